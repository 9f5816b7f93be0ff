/**
 * Messages between the export loop's {@linkcode WorkerExporter} proxy and the worker that runs
 * a sink ({@linkcode runExporterWorker}). Flows travel as binary batches (batch.ts, shared); the
 * worker acknowledges each batch with its counters, so the proxy's ledger is exact across the
 * thread boundary.
 *
 * @module
 */

import type { LogFormat, LogLevel } from "../log.ts";
import type { ExporterContext } from "./component.ts";
import type { ExporterStats } from "./exporter.ts";
import type { BatchBuffer } from "./batch.ts";
import type { ThreadMemory } from "../thread_memory.ts";

/** Counters the worker reports: the sink's own plus what the host counted around it. */
export interface WorkerStats extends ExporterStats {
  /** Records given to the sink's `addRecord` (after decoding the batch). */
  received: number;
  /** Denied operations (`NotCapable`) seen in the sink, synchronous or not. */
  permissionDenied: number;
  /** Errors that escaped the sink (thrown by `addRecord`, unhandled rejections). */
  uncaught: number;
  /** Records the sink took but chose not to export (the flow log's filters). */
  filtered: number;
  /** Records the sink wrote and cannot prove delivered (its `unacknowledged`). */
  unacknowledged: number;
  /**
   * Gauge: records the sink took that are durably in its spool, not yet delivered or dropped
   * (its `inSpool`; 0 for a sink without a spool). Part of what the worker holds; a snapshot
   * taken with the other counters, so a record is never both here and in `exported`.
   */
  inSpool: number;
  /** The sink's further counters, verbatim. */
  extra: Record<string, number | boolean>;
  /** The worker thread's V8 memory when these counters were read (not summed over workers). */
  memory?: ThreadMemory;
}

/** Main thread → worker. */
export type ToWorker =
  | {
    t: "init";
    config: unknown;
    ctx: ExporterContext;
    log: { level: LogLevel; format: LogFormat };
  }
  | { t: "batch"; seq: number; buf: BatchBuffer }
  | { t: "flush"; id: number }
  | { t: "update"; id: number; config: unknown }
  | { t: "stop"; id: number };

/** Worker → main thread. */
export type FromWorker =
  | { t: "ready" }
  | { t: "initError"; message: string }
  | { t: "ack"; seq: number; stats: WorkerStats }
  | { t: "stats"; stats: WorkerStats }
  | { t: "done"; id: number; stats: WorkerStats; error?: string }
  /** A formatted log line: the main thread writes it, to stderr or klog's files. */
  | { t: "log"; line: string; level: LogLevel };

/** Worker stats before anything happened. */
export function emptyWorkerStats(): WorkerStats {
  return {
    received: 0,
    exported: 0,
    dropped: 0,
    errors: 0,
    permissionDenied: 0,
    uncaught: 0,
    filtered: 0,
    unacknowledged: 0,
    inSpool: 0,
    extra: {},
  };
}
