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
 * collector gives the core), a bigint otherwise. A new flow's counters are written from these
 * values; an update's arrive as u32 halves ({@linkcode COUNTER_WORDS}) and are added in halves
 * through the u32 word view of the slot's u64 words (`SlotStore.u64Words`): no BigInt on the
 * update path but for a throughput whose octet growth is 2^53 or more.
 */
type Counter = bigint | number;

const EXACT = 2 ** 53;
const TWO32 = 2 ** 32;
/** The exact result of the last BigInt fallback (addPair NaN, rate -1); read right after. */
let spill = 0n;

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

/**
 * The 8 counters of a record (`STATS_FIELDS` order, the slot's u64 order) as 16 u32 words:
 * word 2·i the high half of counter i, 2·i + 1 its low half. The update path's form: a shard
 * reads them straight from the record's bytes (big-endian u64 at fixed offsets), and a decoded
 * record's values are split into them by {@linkcode counterWords}. Exact for every u64.
 */
export const COUNTER_WORDS = 16;

/**
 * Writes the 8 counters of `r` (validated and present: `countersValid(r, true)`) into `cw` as
 * {@linkcode COUNTER_WORDS}. A bigint outside the u64 range wraps as a u64 store would.
 */
export function counterWords(r: FlowInput, cw: Uint32Array): void {
  split(cw, 0, r.octetDeltaCount!);
  split(cw, 2, r.octetTotalCount!);
  split(cw, 4, r.packetDeltaCount!);
  split(cw, 6, r.packetTotalCount!);
  split(cw, 8, r.reverseOctetDeltaCount!);
  split(cw, 10, r.reverseOctetTotalCount!);
  split(cw, 12, r.reversePacketDeltaCount!);
  split(cw, 14, r.reversePacketTotalCount!);
}

function split(cw: Uint32Array, i: number, v: Counter): void {
  if (typeof v === "number") {
    cw[i] = (v / TWO32) >>> 0;
    cw[i + 1] = v >>> 0;
    return;
  }
  const x = BigInt.asUintN(64, v);
  cw[i] = Number(x >> 32n);
  cw[i + 1] = Number(x & 0xffffffffn);
}

/**
 * §3.3: aggregates `r` into the flow of `slot` for `sides`, its 8 counters given as
 * {@linkcode COUNTER_WORDS} in `cw` (`r`'s own counters are not read). Fields were validated by
 * the caller.
 */
export function aggregate(
  s: CoreState,
  slot: number,
  r: FlowInput,
  sides: number,
  cw: Uint32Array,
): void {
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
  const w = s.store.u64Words(slot);
  const b = u64Base(slot);
  let diff = addPair(w, b + OCT_D, cw, 2 * OCT_D, sides, isLatest);
  let bigDiff = spill;
  addPair(w, b + PKT_D, cw, 2 * PKT_D, sides, isLatest);
  let rdiff = addPair(w, b + ROCT_D, cw, 2 * ROCT_D, sides, isLatest);
  let bigRdiff = spill;
  addPair(w, b + RPKT_D, cw, 2 * RPKT_D, sides, isLatest);
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
  setThroughput(s.store.u64(slot), w, b, diff, bigDiff, rdiff, bigRdiff, dt, sides);
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
 * §3.3 step C for the delta counter at u64 index `at` and its total at `at + 1`, the record's
 * values at words `ci` (delta) and `ci + 2` (total) of `cw` ({@linkcode COUNTER_WORDS}): the
 * sides' deltas add up, their totals are replaced, and the common pair follows the latest
 * record. All in u32 halves, so exact over the whole u64 range (a delta sum wraps at 2^64, as
 * a u64 does). Returns the total's `v − old` of the last side (may be negative) as a double,
 * or NaN with the exact value in {@linkcode spill} when it is 2^53 or more away from 0.
 */
function addPair(
  w: Uint32Array,
  at: number,
  cw: Uint32Array,
  ci: number,
  sides: number,
  isLatest: boolean,
): number {
  const tHi = cw[ci + 2];
  const tLo = cw[ci + 3];
  let side = 0;
  if (sides & SIDE_S) {
    side = 2 * (at + S_OFF);
    addSide(w, side, cw, ci);
  }
  if (sides & SIDE_D) {
    side = 2 * (at + D_OFF);
    addSide(w, side, cw, ci);
  }
  if (isLatest) {
    const c = 2 * at;
    w[c] = w[side];
    w[c + 1] = w[side + 1];
    const cHi = w[c + 2 + U64_HI];
    if (cHi < tHi || (cHi === tHi && w[c + 2 + U64_LO] < tLo)) {
      w[c + 2 + U64_HI] = tHi;
      w[c + 2 + U64_LO] = tLo;
    }
  }
  const hd = tHi - oldHi;
  // |hd| < 2^21: the difference is within ±(2^53 − 1), exact as a double.
  if (hd > -0x200000 && hd < 0x200000) return hd * TWO32 + (tLo - oldLo);
  spill = ((BigInt(tHi) << 32n) | BigInt(tLo)) - ((BigInt(oldHi) << 32n) | BigInt(oldLo));
  return NaN;
}

/** The total a side had before {@linkcode addSide} replaced it, as its u32 halves. */
let oldHi = 0;
let oldLo = 0;

/**
 * One side's copy of a pair (its delta at u32 word `side`, its total at `side + 2`): the record's
 * delta (words `ci`, `ci + 1` of `cw`) added in halves, the carry into the high word (wrapping
 * at 2^64 as a u64 does), and its total replaced by the record's, the old one kept in
 * {@linkcode oldHi}/{@linkcode oldLo}.
 */
function addSide(w: Uint32Array, side: number, cw: Uint32Array, ci: number): void {
  const lo = w[side + U64_LO] + cw[ci + 1];
  w[side + U64_LO] = lo >>> 0;
  w[side + U64_HI] = (w[side + U64_HI] + cw[ci] + (lo >= TWO32 ? 1 : 0)) >>> 0;
  oldHi = w[side + 2 + U64_HI];
  oldLo = w[side + 2 + U64_LO];
  w[side + 2 + U64_HI] = cw[ci + 2];
  w[side + 2 + U64_LO] = cw[ci + 3];
}
