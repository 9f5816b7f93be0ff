import assert from "node:assert/strict";
import { aggregate, initStats, resetDeltas } from "../../src/aggregation/flow_stats.ts";
import { FIELD_CODE } from "../../src/aggregation/field_code.ts";
import {
  D_OFF,
  OCT_D,
  OCT_T,
  S_OFF,
  SIDE_D,
  SIDE_S,
  THR,
  THR_D,
  THR_S,
} from "../../src/aggregation/layout.ts";
import { U32, u32Base, u64Base } from "../../src/aggregation/slot_store.ts";
import { counters, newState, s1 } from "./fixtures.ts";

Deno.test("initStats: common values and the copies of the record's side only", () => {
  const u = new BigUint64Array(30);
  initStats(u, 0, { ...s1(), flowStartSeconds: 0, flowEndSeconds: 4 }, SIDE_S);
  assert.equal(u[OCT_T], 1000n);
  assert.equal(u[S_OFF + OCT_T], 1000n);
  assert.equal(u[D_OFF + OCT_T], 0n);
  assert.equal(u[THR], 2000n); // 1000 B * 8 / 4 s
  assert.equal(u[THR_S], 2000n);
  assert.equal(u[THR_D], 0n);
});

Deno.test("initStats: no throughput when the record's end is not after its start", () => {
  const u = new BigUint64Array(30);
  initStats(u, 0, { ...s1(), flowStartSeconds: 5, flowEndSeconds: 5 }, SIDE_S | SIDE_D);
  assert.equal(u[THR], 0n);
  assert.equal(u[D_OFF + OCT_T], 1000n);
});

Deno.test("resetDeltas zeroes deltas and throughputs, keeps totals", () => {
  const u = new BigUint64Array(60).fill(7n);
  resetDeltas(u, 30);
  assert.equal(u[30 + OCT_D], 0n);
  assert.equal(u[30 + S_OFF + OCT_D], 0n);
  assert.equal(u[30 + D_OFF + OCT_D], 0n);
  assert.equal(u[30 + THR], 0n);
  assert.equal(u[30 + OCT_T], 7n);
  assert.equal(u[0], 7n); // the slot before is untouched
});

function flowWith(end: number) {
  const { s } = newState();
  const slot = s.store.alloc();
  const u32 = s.store.u32(slot);
  const ub = u32Base(slot);
  const flow = FIELD_CODE.create(s1(), s.intern, u32, ub, slot, 0);
  u32[ub + U32.END] = end;
  u32[ub + U32.END_S] = end;
  return { s, flow, u: s.store.u64(slot), b: u64Base(slot) };
}

Deno.test("aggregate: a record not after the side's last end is stale and changes no counter", () => {
  const { s, flow, u, b } = flowWith(10);
  aggregate(s, flow, { ...s1(), flowEndSeconds: 10, ...counters(9n, 9n, 9n, 9n) }, SIDE_S);
  assert.equal(s.counters.recordsStale, 1);
  assert.equal(u[b + OCT_T], 0n);
});

Deno.test("aggregate: a total that went down gives throughput 0 and is counted (L8)", () => {
  const { s, flow, u, b } = flowWith(10);
  u[b + S_OFF + OCT_T] = 5000n;
  aggregate(s, flow, { ...s1(), flowEndSeconds: 12, ...counters(1n, 1n, 100n, 100n) }, SIDE_S);
  assert.equal(s.counters.negativeDiffsClamped, 1);
  assert.equal(u[b + THR_S], 0n);
  assert.equal(u[b + S_OFF + OCT_T], 100n);
  assert.equal(u[b + S_OFF + OCT_D], 100n);
});
