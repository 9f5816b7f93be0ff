import assert from "node:assert/strict";
import { addressText, emitOne, flowKeyOf, snapshot } from "../../src/aggregation/snapshot.ts";
import { addRecord } from "../../src/aggregation/ingest.ts";
import { FL_UPDATED } from "../../src/aggregation/layout.ts";
import { U32 } from "../../src/aggregation/slot_store.ts";
import { exportedAddress } from "../../src/aggregation/flow_key.ts";
import { BatchWriter } from "../../src/exporters/batch.ts";
import { collector, flagsOf, liveSlots, newState, s1 } from "./fixtures.ts";

Deno.test("snapshot names the address IEs by family and is an own copy", () => {
  const { s } = newState();
  const r = s1({ sourceIPv6Address: "2001:db8::1", destinationIPv6Address: "::ffff:10.0.0.2" });
  delete r.sourceIPv4Address;
  delete r.destinationIPv4Address;
  assert.equal(addRecord(s, r), true);
  const [flow] = liveSlots(s);
  const rec = snapshot(s, flow);
  assert.equal(rec.sourceIPv6Address, "2001:db8::1");
  assert.equal(rec.destinationIPv6Address, "10.0.0.2");
  assert.equal(rec.sourceIPv4Address, undefined);
  assert.equal(rec.destinationClusterIPv4, "192.168.0.1");
  assert.equal(rec.sourcePodLabels, undefined);
  rec.sourcePodName = "changed";
  assert.equal(snapshot(s, flow).sourcePodName, "pod1");
  assert.equal(addressText(s, flow, U32.SRC), "2001:db8::1");
  assert.deepEqual(flowKeyOf(s, flow), {
    sourceAddress: "2001:db8::1",
    destinationAddress: "10.0.0.2",
    protocol: 6,
    sourcePort: 1234,
    destinationPort: 5678,
  });
});

Deno.test("emitOne fills a missing Pod through the hook and clears the updated flag", () => {
  const { s } = newState();
  assert.equal(addRecord(s, s1({ flowType: 1 })), true);
  const [flow] = liveSlots(s);
  const { out, emit } = collector();
  const hooks = {
    lookupPod: (ip: string) =>
      ip === "10.0.0.2" ? { name: "pod2", namespace: "ns", nodeName: "n2" } : undefined,
  };
  // flowType 1 (IntraNode) is filled at creation: no look-up.
  assert.equal(emitOne(s, flow, emit, { hooks, uncorrelated: false }), true);
  assert.equal(out[0].record.destinationPodName, "");
  assert.equal(flagsOf(s, flow) & FL_UPDATED, 0);
  assert.equal(s.counters.exportedWithoutNewData, 0);
  assert.equal(emitOne(s, flow, emit, { hooks, uncorrelated: false }), true);
  assert.equal(s.counters.exportedWithoutNewData, 1);
});

Deno.test("emitOne without address text: empty text, the words give the same addresses", () => {
  const { s } = newState();
  const v6 = s1({ sourceIPv6Address: "2001:db8::1", destinationIPv6Address: "::ffff:10.0.0.2" });
  delete v6.sourceIPv4Address;
  delete v6.destinationIPv4Address;
  const inputs = [s1({ sourceIPv4Address: "10.0.0.1", destinationIPv4Address: "10.9.8.7" }), v6];
  for (const r of inputs) assert.equal(addRecord(s, r), true);
  for (const flow of liveSlots(s)) {
    const withText = collector();
    const without = collector();
    emitOne(s, flow, withText.emit, { hooks: undefined, uncorrelated: false });
    emitOne(s, flow, without.emit, { hooks: { addressText: false }, uncorrelated: false });
    const [a, b] = [withText.out[0], without.out[0]];
    assert.equal(b.key.sourceAddress, "");
    assert.equal(b.key.destinationAddress, "");
    assert.equal(b.record[b.isIPv6 ? "sourceIPv6Address" : "sourceIPv4Address"], "");
    assert.notEqual(a.key.sourceAddress, "");
    assert.equal(exportedAddress(b, false), a.key.sourceAddress);
    assert.equal(exportedAddress(b, true), a.key.destinationAddress);
    assert.equal(exportedAddress(a, true), a.key.destinationAddress, "text wins when present");
    // The worker batch reads the words: the same row either way.
    const [wa, wb] = [new BatchWriter(1), new BatchWriter(1)];
    wa.add(a);
    wb.add(b);
    assert.deepEqual(new Uint8Array(wb.finish()), new Uint8Array(wa.finish()));
  }
});
