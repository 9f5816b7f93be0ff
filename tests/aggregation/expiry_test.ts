import assert from "node:assert/strict";
import {
  expire,
  hasExpired,
  nextExpiryDelayMs,
  scheduleNew,
  touch,
} from "../../src/aggregation/expiry.ts";
import { FIELD_CODE } from "../../src/aggregation/field_code.ts";
import { KEY_WORDS } from "../../src/aggregation/flow_table.ts";
import {
  FL_IPV4,
  FL_READY,
  MAX_RETRIES,
  RETRY_SHIFT,
  T_ACTIVE,
  T_INACTIVE,
} from "../../src/aggregation/layout.ts";
import { f64Base, U32, u32Base } from "../../src/aggregation/slot_store.ts";
import { collector, newState, s1 } from "./fixtures.ts";
import { prng } from "../_helpers/prng.ts";

/** A flow of key 10.0.0.1 -> 10.0.0.2 with `flags`, queued; returns its slot. */
function addFlow(s: ReturnType<typeof newState>["s"], flags: number): number {
  const slot = s.store.alloc();
  const u32 = s.store.u32(slot);
  FIELD_CODE.create(s1(), s.intern, s.groups, u32, u32Base(slot));
  u32[u32Base(slot) + U32.FLAGS] = flags;
  const k = new Uint32Array(KEY_WORDS);
  k.set([0x0a000001, 0, 0, 0, 0x0a000002, 0, 0, 0, 6, 1234, 5678, 4]);
  s.table.insert(slot, k, s.table.hash(k));
  scheduleNew(s, slot);
  return slot;
}

Deno.test("scheduleNew sets both expiry times from now; touch moves only the inactive one", () => {
  const { s, clock } = newState();
  clock.advance(1000);
  const flow = addFlow(s, FL_READY);
  const f64 = s.store.f64(flow);
  const fb = f64Base(flow);
  assert.deepEqual([f64[fb + T_ACTIVE], f64[fb + T_INACTIVE]], [61_000, 91_000]);
  clock.advance(5000);
  touch(s, flow);
  assert.deepEqual([f64[fb + T_ACTIVE], f64[fb + T_INACTIVE]], [61_000, 96_000]);
  assert.equal(s.heap.priorityOf(flow), 61_000);
});

Deno.test("touch: a flow's heap priority stays min(A, I) whichever expiry is the earlier, timeouts changed on the way", () => {
  const { s, clock } = newState({ activeTimeoutMs: 60_000, inactiveTimeoutMs: 10_000 });
  const rand = prng(15);
  const slots: number[] = [];
  let moved = 0;
  for (let step = 0; step < 20_000; step++) {
    const r = rand();
    if (r < 0.05 || slots.length === 0) {
      const slot = s.store.alloc();
      scheduleNew(s, slot);
      slots.push(slot);
    } else if (r < 0.06) {
      // A reload: either timeout may become the shorter one.
      s.active = 1000 + Math.floor(rand() * 100_000);
      s.inactive = 1000 + Math.floor(rand() * 100_000);
    } else {
      clock.advance(Math.floor(rand() * 500));
      const slot = slots[Math.floor(rand() * slots.length)];
      const before = s.heap.priorityOf(slot);
      touch(s, slot);
      if (s.heap.priorityOf(slot) !== before) moved++;
    }
  }
  for (const slot of slots) {
    const f64 = s.store.f64(slot);
    const fb = f64Base(slot);
    assert.equal(s.heap.priorityOf(slot), Math.min(f64[fb + T_ACTIVE], f64[fb + T_INACTIVE]));
  }
  // Both cases ran: touches that moved the flow in the heap, and touches that left it.
  assert.ok(moved > 100 && moved < 18_000, `${moved} touches moved a flow`);
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

Deno.test("the not-ready count shares the flags word: counted above the flags, saturated", () => {
  const { s, clock } = newState({ maxRetries: Infinity });
  const slot = addFlow(s, FL_IPV4);
  const flags = () => s.store.u32(slot)[u32Base(slot) + U32.FLAGS];
  const { emit } = collector();
  clock.advance(60_000);
  expire(s, emit);
  assert.equal(flags(), FL_IPV4 | (1 << RETRY_SHIFT));
  s.store.u32(slot)[u32Base(slot) + U32.FLAGS] = FL_IPV4 | ((MAX_RETRIES - 1) << RETRY_SHIFT);
  for (let i = 0; i < 3; i++) {
    clock.advance(60_000);
    expire(s, emit);
  }
  assert.equal(flags() >>> RETRY_SHIFT, MAX_RETRIES);
  assert.equal(flags() & 0xff, FL_IPV4);
  assert.equal(s.heap.size, 1);
});
