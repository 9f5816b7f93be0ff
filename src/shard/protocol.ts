/**
 * Messages between the main thread's `ShardPool` and a shard worker (`worker.ts`), and the
 * shared counters they both read. Records travel main → shard as frames of binary rows over the
 * shard's ring (`ring.ts`, `input_rows.ts`), never as messages; expired flows travel
 * shard → main as the exporters' binary batches (`exporters/batch.ts`); the shard's counters are
 * in shared memory (`report_cell.ts`), written after every slice of ingest and every sweep. A
 * message that must see every record sent before it (a query, new settings, the stop) is
 * handled after the shard drained its ring.
 *
 * @module
 */

import type { AggregatedRecord, FlowKey } from "../aggregation/record.ts";
import type { AggregationCore } from "../aggregation/core.ts";
import type { AggregationStats } from "../aggregation/counters.ts";
import type { LogFormat, LogLevel } from "../log.ts";
import type { PodChange } from "../k8s/pod_store.ts";
import type { BatchBuffer } from "../exporters/batch.ts";
import type { ThreadMemory } from "../thread_memory.ts";

/** The core's settings a shard takes at start and on a reload (all serialisable). */
export interface ShardSettings {
  activeTimeoutMs: number;
  inactiveTimeoutMs: number;
  maxFlows: number;
  maxFlowBytes: number;
  includePodLabels: boolean;
  /** `limits.maxStringBytes`, for the decoders of records routed undecoded. */
  maxStringBytes?: number;
}

/** The setters of a core that {@linkcode applyCoreSettings} calls. */
export type SettableCore = Pick<
  AggregationCore,
  "updateTimeouts" | "setIncludePodLabels" | "setMaxFlows" | "setMaxFlowBytes"
>;

/** A change of core settings applied by {@linkcode applyCoreSettings}: its log line. */
export interface CoreSettingChange {
  readonly msg: string;
  /** The settings it applied. */
  readonly keys: readonly (keyof ShardSettings)[];
}

/** Each core setting: the settings it reads, how it is applied, and its log line. */
const CORE_SETTINGS: readonly {
  readonly keys: readonly (keyof ShardSettings)[];
  readonly apply: (core: SettableCore, s: ShardSettings) => void;
  readonly msg: string;
}[] = [
  {
    keys: ["activeTimeoutMs", "inactiveTimeoutMs"],
    apply: (c, s) => c.updateTimeouts(s.activeTimeoutMs, s.inactiveTimeoutMs),
    msg: "flow record timeouts updated",
  },
  {
    keys: ["includePodLabels"],
    apply: (c, s) => c.setIncludePodLabels(s.includePodLabels),
    msg: "pod labels setting updated",
  },
  { keys: ["maxFlows"], apply: (c, s) => c.setMaxFlows(s.maxFlows), msg: "maxFlows limit updated" },
  {
    keys: ["maxFlowBytes"],
    apply: (c, s) => c.setMaxFlowBytes(s.maxFlowBytes),
    msg: "maxFlowBytes limit updated",
  },
];

/**
 * Applies `next` to a core: the settings that differ from `prev`, or all of them without
 * `prev`. The one place a reload reaches a core, in the main thread (one shard) or in a shard
 * worker. Returns what changed, to be logged (`maxStringBytes` is the shard's decoders', not
 * the core's).
 */
export function applyCoreSettings(
  core: SettableCore,
  next: ShardSettings,
  prev?: ShardSettings,
): CoreSettingChange[] {
  const changes: CoreSettingChange[] = [];
  for (const s of CORE_SETTINGS) {
    if (prev !== undefined && s.keys.every((k) => prev[k] === next[k])) continue;
    s.apply(core, next);
    changes.push(s);
  }
  return changes;
}

/**
 * Words of the shared usage array per shard (`Float64Array` over a `SharedArrayBuffer`): the
 * shard's live flows (exact, written as they change) and held bytes (published after each
 * slice of ingest), for the process-wide limits and the pool's counts.
 */
export const USAGE_WORDS = 2;

/** Main thread → shard worker. */
export type ToShard =
  | {
    t: "init";
    index: number;
    shards: number;
    /** Workers started for this shard before this one (0: the first). */
    generation: number;
    settings: ShardSettings;
    usage: SharedArrayBuffer;
    /** The shard's report cell (`report_cell.ts`), written by the shard, read by the pool. */
    report: SharedArrayBuffer;
    /** The process's live flows: one `Int32Array` word, counted atomically by every shard. */
    flows: SharedArrayBuffer;
    ring: SharedArrayBuffer;
    log: { level: LogLevel; format: LogFormat };
    /** With a cluster: the Pod store's entries, to seed the shard's replica (then `pods`). */
    pods?: PodChange[];
  }
  | { t: "pods"; changes: PodChange[] }
  | { t: "settings"; settings: ShardSettings }
  | {
    t: "query";
    id: number;
    filter: Partial<FlowKey> | null;
    /** One page (`AggregationCore.queryPage`): at most `limit` matches from slot `from` on. */
    limit: number;
    from: number;
    /** Answer each record's JSON text (`records_json.ts`) rather than the record. */
    texts: boolean;
  }
  | { t: "stop"; id: number };

/** A shard's counters (in its report cell, written before its `stopped` message too). */
export interface ShardReport {
  stats: AggregationStats;
  /** String values cut to `limits.maxStringBytes` by the shard's decoders (monotonic). */
  stringsTruncated: number;
  /** The shard thread's V8 memory when the report was written. */
  memory: ThreadMemory;
}

/** Shard worker → main thread. */
export type FromShard =
  | { t: "ready" }
  | {
    t: "flows";
    buf: BatchBuffer;
    /**
     * Flows of the stop's final flush (`flushAll`): the shard's usage word counts them held
     * until the flush ends, its report does not count them exported.
     */
    final: boolean;
  }
  | { t: "query"; id: number; records: AggregatedRecord[] | string[]; next: number }
  | { t: "stopped"; id: number }
  | { t: "log"; line: string; level: LogLevel };
