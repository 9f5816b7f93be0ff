import assert from "node:assert/strict";
import {
  expire,
  hasExpired,
  nextExpiryDelayMs,
  scheduleNew,
  touch,
} from "../../src/aggregation/expiry.ts";
import { FIELD_CODE } from "../../src/aggregation/field_code.ts";
import { FL_READY, T_ACTIVE, T_INACTIVE } from "../../src/aggregation/layout.ts";
import { f64Base, u32Base } from "../../src/aggregation/slot_store.ts";
import { collector, newState, s1 } from "./fixtures.ts";

function addFlow(s: ReturnType<typeof newState>["s"], flags: number) {
  const slot = s.store.alloc();
  const flow = FIELD_CODE.create(s1(), s.intern, s.store.u32(slot), u32Base(slot), slot, flags);
  s.bySlot[slot] = flow;
  scheduleNew(s, flow);
  return flow;
}

Deno.test("scheduleNew sets both expiry times from now; touch moves only the inactive one", () => {
  const { s, clock } = newState();
  clock.advance(1000);
  const flow = addFlow(s, FL_READY);
  const f64 = s.store.f64(flow.slot);
  const fb = f64Base(flow.slot);
  assert.deepEqual([f64[fb + T_ACTIVE], f64[fb + T_INACTIVE]], [61_000, 91_000]);
  clock.advance(5000);
  touch(s, flow);
  assert.deepEqual([f64[fb + T_ACTIVE], f64[fb + T_INACTIVE]], [61_000, 96_000]);
  assert.equal(s.heap.priorityOf(flow), 61_000);
});

Deno.test("nextExpiryDelayMs: min(A, I) when empty, slack + time to the first expiry otherwise", () => {
  const { s, clock } = newState();
  assert.equal(nextExpiryDelayMs(s), 60_000);
  addFlow(s, FL_READY);
  clock.advance(10_000);
  assert.equal(nextExpiryDelayMs(s), 50_100);
  clock.advance(100_000);
  assert.equal(nextExpiryDelayMs(s), 100);
});

Deno.test("a not-ready flow is re-queued, not exported, until it runs out of retries", () => {
  const { s, clock } = newState({ maxRetries: 1 });
  addFlow(s, 0);
  const { out, emit } = collector();
  clock.advance(60_000);
  assert.equal(hasExpired(s), true);
  assert.equal(expire(s, emit), 0);
  assert.equal(s.counters.notReadyRetries, 1);
  clock.advance(60_000);
  assert.equal(expire(s, emit), 1);
  assert.equal(out[0].uncorrelated, true);
  assert.equal(s.heap.size, 0);
  assert.equal(s.counters.flowsDeleted, 1);
});
