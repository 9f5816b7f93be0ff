/**
 * Per-flow statistics and throughput (spec aggregation.md §3.2, §3.3, §3.6): the 8 common
 * counters, their FromSourceNode/FromDestinationNode copies, the per-side flow ends and the 6
 * throughputs, all in the flow's u64/u32 slot words. `sides` is a mask of
 * {@linkcode SIDE_S}/{@linkcode SIDE_D}: the Node(s) whose copies a record updates.
 */

import type { FlowInput } from "./record.ts";
import {
  D_OFF,
  END_OF_FLOW,
  FL_UPDATED,
  OCT_D,
  OCT_T,
  PKT_D,
  PKT_T,
  ROCT_D,
  ROCT_T,
  RPKT_D,
  RPKT_T,
  RTHR,
  RTHR_D,
  RTHR_S,
  S_OFF,
  SIDE_D,
  SIDE_S,
  THR,
  THR_D,
  THR_S,
} from "./layout.ts";
import { U32, u32Base, u64Base } from "./slot_store.ts";
import type { CoreState } from "./state.ts";
import { isUint, num } from "./values.ts";

/**
 * §3.2: the counters of a new flow (common value as received, per-side copies for `sides`) and
 * its first throughput window, the record's own start..end (none when end <= start). The caller
 * has checked that the times and both octet totals are present and valid.
 */
export function initStats(u: BigUint64Array, b: number, r: FlowInput, sides: number): void {
  const oct = r.octetTotalCount!;
  const roct = r.reverseOctetTotalCount!;
  initStat(u, b, OCT_D, r.octetDeltaCount, sides);
  initStat(u, b, OCT_T, oct, sides);
  initStat(u, b, PKT_D, r.packetDeltaCount, sides);
  initStat(u, b, PKT_T, r.packetTotalCount, sides);
  initStat(u, b, ROCT_D, r.reverseOctetDeltaCount, sides);
  initStat(u, b, ROCT_T, roct, sides);
  initStat(u, b, RPKT_D, r.reversePacketDeltaCount, sides);
  initStat(u, b, RPKT_T, r.reversePacketTotalCount, sides);
  const start = r.flowStartSeconds!;
  const end = r.flowEndSeconds!;
  if (end > start) {
    const dt = BigInt(end - start);
    setThroughput(u, b, oct * 8n / dt, roct * 8n / dt, sides);
  }
}

/** §3.3: aggregates `r` into the flow of `slot` for `sides`. Fields were validated by the caller. */
export function aggregate(s: CoreState, slot: number, r: FlowInput, sides: number): void {
  const u32 = s.store.u32(slot);
  const ub = u32Base(slot);
  u32[ub + U32.FLAGS] |= FL_UPDATED;
  const inEnd = r.flowEndSeconds!;
  // Step A.
  let isLatest = false;
  if (inEnd >= u32[ub + U32.END]) {
    isLatest = true;
    u32[ub + U32.END] = inEnd;
  }
  const startFallback = isUint(r.flowStartSeconds!, 0xffffffff)
    ? r.flowStartSeconds!
    : u32[ub + U32.START];
  let prev = 0;
  if (sides & SIDE_S) {
    const p = u32[ub + U32.END_S];
    prev = p === 0 ? startFallback : p;
    // Unconditional, even backwards (upstream L7, kept: SC-09 encodes it).
    u32[ub + U32.END_S] = inEnd;
  }
  if (sides & SIDE_D) {
    const p = u32[ub + U32.END_D];
    prev = p === 0 ? startFallback : p;
    u32[ub + U32.END_D] = inEnd;
  }
  if (inEnd <= prev) {
    // Step A.3: nothing else changes (upstream L6, kept: SC-08 encodes it). This also is
    // the dt == 0 guard of L14: throughput is never divided by zero.
    s.counters.recordsStale++;
    return;
  }
  const dt = inEnd - prev;
  // Step B.
  if (u32[ub + U32.REASON] !== END_OF_FLOW) u32[ub + U32.REASON] = num(r.flowEndReason);
  // Usually unchanged (and the decoder's interned string): skip the intern lookup then.
  if (isLatest) {
    const I = s.intern;
    const t = u32[ub + U32.TCP_STATE];
    if (r.tcpState !== I.text(t)) u32[ub + U32.TCP_STATE] = I.replace(t, r.tcpState);
  }
  // Step C.
  const u = s.store.u64(slot);
  const b = u64Base(slot);
  let diff = addPair(u, b, OCT_D, r.octetDeltaCount!, r.octetTotalCount!, sides, isLatest);
  addPair(u, b, PKT_D, r.packetDeltaCount!, r.packetTotalCount!, sides, isLatest);
  let rdiff = addPair(
    u,
    b,
    ROCT_D,
    r.reverseOctetDeltaCount!,
    r.reverseOctetTotalCount!,
    sides,
    isLatest,
  );
  addPair(u, b, RPKT_D, r.reversePacketDeltaCount!, r.reversePacketTotalCount!, sides, isLatest);
  // Step D. A counter that went down (agent restart, 5-tuple reuse) would wrap in u64
  // upstream (L8) and give an absurd throughput: clamp to 0 instead.
  if (diff < 0n) {
    diff = 0n;
    s.counters.negativeDiffsClamped++;
  }
  if (rdiff < 0n) {
    rdiff = 0n;
    s.counters.negativeDiffsClamped++;
  }
  const bdt = BigInt(dt);
  // v1.13 sets the common pair from every processed record, latest or not (L5, kept: SC-10).
  setThroughput(u, b, diff * 8n / bdt, rdiff * 8n / bdt, sides);
}

/** §3.6: zeroes the 12 delta counters and the 6 throughputs; totals and ends stay. */
export function resetDeltas(u: BigUint64Array, b: number): void {
  for (let off = 0; off <= D_OFF; off += S_OFF) {
    u[b + off + OCT_D] = 0n;
    u[b + off + PKT_D] = 0n;
    u[b + off + ROCT_D] = 0n;
    u[b + off + RPKT_D] = 0n;
  }
  u.fill(0n, b + THR, b + RTHR_D + 1);
}

/** The common throughput pair and the copies of `sides`. */
function setThroughput(
  u: BigUint64Array,
  b: number,
  thr: bigint,
  rthr: bigint,
  sides: number,
): void {
  u[b + THR] = thr;
  u[b + RTHR] = rthr;
  if (sides & SIDE_S) {
    u[b + THR_S] = thr;
    u[b + RTHR_S] = rthr;
  }
  if (sides & SIDE_D) {
    u[b + THR_D] = thr;
    u[b + RTHR_D] = rthr;
  }
}

/** §3.2: common value as received; per-side copies for the filled sides. */
function initStat(
  u: BigUint64Array,
  b: number,
  idx: number,
  v: bigint | undefined,
  sides: number,
): void {
  if (v === undefined) return;
  u[b + idx] = v;
  if (sides & SIDE_S) u[b + S_OFF + idx] = v;
  if (sides & SIDE_D) u[b + D_OFF + idx] = v;
}

/**
 * §3.3 step C for the delta counter at `at` and its total at `at + 1`: the sides' deltas add
 * up, their totals are replaced, and the common pair follows the latest record. Returns the
 * total's `v − old` of the last side (may be negative).
 */
function addPair(
  u: BigUint64Array,
  b: number,
  at: number,
  delta: bigint,
  total: bigint,
  sides: number,
  isLatest: boolean,
): bigint {
  let diff = 0n;
  if (sides & SIDE_S) {
    const o = b + S_OFF + at;
    u[o] += delta;
    diff = total - u[o + 1];
    u[o + 1] = total;
  }
  if (sides & SIDE_D) {
    const o = b + D_OFF + at;
    u[o] += delta;
    diff = total - u[o + 1];
    u[o + 1] = total;
  }
  if (isLatest) {
    u[b + at] = (sides & SIDE_D) ? u[b + D_OFF + at] : u[b + S_OFF + at];
    if (u[b + at + 1] < total) u[b + at + 1] = total;
  }
  return diff;
}
