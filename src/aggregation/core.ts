/**
 * The aggregation core (spec aggregation.md §1-4): ingests decoded Agent records, correlates the
 * two halves of InterNode flows, keeps per-side and common statistics and throughput, and hands
 * expired flows to the export loop as snapshots. Pure and synchronous: no I/O, no timers; time
 * comes from the injected {@linkcode Clock}. The caller arms its own timer from
 * {@linkcode AggregationCore.nextExpiryDelayMs}.
 *
 * Storage is compact on purpose (target <= 1 KB per live flow at 1M flows): numbers and the key
 * words live in a chunked {@linkcode SlotStore}, the flow map is a numeric open-addressing
 * {@linkcode FlowTable} (no key strings), a flow object holds only strings and a few small
 * integers, and repeated strings (Pod, namespace, Node, policy names, tcpState) are interned.
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
 * - L4 (E2): a record that needs no correlation hitting a not-ready entry marks it ready, with
 *   correlatedFieldsFilled = false so that the export loop fills the missing Pod.
 * - L8/L14: a counter that went down gives a diff of 0 (clamped, counted) instead of a u64
 *   wrap-around; throughput is never computed for dt <= 0.
 * - L12: `maxFlows` bounds the map; new keys over it are dropped and counted.
 * - L15: records are processed one by one; a bad record is rejected and counted alone.
 * - L17: a Pod without labels encodes as `{}` (newer Antrea), not `null`.
 * - L24: a record mixing an IPv4 and an IPv6 address is rejected (counted) instead of creating
 *   a mixed key; query filters are canonicalised before matching. The address family is part
 *   of the key, so an IPv4 key and an IPv4-mapped IPv6 key (both printed `a.b.c.d`) stay apart.
 * Upstream behaviour is kept where tests of §9 encode it: same-second records ignored (L6),
 * per-side end rewinds (L7), common throughput set by every processed record (L5), metadata
 * look-ups not retried after a miss (L16).
 */

import type { Clock } from "../clock.ts";
import { logger, RateLimitedLog } from "../log.ts";
import {
  canonicalAddress,
  canonicalAnyAddress,
  formatIPv4Word,
  formatIPv6Words,
  parseIPv4Word,
  parseIPv6Words,
} from "./flow_key.ts";
import {
  correlationRequired,
  encodePodLabels,
  FlowType,
  isFromDestination,
  isFromSource,
} from "./correlation.ts";
import { ExpiryHeap, type HeapItem } from "./expiry_heap.ts";
import { f64Base, SlotStore, U32, u32Base, u64Base } from "./slot_store.ts";
import { FlowTable, hashKey, KEY_WORDS } from "./flow_table.ts";
import type { AggregatedRecord, ExportedFlow, FlowInput, FlowKey } from "./record.ts";

const log = logger("aggregation");

// u64 layout of a slot. The 8 common Stats counters in the spec's list order, then the same 8
// FromSourceNode, the same 8 FromDestinationNode, then the 6 throughputs.
const OCT_D = 0;
const OCT_T = 1;
const PKT_D = 2;
const PKT_T = 3;
const ROCT_D = 4;
const ROCT_T = 5;
const RPKT_D = 6;
const RPKT_T = 7;
const S_OFF = 8;
const D_OFF = 16;
const THR = 24;
const RTHR = 25;
const THR_S = 26;
const RTHR_S = 27;
const THR_D = 28;
const RTHR_D = 29;

// u32 layout of a slot (shared with the flow table, which owns the key words).
const F_START = U32.START;
const F_END = U32.END;
const F_END_S = U32.END_S;
const F_END_D = U32.END_D;
const F_REASON = U32.REASON;
const F_PROTO = U32.PROTO;
const F_SPORT = U32.SPORT;
const F_DPORT = U32.DPORT;
const F_TYPE = U32.TYPE;
const F_SVC_PORT = U32.SVC_PORT;
const F_ING_TYPE = U32.ING_TYPE;
const F_ING_ACT = U32.ING_ACT;
const F_EG_TYPE = U32.EG_TYPE;
const F_EG_ACT = U32.EG_ACT;

// f64 layout of a slot.
const T_ACTIVE = 0;
const T_INACTIVE = 1;

const SIDE_S = 1;
const SIDE_D = 2;

const FL_READY = 1;
const FL_CORR_FILLED = 2;
const FL_EXT_FILLED = 4;
const FL_IPV4 = 8;
/** A record was aggregated since the last export (to count exports without new data, L9). */
const FL_UPDATED = 16;

const END_OF_FLOW = 3;

/** Why {@linkcode AggregationCore.addRecord} rejected a record. */
export type RejectReason =
  | "missingKeyField"
  | "badAddress"
  | "mixedAddressFamily"
  | "missingField"
  | "badFieldType"
  | "maxFlows"
  | "invalidRecord";

const REJECT_REASONS: readonly RejectReason[] = [
  "invalidRecord",
  "missingKeyField",
  "badAddress",
  "mixedAddressFamily",
  "missingField",
  "badFieldType",
  "maxFlows",
];

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
  /** Maximum live flows; records for new keys over it are dropped and counted (default 1M). */
  maxFlows?: number;
  /** Add `sourcePodLabels`/`destinationPodLabels` at the first export (default false). */
  includePodLabels?: boolean;
  /** Slack added to the next expiry delay (spec §4.6 MinExpiryTime, default 100 ms). */
  minExpiryMs?: number;
  /** Upstream L3: delete an un-correlated half silently instead of exporting it (default false). */
  dropUncorrelated?: boolean;
}

/** Pod metadata returned by the export loop's Pod store. */
export interface PodInfo {
  /** Pod name. */
  name: string;
  /** Pod namespace. */
  namespace: string;
  /** Node the Pod runs on. */
  nodeName: string;
  /** Pod labels; undefined or empty for a Pod without labels. */
  labels?: Record<string, string>;
}

/** Hooks the export loop passes to a sweep to enrich flows before their snapshot. */
export interface ExportHooks {
  /**
   * Finds the Pod that owned `ip` at `startTimeSec` (the flow's flowStartSeconds). Called only
   * for flows whose metadata is not filled (§6.5) and, with labels enabled, once per flow for
   * each named Pod (§6.6). Without this hook nothing is filled and the flags stay unset.
   */
  lookupPod?(ip: string, startTimeSec: number): PodInfo | undefined;
}

/** Options of one {@linkcode AggregationCore.expire} sweep. */
export interface ExpireOptions extends ExportHooks {
  /** Most due flows handled by this call (default: all); the rest wait for the next call. */
  limit?: number;
}

/** Counters of the core (all monotonic except `flows`). */
export interface AggregationStats {
  /** Records offered to addRecord. */
  recordsIn: number;
  /** Records aggregated (created or updated a flow). */
  recordsAccepted: number;
  /** Records rejected, by reason (includes `maxFlows`). */
  recordsRejected: Record<RejectReason, number>;
  /** Accepted records ignored by §3.3 step 3 (flowEnd not after the side's previous end). */
  recordsStale: number;
  /** Records whose flowType IE was missing (treated as 0). */
  missingFlowType: number;
  /** Flows created. */
  flowsCreated: number;
  /** Flows deleted (inactive expiry, un-correlated give-up, flush). */
  flowsDeleted: number;
  /** InterNode halves merged. */
  correlated: number;
  /** Not-ready entries made ready by a record needing no correlation (E2 fix, L4). */
  readyWithoutCorrelation: number;
  /** Snapshots handed to `emit` without it throwing. */
  exported: number;
  /** Of those, snapshots flagged `uncorrelated`. */
  uncorrelatedExported: number;
  /** Un-correlated halves deleted without export (`dropUncorrelated` only). */
  uncorrelatedDropped: number;
  /** Exports of a flow that received no record since its previous export (L9). */
  exportedWithoutNewData: number;
  /** Calls of `emit` that threw. */
  emitErrors: number;
  /** Expiries that found a flow not ready and re-queued it. */
  notReadyRetries: number;
  /** Records dropped because `maxFlows` was reached (same as recordsRejected.maxFlows). */
  droppedMaxFlows: number;
  /** Total-counter diffs that were negative and clamped to 0 (L8). */
  negativeDiffsClamped: number;
  /** Pod look-ups that found nothing. */
  podLookupMisses: number;
  /** Live flows now. */
  flows: number;
}

/** Internal state of one entry, for tests and debugging. */
export interface FlowEntryState {
  /** May be exported. */
  readyToSend: boolean;
  /** Not-ready expiries so far. */
  retries: number;
  /** False: the Pod metadata is filled from the Pod store at the next export. */
  correlatedFieldsFilled: boolean;
  /** False: labels are added at the next export when enabled. */
  externalFieldsFilled: boolean;
  /** Both addresses came from IPv4 IEs. */
  isIPv4: boolean;
  /** Active expiry time (monotonic ms). */
  activeExpireMs: number;
  /** Inactive expiry time (monotonic ms). */
  inactiveExpireMs: number;
}

/** One live flow: strings and small integers only; numbers are in its slot. */
class Flow implements HeapItem {
  heapIndex = -1;
  flags: number;
  retries = 0;
  readonly slot: number;
  srcPod = "";
  srcNs = "";
  srcNode = "";
  dstPod = "";
  dstNs = "";
  dstNode = "";
  svcPortName = "";
  ingName = "";
  ingNs = "";
  ingRule = "";
  egName = "";
  egNs = "";
  egRule = "";
  tcpState = "";
  egressName = "";
  egressIP = "";
  clusterV4: string | undefined = undefined;
  clusterV6: string | undefined = undefined;
  srcLabels: string | undefined = undefined;
  dstLabels: string | undefined = undefined;

  constructor(slot: number, flags: number) {
    this.slot = slot;
    this.flags = flags;
  }
}

// Interning: many flows share Pod, namespace, Node and policy names. A direct-mapped table
// (slot from the length and a few sampled characters; a hit compares the whole string) instead
// of a Map: no full-string hash, growth or rehash per new name, and bounded by construction.
// A collision only loses sharing, never correctness.
const INTERN_SLOTS = 1 << 16;

function internSlot(s: string): number {
  const n = s.length;
  let h = Math.imul(2166136261 ^ n, 16777619);
  h = Math.imul(h ^ s.charCodeAt(0), 16777619);
  h = Math.imul(h ^ s.charCodeAt(n - 1), 16777619);
  if (n > 2) {
    h = Math.imul(h ^ s.charCodeAt(1), 16777619);
    h = Math.imul(h ^ s.charCodeAt(n - 2), 16777619);
    h = Math.imul(h ^ s.charCodeAt(n >> 1), 16777619);
    if (n > 5) {
      h = Math.imul(h ^ s.charCodeAt(2), 16777619);
      h = Math.imul(h ^ s.charCodeAt(n - 3), 16777619);
      h = Math.imul(h ^ s.charCodeAt(n - 4), 16777619);
    }
  }
  return (h ^ (h >>> 15)) & (INTERN_SLOTS - 1);
}

function newInternTable(): (string | undefined)[] {
  return new Array<string | undefined>(INTERN_SLOTS).fill(undefined);
}

/** The aggregation process: flow map, correlation, statistics and expiry queue. */
export class AggregationCore {
  #active: number;
  #inactive: number;
  readonly #clock: Clock;
  readonly #maxRetries: number;
  readonly #maxFlows: number;
  readonly #minExpiryMs: number;
  readonly #dropUncorrelated: boolean;
  #includePodLabels: boolean;
  readonly #store = new SlotStore();
  readonly #table = new FlowTable(this.#store);
  /** Flow object of each slot (undefined for free slots). */
  #bySlot: (Flow | undefined)[] = [];
  /** Probe key scratch, reused by every record. */
  readonly #k = new Uint32Array(KEY_WORDS);
  readonly #heap = new ExpiryHeap<Flow>();
  #intern = newInternTable();
  readonly #rl: RateLimitedLog;
  readonly #rejected: Record<RejectReason, number>;
  #recordsIn = 0;
  #recordsAccepted = 0;
  #recordsStale = 0;
  #missingFlowType = 0;
  #flowsCreated = 0;
  #flowsDeleted = 0;
  #correlated = 0;
  #readyWithoutCorrelation = 0;
  #exported = 0;
  #uncorrelatedExported = 0;
  #uncorrelatedDropped = 0;
  #exportedWithoutNewData = 0;
  #emitErrors = 0;
  #notReadyRetries = 0;
  #negativeDiffsClamped = 0;
  #podLookupMisses = 0;

  /** Creates an empty core. Throws RangeError for non-positive or non-finite timeouts. */
  constructor(opts: AggregationOptions) {
    checkTimeouts(opts.activeTimeoutMs, opts.inactiveTimeoutMs);
    this.#active = opts.activeTimeoutMs;
    this.#inactive = opts.inactiveTimeoutMs;
    this.#clock = opts.clock;
    this.#maxRetries = opts.maxRetries ?? 2;
    this.#maxFlows = opts.maxFlows ?? 1_000_000;
    this.#minExpiryMs = opts.minExpiryMs ?? 100;
    this.#dropUncorrelated = opts.dropUncorrelated ?? false;
    this.#includePodLabels = opts.includePodLabels ?? false;
    this.#rl = new RateLimitedLog(10_000, () => this.#clock.nowMs());
    this.#rejected = Object.fromEntries(REJECT_REASONS.map((r) => [r, 0])) as Record<
      RejectReason,
      number
    >;
  }

  /** Number of live flows (ready, not ready). */
  get flowCount(): number {
    return this.#table.size;
  }

  /** Number of queued expiry items; always equals {@linkcode flowCount} (no orphans). */
  get queueLength(): number {
    return this.#heap.size;
  }

  /** Changes A and I for schedules computed from now on (existing expiry times are kept). */
  updateTimeouts(activeMs: number, inactiveMs: number): void {
    checkTimeouts(activeMs, inactiveMs);
    this.#active = activeMs;
    this.#inactive = inactiveMs;
  }

  /** Enables or disables Pod labels for flows exported from now on. */
  setIncludePodLabels(on: boolean): void {
    this.#includePodLabels = on;
  }

  /** Ingests records one by one (a message); returns how many were accepted. */
  addRecords(records: Iterable<FlowInput>): number {
    let n = 0;
    for (const r of records) if (this.addRecord(r)) n++;
    return n;
  }

  /**
   * Ingests one record synchronously (spec §2.2). Returns false, counting and logging the
   * reason, when the record is rejected; never throws for bad input.
   */
  addRecord(r: FlowInput): boolean {
    this.#recordsIn++;
    try {
      return this.#addRecord(r);
    } catch (err) {
      // Last line of defence: field checks above should make this unreachable; a record must
      // never take the collector down.
      return this.#reject("invalidRecord", `record could not be aggregated: ${err}`);
    }
  }

  #addRecord(r: FlowInput): boolean {
    if (r === null || typeof r !== "object") {
      return this.#reject("invalidRecord", "record is not an object");
    }
    const sport = r.sourceTransportPort;
    const dport = r.destinationTransportPort;
    const proto = r.protocolIdentifier;
    if (sport === undefined || dport === undefined || proto === undefined) {
      return this.#reject("missingKeyField", "record without protocol or ports");
    }
    if (!isUint(sport, 0xffff) || !isUint(dport, 0xffff) || !isUint(proto, 0xff)) {
      return this.#reject("badFieldType", "record with an out-of-range protocol or port");
    }
    let srcText: string | undefined = r.sourceIPv4Address;
    let srcV4 = true;
    if (srcText === undefined) {
      srcText = r.sourceIPv6Address;
      srcV4 = false;
    } else if (r.sourceIPv6Address !== undefined) this.#warnBothFamilies("source");
    let dstText: string | undefined = r.destinationIPv4Address;
    let dstV4 = true;
    if (dstText === undefined) {
      dstText = r.destinationIPv6Address;
      dstV4 = false;
    } else if (r.destinationIPv6Address !== undefined) this.#warnBothFamilies("destination");
    if (srcText === undefined || dstText === undefined) {
      return this.#reject("missingKeyField", "record without source or destination address");
    }
    if (srcV4 !== dstV4) {
      return this.#reject("mixedAddressFamily", "record mixes IPv4 and IPv6 addresses");
    }
    const k = this.#k;
    if (srcV4) {
      const a = typeof srcText === "string" ? parseIPv4Word(srcText) : -1;
      const b = typeof dstText === "string" ? parseIPv4Word(dstText) : -1;
      if (a < 0 || b < 0) return this.#reject("badAddress", "record with an invalid address");
      k[0] = a;
      k[1] = k[2] = k[3] = 0;
      k[4] = b;
      k[5] = k[6] = k[7] = 0;
      k[11] = 4;
    } else {
      const a = parseIPv6Words(srcText);
      const b = parseIPv6Words(dstText);
      if (a === undefined || b === undefined) {
        return this.#reject("badAddress", "record with an invalid address");
      }
      k.set(a, 0);
      k.set(b, 4);
      k[11] = 6;
    }
    k[8] = proto;
    k[9] = sport;
    k[10] = dport;
    const h = hashKey(k);
    let flowType = r.flowType;
    if (typeof flowType !== "number") {
      flowType = FlowType.Unknown;
      this.#missingFlowType++;
      const s = this.#rl.allow("flowType");
      if (s >= 0) log.warn("record without flowType, treated as 0", { suppressed: s });
    }
    const corr = correlationRequired(r, flowType);
    const slot = this.#table.find(k, h);
    if (slot < 0) return this.#create(h, r, srcV4, flowType, corr);
    return this.#update(this.#bySlot[slot]!, r, corr);
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
    const heap = this.#heap;
    if (heap.size === 0) return 0;
    const T = this.#clock.nowMs();
    const limit = hooks?.limit ?? Infinity;
    let n = 0;
    let popped = 0;
    while (heap.size > 0 && popped++ < limit && heap.peekPriority() <= T) {
      const flow = heap.pop()!;
      const f64 = this.#store.f64(flow.slot);
      const fb = f64Base(flow.slot);
      if ((flow.flags & FL_READY) === 0) {
        flow.retries++;
        if (flow.retries > this.#maxRetries) {
          if (this.#dropUncorrelated) {
            this.#uncorrelatedDropped++;
          } else if (this.#emitOne(flow, emit, hooks, true)) {
            n++;
          }
          this.#deleteFlow(flow);
          continue;
        }
        this.#notReadyRetries++;
        f64[fb + T_ACTIVE] = T + this.#active;
        f64[fb + T_INACTIVE] = T + this.#inactive;
        heap.push(flow, Math.min(f64[fb + T_ACTIVE], f64[fb + T_INACTIVE]));
        continue;
      }
      if (this.#emitOne(flow, emit, hooks, false)) n++;
      this.#reset(flow);
      // `<=` (L2): an item expired by exact equality is deleted or re-queued, never orphaned.
      if (f64[fb + T_INACTIVE] <= T) {
        this.#deleteFlow(flow);
      } else {
        f64[fb + T_ACTIVE] = T + this.#active;
        heap.push(flow, Math.min(f64[fb + T_ACTIVE], f64[fb + T_INACTIVE]));
      }
    }
    return n;
  }

  /** True when at least one flow is due for {@linkcode expire} now. */
  hasExpired(): boolean {
    return this.#heap.size > 0 && this.#heap.peekPriority() <= this.#clock.nowMs();
  }

  /**
   * Emits every flow still held, ready or not (not-ready ones flagged `uncorrelated`), for a
   * final flush at shutdown (L22), and empties the core. Returns the successful emits.
   */
  flushAll(emit: (f: ExportedFlow) => void, hooks?: ExportHooks): number {
    let n = 0;
    for (const flow of this.#bySlot) {
      if (flow === undefined) continue;
      if (this.#emitOne(flow, emit, hooks, (flow.flags & FL_READY) === 0)) n++;
      this.#flowsDeleted++;
    }
    this.#table.clear();
    this.#bySlot = [];
    this.#heap.clear();
    this.#store.clear();
    this.#intern = newInternTable();
    return n;
  }

  /** Monotonic time (ms) at which the earliest flow expires; +Infinity when none is held. */
  get earliestExpiryMs(): number {
    return this.#heap.peekPriority();
  }

  /**
   * Milliseconds until the next sweep should run (spec §4.6): `minExpiry + (top − now)`, or
   * `minExpiry` when that is negative; `min(A, I)` when no flow is held.
   */
  nextExpiryDelayMs(): number {
    if (this.#heap.size === 0) return Math.min(this.#active, this.#inactive);
    const d = this.#minExpiryMs + (this.#heap.peekPriority() - this.#clock.nowMs());
    return d < 0 ? this.#minExpiryMs : d;
  }

  /**
   * Snapshots of the flows matching `filter` (spec §8): none given → all; a complete key (both
   * addresses, protocol and both ports non-zero) → exact look-up; otherwise `""`/0 fields are
   * wildcards. Filter addresses are canonicalised first. At most `limit` results.
   */
  query(filter?: Partial<FlowKey> | null, limit = Infinity): AggregatedRecord[] {
    const out: AggregatedRecord[] = [];
    if (limit <= 0) return out;
    if (filter === undefined || filter === null) {
      for (const f of this.#bySlot) {
        if (f === undefined) continue;
        out.push(this.#snapshot(f));
        if (out.length >= limit) break;
      }
      return out;
    }
    const canon = (a: string | undefined): string | undefined =>
      a === undefined || a === "" ? "" : canonicalAnyAddress(a);
    const src = canon(filter.sourceAddress);
    const dst = canon(filter.destinationAddress);
    // An unparsable address matches nothing (it can never equal a stored canonical address).
    if (src === undefined || dst === undefined) return out;
    const proto = filter.protocol ?? 0;
    const sport = filter.sourcePort ?? 0;
    const dport = filter.destinationPort ?? 0;
    if (src !== "" && dst !== "" && proto !== 0 && sport !== 0 && dport !== 0) {
      for (const f of this.#findByKey(src, dst, proto, sport, dport)) {
        if (out.length < limit) out.push(this.#snapshot(f));
      }
      return out;
    }
    for (const f of this.#bySlot) {
      if (f === undefined) continue;
      const u32 = this.#store.u32(f.slot);
      const ub = u32Base(f.slot);
      if (proto !== 0 && u32[ub + F_PROTO] !== proto) continue;
      if (sport !== 0 && u32[ub + F_SPORT] !== sport) continue;
      if (dport !== 0 && u32[ub + F_DPORT] !== dport) continue;
      if (src !== "" && this.#addrText(f.slot, U32.SRC) !== src) continue;
      if (dst !== "" && this.#addrText(f.slot, U32.DST) !== dst) continue;
      out.push(this.#snapshot(f));
      if (out.length >= limit) break;
    }
    return out;
  }

  /** Internal flags and expiry times of one flow (tests, debugging); undefined if unknown. */
  entryState(key: FlowKey): FlowEntryState | undefined {
    const src = canonicalAnyAddress(key.sourceAddress);
    const dst = canonicalAnyAddress(key.destinationAddress);
    if (src === undefined || dst === undefined) return undefined;
    const f = this.#findByKey(src, dst, key.protocol, key.sourcePort, key.destinationPort)[0];
    if (f === undefined) return undefined;
    const f64 = this.#store.f64(f.slot);
    const fb = f64Base(f.slot);
    return {
      readyToSend: (f.flags & FL_READY) !== 0,
      retries: f.retries,
      correlatedFieldsFilled: (f.flags & FL_CORR_FILLED) !== 0,
      externalFieldsFilled: (f.flags & FL_EXT_FILLED) !== 0,
      isIPv4: (f.flags & FL_IPV4) !== 0,
      activeExpireMs: f64[fb + T_ACTIVE],
      inactiveExpireMs: f64[fb + T_INACTIVE],
    };
  }

  /**
   * Flows whose key prints as the given canonical text. Usually 0 or 1; an IPv4 key and an
   * IPv4-mapped IPv6 key print the same (Go quirk) but are distinct flows here.
   */
  #findByKey(src: string, dst: string, proto: number, sport: number, dport: number): Flow[] {
    const found: Flow[] = [];
    if (!isUint(proto, 0xff) || !isUint(sport, 0xffff) || !isUint(dport, 0xffff)) return found;
    const k = new Uint32Array(KEY_WORDS);
    k[8] = proto;
    k[9] = sport;
    k[10] = dport;
    const probe = (): void => {
      const slot = this.#table.find(k, hashKey(k));
      if (slot >= 0) found.push(this.#bySlot[slot]!);
    };
    const a4 = src.includes(":") ? -1 : parseIPv4Word(src);
    const b4 = dst.includes(":") ? -1 : parseIPv4Word(dst);
    if (a4 >= 0 && b4 >= 0) {
      k[0] = a4;
      k[4] = b4;
      k[11] = 4;
      probe();
    }
    // IPv6 family: IPv4 text stands for the IPv4-mapped address ::ffff:a.b.c.d.
    const a6 = a4 >= 0 ? new Uint32Array([0, 0, 0xffff, a4]) : parseIPv6Words(src);
    const b6 = b4 >= 0 ? new Uint32Array([0, 0, 0xffff, b4]) : parseIPv6Words(dst);
    if (a6 !== undefined && b6 !== undefined) {
      k.set(a6, 0);
      k.set(b6, 4);
      k[11] = 6;
      probe();
    }
    return found;
  }

  /** Canonical text of the address stored at `at` (U32.SRC or U32.DST) of a slot. */
  #addrText(slot: number, at: number): string {
    const u = this.#store.u32(slot);
    const b = u32Base(slot);
    if (u[b + U32.FAMILY] === 4) return formatIPv4Word(u[b + at]);
    return formatIPv6Words(u[b + at], u[b + at + 1], u[b + at + 2], u[b + at + 3]);
  }

  /** The flow key of a slot, with canonical address text. */
  #flowKey(slot: number): FlowKey {
    const u = this.#store.u32(slot);
    const b = u32Base(slot);
    return {
      sourceAddress: this.#addrText(slot, U32.SRC),
      destinationAddress: this.#addrText(slot, U32.DST),
      protocol: u[b + U32.PROTO],
      sourcePort: u[b + U32.SPORT],
      destinationPort: u[b + U32.DPORT],
    };
  }

  /** Current counters (a copy). */
  stats(): AggregationStats {
    return {
      recordsIn: this.#recordsIn,
      recordsAccepted: this.#recordsAccepted,
      recordsRejected: { ...this.#rejected },
      recordsStale: this.#recordsStale,
      missingFlowType: this.#missingFlowType,
      flowsCreated: this.#flowsCreated,
      flowsDeleted: this.#flowsDeleted,
      correlated: this.#correlated,
      readyWithoutCorrelation: this.#readyWithoutCorrelation,
      exported: this.#exported,
      uncorrelatedExported: this.#uncorrelatedExported,
      uncorrelatedDropped: this.#uncorrelatedDropped,
      exportedWithoutNewData: this.#exportedWithoutNewData,
      emitErrors: this.#emitErrors,
      notReadyRetries: this.#notReadyRetries,
      droppedMaxFlows: this.#rejected.maxFlows,
      negativeDiffsClamped: this.#negativeDiffsClamped,
      podLookupMisses: this.#podLookupMisses,
      flows: this.#table.size,
    };
  }

  // ---- ingestion ----

  #reject(reason: RejectReason, msg: string): boolean {
    this.#rejected[reason]++;
    const s = this.#rl.allow(reason);
    if (s >= 0) log.warn(msg, { reason, suppressed: s });
    return false;
  }

  #warnBothFamilies(side: string): void {
    const s = this.#rl.allow("bothFamilies");
    if (s >= 0) {
      log.warn("record carries IPv4 and IPv6 address IEs, IPv4 used", { side, suppressed: s });
    }
  }

  #str(s: string | undefined): string {
    if (s === undefined || s === "") return "";
    if (typeof s !== "string") return String(s);
    const slot = internSlot(s);
    const k = this.#intern[slot];
    if (k === s) return k; // equal text: the shared copy
    this.#intern[slot] = s;
    return s;
  }

  /** Creates a flow for the key in the probe scratch (hash `h`). */
  #create(h: number, r: FlowInput, isIPv4: boolean, flowType: number, corr: boolean): boolean {
    const start = r.flowStartSeconds;
    const end = r.flowEndSeconds;
    const oct = r.octetTotalCount;
    const roct = r.reverseOctetTotalCount;
    // §3.1: creation needs these four; the other counters default to 0.
    if (start === undefined || end === undefined || oct === undefined || roct === undefined) {
      return this.#reject("missingField", "new flow without start/end time or octet totals");
    }
    if (!isUint(start, 0xffffffff) || !isUint(end, 0xffffffff)) {
      return this.#reject("badFieldType", "record with an invalid flowStart/EndSeconds");
    }
    if (!this.#countersValid(r, false)) {
      return this.#reject("badFieldType", "record with a non-bigint counter");
    }
    if (this.#table.size >= this.#maxFlows) {
      return this.#reject("maxFlows", "maxFlows reached, record for a new flow dropped");
    }
    const sides = corr
      ? (isFromSource(r.sourcePodName, r.destinationPodName) ? SIDE_S : SIDE_D)
      : SIDE_S | SIDE_D;
    let flags = FL_UPDATED;
    if (isIPv4) flags |= FL_IPV4;
    if (!corr) {
      flags |= FL_READY;
      if (flowType !== FlowType.InterNode) flags |= FL_CORR_FILLED;
    }
    const store = this.#store;
    const slot = store.alloc();
    const flow = new Flow(slot, flags);
    flow.srcPod = this.#str(r.sourcePodName);
    flow.srcNs = this.#str(r.sourcePodNamespace);
    flow.srcNode = this.#str(r.sourceNodeName);
    flow.dstPod = this.#str(r.destinationPodName);
    flow.dstNs = this.#str(r.destinationPodNamespace);
    flow.dstNode = this.#str(r.destinationNodeName);
    flow.svcPortName = this.#str(r.destinationServicePortName);
    flow.ingName = this.#str(r.ingressNetworkPolicyName);
    flow.ingNs = this.#str(r.ingressNetworkPolicyNamespace);
    flow.ingRule = this.#str(r.ingressNetworkPolicyRuleName);
    flow.egName = this.#str(r.egressNetworkPolicyName);
    flow.egNs = this.#str(r.egressNetworkPolicyNamespace);
    flow.egRule = this.#str(r.egressNetworkPolicyRuleName);
    flow.tcpState = this.#str(r.tcpState);
    flow.egressName = this.#str(r.egressName);
    flow.egressIP = this.#str(r.egressIP);
    if (r.destinationClusterIPv4 !== undefined) {
      flow.clusterV4 = this.#str(canonicalAddress(r.destinationClusterIPv4, true) ?? "0.0.0.0");
    }
    if (r.destinationClusterIPv6 !== undefined) {
      flow.clusterV6 = this.#str(canonicalAddress(r.destinationClusterIPv6, false) ?? "::");
    }

    const u32 = store.u32(slot);
    const ub = u32Base(slot);
    u32[ub + F_START] = start;
    u32[ub + F_END] = end;
    u32[ub + F_REASON] = num(r.flowEndReason);
    u32[ub + F_TYPE] = flowType;
    u32[ub + F_SVC_PORT] = num(r.destinationServicePort);
    u32[ub + F_ING_TYPE] = num(r.ingressNetworkPolicyType);
    u32[ub + F_ING_ACT] = num(r.ingressNetworkPolicyRuleAction);
    u32[ub + F_EG_TYPE] = num(r.egressNetworkPolicyType);
    u32[ub + F_EG_ACT] = num(r.egressNetworkPolicyRuleAction);
    if (sides & SIDE_S) u32[ub + F_END_S] = end;
    if (sides & SIDE_D) u32[ub + F_END_D] = end;

    const u = store.u64(slot);
    const b = u64Base(slot);
    initStat(u, b, OCT_D, r.octetDeltaCount, sides);
    initStat(u, b, OCT_T, oct, sides);
    initStat(u, b, PKT_D, r.packetDeltaCount, sides);
    initStat(u, b, PKT_T, r.packetTotalCount, sides);
    initStat(u, b, ROCT_D, r.reverseOctetDeltaCount, sides);
    initStat(u, b, ROCT_T, roct, sides);
    initStat(u, b, RPKT_D, r.reversePacketDeltaCount, sides);
    initStat(u, b, RPKT_T, r.reversePacketTotalCount, sides);
    // §3.2: the first window is the record's own start..end; none when end <= start.
    if (end > start) {
      const dt = BigInt(end - start);
      const thr = oct * 8n / dt;
      const rthr = roct * 8n / dt;
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

    const t = this.#clock.nowMs();
    const f64 = store.f64(slot);
    const fb = f64Base(slot);
    f64[fb + T_ACTIVE] = t + this.#active;
    f64[fb + T_INACTIVE] = t + this.#inactive;
    this.#heap.push(flow, Math.min(f64[fb + T_ACTIVE], f64[fb + T_INACTIVE]));
    this.#table.insert(slot, this.#k, h);
    this.#bySlot[slot] = flow;
    this.#flowsCreated++;
    this.#recordsAccepted++;
    return true;
  }

  #countersValid(r: FlowInput, required: boolean): boolean {
    return okBig(r.octetDeltaCount, required) && okBig(r.octetTotalCount, required) &&
      okBig(r.packetDeltaCount, required) && okBig(r.packetTotalCount, required) &&
      okBig(r.reverseOctetDeltaCount, required) && okBig(r.reverseOctetTotalCount, required) &&
      okBig(r.reversePacketDeltaCount, required) && okBig(r.reversePacketTotalCount, required);
  }

  #update(flow: Flow, r: FlowInput, corr: boolean): boolean {
    // §3.3: an update needs the NonStats IEs and all 8 Stats IEs (upstream fails otherwise).
    if (
      r.flowEndSeconds === undefined || r.flowEndReason === undefined || r.tcpState === undefined
    ) {
      return this.#reject("missingField", "flow update without flowEndSeconds/Reason/tcpState");
    }
    if (!isUint(r.flowEndSeconds, 0xffffffff)) {
      return this.#reject("badFieldType", "record with an invalid flowEndSeconds");
    }
    if (!this.#countersValid(r, true)) {
      return this.#reject("missingField", "flow update without all 8 counters");
    }
    let sides: number;
    if (corr) {
      if (
        (flow.flags & FL_READY) === 0 && !this.#sameNode(r, flow)
      ) {
        this.#correlate(flow, r);
        flow.flags |= FL_READY | FL_CORR_FILLED;
        this.#correlated++;
      }
      sides = isFromSource(r.sourcePodName, r.destinationPodName) ? SIDE_S : SIDE_D;
    } else {
      sides = SIDE_S | SIDE_D;
      if ((flow.flags & FL_READY) === 0) {
        // E2 fix (L4): without it the flow would never be exported.
        flow.flags = (flow.flags | FL_READY) & ~FL_CORR_FILLED;
        this.#readyWithoutCorrelation++;
      }
    }
    this.#aggregate(flow, r, sides);
    const t = this.#clock.nowMs();
    const f64 = this.#store.f64(flow.slot);
    const fb = f64Base(flow.slot);
    f64[fb + T_INACTIVE] = t + this.#inactive;
    this.#heap.update(flow, Math.min(f64[fb + T_ACTIVE], f64[fb + T_INACTIVE]));
    this.#recordsAccepted++;
    return true;
  }

  #sameNode(r: FlowInput, flow: Flow): boolean {
    return (isFromSource(r.sourcePodName, r.destinationPodName) &&
      isFromSource(flow.srcPod, flow.dstPod)) ||
      (isFromDestination(r.sourcePodName, r.destinationPodName) &&
        isFromDestination(flow.srcPod, flow.dstPod));
  }

  /** §1.5: copies every set correlate field of `r` into the stored flow. */
  #correlate(flow: Flow, r: FlowInput): void {
    if (r.sourcePodName) flow.srcPod = this.#str(r.sourcePodName);
    if (r.sourcePodNamespace) flow.srcNs = this.#str(r.sourcePodNamespace);
    if (r.sourceNodeName) flow.srcNode = this.#str(r.sourceNodeName);
    if (r.destinationPodName) flow.dstPod = this.#str(r.destinationPodName);
    if (r.destinationPodNamespace) flow.dstNs = this.#str(r.destinationPodNamespace);
    if (r.destinationNodeName) flow.dstNode = this.#str(r.destinationNodeName);
    // A stored record without the IE is skipped (upstream dereferences nil: L14).
    if (flow.clusterV4 !== undefined && r.destinationClusterIPv4 !== undefined) {
      const v = canonicalAddress(r.destinationClusterIPv4, true);
      if (v !== undefined && v !== "0.0.0.0") flow.clusterV4 = this.#str(v);
    }
    if (flow.clusterV6 !== undefined && r.destinationClusterIPv6 !== undefined) {
      const v = canonicalAddress(r.destinationClusterIPv6, false);
      if (v !== undefined && v !== "::") flow.clusterV6 = this.#str(v);
    }
    const u32 = this.#store.u32(flow.slot);
    const ub = u32Base(flow.slot);
    if (num(r.destinationServicePort) !== 0) u32[ub + F_SVC_PORT] = num(r.destinationServicePort);
    if (r.destinationServicePortName) flow.svcPortName = this.#str(r.destinationServicePortName);
    if (r.ingressNetworkPolicyName) flow.ingName = this.#str(r.ingressNetworkPolicyName);
    if (r.ingressNetworkPolicyNamespace) flow.ingNs = this.#str(r.ingressNetworkPolicyNamespace);
    if (num(r.ingressNetworkPolicyRuleAction) !== 0) {
      u32[ub + F_ING_ACT] = num(r.ingressNetworkPolicyRuleAction);
    }
    if (num(r.ingressNetworkPolicyType) !== 0) {
      u32[ub + F_ING_TYPE] = num(r.ingressNetworkPolicyType);
    }
    if (r.ingressNetworkPolicyRuleName) flow.ingRule = this.#str(r.ingressNetworkPolicyRuleName);
    if (r.egressNetworkPolicyName) flow.egName = this.#str(r.egressNetworkPolicyName);
    if (r.egressNetworkPolicyNamespace) flow.egNs = this.#str(r.egressNetworkPolicyNamespace);
    if (num(r.egressNetworkPolicyRuleAction) !== 0) {
      u32[ub + F_EG_ACT] = num(r.egressNetworkPolicyRuleAction);
    }
    if (num(r.egressNetworkPolicyType) !== 0) u32[ub + F_EG_TYPE] = num(r.egressNetworkPolicyType);
    if (r.egressNetworkPolicyRuleName) flow.egRule = this.#str(r.egressNetworkPolicyRuleName);
  }

  /** §3.3: aggregates `r` into `flow` for `sides`. Fields were validated by the caller. */
  #aggregate(flow: Flow, r: FlowInput, sides: number): void {
    flow.flags |= FL_UPDATED;
    const slot = flow.slot;
    const u32 = this.#store.u32(slot);
    const ub = u32Base(slot);
    const inEnd = r.flowEndSeconds!;
    // Step A.
    let isLatest = false;
    if (inEnd >= u32[ub + F_END]) {
      isLatest = true;
      u32[ub + F_END] = inEnd;
    }
    const startFallback = isUint(r.flowStartSeconds!, 0xffffffff)
      ? r.flowStartSeconds!
      : u32[ub + F_START];
    let prev = 0;
    if (sides & SIDE_S) {
      const p = u32[ub + F_END_S];
      prev = p === 0 ? startFallback : p;
      // Unconditional, even backwards (upstream L7, kept: SC-09 encodes it).
      u32[ub + F_END_S] = inEnd;
    }
    if (sides & SIDE_D) {
      const p = u32[ub + F_END_D];
      prev = p === 0 ? startFallback : p;
      u32[ub + F_END_D] = inEnd;
    }
    if (inEnd <= prev) {
      // Step A.3: nothing else changes (upstream L6, kept: SC-08 encodes it). This also is
      // the dt == 0 guard of L14: throughput is never divided by zero.
      this.#recordsStale++;
      return;
    }
    const dt = inEnd - prev;
    // Step B.
    if (u32[ub + F_REASON] !== END_OF_FLOW) u32[ub + F_REASON] = num(r.flowEndReason);
    // Usually unchanged (and the decoder's interned string): skip the intern lookup then.
    if (isLatest && r.tcpState !== flow.tcpState) flow.tcpState = this.#str(r.tcpState);
    // Step C.
    const u = this.#store.u64(slot);
    const b = u64Base(slot);
    addDelta(u, b, OCT_D, r.octetDeltaCount!, sides, isLatest);
    let diff = setTotal(u, b, OCT_T, r.octetTotalCount!, sides, isLatest);
    addDelta(u, b, PKT_D, r.packetDeltaCount!, sides, isLatest);
    setTotal(u, b, PKT_T, r.packetTotalCount!, sides, isLatest);
    addDelta(u, b, ROCT_D, r.reverseOctetDeltaCount!, sides, isLatest);
    let rdiff = setTotal(u, b, ROCT_T, r.reverseOctetTotalCount!, sides, isLatest);
    addDelta(u, b, RPKT_D, r.reversePacketDeltaCount!, sides, isLatest);
    setTotal(u, b, RPKT_T, r.reversePacketTotalCount!, sides, isLatest);
    // Step D. A counter that went down (agent restart, 5-tuple reuse) would wrap in u64
    // upstream (L8) and give an absurd throughput: clamp to 0 instead.
    if (diff < 0n) {
      diff = 0n;
      this.#negativeDiffsClamped++;
    }
    if (rdiff < 0n) {
      rdiff = 0n;
      this.#negativeDiffsClamped++;
    }
    const bdt = BigInt(dt);
    const thr = diff * 8n / bdt;
    const rthr = rdiff * 8n / bdt;
    if (sides & SIDE_S) {
      u[b + THR_S] = thr;
      u[b + RTHR_S] = rthr;
    }
    if (sides & SIDE_D) {
      u[b + THR_D] = thr;
      u[b + RTHR_D] = rthr;
    }
    // v1.13 sets the common pair from every processed record, latest or not (L5, kept: SC-10).
    u[b + THR] = thr;
    u[b + RTHR] = rthr;
  }

  // ---- export ----

  #emitOne(
    flow: Flow,
    emit: (f: ExportedFlow) => void,
    hooks: ExportHooks | undefined,
    uncorrelated: boolean,
  ): boolean {
    this.#fill(flow, hooks);
    const record = this.#snapshot(flow);
    const updated = (flow.flags & FL_UPDATED) !== 0;
    flow.flags &= ~FL_UPDATED;
    const ev: ExportedFlow = {
      key: this.#flowKey(flow.slot),
      record,
      isIPv6: (flow.flags & FL_IPV4) === 0,
      uncorrelated,
    };
    try {
      emit(ev);
    } catch (err) {
      // L1: one failing sink must not orphan the flow or stop the sweep.
      this.#emitErrors++;
      const s = this.#rl.allow("emit");
      if (s >= 0) log.error("export callback failed", { error: err, suppressed: s });
      return false;
    }
    this.#exported++;
    if (uncorrelated) this.#uncorrelatedExported++;
    if (!updated) this.#exportedWithoutNewData++;
    return true;
  }

  /** §6.5/§6.6: fills Pod metadata and labels once per flow, through the hooks. */
  #fill(flow: Flow, hooks: ExportHooks | undefined): void {
    const lookup = hooks?.lookupPod;
    if (lookup === undefined) return;
    const start = this.#store.u32(flow.slot)[u32Base(flow.slot) + F_START];
    if ((flow.flags & FL_CORR_FILLED) === 0) {
      if (flow.srcPod === "") {
        const p = this.#lookup(lookup, this.#addrText(flow.slot, U32.SRC), start);
        if (p !== undefined) {
          flow.srcPod = this.#str(p.name);
          flow.srcNs = this.#str(p.namespace);
          flow.srcNode = this.#str(p.nodeName);
        }
      }
      if (flow.dstPod === "") {
        const p = this.#lookup(lookup, this.#addrText(flow.slot, U32.DST), start);
        if (p !== undefined) {
          flow.dstPod = this.#str(p.name);
          flow.dstNs = this.#str(p.namespace);
          flow.dstNode = this.#str(p.nodeName);
        }
      }
      // Set even after a miss, as v1.13 does (L16 kept): the flag means "tried".
      flow.flags |= FL_CORR_FILLED;
    }
    if (this.#includePodLabels && (flow.flags & FL_EXT_FILLED) === 0) {
      flow.srcLabels = flow.srcPod !== "" && flow.srcNs !== ""
        ? this.#labels(lookup, this.#addrText(flow.slot, U32.SRC), start)
        : "";
      flow.dstLabels = flow.dstPod !== "" && flow.dstNs !== ""
        ? this.#labels(lookup, this.#addrText(flow.slot, U32.DST), start)
        : "";
      flow.flags |= FL_EXT_FILLED;
    }
  }

  #lookup(
    lookup: (ip: string, t: number) => PodInfo | undefined,
    ip: string,
    start: number,
  ): PodInfo | undefined {
    let p: PodInfo | undefined;
    try {
      p = lookup(ip, start);
    } catch (err) {
      log.error("Pod look-up failed", { ip, error: err });
    }
    if (p === undefined) {
      this.#podLookupMisses++;
      const s = this.#rl.allow("podMiss");
      if (s >= 0) log.error("cannot find Pod information", { ip, startTime: start, suppressed: s });
    }
    return p;
  }

  #labels(
    lookup: (ip: string, t: number) => PodInfo | undefined,
    ip: string,
    start: number,
  ): string {
    const p = this.#lookup(lookup, ip, start);
    return p === undefined ? "" : this.#str(encodePodLabels(p.labels));
  }

  /** §3.6: zeroes the 12 delta counters and the 6 throughputs; totals and ends stay. */
  #reset(flow: Flow): void {
    const u = this.#store.u64(flow.slot);
    const b = u64Base(flow.slot);
    for (const off of [0, S_OFF, D_OFF]) {
      u[b + off + OCT_D] = 0n;
      u[b + off + PKT_D] = 0n;
      u[b + off + ROCT_D] = 0n;
      u[b + off + RPKT_D] = 0n;
    }
    u.fill(0n, b + THR, b + RTHR_D + 1);
  }

  #deleteFlow(flow: Flow): void {
    // The table finds the slot through its key words: remove before the slot is zeroed.
    this.#table.remove(flow.slot);
    this.#bySlot[flow.slot] = undefined;
    this.#heap.remove(flow);
    this.#store.free(flow.slot);
    this.#flowsDeleted++;
  }

  /** Builds an own copy of the flow as exporters and the query API see it. */
  #snapshot(f: Flow): AggregatedRecord {
    const slot = f.slot;
    const u = this.#store.u64(slot);
    const b = u64Base(slot);
    const u32 = this.#store.u32(slot);
    const ub = u32Base(slot);
    const src = this.#addrText(slot, U32.SRC);
    const dst = this.#addrText(slot, U32.DST);
    const v4 = (f.flags & FL_IPV4) !== 0;
    const rec: AggregatedRecord = {
      flowStartSeconds: u32[ub + F_START],
      flowEndSeconds: u32[ub + F_END],
      flowEndReason: u32[ub + F_REASON],
      sourceTransportPort: u32[ub + F_SPORT],
      destinationTransportPort: u32[ub + F_DPORT],
      protocolIdentifier: u32[ub + F_PROTO],
      packetTotalCount: u[b + PKT_T],
      octetTotalCount: u[b + OCT_T],
      packetDeltaCount: u[b + PKT_D],
      octetDeltaCount: u[b + OCT_D],
      reversePacketTotalCount: u[b + RPKT_T],
      reverseOctetTotalCount: u[b + ROCT_T],
      reversePacketDeltaCount: u[b + RPKT_D],
      reverseOctetDeltaCount: u[b + ROCT_D],
      sourcePodName: f.srcPod,
      sourcePodNamespace: f.srcNs,
      sourceNodeName: f.srcNode,
      destinationPodName: f.dstPod,
      destinationPodNamespace: f.dstNs,
      destinationNodeName: f.dstNode,
      destinationServicePort: u32[ub + F_SVC_PORT],
      destinationServicePortName: f.svcPortName,
      ingressNetworkPolicyName: f.ingName,
      ingressNetworkPolicyNamespace: f.ingNs,
      ingressNetworkPolicyType: u32[ub + F_ING_TYPE],
      ingressNetworkPolicyRuleName: f.ingRule,
      ingressNetworkPolicyRuleAction: u32[ub + F_ING_ACT],
      egressNetworkPolicyName: f.egName,
      egressNetworkPolicyNamespace: f.egNs,
      egressNetworkPolicyType: u32[ub + F_EG_TYPE],
      egressNetworkPolicyRuleName: f.egRule,
      egressNetworkPolicyRuleAction: u32[ub + F_EG_ACT],
      tcpState: f.tcpState,
      flowType: u32[ub + F_TYPE],
      egressName: f.egressName,
      egressIP: f.egressIP,
      octetDeltaCountFromSourceNode: u[b + S_OFF + OCT_D],
      octetDeltaCountFromDestinationNode: u[b + D_OFF + OCT_D],
      octetTotalCountFromSourceNode: u[b + S_OFF + OCT_T],
      octetTotalCountFromDestinationNode: u[b + D_OFF + OCT_T],
      packetDeltaCountFromSourceNode: u[b + S_OFF + PKT_D],
      packetDeltaCountFromDestinationNode: u[b + D_OFF + PKT_D],
      packetTotalCountFromSourceNode: u[b + S_OFF + PKT_T],
      packetTotalCountFromDestinationNode: u[b + D_OFF + PKT_T],
      reverseOctetDeltaCountFromSourceNode: u[b + S_OFF + ROCT_D],
      reverseOctetDeltaCountFromDestinationNode: u[b + D_OFF + ROCT_D],
      reverseOctetTotalCountFromSourceNode: u[b + S_OFF + ROCT_T],
      reverseOctetTotalCountFromDestinationNode: u[b + D_OFF + ROCT_T],
      reversePacketDeltaCountFromSourceNode: u[b + S_OFF + RPKT_D],
      reversePacketDeltaCountFromDestinationNode: u[b + D_OFF + RPKT_D],
      reversePacketTotalCountFromSourceNode: u[b + S_OFF + RPKT_T],
      reversePacketTotalCountFromDestinationNode: u[b + D_OFF + RPKT_T],
      flowEndSecondsFromSourceNode: u32[ub + F_END_S],
      flowEndSecondsFromDestinationNode: u32[ub + F_END_D],
      throughput: u[b + THR],
      throughputFromSourceNode: u[b + THR_S],
      throughputFromDestinationNode: u[b + THR_D],
      reverseThroughput: u[b + RTHR],
      reverseThroughputFromSourceNode: u[b + RTHR_S],
      reverseThroughputFromDestinationNode: u[b + RTHR_D],
    };
    if (v4) {
      rec.sourceIPv4Address = src;
      rec.destinationIPv4Address = dst;
    } else {
      rec.sourceIPv6Address = src;
      rec.destinationIPv6Address = dst;
    }
    if (f.clusterV4 !== undefined) rec.destinationClusterIPv4 = f.clusterV4;
    if (f.clusterV6 !== undefined) rec.destinationClusterIPv6 = f.clusterV6;
    if (f.srcLabels !== undefined) rec.sourcePodLabels = f.srcLabels;
    if (f.dstLabels !== undefined) rec.destinationPodLabels = f.dstLabels;
    return rec;
  }
}

function checkTimeouts(activeMs: number, inactiveMs: number): void {
  if (!(Number.isFinite(activeMs) && activeMs > 0)) {
    throw new RangeError(`aggregation: activeTimeoutMs ${activeMs}: must be a positive number`);
  }
  if (!(Number.isFinite(inactiveMs) && inactiveMs > 0)) {
    throw new RangeError(
      `aggregation: inactiveTimeoutMs ${inactiveMs}: must be a positive number`,
    );
  }
}

/** A u8/u16 IE value as a number; anything else (bad input) reads as 0. */
function num(v: number | undefined): number {
  return typeof v === "number" && v >= 0 && v <= 0xffffffff ? v : 0;
}

function isUint(v: number, max: number): boolean {
  return typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= max;
}

function okBig(v: bigint | undefined, required: boolean): boolean {
  return v === undefined ? !required : typeof v === "bigint";
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

/** §3.3 step C for a delta counter. */
function addDelta(
  u: BigUint64Array,
  b: number,
  idx: number,
  v: bigint,
  sides: number,
  isLatest: boolean,
): void {
  if (sides & SIDE_S) u[b + S_OFF + idx] += v;
  if (sides & SIDE_D) u[b + D_OFF + idx] += v;
  if (isLatest) u[b + idx] = (sides & SIDE_D) ? u[b + D_OFF + idx] : u[b + S_OFF + idx];
}

/** §3.3 step C for a total counter; returns `v − old` of the last side (may be negative). */
function setTotal(
  u: BigUint64Array,
  b: number,
  idx: number,
  v: bigint,
  sides: number,
  isLatest: boolean,
): bigint {
  let diff = 0n;
  if (sides & SIDE_S) {
    diff = v - u[b + S_OFF + idx];
    u[b + S_OFF + idx] = v;
  }
  if (sides & SIDE_D) {
    diff = v - u[b + D_OFF + idx];
    u[b + D_OFF + idx] = v;
  }
  if (isLatest && u[b + idx] < v) u[b + idx] = v;
  return diff;
}
