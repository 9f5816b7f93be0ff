import assert from "node:assert/strict";
import { addRecord } from "../../src/aggregation/ingest.ts";
import { FL_READY } from "../../src/aggregation/layout.ts";
import type { FlowInput } from "../../src/aggregation/mod.ts";
import { d1, newState, s1 } from "./fixtures.ts";

Deno.test("addRecord rejects a non-object without throwing", () => {
  const { s } = newState();
  assert.equal(addRecord(s, null as unknown as FlowInput), false);
  assert.equal(s.counters.rejected.invalidRecord, 1);
  assert.equal(s.counters.recordsIn, 1);
});

Deno.test("addRecord: the second InterNode half correlates the stored one", () => {
  const { s } = newState();
  assert.equal(addRecord(s, s1()), true);
  const flow = s.bySlot.find((f) => f !== undefined)!;
  assert.equal(flow.flags & FL_READY, 0);
  assert.equal(addRecord(s, d1()), true);
  assert.equal(flow.flags & FL_READY, FL_READY);
  assert.equal(flow.sourcePodName, "pod1");
  assert.equal(flow.destinationPodName, "pod2");
  assert.equal(flow.clusterV4, "192.168.0.1");
  assert.equal(s.counters.correlated, 1);
  assert.equal(s.table.size, 1);
});

Deno.test("addRecord: a second record from the same Node does not correlate", () => {
  const { s } = newState();
  addRecord(s, s1());
  addRecord(s, s1({ flowEndSeconds: 2, tcpState: "ESTABLISHED" }));
  assert.equal(s.counters.correlated, 0);
  assert.equal(s.counters.recordsAccepted, 2);
});
