/**
 * The aggregation core (spec aggregation.md §1-4): ingests decoded Agent records, correlates the
 * two halves of InterNode flows, keeps per-side and common statistics and throughput, and hands
 * expired flows to the export loop as snapshots. Pure and synchronous: no I/O, no timers; time
 * comes from the injected {@linkcode Clock}. The caller arms its own timer from
 * {@linkcode AggregationCore.nextExpiryDelayMs}.
 *
 * Storage is compact on purpose (target <= 1 KB per live flow at 1M flows): numbers and the key
 * words live in a chunked `SlotStore`, the flow map is a numeric open-addressing `FlowTable` (no
 * key strings), a flow has no JS object (its slot is its handle, its flags are slot words), and
 * its strings (Pod, namespace, Node, policy names, tcpState) are interned and kept as ids in
 * its slot.
 *
 * This class is the public face; the work is split by verb over the modules of this folder,
 * which share one `CoreState` (state.ts): slot layout and field table (layout.ts, compiled by
 * field_code.ts), interning (intern.ts), ingest and correlation (ingest.ts), statistics and
 * throughput (flow_stats.ts), expiry (expiry.ts), snapshots and export hooks (snapshot.ts),
 * query (query.ts) and counters (counters.ts).
 *
 * Deviations from go-ipfix v0.6.2 / Antrea v1.13 (spec §10), each marked `improved` in tests:
 * - L1: an `emit` error is caught, logged and counted; the flow is still reset and re-queued or
 *   deleted, and the sweep continues (upstream orphaned the flow and aborted the sweep). The
 *   export loop's `emit` is expected to hand the snapshot to buffering exporters and not throw;
 *   if it does, that export's deltas are reset anyway rather than piling up behind a failure.
 * - L2: every expiry comparison uses `<=`, so a flow is always re-queued or deleted.
 * - L3: an InterNode half whose partner never arrives is exported with what is known
 *   (`uncorrelated: true`, missing Pod filled through the hooks) after the retries, and counted
 *   (option `dropUncorrelated` restores the silent upstream drop).
 * - L4 (refined E2): the first record from the other Node correlates (§1.5), whether or not it
 *   needs correlation itself and whether or not the entry is already ready; correlation still
 *   happens once per entry. A record that needs no correlation hitting a not-ready entry from
 *   the same Node marks it ready, correlatedFieldsFilled unchanged (the export loop fills the
 *   missing Pod). "Correlated once" is its own flag, not correlatedFieldsFilled, because an
 *   export's Pod-store fill sets that one too and must not stop a later merge; and the first
 *   record's Node is kept in the flags for `sameNode`, because the fill may set both Pod names.
 * - L8/L14: a counter that went down gives a diff of 0 (clamped, counted) instead of a u64
 *   wrap-around; throughput is never computed for dt <= 0.
 * - L12: `maxFlows` bounds the map and `maxFlowBytes` the bytes it holds, strings included;
 *   new keys over either are dropped and counted (also a record that would add strings to a held
 *   flow over the byte bound: a correlation or a new tcpState).
 * - L15: records are processed one by one; a bad record is rejected and counted alone.
 * - L17: a Pod without labels encodes as `{}` (newer Antrea), not `null`.
 * - L24: a record mixing an IPv4 and an IPv6 address is rejected (counted) instead of creating
 *   a mixed key; query filters are canonicalised before matching. The address family is part
 *   of the key, so an IPv4 key and an IPv4-mapped IPv6 key (both printed `a.b.c.d`) stay apart.
 * Upstream behaviour is kept where tests of §9 encode it: same-second records ignored (L6),
 * per-side end rewinds (L7), common throughput set by every processed record (L5), metadata
 * look-ups not retried after a miss (L16).
 */

import type { AggregatedRecord, ExportedFlow, FlowInput, FlowKey } from "./record.ts";
import type { AggregationStats } from "./counters.ts";
import { addRecord, addRecordView } from "./ingest.ts";
import { expire, type ExpireOptions, flushAll, hasExpired, nextExpiryDelayMs } from "./expiry.ts";
import { entryState, type FlowEntryState, query, type QueryPage, queryPage } from "./query.ts";
import type { ExportHooks } from "./snapshot.ts";
import { type AggregationOptions, checkTimeouts, CoreState } from "./state.ts";

export type { AggregationStats, RejectReason } from "./counters.ts";
export type { ExpireOptions } from "./expiry.ts";
export type { FlowEntryState, QueryPage } from "./query.ts";
export type { ExportHooks, PodInfo } from "./snapshot.ts";
export type { AggregationOptions } from "./state.ts";

/** The aggregation process: flow map, correlation, statistics and expiry queue. */
export class AggregationCore {
  readonly #s: CoreState;

  /** Creates an empty core. Throws RangeError for non-positive or non-finite timeouts. */
  constructor(opts: AggregationOptions) {
    this.#s = new CoreState(opts);
  }

  /** Number of live flows (ready, not ready). */
  get flowCount(): number {
    return this.#s.table.size;
  }

  /** Number of queued expiry items; always equals {@linkcode flowCount} (no orphans). */
  get queueLength(): number {
    return this.#s.heap.size;
  }

  /** Changes A and I for schedules computed from now on (existing expiry times are kept). */
  updateTimeouts(activeMs: number, inactiveMs: number): void {
    checkTimeouts(activeMs, inactiveMs);
    this.#s.active = activeMs;
    this.#s.inactive = inactiveMs;
  }

  /** Changes the flow cap for new flows (existing flows over a lowered cap are kept). */
  setMaxFlows(n: number): void {
    this.#s.maxFlows = n;
  }

  /**
   * Changes the bound on the bytes of held flows (see {@linkcode AggregationCore.flowBytes}) for
   * records from now on; flows already held over a lowered bound are kept.
   */
  setMaxFlowBytes(n: number): void {
    this.#s.maxFlowBytes = n;
  }

  /**
   * Bytes of the held flows: a fixed cost per flow (slot, index entries) plus the
   * strings they reference, each distinct string charged once while any flow references it.
   */
  get flowBytes(): number {
    return this.#s.heldBytes();
  }

  /** Enables or disables Pod labels for flows exported from now on. */
  setIncludePodLabels(on: boolean): void {
    this.#s.includePodLabels = on;
  }

  /** Ingests records one by one (a message); returns how many were accepted. */
  addRecords(records: Iterable<FlowInput>): number {
    let n = 0;
    for (const r of records) if (addRecord(this.#s, r)) n++;
    return n;
  }

  /**
   * Ingests one record synchronously (spec §2.2). Returns false, counting and logging the
   * reason, when the record is rejected; never throws for bad input.
   */
  addRecord(r: FlowInput): boolean {
    return addRecord(this.#s, r);
  }

  /**
   * {@linkcode addRecord} of a record given as its view (`UPDATE_VIEW_FIELDS` decoded) and its
   * whole decoding on demand (`full`, called at most once, synchronously), and optionally its
   * flow key words (`key`) and counters (`words`) read from its bytes: see `ingest.ts`
   * `addRecordView`. The same outcome as `addRecord(full())`.
   */
  addRecordView(
    view: FlowInput,
    full: () => FlowInput,
    key?: Uint32Array,
    words?: Uint32Array,
  ): boolean {
    return addRecordView(this.#s, view, full, key, words);
  }

  /**
   * Counts a record that reached this core but could not be decoded (a shard decodes the
   * records the main thread routed to it undecoded): offered and rejected as `invalidRecord`,
   * so the loss ledger balances.
   */
  countUndecodable(why: string): void {
    this.#s.counters.recordsIn++;
    this.#s.reject("invalidRecord", `record could not be decoded: ${why}`);
  }

  /**
   * Exports every expired flow (spec §4.3 with the §10 fixes). For each: fills metadata and
   * labels through `hooks`, calls `emit` once with an own snapshot taken before the reset,
   * then resets deltas/throughput (§3.6) and re-queues or deletes it. Not-ready flows are
   * retried, and after `maxRetries` exported as `uncorrelated` and deleted. An `emit` error is
   * logged and counted and the sweep goes on. Returns the number of successful `emit` calls.
   * With `hooks.limit`, at most that many due flows are handled; the rest stay due for the next
   * call (see {@linkcode AggregationCore.hasExpired}), so a caller can let exporters drain.
   */
  expire(emit: (f: ExportedFlow) => void, hooks?: ExpireOptions): number {
    return expire(this.#s, emit, hooks);
  }

  /** True when at least one flow is due for {@linkcode expire} now. */
  hasExpired(): boolean {
    return hasExpired(this.#s);
  }

  /**
   * Emits every flow still held, ready or not (not-ready ones flagged `uncorrelated`), for a
   * final flush at shutdown (L22), and empties the core. Returns the successful emits.
   */
  flushAll(emit: (f: ExportedFlow) => void, hooks?: ExportHooks): number {
    return flushAll(this.#s, emit, hooks);
  }

  /** Monotonic time (ms) at which the earliest flow expires; +Infinity when none is held. */
  get earliestExpiryMs(): number {
    return this.#s.heap.peekPriority();
  }

  /**
   * Milliseconds until the next sweep should run (spec §4.6): `minExpiry + (top − now)`, or
   * `minExpiry` when that is negative; `min(A, I)` when no flow is held.
   */
  nextExpiryDelayMs(): number {
    return nextExpiryDelayMs(this.#s);
  }

  /**
   * Snapshots of the flows matching `filter` (spec §8): none given → all; a complete key (both
   * addresses, protocol and both ports non-zero) → exact look-up; otherwise `""`/0 fields are
   * wildcards. Filter addresses are canonicalised first. At most `limit` results.
   */
  query(filter?: Partial<FlowKey> | null, limit = Infinity): AggregatedRecord[] {
    return query(this.#s, filter, limit);
  }

  /**
   * One page of {@linkcode query}: the matches held from slot `from` on (0: the first page), at
   * most `limit`, and where the next page starts. A flow held through every page is in exactly
   * one of them; one that comes or goes between pages may be in none.
   */
  queryPage(filter: Partial<FlowKey> | null, limit: number, from: number): QueryPage {
    return queryPage(this.#s, filter, limit, from);
  }

  /** Internal flags and expiry times of one flow (tests, debugging); undefined if unknown. */
  entryState(key: FlowKey): FlowEntryState | undefined {
    return entryState(this.#s, key);
  }

  /** Current counters (a copy). */
  stats(): AggregationStats {
    return this.#s.counters.snapshot(this.#s.table.size, this.#s.heldBytes());
  }
}
