/**
 * Messages between the main thread's {@linkcode ShardPool} and a shard worker (`worker.ts`),
 * and the shared counters they both read. Records travel main → shard in batches (never one
 * message per record); expired flows travel shard → main as the exporters' binary batches
 * (`exporters/batch.ts`), each with the shard's counters, so the main thread's view of every
 * shard is at most one batch old.
 *
 * @module
 */

import type { AggregatedRecord, FlowInput, FlowKey } from "../aggregation/record.ts";
import type { AggregationStats } from "../aggregation/counters.ts";
import type { LogFormat, LogLevel } from "../log.ts";

/** The core's settings a shard takes at start and on a reload (all serialisable). */
export interface ShardSettings {
  activeTimeoutMs: number;
  inactiveTimeoutMs: number;
  maxFlows: number;
  maxFlowBytes: number;
  includePodLabels: boolean;
}

/**
 * Words of the shared usage array per shard (`Float64Array` over a `SharedArrayBuffer`): the
 * shard's live flows and held bytes, for the process-wide limits of every other shard.
 */
export const USAGE_WORDS = 2;

/**
 * Words of the shared control array per shard (`Int32Array`): batches of records the shard has
 * finished ingesting (the main thread bounds the batches in flight with it, and waits on it).
 */
export const CONTROL_WORDS = 1;

/** Main thread → shard worker. */
export type ToShard =
  | {
    t: "init";
    index: number;
    shards: number;
    settings: ShardSettings;
    usage: SharedArrayBuffer;
    control: SharedArrayBuffer;
    log: { level: LogLevel; format: LogFormat };
  }
  | { t: "records"; records: FlowInput[] }
  | { t: "settings"; settings: ShardSettings }
  | { t: "query"; id: number; filter: Partial<FlowKey> | null; limit: number }
  | { t: "stop"; id: number };

/** What a shard reports with every message: its counters. */
export interface ShardReport {
  stats: AggregationStats;
}

/** Shard worker → main thread. */
export type FromShard =
  | { t: "ready" }
  | ({ t: "flows"; buf: ArrayBuffer } & ShardReport)
  | ({ t: "stats" } & ShardReport)
  | { t: "query"; id: number; records: AggregatedRecord[] }
  | ({ t: "stopped"; id: number } & ShardReport)
  | { t: "log"; line: string; level: LogLevel };
