import assert from "node:assert/strict";
import {
  aggregate,
  COUNTER_WORDS,
  counterWords,
  initStats,
  resetDeltas,
} from "../../src/aggregation/flow_stats.ts";
import { FIELD_CODE } from "../../src/aggregation/field_code.ts";
import type { FlowInput } from "../../src/aggregation/record.ts";
import {
  D_OFF,
  OCT_D,
  OCT_T,
  PKT_D,
  ROCT_D,
  RPKT_D,
  RTHR,
  RTHR_D,
  RTHR_S,
  S_OFF,
  SIDE_D,
  SIDE_S,
  THR,
  THR_D,
  THR_S,
} from "../../src/aggregation/layout.ts";
import { U32, u32Base, u64Base } from "../../src/aggregation/slot_store.ts";
import type { CoreState } from "../../src/aggregation/state.ts";
import { counters, newState, s1 } from "./fixtures.ts";
import { prng } from "../_helpers/prng.ts";

Deno.test("initStats: common values and the copies of the record's side only", () => {
  const u = new BigUint64Array(30);
  initStats(
    u,
    new Uint32Array(u.buffer),
    0,
    { ...s1(), flowStartSeconds: 0, flowEndSeconds: 4 },
    SIDE_S,
  );
  assert.equal(u[OCT_T], 1000n);
  assert.equal(u[S_OFF + OCT_T], 1000n);
  assert.equal(u[D_OFF + OCT_T], 0n);
  assert.equal(u[THR], 2000n); // 1000 B * 8 / 4 s
  assert.equal(u[THR_S], 2000n);
  assert.equal(u[THR_D], 0n);
});

Deno.test("initStats: no throughput when the record's end is not after its start", () => {
  const u = new BigUint64Array(30);
  initStats(
    u,
    new Uint32Array(u.buffer),
    0,
    { ...s1(), flowStartSeconds: 5, flowEndSeconds: 5 },
    SIDE_S | SIDE_D,
  );
  assert.equal(u[THR], 0n);
  assert.equal(u[D_OFF + OCT_T], 1000n);
});

Deno.test("initStats: throughput of an octet total above 2^53 is exact", () => {
  const u = new BigUint64Array(30);
  const oct = 2n ** 60n + 12_345n;
  const r = { ...s1(), octetTotalCount: oct, flowStartSeconds: 0, flowEndSeconds: 3 };
  initStats(u, new Uint32Array(u.buffer), 0, r, SIDE_D);
  assert.equal(u[THR], oct * 8n / 3n);
  assert.equal(u[THR_D], oct * 8n / 3n);
  assert.equal(u[THR_S], 0n);
});

Deno.test("initStats: counters as numbers (wire-number mode) store what bigints store", () => {
  const a = new BigUint64Array(30);
  const b = new BigUint64Array(30);
  const r = { ...s1(), flowStartSeconds: 0, flowEndSeconds: 7 };
  initStats(a, new Uint32Array(a.buffer), 0, r, SIDE_S);
  const asNumbers = { ...r };
  for (const k of Object.keys(asNumbers) as (keyof typeof asNumbers)[]) {
    const v = asNumbers[k];
    if (typeof v === "bigint") (asNumbers as Record<string, unknown>)[k] = Number(v);
  }
  initStats(b, new Uint32Array(b.buffer), 0, asNumbers, SIDE_S);
  assert.deepEqual([...b], [...a]);
  assert.ok(a[THR] > 0n);
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
  FIELD_CODE.create(s1(), s.intern, s.groups, u32, ub);
  u32[ub + U32.END] = end;
  u32[ub + U32.END_S] = end;
  return { s, flow: slot, u: s.store.u64(slot), b: u64Base(slot) };
}

/** `aggregate` with the record's counters as words, as the core's update path passes them. */
function update(s: CoreState, flow: number, r: FlowInput, sides: number): void {
  const words = new Uint32Array(COUNTER_WORDS);
  counterWords(r, words);
  aggregate(s, flow, r, sides, words);
}

Deno.test("aggregate: a record not after the side's last end is stale and changes no counter", () => {
  const { s, flow, u, b } = flowWith(10);
  update(s, flow, { ...s1(), flowEndSeconds: 10, ...counters(9n, 9n, 9n, 9n) }, SIDE_S);
  assert.equal(s.counters.recordsStale, 1);
  assert.equal(u[b + OCT_T], 0n);
});

Deno.test("aggregate: a total that went down gives throughput 0 and is counted (L8)", () => {
  const { s, flow, u, b } = flowWith(10);
  u[b + S_OFF + OCT_T] = 5000n;
  update(s, flow, { ...s1(), flowEndSeconds: 12, ...counters(1n, 1n, 100n, 100n) }, SIDE_S);
  assert.equal(s.counters.negativeDiffsClamped, 1);
  assert.equal(u[b + THR_S], 0n);
  assert.equal(u[b + S_OFF + OCT_T], 100n);
  assert.equal(u[b + S_OFF + OCT_D], 100n);
});

/**
 * Reference model of §3.3 steps A-D on BigInts only (the counters' arithmetic before the
 * double fast path): what `aggregate` must leave in the slot's u64 words for any values.
 */
function modelAggregate(
  u: BigUint64Array,
  b: number,
  ends: { end: number; endS: number; endD: number; start: number },
  r: FlowInput,
  sides: number,
): void {
  const inEnd = r.flowEndSeconds!;
  const isLatest = inEnd >= ends.end;
  let prev = 0;
  if (sides & SIDE_S) prev = ends.endS === 0 ? ends.start : ends.endS;
  if (sides & SIDE_D) prev = ends.endD === 0 ? ends.start : ends.endD;
  if (inEnd <= prev) return;
  const pair = (at: number, delta: bigint, total: bigint): bigint => {
    let diff = 0n;
    for (const [side, off] of [[SIDE_S, S_OFF], [SIDE_D, D_OFF]]) {
      if ((sides & side) === 0) continue;
      u[b + off + at] += delta;
      diff = total - u[b + off + at + 1];
      u[b + off + at + 1] = total;
    }
    if (isLatest) {
      u[b + at] = u[b + ((sides & SIDE_D) ? D_OFF : S_OFF) + at];
      if (u[b + at + 1] < total) u[b + at + 1] = total;
    }
    return diff;
  };
  const B = (v: bigint | number | undefined): bigint => BigInt(v!);
  const diff = pair(OCT_D, B(r.octetDeltaCount), B(r.octetTotalCount));
  pair(PKT_D, B(r.packetDeltaCount), B(r.packetTotalCount));
  const rdiff = pair(ROCT_D, B(r.reverseOctetDeltaCount), B(r.reverseOctetTotalCount));
  pair(RPKT_D, B(r.reversePacketDeltaCount), B(r.reversePacketTotalCount));
  const dt = BigInt(inEnd - prev);
  const thr = (diff < 0n ? 0n : diff) * 8n / dt;
  const rthr = (rdiff < 0n ? 0n : rdiff) * 8n / dt;
  u[b + THR] = thr;
  u[b + RTHR] = rthr;
  if (sides & SIDE_S) [u[b + THR_S], u[b + RTHR_S]] = [thr, rthr];
  if (sides & SIDE_D) [u[b + THR_D], u[b + RTHR_D]] = [thr, rthr];
}

Deno.test("aggregate: u64 counters, as numbers or bigints, equal the BigInt model across 2^53 and 2^64", () => {
  // Values around the fast path's edges: small, just below/above 2^53, near 2^64 (u64 wrap).
  const edges = [
    0n,
    1n,
    1500n,
    2n ** 32n - 1n,
    2n ** 32n,
    2n ** 50n,
    2n ** 53n - 2n,
    2n ** 53n,
    2n ** 53n + 7n,
    2n ** 63n,
    2n ** 64n - 1n,
  ];
  for (let seed = 1; seed <= 300; seed++) {
    const rnd = prng(seed);
    // A value below 2^53 comes as a number half of the time (the decoder's wire-number mode).
    const pick = (): bigint | number => {
      const v = rnd() < 0.5
        ? edges[Math.floor(rnd() * edges.length)]
        : BigInt(Math.floor(rnd() * 1e6));
      return v < 2n ** 53n && rnd() < 0.5 ? Number(v) : v;
    };
    const { s, flow, u, b } = flowWith(0);
    const model = new BigUint64Array(u.length);
    const u32 = s.store.u32(flow);
    const ub = u32Base(flow);
    u32[ub + U32.START] = 100;
    for (let step = 0; step < 8; step++) {
      const sides = [SIDE_S, SIDE_D, SIDE_S | SIDE_D][Math.floor(rnd() * 3)];
      const r: FlowInput = {
        ...s1(),
        flowStartSeconds: 100,
        flowEndSeconds: 100 + Math.floor(rnd() * 40),
        octetDeltaCount: pick(),
        octetTotalCount: pick(),
        packetDeltaCount: pick(),
        packetTotalCount: pick(),
        reverseOctetDeltaCount: pick(),
        reverseOctetTotalCount: pick(),
        reversePacketDeltaCount: pick(),
        reversePacketTotalCount: pick(),
      };
      const ends = {
        end: u32[ub + U32.END],
        endS: u32[ub + U32.END_S],
        endD: u32[ub + U32.END_D],
        start: 100,
      };
      model.set(u);
      modelAggregate(model, b, ends, r, sides);
      update(s, flow, r, sides);
      for (let i = b; i < b + 30; i++) {
        assert.equal(u[i], model[i], `seed ${seed} step ${step} u64[${i - b}]`);
      }
    }
  }
});
