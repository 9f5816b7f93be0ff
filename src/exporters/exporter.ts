/**
 * The contract every sink implements (spec `exporters.md` §1). The export loop calls
 * `addRecord` synchronously for each expired flow; it must copy or enqueue and return at once.
 * Network and disk I/O happen in the exporter's own async pump, and a failure there is logged
 * and counted by the exporter: it never loses the record for the other exporters.
 */

import type { ExportedFlow } from "../aggregation/record.ts";
import type { FlowBatch } from "./batch.ts";
import type { ThreadMemory } from "../thread_memory.ts";

/**
 * How long the process waits for one exporter's flush or stop before giving up on it (a worker's
 * sink is then terminated, what it still held counted lost).
 */
export const EXPORTER_STOP_TIMEOUT_MS = 10_000;

/**
 * A sink's own deadline for its last deliveries at stop: inside the process's wait, with 2 s
 * left to abort what is under way and keep the rest in its spool. A sink whose deadline were the
 * process's would be terminated at the same moment, before it could keep anything.
 */
export const SINK_STOP_DEADLINE_MS = EXPORTER_STOP_TIMEOUT_MS - 2_000;

/** Counters every exporter exposes (all monotonic). */
export interface ExporterStats {
  /** Records accepted by `addRecord`. */
  received: number;
  /** Records delivered to the sink. */
  exported: number;
  /** Records lost (queue overflow, sink error after retries), each also logged. */
  dropped: number;
  /**
   * Records handed to a connection and not proven delivered (a stream sink's written records
   * before the collector is known to have read them, and those of connections that ended
   * first). Absent: 0, the sink delivers or drops. Never part of `exported`.
   */
  unacknowledged?: number;
  /**
   * Gauge: of the records this sink took, those durably in its spool (`src/spool/`) and neither
   * delivered nor dropped yet. Durable as the spool defines it: the batch's frame was written
   * whole (`write(2)` returned; not `fsync`ed), which survives the sink's worker or process
   * being killed, and the spool's `records` counted it in that same step. Part of what the sink
   * still holds: never in `exported`, `dropped` or `unacknowledged` at the same moment, so a
   * batch delivered from the spool leaves this gauge in the step it enters `exported`. Records
   * the spool had when it was opened (`recovered`, an earlier sink's) are not this sink's and
   * not counted here. The next sink to open the spool (a restarted worker, the next process)
   * finds these records and counts them as its `recovered`. Absent: 0, the sink has no spool.
   */
  inSpool?: number;
  /** I/O or protocol errors. */
  errors: number;
}

/** A sink for aggregated flow records. */
export interface Exporter {
  /** Short name used in logs and metrics: `ipfix`, `clickhouse`, `s3`, `log`. */
  readonly name: string;
  /**
   * True when the exporter reads a flow's key addresses only from `addressWords` (a worker's
   * proxy, which writes them into the batch in binary): when every exporter does, the core
   * skips formatting address text for the export.
   */
  readonly addressWordsOnly?: boolean;
  /** Begins background work. */
  start(): Promise<void>;
  /** Flushes everything buffered and stops; resolves when done. */
  stop(): Promise<void>;
  /** Takes one record; synchronous, never throws for I/O reasons. */
  addRecord(flow: ExportedFlow): void;
  /**
   * Optional: takes every row of a batch (`batch.ts`), in order, as `addRecord` would take each
   * flow, reading the rows in place instead of as decoded record objects (a sink run in a worker
   * for the batches it receives; a sink's worker proxy for an aggregation shard's batches, which
   * it forwards). It counts each row in `received` as it takes it and never throws for a row it
   * cannot take (that row is counted as dropped).
   */
  addBatch?(batch: FlowBatch): void;
  /**
   * Optional: resolves once the records taken so far have left the exporter's bounded memory
   * buffer (written, or handed to the transport). The export loop awaits it between slices of
   * the shutdown flush, so a burst of held flows does not overrun that buffer. Never rejects.
   */
  flush?(): Promise<void>;
  /**
   * Optional: applies a changed configuration section in place. Only the keys the component
   * declares live (`reload.live`) change when this is called; other changes rebuild the sink.
   */
  update?(config: unknown): Promise<void>;
  /**
   * Optional: called when `stop()` did not finish in time: gives up at once what the exporter
   * still holds, counting it as dropped (a sink in a worker: the worker is terminated, so a
   * stuck sink does not live on beside its replacement; what its last counters had durably in
   * its spool is not lost, and is counted apart: `leftInSpool`). `stop()` then resolves.
   */
  abandon?(reason: string): void;
  /**
   * Optional: the V8 memory of the thread the exporter runs in when it has one of its own (a
   * sink in a worker); undefined while that thread is not running.
   */
  threadMemory?(): ThreadMemory | undefined;
  /** Returns the counters. */
  stats(): ExporterStats;
}

/**
 * Hands a whole batch to an exporter's `addBatch`. It never throws for one row; should it throw
 * anyway, the result names the error and the rows it did not take (by its own `received`), so
 * the caller counts them and the ledger stays exact.
 */
export function offerBatch(
  e: Exporter,
  batch: FlowBatch,
): { failed: boolean; lost: number; error?: unknown } {
  const before = e.stats().received;
  try {
    e.addBatch!(batch);
    return { failed: false, lost: 0 };
  } catch (error) {
    return { failed: true, lost: batch.count - (e.stats().received - before), error };
  }
}
