/**
 * A shard writes its exported flows into the batch straight from their slots
 * (`SlotRowWriter`); the rows must be byte for byte those of the snapshot path (a record object
 * given to `BatchWriter.add`), on the replay sender's realistic stream (IPv4 and IPv6, intra,
 * inter and external flows, ClusterIPs, policies), with Pod metadata and labels filled at export,
 * uncorrelated halves, and counters beyond 2^53.
 */

import assert from "node:assert/strict";
import { addRecord } from "../../src/aggregation/ingest.ts";
import { OCT_T, RPKT_D } from "../../src/aggregation/layout.ts";
import { emitOne, type ExportHooks } from "../../src/aggregation/snapshot.ts";
import { u64Base } from "../../src/aggregation/slot_store.ts";
import { BatchWriter, readBatch } from "../../src/exporters/batch.ts";
import { SlotRowWriter } from "../../src/shard/slot_rows.ts";
import { liveSlots, newState } from "../aggregation/fixtures.ts";
import { replayRecords } from "../aggregation/replay_records.ts";

const CAPACITY = 7;

Deno.test("slot rows are the snapshot path's rows, byte for byte", () => {
  const { s } = newState({ includePodLabels: true });
  for (const round of replayRecords({ seed: 11, wireNumbers: true, rounds: 3 })) {
    for (const r of round) addRecord(s, r);
  }
  const slots = liveSlots(s);
  assert.ok(slots.length > 500, `only ${slots.length} flows`);
  // Counters the BigInt path writes exactly: above 2^32 and above 2^53.
  const u64 = s.store.u64(slots[0]);
  u64[u64Base(slots[0]) + OCT_T] = 2n ** 60n + 12345n;
  u64[u64Base(slots[1]) + RPKT_D] = 2n ** 33n + 7n;
  // Pods for a third of the addresses, with labels: filled at export (the first call per flow).
  let lookups = 0;
  const lookupPod: ExportHooks["lookupPod"] = (ip) => {
    lookups++;
    const last = Number(ip.split(/[.:]/).at(-1) ?? 0);
    if (last % 3 !== 0) return undefined;
    return { name: `pod-${ip}`, namespace: "ns-é", nodeName: "node", labels: { app: ip } };
  };
  const viaRecord: SharedArrayBuffer[] = [];
  const viaSlot: SharedArrayBuffer[] = [];
  const wa = new BatchWriter(CAPACITY);
  const wb = new BatchWriter(CAPACITY);
  const rows = new SlotRowWriter(wb, () => viaSlot.push(wb.finish()));
  const noEmit = () => assert.fail("the slot path must not call emit");
  slots.forEach((slot, i) => {
    const uncorrelated = i % 5 === 0;
    const a = { lookupPod, addressText: false };
    assert.ok(emitOne(s, slot, (f) => wa.add(f), { hooks: a, uncorrelated }));
    if (wa.full) viaRecord.push(wa.finish());
    const b = { lookupPod, addressText: false, rows };
    assert.ok(emitOne(s, slot, noEmit, { hooks: b, uncorrelated }));
  });
  viaRecord.push(wa.finish());
  viaSlot.push(wb.finish());
  assert.ok(lookups > 0);
  assert.equal(viaSlot.length, viaRecord.length);
  viaSlot.forEach((buf, i) => {
    assert.deepEqual(new Uint8Array(buf), new Uint8Array(viaRecord[i]), `batch ${i}`);
  });
  // And the rows read back as the flows they were written from.
  const flows = viaSlot.flatMap((b) => readBatch(b));
  assert.equal(flows.length, slots.length);
  assert.equal(flows[0].record.octetTotalCount, 2n ** 60n + 12345n);
  assert.equal(flows[1].record.reversePacketDeltaCount, 2n ** 33n + 7n);
  assert.equal(flows[0].uncorrelated, true);
  assert.equal(flows[1].uncorrelated, false);
  assert.ok(flows.some((f) => f.isIPv6) && flows.some((f) => !f.isIPv6));
  assert.ok(flows.some((f) => (f.record.sourcePodLabels ?? "").includes('"app"')));
  assert.ok(flows.some((f) => f.record.destinationClusterIPv4 !== undefined));
  assert.ok(flows.some((f) => f.record.ingressNetworkPolicyName));
});
