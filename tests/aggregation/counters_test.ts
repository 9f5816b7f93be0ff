import assert from "node:assert/strict";
import { CoreCounters } from "../../src/aggregation/counters.ts";

Deno.test("CoreCounters.snapshot is a copy with maxFlows drops mirrored", () => {
  const c = new CoreCounters();
  c.recordsIn = 3;
  c.rejected.maxFlows = 2;
  c.rejected.badAddress = 1;
  const s = c.snapshot(7, 4096);
  assert.equal(s.recordsIn, 3);
  assert.equal(s.droppedMaxFlows, 2);
  assert.equal(s.recordsRejected.badAddress, 1);
  assert.equal(s.flows, 7);
  assert.equal(s.flowBytes, 4096);
  c.rejected.badAddress = 5;
  assert.equal(s.recordsRejected.badAddress, 1);
});

Deno.test("CoreCounters start at 0 for every reject reason", () => {
  const s = new CoreCounters().snapshot(0, 0);
  assert.deepEqual(Object.values(s.recordsRejected), [0, 0, 0, 0, 0, 0, 0, 0, 0]);
  assert.equal(Object.keys(s.recordsRejected).length, 9);
  assert.equal(s.recordsRejected.shardFailed, 0);
});
