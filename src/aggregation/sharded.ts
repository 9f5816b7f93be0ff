/**
 * Sharding of the aggregation core by flow key (issue #15, item 2): N cores, each owning the
 * flows whose key hashes to it, so the two halves of an InterNode flow (same 5-tuple, sent by
 * two Nodes) always meet in the same core. The router ({@linkcode shardOf}) reads the key the
 * way the core does (`readFlowKey`) and hashes it as the flow table does; a record without a
 * valid key goes to shard 0, whose core rejects and counts it.
 *
 * {@linkcode ShardedCore} runs the shards in one thread behind the public face of
 * {@linkcode AggregationCore}: it is the reference for the shard workers (the same routing, limits
 * and merges) and runs the core's scenario tests with N shards. Semantics compared with one core:
 * - the limits bound the process: `maxFlows` and `maxFlowBytes` count every shard's flows and
 *   bytes (`AggregationOptions.peers`);
 * - held bytes: a string used by flows of two shards is charged in each (each shard interns its
 *   own copy), so `flowBytes` can exceed one core's figure for the same flows;
 * - expiry takes the due flows of all shards in expiry-time order (a merge of the shards'
 *   queues), so the export order is one core's up to flows due at the same millisecond;
 * - queries and counters are the union and the sum of the shards'.
 */

import type { AggregatedRecord, ExportedFlow, FlowInput, FlowKey } from "./record.ts";
import { AggregationCore, type ExpireOptions, type FlowEntryState } from "./core.ts";
import type { AggregationStats } from "./counters.ts";
import { readFlowKey } from "./flow_key.ts";
import { KEY_WORDS, mix } from "./flow_table.ts";
import type { ExportHooks } from "./snapshot.ts";
import type { AggregationOptions } from "./state.ts";

/**
 * The public face shared by one core and a sharded one (paged queries are a shard worker's, whose
 * pool pages over the workers).
 */
export type CoreApi = {
  [K in Exclude<keyof AggregationCore, "queryPage">]: AggregationCore[K];
};

/**
 * The process's secret routing multipliers (odd, random). With the fixed ones it had, an Agent
 * could compute flow keys that all route to one shard (found by review: 30,000 crafted flows all
 * on shard 0 of 4). Routing is done by the main thread only, so one set per process is enough.
 */
const [R0, R1, R2, R3, R4, R5, R6, R7, RP, RS] = Array.from(
  crypto.getRandomValues(new Uint32Array(10)),
  (w, i) => (i < 9 ? w | 1 : w),
);

/**
 * Shard (0..n-1) of a flow key ({@linkcode KEY_WORDS} words, as `readFlowKey` reads it). Its own
 * hash, not the flow table's (`FlowTable.hash`: a mix per key word, and the main thread routes
 * every record): each word times its own secret odd multiplier, folded, then one finishing mix.
 * Keys can only be made to fold alike by flipping the top bits of two words (a product's top
 * bit moves with its factor's whatever the odd multiplier), so at most 2^10 keys share a fold,
 * and where a fold routes is unknown to the sender. Independent of the tables' hashes (their own
 * random keys), so the keys of one shard still spread over all of its table's buckets.
 */
export function shardOfKey(k: Uint32Array, n: number): number {
  let src = Math.imul(k[0], R0);
  let dst = Math.imul(k[4], R4);
  if (k[11] === 6) {
    src ^= Math.imul(k[1], R1) ^ Math.imul(k[2], R2) ^ Math.imul(k[3], R3);
    dst ^= Math.imul(k[5], R5) ^ Math.imul(k[6], R6) ^ Math.imul(k[7], R7);
  }
  const h = src ^ dst ^ Math.imul((k[9] << 16) | k[10], RP) ^
    (k[8] | (k[11] << 8)) ^ RS;
  return Math.floor((mix(h) / 4294967296) * n);
}

/**
 * Shard of a record among `n`: from its flow key as the core reads it (so text and wire-number
 * forms of one address agree); 0 when it has no valid key (shard 0's core rejects and counts
 * it). `scratch` is a key buffer of `KEY_WORDS` words the caller reuses.
 */
export function shardOf(r: FlowInput, n: number, scratch: Uint32Array): number {
  if (n <= 1 || r === null || typeof r !== "object") return 0;
  if (readFlowKey(scratch, r) !== undefined) return 0;
  return shardOfKey(scratch, n);
}

/** The sum of shards' counters, field by field (nested counters too). */
export function sumStats(list: readonly AggregationStats[]): AggregationStats {
  const add = (into: Record<string, unknown>, from: Record<string, unknown>): void => {
    for (const [k, v] of Object.entries(from)) {
      if (typeof v === "number") into[k] = ((into[k] as number | undefined) ?? 0) + v;
      else if (v !== null && typeof v === "object") {
        into[k] ??= {};
        add(into[k] as Record<string, unknown>, v as Record<string, unknown>);
      }
    }
  };
  const out: Record<string, unknown> = {};
  for (const s of list) add(out, s as unknown as Record<string, unknown>);
  return out as unknown as AggregationStats;
}

/**
 * The earliest flow key match first: one core's `entryState`/exact `query` returns the IPv4 key
 * before an IPv4-mapped IPv6 key that prints the same; across shards the same order is kept by
 * asking every shard and preferring IPv4.
 */
function preferIPv4(states: (FlowEntryState | undefined)[]): FlowEntryState | undefined {
  let found: FlowEntryState | undefined;
  for (const s of states) {
    if (s === undefined) continue;
    if (s.isIPv4) return s;
    found ??= s;
  }
  return found;
}

/** N aggregation cores in one thread, routed by flow key (see the module doc). */
export class ShardedCore implements CoreApi {
  readonly #shards: AggregationCore[] = [];
  readonly #scratch = new Uint32Array(KEY_WORDS);

  /** Creates `n` (>= 1) empty shards with the same options. */
  constructor(opts: AggregationOptions, n: number) {
    if (!Number.isInteger(n) || n < 1) throw new RangeError(`shards: ${n}: must be >= 1`);
    const shards = this.#shards;
    let flows = 0;
    const addFlows = (k: number): number => flows += k;
    for (let i = 0; i < n; i++) {
      const bytes = (): number => {
        let sum = 0;
        for (let j = 0; j < shards.length; j++) if (j !== i) sum += shards[j].flowBytes;
        return sum;
      };
      shards.push(new AggregationCore({ ...opts, peers: { addFlows, bytes } }));
    }
  }

  /** The shards (tests). */
  get shards(): readonly AggregationCore[] {
    return this.#shards;
  }

  #sum(f: (c: AggregationCore) => number): number {
    let n = 0;
    for (const c of this.#shards) n += f(c);
    return n;
  }

  /** See {@linkcode AggregationCore.flowCount}. */
  get flowCount(): number {
    return this.#sum((c) => c.flowCount);
  }

  /** See {@linkcode AggregationCore.queueLength}. */
  get queueLength(): number {
    return this.#sum((c) => c.queueLength);
  }

  /** See {@linkcode AggregationCore.flowBytes} (a string is charged once per shard using it). */
  get flowBytes(): number {
    return this.#sum((c) => c.flowBytes);
  }

  /** See {@linkcode AggregationCore.updateTimeouts}. */
  updateTimeouts(activeMs: number, inactiveMs: number): void {
    for (const c of this.#shards) c.updateTimeouts(activeMs, inactiveMs);
  }

  /** See {@linkcode AggregationCore.setMaxFlows} (a bound of all shards together). */
  setMaxFlows(n: number): void {
    for (const c of this.#shards) c.setMaxFlows(n);
  }

  /** See {@linkcode AggregationCore.setMaxFlowBytes} (a bound of all shards together). */
  setMaxFlowBytes(n: number): void {
    for (const c of this.#shards) c.setMaxFlowBytes(n);
  }

  /** See {@linkcode AggregationCore.setIncludePodLabels}. */
  setIncludePodLabels(on: boolean): void {
    for (const c of this.#shards) c.setIncludePodLabels(on);
  }

  /** See {@linkcode AggregationCore.addRecords}. */
  addRecords(records: Iterable<FlowInput>): number {
    let n = 0;
    for (const r of records) if (this.addRecord(r)) n++;
    return n;
  }

  /** See {@linkcode AggregationCore.countUndecodable} (counted by shard 0). */
  countUndecodable(why: string): void {
    this.#shards[0].countUndecodable(why);
  }

  /** See {@linkcode AggregationCore.addRecord}: the record goes to the shard of its key. */
  addRecord(r: FlowInput): boolean {
    return this.#shards[shardOf(r, this.#shards.length, this.#scratch)].addRecord(r);
  }

  /** See {@linkcode AggregationCore.addRecordView}: to the shard of the view's key. */
  addRecordView(view: FlowInput, full: () => FlowInput): boolean {
    return this.#shards[shardOf(view, this.#shards.length, this.#scratch)].addRecordView(
      view,
      full,
    );
  }

  /**
   * See {@linkcode AggregationCore.expire}: due flows are taken from the shards in expiry-time
   * order, one at a time (`limit` counts them over all shards).
   */
  expire(emit: (f: ExportedFlow) => void, hooks?: ExpireOptions): number {
    const one: ExpireOptions = { ...hooks, limit: 1 };
    let left = hooks?.limit ?? Infinity;
    let n = 0;
    while (left > 0) {
      let next: AggregationCore | undefined;
      for (const c of this.#shards) {
        if (c.hasExpired() && (next === undefined || c.earliestExpiryMs < next.earliestExpiryMs)) {
          next = c;
        }
      }
      if (next === undefined) break;
      n += next.expire(emit, one);
      left--;
    }
    return n;
  }

  /** See {@linkcode AggregationCore.hasExpired}. */
  hasExpired(): boolean {
    return this.#shards.some((c) => c.hasExpired());
  }

  /** See {@linkcode AggregationCore.flushAll}: every shard in turn. */
  flushAll(emit: (f: ExportedFlow) => void, hooks?: ExportHooks): number {
    return this.#sum((c) => c.flushAll(emit, hooks));
  }

  /** See {@linkcode AggregationCore.earliestExpiryMs}. */
  get earliestExpiryMs(): number {
    let t = Infinity;
    for (const c of this.#shards) t = Math.min(t, c.earliestExpiryMs);
    return t;
  }

  /** See {@linkcode AggregationCore.nextExpiryDelayMs}: the shard holding the earliest flow's. */
  nextExpiryDelayMs(): number {
    let first = this.#shards[0];
    for (const c of this.#shards) if (c.earliestExpiryMs < first.earliestExpiryMs) first = c;
    return first.nextExpiryDelayMs();
  }

  /** See {@linkcode AggregationCore.query}: the shards' matches, shard by shard. */
  query(filter?: Partial<FlowKey> | null, limit = Infinity): AggregatedRecord[] {
    const out: AggregatedRecord[] = [];
    for (const c of this.#shards) {
      if (out.length >= limit) break;
      for (const r of c.query(filter, limit - out.length)) out.push(r);
    }
    return out;
  }

  /** See {@linkcode AggregationCore.entryState}. */
  entryState(key: FlowKey): FlowEntryState | undefined {
    return preferIPv4(this.#shards.map((c) => c.entryState(key)));
  }

  /** See {@linkcode AggregationCore.stats}: the sum of the shards' counters. */
  stats(): AggregationStats {
    return sumStats(this.#shards.map((c) => c.stats()));
  }
}
