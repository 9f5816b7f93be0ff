/**
 * The flow log exporter (exporters.md §5): one CSV-like line per exported flow, appended to a
 * size-rotated file (or stdout). `addRecord` is synchronous and never throws: it converts the
 * flow to its line at once (the aggregator mutates the live record right after), filters it
 * and queues it in memory. Lines reach disk when 4 KiB are pending, on the flush timer (5 s by
 * default) and on `stop()`. Unlike upstream, a write error is not sticky: it is logged and
 * counted, the affected lines are dropped, and the file is reopened on the next write, so a
 * broken disk never blocks the other exporters (§9.1). The counts are exact even when a write
 * fails part-way (disk full): lines that reached the file whole are `exported`, the rest of the
 * batch `dropped` (one `errors`), and the torn partial line is truncated away before the next
 * write (see rotate.ts), so `exported` equals the number of lines on disk. Strings from the
 * wire are escaped in the line (format.ts), so no field can break a line or drive a terminal.
 *
 * Permissions: `--allow-read --allow-write` on the log directory.
 */

import type { ExportedFlow } from "../../aggregation/record.ts";
import { type Clock, systemClock } from "../../clock.ts";
import { type FlowLoggerConfig, isStdoutPath } from "./config.ts";
import { logger, RateLimitedLog } from "../../log.ts";
import type { Exporter, ExporterStats } from "../exporter.ts";
import { noteDenied } from "../denied.ts";
import { toFlatRecord } from "../flat_record.ts";
import { BatchLines, formatLogLine, LogFilter } from "./format.ts";
import type { FlowBatch } from "../batch.ts";
import { type LineSink, RotatingFile, type RotatingFileOptions, StdoutSink } from "./rotate.ts";

const log = logger("log-exporter");
const MIB = 1024 * 1024;

/** Tuning knobs of {@linkcode LogExporter}, mostly for tests. */
export interface LogExporterOptions {
  /** Time source for backup names, maxAge and log rate limiting. Default: system clock. */
  clock?: Clock;
  /** Period of the flush timer. Default 5000 ms. */
  flushIntervalMs?: number;
  /** Pending bytes that trigger an immediate flush. Default 4096. */
  bufferBytes?: number;
  /** Pending bytes beyond which new lines are dropped (disk stuck). Default 16 MiB. */
  maxPendingBytes?: number;
  /** Overrides `maxSize` (MiB) with an exact byte count. */
  maxSizeBytes?: number;
  /** Wraps every log file opened; a test seam for write faults (see {@linkcode RotatingFile}). */
  wrapFile?: RotatingFileOptions["wrapFile"];
}

/** Counters of the log exporter. */
export interface LogExporterStats extends ExporterStats {
  /** Records not logged because no filter matched. */
  filtered: number;
  /** File rotations. */
  rotations: number;
  /**
   * Backup pruning decisions against the time in the backup's name (removed though its name
   * says it should stay, or kept though it says it should go): the wall clock stepped, and the
   * backups this process rotated were ordered and aged by its own clock. Logged as a warning.
   */
  backupNameConflicts: number;
}

export { isStdoutPath };

/** Writes exported flows to a rotating log file. */
export class LogExporter implements Exporter {
  /** Exporter name in logs and metrics. */
  readonly name = "log";
  readonly #opts:
    & Required<Omit<LogExporterOptions, "maxSizeBytes" | "wrapFile">>
    & Pick<LogExporterOptions, "maxSizeBytes" | "wrapFile">;
  readonly #errLog: RateLimitedLog;
  #config: FlowLoggerConfig;
  #filter: LogFilter;
  #sink: LineSink;
  #pending: string[] = [];
  #pendingBytes = 0;
  #sizeFlushQueued = false;
  #chain: Promise<void> = Promise.resolve();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #running = false;
  /** Bumped on every start, so a timer callback of an earlier run never re-arms itself. */
  #generation = 0;
  #stats = { received: 0, exported: 0, dropped: 0, errors: 0, filtered: 0 };
  #rotationsBefore = 0;
  #backupNameConflictsBefore = 0;

  /** Builds the exporter from the `flowLogger` section; no file is touched until a write. */
  constructor(config: FlowLoggerConfig, options: LogExporterOptions = {}) {
    this.#opts = {
      clock: options.clock ?? systemClock,
      flushIntervalMs: options.flushIntervalMs ?? 5000,
      bufferBytes: options.bufferBytes ?? 4096,
      maxPendingBytes: options.maxPendingBytes ?? 16 * MIB,
      maxSizeBytes: options.maxSizeBytes,
      wrapFile: options.wrapFile,
    };
    this.#errLog = new RateLimitedLog(10_000, () => this.#opts.clock.nowMs());
    this.#config = structuredClone(config);
    this.#filter = new LogFilter(config.filters);
    this.#sink = this.#makeSink();
  }

  /** The configuration in force. */
  get config(): FlowLoggerConfig {
    return structuredClone(this.#config);
  }

  /** Starts the flush timer. */
  start(): Promise<void> {
    if (!this.#running) {
      this.#running = true;
      this.#generation++;
      this.#schedule();
      log.info("Flow logger started", { path: this.#config.path });
    }
    return Promise.resolve();
  }

  /** Stops the timer, flushes everything pending and closes the file. */
  async stop(): Promise<void> {
    await this.#pauseAndClose();
  }

  /**
   * Stops the timer, then flushes and closes the file as one step of the write chain: a
   * size-triggered flush queued meanwhile can never write into (and so reopen) the file being
   * closed. `then` runs in the same step, before any later write sees the sink.
   */
  async #pauseAndClose(then?: () => void): Promise<void> {
    this.#running = false;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#serialized(async () => {
      await this.#flushOnce();
      await this.#closeSink();
      then?.();
    });
  }

  /** Formats, filters and queues one flow. Never throws, never blocks. */
  addRecord(flow: ExportedFlow): void {
    this.#stats.received++;
    let line: string;
    try {
      const flat = toFlatRecord(flow);
      if (!this.#filter.matches(flat)) {
        this.#stats.filtered++;
        return;
      }
      line = formatLogLine(flat, this.#config.prettyPrint);
    } catch (e) {
      // A malformed record must not break the export loop.
      this.#formatFailed(e);
      return;
    }
    this.#queue(line);
  }

  /**
   * Formats, filters and queues every row of a batch received in the worker, reading the rows
   * in place (no record objects): the same lines as {@linkcode addRecord}. Never throws.
   */
  addBatch(batch: FlowBatch): void {
    const lines = new BatchLines(batch, { prettyPrint: this.#config.prettyPrint });
    const filter = this.#filter;
    for (let r = 0; r < lines.count; r++) {
      this.#stats.received++;
      let line: string;
      try {
        if (!lines.matches(filter, r)) {
          this.#stats.filtered++;
          continue;
        }
        line = lines.line(r);
      } catch (e) {
        this.#formatFailed(e);
        continue;
      }
      this.#queue(line);
    }
  }

  #formatFailed(e: unknown): void {
    this.#stats.errors++;
    this.#stats.dropped++;
    this.#logError("Cannot format flow record", e);
  }

  /** Queues one formatted line, or drops it when the buffer is full. */
  #queue(line: string): void {
    if (this.#pendingBytes + line.length > this.#opts.maxPendingBytes) {
      this.#stats.dropped++;
      this.#logError("Flow log buffer full, record dropped", undefined);
      return;
    }
    this.#pending.push(line);
    this.#pendingBytes += line.length;
    if (this.#pendingBytes >= this.#opts.bufferBytes && !this.#sizeFlushQueued) {
      this.#sizeFlushQueued = true;
      void this.flush();
    }
  }

  /** Writes everything pending now; flushes never overlap. Resolves when done (never rejects). */
  flush(): Promise<void> {
    return this.#serialized(() => this.#flushOnce());
  }

  /** Runs `fn` after every write and close queued before it; never rejects. */
  #serialized(fn: () => Promise<void>): Promise<void> {
    const run = this.#chain.then(fn);
    this.#chain = run.catch((err) => this.#logError("flow log operation failed", err));
    return this.#chain;
  }

  /**
   * Applies a reloaded `flowLogger` section. Any change restarts the logger: pending lines are
   * flushed to the old file, which is closed; new lines go to the new path with the new
   * rotation, filters and prettyPrint. An identical section is a no-op.
   */
  async update(config: FlowLoggerConfig): Promise<void> {
    if (JSON.stringify(config) === JSON.stringify(this.#config)) return;
    const wasRunning = this.#running;
    // Pending lines go to the old file, it is closed, and only then do later writes see the new
    // sink (no write can reopen the old file meanwhile).
    await this.#pauseAndClose(() => {
      this.#config = structuredClone(config);
      this.#filter = new LogFilter(config.filters);
      this.#sink = this.#makeSink();
    });
    log.info("Flow logger configuration updated", { path: config.path });
    if (wasRunning) await this.start();
  }

  /** Returns the counters. */
  stats(): LogExporterStats {
    const file = this.#sink instanceof RotatingFile ? this.#sink : undefined;
    const rotations = this.#rotationsBefore + (file?.rotations ?? 0);
    const backupNameConflicts = this.#backupNameConflictsBefore + (file?.nameConflicts ?? 0);
    return { ...this.#stats, rotations, backupNameConflicts };
  }

  #makeSink(): LineSink {
    if (isStdoutPath(this.#config.path)) return new StdoutSink();
    return new RotatingFile(this.#config.path, {
      maxSizeBytes: this.#opts.maxSizeBytes ?? this.#config.maxSize * MIB,
      maxBackups: this.#config.maxBackups,
      maxAgeDays: this.#config.maxAge,
      compress: this.#config.compress,
      clock: this.#opts.clock,
      onError: () => this.#stats.errors++,
      wrapFile: this.#opts.wrapFile,
    });
  }

  async #closeSink(): Promise<void> {
    await this.#sink.close();
    if (this.#sink instanceof RotatingFile) {
      this.#rotationsBefore += this.#sink.rotations;
      this.#backupNameConflictsBefore += this.#sink.nameConflicts;
    }
    // A fresh sink, so a later start() or write begins with new counters and an unopened file.
    this.#sink = this.#makeSink();
  }

  async #flushOnce(): Promise<void> {
    this.#sizeFlushQueued = false;
    if (this.#pending.length === 0) return;
    // Snapshot and clear in one synchronous step: lines added during the write wait their turn.
    const lines = this.#pending;
    this.#pending = [];
    this.#pendingBytes = 0;
    const res = await this.#sink.writeLines(lines);
    this.#stats.exported += res.written;
    const lost = lines.length - res.written;
    this.#stats.dropped += lost;
    if (res.tooLong > 0) this.#stats.errors++;
    if (res.error !== undefined) {
      this.#stats.errors++;
      this.#logError(
        "Cannot write flow log; lines dropped, file reopened on next write",
        res.error,
        {
          path: this.#config.path,
          lines: lines.length - res.written - res.tooLong,
        },
      );
    }
  }

  #schedule(): void {
    if (!this.#running) return;
    const generation = this.#generation;
    this.#timer = setTimeout(async () => {
      this.#timer = undefined;
      await this.flush();
      if (generation === this.#generation) this.#schedule();
    }, this.#opts.flushIntervalMs);
  }

  #logError(msg: string, err: unknown, fields: Record<string, unknown> = {}): void {
    noteDenied(err);
    const suppressed = this.#errLog.allow(msg);
    if (suppressed < 0) return;
    log.error(msg, { ...fields, err, suppressed });
  }
}
