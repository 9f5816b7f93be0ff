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
import { U32, u32Base, U64_HI, U64_LO, u64Base } from "./slot_store.ts";
import type { CoreState } from "./state.ts";
import { isUint, num } from "./values.ts";

/**
 * A u64 counter as the decoder hands it: a number below 2^53 in wire-number mode (what the
 * collector gives the core), a bigint otherwise. The arithmetic on numbers runs on doubles
 * through the u32 word view of the slot's u64 words (`SlotStore.u64Words`), with no BigInt
 * allocated per counter, as long as every value read, written or multiplied stays below 2^53;
 * any other case takes the BigInt path, so results stay exact over the whole u64 range.
 */
type Counter = bigint | number;

const EXACT = 2 ** 53;
const TWO32 = 2 ** 32;
/** The exact result of the last BigInt fallback (addPair NaN, rate -1); read right after. */
let spill = 0n;

/** The u64 at index `i` of a word view as a double, or -1 when it is ≥ 2^53. */
function rd(w: Uint32Array, i: number): number {
  const hi = w[2 * i + U64_HI];
  return hi < 0x200000 ? hi * TWO32 + w[2 * i + U64_LO] : -1;
}

/** Writes `v` (an integer, 0 <= v < 2^53) as the u64 at index `i` of a word view. */
function wr(w: Uint32Array, i: number, v: number): void {
  w[2 * i + U64_LO] = v >>> 0;
  w[2 * i + U64_HI] = (v / TWO32) >>> 0;
}

/** Copies the u64 at index `from` to index `to` of a word view. */
function cp(w: Uint32Array, from: number, to: number): void {
  w[2 * to] = w[2 * from];
  w[2 * to + 1] = w[2 * from + 1];
}

/** A validated counter as a bigint (the BigInt path). */
function big(v: Counter): bigint {
  return typeof v === "bigint" ? v : BigInt(v);
}

/**
 * §3.2: the counters of a new flow (common value as received, per-side copies for `sides`) and
 * its first throughput window, the record's own start..end (none when end <= start). The caller
 * has checked that the times and both octet totals are present and valid.
 */
export function initStats(
  u: BigUint64Array,
  w: Uint32Array,
  b: number,
  r: FlowInput,
  sides: number,
): void {
  const oct = r.octetTotalCount!;
  const roct = r.reverseOctetTotalCount!;
  initStat(u, w, b + OCT_D, r.octetDeltaCount, sides);
  initStat(u, w, b + OCT_T, oct, sides);
  initStat(u, w, b + PKT_D, r.packetDeltaCount, sides);
  initStat(u, w, b + PKT_T, r.packetTotalCount, sides);
  initStat(u, w, b + ROCT_D, r.reverseOctetDeltaCount, sides);
  initStat(u, w, b + ROCT_T, roct, sides);
  initStat(u, w, b + RPKT_D, r.reversePacketDeltaCount, sides);
  initStat(u, w, b + RPKT_T, r.reversePacketTotalCount, sides);
  const start = r.flowStartSeconds!;
  const end = r.flowEndSeconds!;
  if (end > start) {
    setThroughput(u, w, b, diffOf(oct), spill, diffOf(roct), spill, end - start, sides);
  }
}

/** A counter as {@linkcode addPair} returns a difference: a number as is, a bigint as NaN with it in spill. */
function diffOf(v: Counter): number {
  if (typeof v === "number") return v;
  spill = v;
  return NaN;
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
  // Usually unchanged (and the same string object: the decoder's remembered last value): skip
  // the intern lookup then.
  if (isLatest) {
    const I = s.intern;
    const t = u32[ub + U32.TCP_STATE];
    if (r.tcpState !== I.text(t)) u32[ub + U32.TCP_STATE] = I.replace(t, r.tcpState);
  }
  // Step C.
  const u = s.store.u64(slot);
  const w = s.store.u64Words(slot);
  const b = u64Base(slot);
  let diff = addPair(u, w, b + OCT_D, r.octetDeltaCount!, r.octetTotalCount!, sides, isLatest);
  let bigDiff = spill;
  addPair(u, w, b + PKT_D, r.packetDeltaCount!, r.packetTotalCount!, sides, isLatest);
  let rdiff = addPair(
    u,
    w,
    b + ROCT_D,
    r.reverseOctetDeltaCount!,
    r.reverseOctetTotalCount!,
    sides,
    isLatest,
  );
  let bigRdiff = spill;
  addPair(
    u,
    w,
    b + RPKT_D,
    r.reversePacketDeltaCount!,
    r.reversePacketTotalCount!,
    sides,
    isLatest,
  );
  // Step D. A counter that went down (agent restart, 5-tuple reuse) would wrap in u64
  // upstream (L8) and give an absurd throughput: clamp to 0 instead.
  if (diff < 0 || (diff !== diff && bigDiff < 0n)) {
    diff = 0;
    bigDiff = 0n;
    s.counters.negativeDiffsClamped++;
  }
  if (rdiff < 0 || (rdiff !== rdiff && bigRdiff < 0n)) {
    rdiff = 0;
    bigRdiff = 0n;
    s.counters.negativeDiffsClamped++;
  }
  // v1.13 sets the common pair from every processed record, latest or not (L5, kept: SC-10).
  setThroughput(u, w, b, diff, bigDiff, rdiff, bigRdiff, dt, sides);
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

/**
 * The common throughput pair and the copies of `sides`: ⌊diff · 8 / dt⌋ bits/s of an octet
 * total's growth `diff` >= 0 (a double, or NaN with the exact value in `dBig`) over `dt` > 0 s.
 */
function setThroughput(
  u: BigUint64Array,
  w: Uint32Array,
  b: number,
  diff: number,
  dBig: bigint,
  rdiff: number,
  rBig: bigint,
  dt: number,
  sides: number,
): void {
  put(u, w, b + THR, rate(diff, dBig, dt));
  put(u, w, b + RTHR, rate(rdiff, rBig, dt));
  if (sides & SIDE_S) {
    cp(w, b + THR, b + THR_S);
    cp(w, b + RTHR, b + RTHR_S);
  }
  if (sides & SIDE_D) {
    cp(w, b + THR, b + THR_D);
    cp(w, b + RTHR, b + RTHR_D);
  }
}

/**
 * ⌊diff · 8 / dt⌋ as a double when exact (diff · 8 < 2^53, so the rounded quotient's floor is
 * the integer one); otherwise -1 with the value in {@linkcode spill}.
 */
function rate(diff: number, dBig: bigint, dt: number): number {
  if (diff === diff) {
    if (diff * 8 < EXACT) return Math.floor(diff * 8 / dt);
    dBig = BigInt(diff);
  }
  spill = dBig * 8n / BigInt(dt);
  return -1;
}

/** Stores a {@linkcode rate} result at u64 index `i`. */
function put(u: BigUint64Array, w: Uint32Array, i: number, v: number): void {
  if (v >= 0) wr(w, i, v);
  else u[i] = spill;
}

/** §3.2: common value (u64 index `i`) as received; per-side copies for the filled sides. */
function initStat(
  u: BigUint64Array,
  w: Uint32Array,
  i: number,
  v: Counter | undefined,
  sides: number,
): void {
  if (v === undefined) return;
  if (typeof v === "number") {
    wr(w, i, v);
    if (sides & SIDE_S) wr(w, i + S_OFF, v);
    if (sides & SIDE_D) wr(w, i + D_OFF, v);
    return;
  }
  u[i] = v;
  if (sides & SIDE_S) u[i + S_OFF] = v;
  if (sides & SIDE_D) u[i + D_OFF] = v;
}

/**
 * §3.3 step C for the delta counter at u64 index `at` and its total at `at + 1`: the sides'
 * deltas add up, their totals are replaced, and the common pair follows the latest record.
 * Returns the total's `v − old` of the last side (may be negative) as a double, or NaN with
 * the exact value in {@linkcode spill} when the BigInt path ran (bigint inputs, or a value
 * at or above 2^53).
 */
function addPair(
  u: BigUint64Array,
  w: Uint32Array,
  at: number,
  delta: Counter,
  total: Counter,
  sides: number,
  isLatest: boolean,
): number {
  if (typeof delta === "number" && typeof total === "number") {
    // Every value read and written must be exact: checked before anything is written.
    const sAt = at + S_OFF;
    const dAt = at + D_OFF;
    let cs = 0;
    let ts = 0;
    let cd = 0;
    let td = 0;
    let ok = true;
    if (sides & SIDE_S) {
      cs = rd(w, sAt);
      ts = rd(w, sAt + 1);
      ok = cs >= 0 && ts >= 0 && cs + delta < EXACT;
    }
    if (ok && (sides & SIDE_D)) {
      cd = rd(w, dAt);
      td = rd(w, dAt + 1);
      ok = cd >= 0 && td >= 0 && cd + delta < EXACT;
    }
    if (ok) {
      let diff = 0;
      if (sides & SIDE_S) {
        wr(w, sAt, cs + delta);
        wr(w, sAt + 1, total);
        diff = total - ts;
      }
      if (sides & SIDE_D) {
        wr(w, dAt, cd + delta);
        wr(w, dAt + 1, total);
        diff = total - td;
      }
      if (isLatest) {
        cp(w, (sides & SIDE_D) ? dAt : sAt, at);
        const ct = rd(w, at + 1);
        if (ct >= 0 && ct < total) wr(w, at + 1, total);
      }
      return diff;
    }
  }
  // Bigint inputs stay bigints: converting the difference back to a double would cost two
  // BigInt comparisons and a Number() call, more than the BigInt arithmetic it saves.
  spill = addPairBig(u, at, big(delta), big(total), sides, isLatest);
  return NaN;
}

/** {@linkcode addPair} on the BigInt view: exact for every u64 value. */
function addPairBig(
  u: BigUint64Array,
  at: number,
  delta: bigint,
  total: bigint,
  sides: number,
  isLatest: boolean,
): bigint {
  let diff = 0n;
  if (sides & SIDE_S) {
    const o = at + S_OFF;
    u[o] += delta;
    diff = total - u[o + 1];
    u[o + 1] = total;
  }
  if (sides & SIDE_D) {
    const o = at + D_OFF;
    u[o] += delta;
    diff = total - u[o + 1];
    u[o + 1] = total;
  }
  if (isLatest) {
    u[at] = (sides & SIDE_D) ? u[at + D_OFF] : u[at + S_OFF];
    if (u[at + 1] < total) u[at + 1] = total;
  }
  return diff;
}
