/**
 * The S3 exporter (exporters.md §4): CSV objects `[<prefix>/]records-<id>.csv[.gz]` in a
 * bucket. `addRecord` formats the record's line at once (the live record changes right after)
 * and appends it to the current object; an object is finished at `maxRecordsPerFile` records
 * and at every `uploadInterval` tick when non-empty, then uploaded, oldest first.
 *
 * Unlike upstream, nothing is lost silently (§9.1):
 * - finished objects wait in memory bounded by bytes (`maxPendingBytes`); beyond it the oldest
 *   waiting object is offered to the {@linkcode PendingOverflow} seam (the durable spool plugs
 *   in there) and, when refused, dropped and counted (`pendingDropped`), with a logged error;
 * - a failed upload keeps the object and its name: the retry at the next tick overwrites the
 *   same key, so an upload that failed after landing leaves no duplicate;
 * - the ledger `received = exported + dropped + buffered` holds at every moment (`buffered`
 *   counts the records of the current object, of objects being finished and of waiting ones);
 * - `stop()` finishes the current object and uploads everything waiting, retrying until a
 *   deadline (8 s, inside the export loop's 10 s per sink); what is left then is counted
 *   (`stopDropped`) and logged.
 *
 * Reload: bucket, prefix, region and interval are live (as upstream), and so are `compress` and
 * `maxRecordsPerFile`, from the next object on. A new bucket or region re-discovers the bucket's
 * region (upstream kept comparing with the hint and used the wrong region).
 *
 * Permissions: see `mod.ts`.
 *
 * @module
 */

import type { ExportedFlow } from "../../aggregation/record.ts";
import { type Clock, type ClockTimer, systemClock } from "../../clock.ts";
import { logger, RateLimitedLog } from "../../log.ts";
import type { Exporter, ExporterStats } from "../exporter.ts";
import type { S3UploaderConfig } from "./config.ts";
import { formatCsvLine } from "./csv.ts";
import { type FinishedObject, ObjectWriter } from "./object.ts";
import {
  describeS3Error,
  type ObjectStore,
  type ObjectStoreOptions,
  type ObjectStoreTarget,
  SdkObjectStore,
} from "./store.ts";

const log = logger("s3-exporter");
const MIB = 1024 * 1024;

/**
 * Where a finished object goes when the pending-bytes bound has no room for it: the seam of the
 * durable spool. An object it takes is its responsibility from then on (counted `spooled`, part
 * of `buffered`); an object it refuses is dropped and counted.
 */
export interface PendingOverflow {
  /** Takes `object`, or returns false when it cannot. */
  offer(object: FinishedObject): boolean;
}

/** No spool: every overflowing object is refused (dropped and counted). */
export const NO_OVERFLOW: PendingOverflow = { offer: () => false };

/** Tuning of {@linkcode S3Exporter}, mostly for tests. */
export interface S3ExporterOptions {
  /** Time source of the upload ticks, the stop deadline and `timeInserted`. Default: system. */
  clock?: Clock;
  /** Cluster UUID written in every line. */
  clusterUuid?: string;
  /** Bytes of finished objects waiting for upload beyond which the oldest is dropped. 256 MiB. */
  maxPendingBytes?: number;
  /**
   * How long `stop()` keeps uploading. Default 8 s: the export loop gives a sink 10 s to stop
   * before it gives up on it, and the sink must count what it could not upload before then
   * (upstream waited 1 min).
   */
  stopDeadlineMs?: number;
  /** Pause between two upload attempts during `stop()`. Default 1 s. */
  stopRetryMs?: number;
  /** gzip level (1 fastest … 9 smallest). Default 6 (Go's default, as upstream). */
  gzipLevel?: number;
  /** Options of the S3 client. */
  store?: ObjectStoreOptions;
  /** Builds the store of a target (a test seam, e.g. to inject faults). Default: the SDK's. */
  makeStore?: (target: ObjectStoreTarget, options: ObjectStoreOptions) => ObjectStore;
  /** Where objects beyond `maxPendingBytes` go. Default: none (dropped and counted). */
  overflow?: PendingOverflow;
}

/** Counters of the S3 exporter. */
export interface S3ExporterStats extends ExporterStats {
  /** Records taken and not yet uploaded or dropped (current, finishing and waiting objects). */
  buffered: number;
  /** Objects uploaded. */
  objectsUploaded: number;
  /** Upload attempts that failed (the object is kept and retried under the same key). */
  uploadFailures: number;
  /** Objects uploaded after at least one failed attempt. */
  retriedUploads: number;
  /** Finished objects waiting for upload. */
  pendingObjects: number;
  /** Their bytes. */
  pendingBytes: number;
  /** Records dropped because waiting objects exceeded `maxPendingBytes`. */
  pendingDropped: number;
  /** Records still waiting when the stop deadline passed, dropped. */
  stopDropped: number;
  /** Records handed to the overflow spool. */
  spooled: number;
  /** Bucket region discoveries that succeeded. */
  regionDiscoveries: number;
  /** Region discoveries that failed (retried at the next tick). */
  regionFailures: number;
}

interface PendingObject extends FinishedObject {
  attempts: number;
}

function targetOf(c: S3UploaderConfig): ObjectStoreTarget {
  return { bucket: c.bucketName, region: c.region, endpoint: c.endpoint };
}

function objectKey(prefix: string, name: string): string {
  return prefix === "" ? name : `${prefix}/${name}`;
}

/** Uploads exported flows as CSV objects to S3. */
export class S3Exporter implements Exporter {
  /** Exporter name in logs and metrics. */
  readonly name = "s3";
  readonly #clock: Clock;
  readonly #clusterUuid: string;
  readonly #maxPendingBytes: number;
  readonly #stopDeadlineMs: number;
  readonly #stopRetryMs: number;
  readonly #gzipLevel: number;
  readonly #storeOptions: ObjectStoreOptions;
  readonly #makeStore: (target: ObjectStoreTarget, options: ObjectStoreOptions) => ObjectStore;
  readonly #overflow: PendingOverflow;
  readonly #errLog: RateLimitedLog;
  #config: S3UploaderConfig;
  #store: ObjectStore;
  #regionKnown = false;
  #current: ObjectWriter | undefined;
  /** Finishes run one after the other, so objects are queued in the order they were filled. */
  #finishing: Promise<void> = Promise.resolve();
  #finishingRecords = 0;
  #pending: PendingObject[] = [];
  #pendingBytes = 0;
  #pendingRecords = 0;
  #inFlight: PendingObject | undefined;
  #pass: Promise<boolean> | undefined;
  #again = false;
  #timer: ClockTimer | undefined;
  #running = false;
  /** Set when `stop()` begins: later records are dropped and counted, never left behind. */
  #stopped = false;
  #stats = {
    received: 0,
    exported: 0,
    dropped: 0,
    errors: 0,
    objectsUploaded: 0,
    uploadFailures: 0,
    retriedUploads: 0,
    pendingDropped: 0,
    stopDropped: 0,
    spooled: 0,
    regionDiscoveries: 0,
    regionFailures: 0,
  };

  /** Builds the exporter from the `s3Uploader` section; no request is sent before `start()`. */
  constructor(config: S3UploaderConfig, options: S3ExporterOptions = {}) {
    this.#clock = options.clock ?? systemClock;
    this.#clusterUuid = options.clusterUuid ?? "";
    this.#maxPendingBytes = options.maxPendingBytes ?? 256 * MIB;
    this.#stopDeadlineMs = options.stopDeadlineMs ?? 8_000;
    this.#stopRetryMs = options.stopRetryMs ?? 1000;
    this.#gzipLevel = options.gzipLevel ?? 6;
    this.#storeOptions = options.store ?? {};
    this.#makeStore = options.makeStore ?? ((t, o) => new SdkObjectStore(t, o));
    this.#overflow = options.overflow ?? NO_OVERFLOW;
    this.#errLog = new RateLimitedLog(10_000, () => this.#clock.nowMs());
    this.#config = structuredClone(config);
    this.#store = this.#makeStore(targetOf(config), this.#storeOptions);
  }

  /** The configuration in force. */
  get config(): S3UploaderConfig {
    return structuredClone(this.#config);
  }

  /**
   * Starts the upload ticks and discovers the bucket's region. A failed discovery does not
   * fail the start: it is logged and counted, records are kept, and it is retried every tick.
   */
  start(): Promise<void> {
    if (this.#running || this.#stopped) return Promise.resolve();
    this.#running = true;
    this.#arm();
    log.info("S3 uploader started", {
      bucket: this.#config.bucketName,
      prefix: this.#config.bucketPrefix,
      interval: this.#config.uploadInterval,
    });
    void this.#kick();
    return Promise.resolve();
  }

  /** Formats one flow into the current object. Never throws, never blocks. */
  addRecord(flow: ExportedFlow): void {
    this.#stats.received++;
    if (this.#stopped) {
      this.#drop(1, "stopDropped", "S3 uploader stopped, record dropped");
      return;
    }
    let line: string;
    try {
      line = formatCsvLine(flow, {
        clusterUuid: this.#clusterUuid,
        timeInsertedSeconds: Math.floor(this.#clock.wallMs() / 1000),
      });
    } catch (err) {
      this.#stats.errors++;
      this.#drop(1, undefined, "Cannot format flow record for S3, dropped", err);
      return;
    }
    const w = this.#current ??= new ObjectWriter({
      compress: this.#config.compress,
      gzipLevel: this.#gzipLevel,
    });
    w.add(line);
    if (w.records >= this.#config.maxRecordsPerFile) {
      this.#finishCurrent();
      void this.#finishing.then(() => this.#kick());
    }
  }

  /** Resolves once every object finished so far is compressed and waiting for upload. */
  flush(): Promise<void> {
    return this.#finishing;
  }

  /**
   * Applies a reloaded section. Bucket and region: the running upload ends first, then the
   * client is rebuilt and the region re-discovered; objects waiting go to the new bucket and
   * prefix. Interval: the tick is re-armed. `compress` and `maxRecordsPerFile`: from the next
   * object on.
   */
  async update(config: unknown): Promise<void> {
    const next = structuredClone(config as S3UploaderConfig);
    const old = this.#config;
    const retarget = next.bucketName !== old.bucketName || next.region !== old.region ||
      next.endpoint !== old.endpoint;
    if (retarget) await this.#pass;
    this.#config = next;
    if (retarget) {
      this.#store.destroy();
      this.#store = this.#makeStore(targetOf(next), this.#storeOptions);
      this.#regionKnown = false;
    }
    if (next.uploadIntervalMs !== old.uploadIntervalMs && this.#running) {
      this.#timer?.cancel();
      this.#arm();
    }
    log.info("S3 uploader configuration updated", {
      bucket: next.bucketName,
      prefix: next.bucketPrefix,
      interval: next.uploadInterval,
    });
    if (retarget && this.#running) void this.#kick();
  }

  /**
   * Stops the ticks, finishes the current object and uploads everything waiting, retrying until
   * the stop deadline; records still waiting then are dropped, counted and logged.
   */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#running = false;
    this.#timer?.cancel();
    this.#timer = undefined;
    await this.#pass;
    this.#finishCurrent();
    await this.#finishing;
    const abort = new AbortController();
    const deadlineAt = this.#clock.nowMs() + this.#stopDeadlineMs;
    const deadline = this.#clock.setTimer(this.#stopDeadlineMs, () => abort.abort());
    while (this.#pending.length > 0 && !abort.signal.aborted) {
      if (await this.#kick(abort.signal)) continue;
      // No pause that would end past the deadline: what is left is counted now.
      if (abort.signal.aborted || this.#clock.nowMs() + this.#stopRetryMs >= deadlineAt) break;
      await this.#pause(this.#stopRetryMs, abort.signal);
    }
    deadline.cancel();
    if (this.#pending.length > 0) {
      const records = this.#pendingRecords;
      const objects = this.#pending.length;
      this.#pending = [];
      this.#pendingBytes = 0;
      this.#pendingRecords = 0;
      this.#stats.dropped += records;
      this.#stats.stopDropped += records;
      log.error("S3 uploads not done by the stop deadline, records dropped", {
        records,
        objects,
        deadlineMs: this.#stopDeadlineMs,
      });
    }
    this.#store.destroy();
    log.info("S3 uploader stopped", { ...this.stats() });
  }

  /** The counters; `received = exported + dropped + buffered` at every moment. */
  stats(): S3ExporterStats {
    return {
      ...this.#stats,
      buffered: (this.#current?.records ?? 0) + this.#finishingRecords + this.#pendingRecords +
        this.#stats.spooled,
      pendingObjects: this.#pending.length,
      pendingBytes: this.#pendingBytes,
    };
  }

  #arm(): void {
    this.#timer = this.#clock.setTimer(this.#config.uploadIntervalMs, () => {
      if (!this.#running) return;
      this.#arm();
      this.#finishCurrent();
      void this.#finishing.then(() => this.#kick());
    });
  }

  #pause(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const t = this.#clock.setTimer(ms, done);
      signal.addEventListener("abort", done, { once: true });
      function done(): void {
        t.cancel();
        signal.removeEventListener("abort", done);
        resolve();
      }
    });
  }

  /** Moves the current object (if it has records) to the finishing chain. */
  #finishCurrent(): void {
    const w = this.#current;
    if (w === undefined || w.records === 0) return;
    this.#current = undefined;
    this.#finishingRecords += w.records;
    this.#finishing = this.#finishing.then(async () => {
      let object: FinishedObject;
      try {
        object = await w.finish();
      } catch (err) {
        this.#finishingRecords -= w.records;
        this.#stats.errors++;
        this.#drop(w.records, undefined, "Cannot finish S3 object, records dropped", err);
        return;
      }
      // Handed over in one synchronous step: the records are never counted twice or not at all.
      this.#finishingRecords -= object.records;
      this.#enqueue(object);
    });
  }

  #enqueue(object: FinishedObject): void {
    this.#pending.push({ ...object, attempts: 0 });
    this.#pendingBytes += object.body.byteLength;
    this.#pendingRecords += object.records;
    while (this.#pendingBytes > this.#maxPendingBytes) {
      // The oldest object not being uploaded right now.
      const i = this.#pending[0] === this.#inFlight ? 1 : 0;
      if (i >= this.#pending.length) break;
      const [evicted] = this.#pending.splice(i, 1);
      this.#pendingBytes -= evicted.body.byteLength;
      this.#pendingRecords -= evicted.records;
      if (this.#overflow.offer(evicted)) {
        this.#stats.spooled += evicted.records;
        continue;
      }
      this.#drop(
        evicted.records,
        "pendingDropped",
        "S3 objects waiting for upload exceed maxPendingBytes, oldest dropped",
        undefined,
        { object: evicted.name, maxPendingBytes: this.#maxPendingBytes },
      );
    }
  }

  /**
   * Runs an upload pass, or joins the running one (which then makes one more pass). Resolves
   * true when nothing is left waiting after it.
   */
  #kick(signal?: AbortSignal): Promise<boolean> {
    if (this.#pass !== undefined) {
      this.#again = true;
      return this.#pass;
    }
    const run = async (): Promise<boolean> => {
      let ok: boolean;
      do {
        this.#again = false;
        ok = await this.#uploadAll(signal);
      } while (ok && this.#again);
      return ok;
    };
    this.#pass = run().finally(() => this.#pass = undefined);
    return this.#pass;
  }

  /** Discovers the region if needed, then uploads waiting objects oldest first; stops at a failure. */
  async #uploadAll(signal?: AbortSignal): Promise<boolean> {
    const store = this.#store;
    if (!this.#regionKnown) {
      try {
        const region = await store.discoverRegion(signal);
        this.#regionKnown = true;
        this.#stats.regionDiscoveries++;
        log.info("S3 bucket region", { bucket: this.#config.bucketName, region });
      } catch (err) {
        this.#stats.regionFailures++;
        this.#stats.errors++;
        this.#logError("S3 bucket region discovery failed; retried at the next upload tick", err, {
          bucket: this.#config.bucketName,
        });
        return false;
      }
    }
    while (this.#pending.length > 0) {
      const object = this.#pending[0];
      const key = objectKey(this.#config.bucketPrefix, object.name);
      this.#inFlight = object;
      try {
        await store.put(key, object.body, signal);
      } catch (err) {
        object.attempts++;
        this.#stats.uploadFailures++;
        this.#stats.errors++;
        this.#logError(
          "error when uploading file to S3; kept and retried under the same key",
          err,
          { bucket: this.#config.bucketName, key, records: object.records },
        );
        return false;
      } finally {
        this.#inFlight = undefined;
      }
      // Eviction never takes the object in flight, so it is still the first one.
      this.#pending.shift();
      this.#pendingBytes -= object.body.byteLength;
      this.#pendingRecords -= object.records;
      this.#stats.exported += object.records;
      this.#stats.objectsUploaded++;
      if (object.attempts > 0) this.#stats.retriedUploads++;
    }
    return true;
  }

  #drop(
    records: number,
    counter: "pendingDropped" | "stopDropped" | undefined,
    msg: string,
    err?: unknown,
    fields: Record<string, unknown> = {},
  ): void {
    this.#stats.dropped += records;
    if (counter !== undefined) this.#stats[counter] += records;
    this.#logError(msg, err, { ...fields, records });
  }

  #logError(msg: string, err: unknown, fields: Record<string, unknown> = {}): void {
    const suppressed = this.#errLog.allow(msg);
    if (suppressed < 0) return;
    log.error(msg, {
      ...fields,
      ...(err === undefined ? {} : { err: describeS3Error(err) }),
      suppressed,
    });
  }
}
