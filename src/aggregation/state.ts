/**
 * The state of one aggregation core, shared by the modules that act on it (ingest, statistics,
 * expiry, snapshot, query): options, the slot store (a flow is its slot), the flow table, the
 * expiry queue, the intern table and the counters. Internal: `AggregationCore`
 * (core.ts) owns one and is the public face; nothing here is exported from `mod.ts`.
 */

import type { Clock } from "../clock.ts";
import { type Logger, logger, RateLimitedLog } from "../log.ts";
import { CoreCounters, type RejectReason } from "./counters.ts";
import { IndexHeap } from "./expiry_heap.ts";
import { FlowTable, KEY_WORDS, MAX_PROBE, MAX_TABLE_SLOTS } from "./flow_table.ts";
import { COUNTER_WORDS } from "./flow_stats.ts";
import { Interner } from "./intern.ts";
import { FIELD_CODE } from "./field_code.ts";
import type { TupleTable } from "./tuples.ts";
import { FLOW_FIXED_BYTES } from "./layout.ts";
import { FAMILY_SHIFT, SlotStore, U32, u32Base } from "./slot_store.ts";

/** The aggregation logger. */
export const log: Logger = logger("aggregation");

/** Construction options of {@linkcode AggregationCore}. */
export interface AggregationOptions {
  /** activeFlowRecordTimeout (A) in ms. */
  activeTimeoutMs: number;
  /** inactiveFlowRecordTimeout (I) in ms. */
  inactiveTimeoutMs: number;
  /** Monotonic time for expiry. */
  clock: Clock;
  /** Not-ready expiries tolerated before giving up on a partner (default 2: gone at the 3rd). */
  maxRetries?: number;
  /**
   * Maximum live flows; records for new keys over it are dropped and counted. Default
   * unbounded: the product passes the `limits.maxFlows` config key.
   */
  maxFlows?: number;
  /**
   * Maximum bytes of held flows, their strings included (see {@linkcode CoreState.heldBytes});
   * a record for a new flow, or one that would add strings, over it is dropped and counted.
   * Default unbounded: the product passes the `limits.maxFlowBytes` config key.
   */
  maxFlowBytes?: number;
  /** Add `sourcePodLabels`/`destinationPodLabels` at the first export (default false). */
  includePodLabels?: boolean;
  /** Slack added to the next expiry delay (spec §4.6 MinExpiryTime, default 100 ms). */
  minExpiryMs?: number;
  /** Upstream L3: delete an un-correlated half silently instead of exporting it (default false). */
  dropUncorrelated?: boolean;
  /**
   * The usage shared with the other shards of a sharded process: `maxFlows` and `maxFlowBytes`
   * bound the process. Absent: this core is the only one.
   */
  peers?: PeerUsage;
}

/** Usage shared by the shards of a process (see {@linkcode AggregationOptions.peers}). */
export interface PeerUsage {
  /**
   * Adds `n` (+1 for a flow created, -k for k deleted) to the live flows of the whole process
   * and returns the new total: one atomic count, so `maxFlows` holds exactly however the
   * shards race.
   */
  addFlows(n: number): number;
  /**
   * Held bytes of the other shards (see {@linkcode CoreState.heldBytes}), as they last
   * published them (a shard's own bytes change with every string: not counted atomically).
   */
  bytes(): number;
  /**
   * Publishes this shard's held bytes, `n` with a charge about to be made, as soon as a charge
   * passes the bound check (the exact figure follows at the end of each slice), so the other
   * shards check against it at once.
   */
  publishBytes?(n: number): void;
}

/** Everything one core holds. Fields are shared by the verb modules of this folder. */
export class CoreState {
  /** A in ms (changed by updateTimeouts). */
  active: number;
  /** I in ms (changed by updateTimeouts). */
  inactive: number;
  /** Monotonic time. */
  readonly clock: Clock;
  /** See {@linkcode AggregationOptions.maxRetries}. */
  readonly maxRetries: number;
  /** See {@linkcode AggregationOptions.maxFlows} (changed by setMaxFlows). */
  maxFlows: number;
  /** See {@linkcode AggregationOptions.maxFlowBytes} (changed by setMaxFlowBytes). */
  maxFlowBytes: number;
  /** See {@linkcode AggregationOptions.minExpiryMs}. */
  readonly minExpiryMs: number;
  /** See {@linkcode AggregationOptions.dropUncorrelated}. */
  readonly dropUncorrelated: boolean;
  /** See {@linkcode AggregationOptions.includePodLabels}. */
  includePodLabels: boolean;
  /** See {@linkcode AggregationOptions.peers}. */
  readonly peers: PeerUsage | undefined;
  /** Numbers and key words of every flow. */
  readonly store: SlotStore = new SlotStore();
  /** 5-tuple → slot. */
  readonly table: FlowTable = new FlowTable(this.store, {
    onRekey: (probe, flows) => {
      this.counters.flowTableRekeys++;
      // At most once per doubling of the table (flow_table.ts): not rate-limited.
      log.warn(
        "flow table: an insert probed past the bound, as keys crafted to share a hash would " +
          "make it: rehashed under a new random key",
        { probe, maxProbe: MAX_PROBE, flows },
      );
    },
  });
  /** Probe key scratch, reused by every record. */
  readonly key: Uint32Array = new Uint32Array(KEY_WORDS);
  /** A decoded record's counters as words (`counterWords`), for an update from its values. */
  readonly words: Uint32Array = new Uint32Array(COUNTER_WORDS);
  /** Expiry queue of every live flow's slot. */
  readonly heap: IndexHeap = new IndexHeap();
  /** Shared copies of the flows' strings. */
  readonly intern: Interner = new Interner();
  /** Shared tuples of the flows' field groups (layout.ts GROUPS), one table per group. */
  readonly groups: TupleTable[] = FIELD_CODE.newGroupTables(this.intern);
  /** Rate limit of the per-record warnings. */
  readonly rl: RateLimitedLog;
  /** The counters. */
  readonly counters: CoreCounters = new CoreCounters();

  /** State of an empty core. Throws RangeError for non-positive or non-finite timeouts. */
  constructor(opts: AggregationOptions) {
    checkTimeouts(opts.activeTimeoutMs, opts.inactiveTimeoutMs);
    this.active = opts.activeTimeoutMs;
    this.inactive = opts.inactiveTimeoutMs;
    this.clock = opts.clock;
    this.maxRetries = opts.maxRetries ?? 2;
    this.maxFlows = opts.maxFlows ?? Infinity;
    this.maxFlowBytes = opts.maxFlowBytes ?? Infinity;
    this.minExpiryMs = opts.minExpiryMs ?? 100;
    this.dropUncorrelated = opts.dropUncorrelated ?? false;
    this.includePodLabels = opts.includePodLabels ?? false;
    this.peers = opts.peers;
    this.rl = new RateLimitedLog(10_000, () => this.clock.nowMs());
  }

  /**
   * Bytes of the held flows: a fixed cost per flow ({@linkcode FLOW_FIXED_BYTES}) plus every
   * string and field-group tuple the flows reference, each distinct one charged once
   * (intern.ts, tuples.ts).
   */
  heldBytes(): number {
    let tuples = 0;
    for (const g of this.groups) tuples += g.bytes;
    return this.table.size * FLOW_FIXED_BYTES + this.intern.bytes + tuples;
  }

  /** True when `slot` holds a live flow (its key's family is set; free slots are zeroed). */
  live(slot: number): boolean {
    return this.store.u32(slot)[u32Base(slot) + U32.PROTO] >>> FAMILY_SHIFT !== 0;
  }

  /**
   * Counts one more flow unless that would exceed `maxFlows` (the other shards' flows included);
   * false, counting nothing, when it would. Undone by {@linkcode flowsGone}.
   */
  takeFlow(): boolean {
    // The flow table numbers at most MAX_TABLE_SLOTS slots (limits.maxFlows is kept below).
    if (this.store.used >= MAX_TABLE_SLOTS) return false;
    const p = this.peers;
    if (p === undefined) return this.table.size < this.maxFlows;
    if (p.addFlows(1) <= this.maxFlows) return true;
    p.addFlows(-1);
    return false;
  }

  /** `n` flows were deleted (or a taken one was not created after all). */
  flowsGone(n: number): void {
    this.peers?.addFlows(-n);
  }

  /**
   * True when adding `bytes` to the held flows would exceed `maxFlowBytes` (the other shards'
   * bytes included).
   */
  overBytes(bytes: number): boolean {
    const held = this.heldBytes();
    const p = this.peers;
    if (p === undefined) return held + bytes > this.maxFlowBytes;
    if (held + p.bytes() + bytes > this.maxFlowBytes) return true;
    // Told to the other shards at once, not at the end of the slice: each would otherwise fill
    // to the whole bound meanwhile (4 shards held 2-3.4 times it).
    p.publishBytes?.(held + bytes);
    return false;
  }

  /** Counts and logs (rate-limited) a rejected record; returns false for `return reject(...)`. */
  reject(reason: RejectReason, msg: string): boolean {
    this.counters.rejected[reason]++;
    const s = this.rl.allow(reason);
    if (s >= 0) log.warn(msg, { reason, suppressed: s });
    return false;
  }
}

/** Throws RangeError unless both timeouts are positive finite numbers. */
export function checkTimeouts(activeMs: number, inactiveMs: number): void {
  if (!(Number.isFinite(activeMs) && activeMs > 0)) {
    throw new RangeError(`aggregation: activeTimeoutMs ${activeMs}: must be a positive number`);
  }
  if (!(Number.isFinite(inactiveMs) && inactiveMs > 0)) {
    throw new RangeError(
      `aggregation: inactiveTimeoutMs ${inactiveMs}: must be a positive number`,
    );
  }
}
