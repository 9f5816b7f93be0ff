/**
 * The S3 exporter (exporters.md §4): CSV objects `[<prefix>/]records-<id>.csv[.gz]` in a
 * bucket. `addRecord` formats the record's line at once (the live record changes right after)
 * and appends it to the current object; an object is finished at `maxRecordsPerFile` records
 * and at every `uploadInterval` tick when non-empty, then uploaded, oldest first.
 *
 * Unlike upstream, nothing is lost silently (§9.1):
 * - finished objects wait in memory bounded by bytes (`maxPendingBytes`); beyond it the oldest
 *   waiting object goes to the durable spool (`s3Uploader.spool`, see `spool.ts`) with its
 *   key, and only when the spool is not usable is it dropped and counted (`pendingDropped`),
 *   with a logged error; a full spool drops its oldest segment, counted (`spoolDropped`);
 * - every upload pass sends the spool first (oldest first, under the stored keys), then the
 *   objects in memory; a spool left by an earlier process is replayed the same way, its records
 *   counted apart (`recovered` = `recoveredUploaded` + `recoveredDropped` + what still waits);
 * - a failed upload keeps the object and its name: the retry at the next tick overwrites the
 *   same key, so an upload that failed after landing leaves no duplicate; after a failed pass,
 *   objects finished meanwhile start no pass for a backoff (1 s, doubled at every failed pass
 *   in a row, at most the upload interval; the tick and the stop still start theirs);
 * - the ledger `received = exported + dropped + buffered` holds at every moment (`buffered`
 *   counts the records of the current object, of objects being finished, of waiting ones and of
 *   this process's records in the spool, the last also as `inSpool`: written whole, they
 *   survive the sink's worker being killed);
 * - `stop()` finishes the current object and uploads everything waiting, retrying until a
 *   deadline (8 s, inside the export loop's 10 s per sink; an upload still running then, the
 *   one of a pass started before the stop included, is aborted); what is left then goes to the
 *   spool (for the next start), and only without a usable spool is it counted (`stopDropped`)
 *   and logged;
 * - an upload pass never rejects: a spool error during a replay (its cursor not written after
 *   an upload: a full disk) is counted (`spoolReplayErrors`) and logged, and the pass goes on.
 *
 * Reload: bucket, prefix, region and interval are live (as upstream), and so are `compress`,
 * `gzipLevel` and `maxRecordsPerFile`, from the next object on. A new bucket or region re-discovers the bucket's
 * region (upstream kept comparing with the hint and used the wrong region), and so does an
 * upload answered 301 with the bucket's region.
 *
 * Permissions: see `mod.ts`.
 *
 * @module
 */

import type { ExportedFlow } from "../../aggregation/record.ts";
import { type Clock, type ClockTimer, systemClock } from "../../clock.ts";
import { logger, RateLimitedLog } from "../../log.ts";
import { type Exporter, type ExporterStats, SINK_STOP_DEADLINE_MS } from "../exporter.ts";
import { noteDenied } from "../denied.ts";
import type { S3UploaderConfig } from "./config.ts";
import { CsvWriter } from "./csv.ts";
import { type FinishedObject, ObjectWriter } from "./object.ts";
import { ObjectSpool, type SpoolObjectLease } from "./spool.ts";
import {
  logSpoolOpened,
  ownSpoolShare,
  type SpoolSinkCounters,
  spoolSinkCounters,
} from "../spool_config.ts";
import {
  describeS3Error,
  isPermanentS3Error,
  movedToRegion,
  type ObjectStore,
  type ObjectStoreOptions,
  type ObjectStoreTarget,
  s3ErrorCode,
  SdkObjectStore,
} from "./store.ts";

const log = logger("s3-exporter");
const MIB = 1024 * 1024;
/**
 * Pause after a failed upload pass during which finished objects start no new pass; doubled at
 * every failed pass in a row, at most the upload interval.
 */
const RETRY_BACKOFF_MS = 1000;

/** Tuning of {@linkcode S3Exporter}, mostly for tests. */
export interface S3ExporterOptions {
  /** Time source of the upload ticks, the stop deadline and `timeInserted`. Default: system. */
  clock?: Clock;
  /** Cluster UUID written in every line. */
  clusterUuid?: string;
  /** Bytes of finished objects waiting for upload beyond which the oldest is dropped. 256 MiB. */
  maxPendingBytes?: number;
  /**
   * How long `stop()` keeps uploading. Default {@linkcode SINK_STOP_DEADLINE_MS} (8 s): the
   * export loop gives a sink 10 s to stop before it gives up on it, and the sink must count what
   * it could not upload before then (upstream waited 1 min).
   */
  stopDeadlineMs?: number;
  /** Pause between two upload attempts during `stop()`. Default 1 s. */
  stopRetryMs?: number;
  /** Options of the S3 client. */
  store?: ObjectStoreOptions;
  /** Builds the store of a target (a test seam, e.g. to inject faults). Default: the SDK's. */
  makeStore?: (target: ObjectStoreTarget, options: ObjectStoreOptions) => ObjectStore;
  /**
   * Use the durable spool of `config.spool`. Default true; false keeps objects in memory only
   * (beyond `maxPendingBytes`, and at the stop deadline, they are dropped and counted).
   */
  spool?: boolean;
}

/** Counters of the S3 exporter. */
export interface S3ExporterStats extends ExporterStats, SpoolSinkCounters {
  /** Records taken and not yet uploaded or dropped (current, finishing and waiting objects). */
  buffered: number;
  /** Objects uploaded. */
  objectsUploaded: number;
  /** Upload attempts that failed (the object is kept and retried under the same key). */
  uploadFailures: number;
  /**
   * Of them, refused by S3 for good (`AccessDenied`, `InvalidAccessKeyId`,
   * `SignatureDoesNotMatch`, `NoSuchBucket`, `PermanentRedirect`, any other 403 or 301): wrong
   * credentials, bucket or region. Still retried (a reload may fix them), with the backoff.
   */
  permanentFailures: number;
  /** Objects uploaded after at least one failed attempt. */
  retriedUploads: number;
  /** Finished objects waiting for upload. */
  pendingObjects: number;
  /** Their bytes. */
  pendingBytes: number;
  /** Records dropped because waiting objects exceeded `maxPendingBytes`. */
  pendingDropped: number;
  /** Records still waiting when the stop deadline passed and not spooled, dropped. */
  stopDropped: number;
  /** Records handed to the spool (memory bound exceeded, or left at the stop deadline). */
  spooled: number;
  /** Records dropped because the spool could not write them (an I/O error). */
  spoolWriteDropped: number;
  /** Records lost in the spool (oldest segment dropped when full, corrupt frames, files gone). */
  spoolDropped: number;
  /** Gauge: records waiting in the spool (recovered ones included). */
  spoolRecords: number;
  /** Gauge: bytes of the spool's segments. */
  spoolBytes: number;
  /** The spool is open (false while it waits for its lock, when disabled or unusable). */
  spoolOpen: boolean;
  /** Records found in the spool at start (an earlier process). */
  recovered: number;
  /** Of them, uploaded. */
  recoveredUploaded: number;
  /** Of them, dropped (spool full or corrupt). */
  recoveredDropped: number;
  /** Bucket region discoveries that succeeded. */
  regionDiscoveries: number;
  /** Region discoveries that failed (retried at the next tick). */
  regionFailures: number;
  /**
   * Spool operations of a replay that failed (an I/O error, e.g. a full disk): reading the next
   * object (the pass ends, retried at the next tick), or moving the spool's cursor after an
   * upload (the object has left the spool and the pass goes on; the next start may upload it
   * again under the same key).
   */
  spoolReplayErrors: number;
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
  readonly #csv: CsvWriter;
  readonly #maxPendingBytes: number;
  readonly #stopDeadlineMs: number;
  readonly #stopRetryMs: number;
  readonly #storeOptions: ObjectStoreOptions;
  readonly #makeStore: (target: ObjectStoreTarget, options: ObjectStoreOptions) => ObjectStore;
  readonly #spool: ObjectSpool | undefined;
  #spoolOpening: Promise<void> = Promise.resolve();
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
  /** Failed upload passes in a row. */
  #failedPasses = 0;
  /** Before this time (clock ms) finished objects start no pass (the backoff of failed passes). */
  #retryAt = 0;
  #timer: ClockTimer | undefined;
  #running = false;
  /** Set when `stop()` begins: later records are dropped and counted, never left behind. */
  #stopped = false;
  /** Aborted at the stop deadline: ends every S3 request still running, whichever pass sent it. */
  readonly #deadline = new AbortController();
  #stats = {
    received: 0,
    exported: 0,
    dropped: 0,
    errors: 0,
    objectsUploaded: 0,
    uploadFailures: 0,
    permanentFailures: 0,
    retriedUploads: 0,
    pendingDropped: 0,
    stopDropped: 0,
    spooled: 0,
    spoolWriteDropped: 0,
    recoveredUploaded: 0,
    regionDiscoveries: 0,
    regionFailures: 0,
    spoolReplayErrors: 0,
  };

  /** Builds the exporter from the `s3Uploader` section; no request is sent before `start()`. */
  constructor(config: S3UploaderConfig, options: S3ExporterOptions = {}) {
    this.#clock = options.clock ?? systemClock;
    this.#csv = new CsvWriter(options.clusterUuid ?? "");
    this.#maxPendingBytes = options.maxPendingBytes ?? 256 * MIB;
    this.#stopDeadlineMs = options.stopDeadlineMs ?? SINK_STOP_DEADLINE_MS;
    this.#stopRetryMs = options.stopRetryMs ?? 1000;
    this.#storeOptions = options.store ?? {};
    this.#makeStore = options.makeStore ?? ((t, o) => new SdkObjectStore(t, o));
    this.#spool = options.spool === false ? undefined : new ObjectSpool(config.spool);
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
      spoolDir: this.#spool?.config.dir ?? "",
    });
    this.#spoolOpening = this.#openSpool();
    void this.#kick();
    return Promise.resolve();
  }

  /** Opens the spool in the background (it may wait for a rebuilt sink's lock), then replays it. */
  async #openSpool(): Promise<void> {
    const spool = this.#spool;
    if (spool === undefined) return;
    try {
      const s = await spool.open();
      logSpoolOpened(log, "S3", { config: spool.config, stats: s });
      if (this.#running && s.records > 0) void this.#kick();
    } catch (err) {
      log.error("cannot open the S3 spool: objects wait in memory only", {
        dir: spool.config.dir,
        err,
      });
    }
  }

  /** Formats one flow into the current object. Never throws, never blocks. */
  addRecord(flow: ExportedFlow): void {
    this.#stats.received++;
    if (this.#stopped) {
      this.#drop(1, "stopDropped", "S3 uploader stopped, record dropped");
      return;
    }
    const w = this.#current ??= new ObjectWriter({
      compress: this.#config.compress,
      gzipLevel: this.#config.gzipLevel,
    });
    try {
      w.addFlow(this.#csv, flow, Math.floor(this.#clock.wallMs() / 1000));
    } catch (err) {
      this.#stats.errors++;
      this.#drop(1, undefined, "Cannot format flow record for S3, dropped", err);
      return;
    }
    if (w.records >= this.#config.maxRecordsPerFile) {
      this.#finishCurrent();
      void this.#finishing.then(() => {
        if (this.#clock.nowMs() >= this.#retryAt) void this.#kick();
      });
    }
  }

  /**
   * Resolves once every object finished so far is compressed and waiting for upload (in memory
   * or written to the spool).
   */
  async flush(): Promise<void> {
    await this.#finishing;
    // Not while the spool waits for its lock: those objects stay counted as buffered.
    if (this.#spool?.isOpen) await this.#spool.settled();
  }

  /**
   * Applies a reloaded section. Bucket and region: the running upload ends first, then the
   * client is rebuilt and the region re-discovered; objects waiting go to the new bucket and
   * prefix. Interval: the tick is re-armed. `compress`, `gzipLevel` and `maxRecordsPerFile`:
   * from the next object on.
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
   * the stop deadline (armed first: it also aborts the request of a pass started before the
   * stop); records still waiting then go to the spool, else are dropped, counted and logged.
   */
  async stop(): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#running = false;
    this.#timer?.cancel();
    this.#timer = undefined;
    const abort = this.#deadline;
    const deadlineAt = this.#clock.nowMs() + this.#stopDeadlineMs;
    const deadline = this.#clock.setTimer(this.#stopDeadlineMs, () => abort.abort());
    // Ends at its next object, or at the deadline (its request aborted).
    await this.#pass;
    this.#finishCurrent();
    await this.#finishing;
    while (this.#pending.length > 0 && !abort.signal.aborted) {
      if (await this.#kick(abort.signal)) continue;
      // No pause that would end past the deadline: what is left is counted now.
      if (abort.signal.aborted || this.#clock.nowMs() + this.#stopRetryMs >= deadlineAt) break;
      await this.#pause(this.#stopRetryMs, abort.signal);
    }
    deadline.cancel();
    if (this.#pending.length > 0) await this.#spoolAtStop();
    if (this.#pending.length > 0) {
      const records = this.#pendingRecords;
      const objects = this.#pending.length;
      this.#pending = [];
      this.#pendingBytes = 0;
      this.#pendingRecords = 0;
      this.#stats.dropped += records;
      this.#stats.stopDropped += records;
      log.error("S3 uploads not done by the stop deadline and no spool, records dropped", {
        records,
        objects,
        deadlineMs: this.#stopDeadlineMs,
      });
    }
    await this.#spool?.close();
    this.#store.destroy();
    log.info("S3 uploader stopped", { ...this.stats() });
  }

  /** Moves the objects still waiting to the spool (waiting, bounded, for it to open). */
  async #spoolAtStop(): Promise<void> {
    const spool = this.#spool;
    if (spool === undefined) return;
    if (!spool.isOpen) {
      // The spool may still wait for its lock (a sink replaced by a reload): bounded.
      const waited = Promise.withResolvers<void>();
      const t = this.#clock.setTimer(this.#stopDeadlineMs, () => waited.resolve());
      await Promise.race([this.#spoolOpening, waited.promise]);
      t.cancel();
      // Still not open: what waits is counted below (stopDropped), not held up by the lock.
      if (!spool.isOpen) return;
    }
    const records = this.#pendingRecords;
    while (this.#pending.length > 0) {
      if (!this.#toSpool(this.#pending[0])) break;
      const o = this.#pending.shift()!;
      this.#pendingBytes -= o.body.byteLength;
      this.#pendingRecords -= o.records;
    }
    await spool.settled();
    if (records > this.#pendingRecords) {
      log.warn("S3 uploads not done by the stop deadline; objects kept in the spool", {
        records: records - this.#pendingRecords,
        dir: spool.config.dir,
      });
    }
  }

  /**
   * Hands `o` to the spool under its key (the prefix in force now); false when there is no
   * usable spool. The caller removes it from memory in the same synchronous step.
   */
  #toSpool(o: FinishedObject): boolean {
    const spool = this.#spool;
    if (spool === undefined) return false;
    const key = objectKey(this.#config.bucketPrefix, o.name);
    const taken = spool.offer({ key, body: o.body, records: o.records }, (err) => {
      this.#stats.errors++;
      this.#drop(o.records, "spoolWriteDropped", "S3 spool write failed, records dropped", err, {
        key,
      });
    });
    if (taken) this.#stats.spooled += o.records;
    return taken;
  }

  /**
   * The counters; `received = exported + dropped + buffered` at every moment, where `exported`
   * and `dropped` count this process's records and `buffered` holds the records in memory and
   * this process's records in the spool (recovered ones are counted apart).
   */
  stats(): S3ExporterStats {
    const sp = this.#spool?.stats();
    const spoolDropped = sp?.dropped ?? 0;
    const recovered = sp?.recovered ?? 0;
    const recoveredDropped = sp?.droppedRecovered ?? 0;
    const spoolRecords = sp?.records ?? 0;
    // Counted uploaded in the step they leave the spool's counters (the ack's hook): never both
    // in `exported` and in `inSpool`.
    const own = ownSpoolShare(sp, this.#stats.recoveredUploaded);
    return {
      ...this.#stats,
      dropped: this.#stats.dropped + own.dropped,
      inSpool: own.inSpool,
      buffered: (this.#current?.records ?? 0) + this.#finishingRecords + this.#pendingRecords +
        (this.#spool?.appending ?? 0) + own.inSpool,
      pendingObjects: this.#pending.length,
      pendingBytes: this.#pendingBytes,
      spoolDropped,
      ...spoolSinkCounters(sp),
      spoolRecords,
      spoolBytes: sp?.bytes ?? 0,
      spoolOpen: sp !== undefined,
      recovered,
      recoveredDropped,
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
      if (this.#toSpool(evicted)) continue;
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
   * true when nothing is left waiting after it; never rejects (callers do not wait for it).
   */
  #kick(signal?: AbortSignal): Promise<boolean> {
    if (this.#pass !== undefined) {
      // The stop's passes do not join one started before it (that one ends at its next object).
      if (signal !== undefined) return this.#pass.then(() => this.#kick(signal));
      this.#again = true;
      return this.#pass;
    }
    const run = async (): Promise<boolean> => {
      let ok: boolean;
      do {
        this.#again = false;
        try {
          ok = await this.#uploadAll(signal);
        } catch (err) {
          // Every expected failure is handled inside the pass; this is the last guard.
          this.#stats.errors++;
          this.#logError("S3 upload pass failed; retried at the next upload tick", err);
          ok = false;
        }
      } while (ok && this.#again);
      this.#backOff(ok);
      return ok;
    };
    this.#pass = run().finally(() => this.#pass = undefined);
    return this.#pass;
  }

  /**
   * After a failed pass, finished objects start no pass for {@linkcode RETRY_BACKOFF_MS}, doubled
   * at every failed pass in a row up to the upload interval (the tick and the stop still start
   * theirs); a pass that leaves nothing waiting ends the backoff.
   */
  #backOff(ok: boolean): void {
    if (ok) {
      this.#failedPasses = 0;
      this.#retryAt = 0;
      return;
    }
    const ms = Math.min(RETRY_BACKOFF_MS * 2 ** this.#failedPasses, this.#config.uploadIntervalMs);
    this.#failedPasses++;
    this.#retryAt = this.#clock.nowMs() + ms;
  }

  /**
   * Discovers the region if needed, then uploads waiting objects oldest first; stops at a
   * failure. `signal` marks the stop's passes; every request is aborted at the stop deadline.
   */
  async #uploadAll(signal?: AbortSignal): Promise<boolean> {
    const store = this.#store;
    const requestSignal = this.#deadline.signal;
    if (!this.#regionKnown) {
      try {
        const region = await store.discoverRegion(requestSignal);
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
    if (!(await this.#uploadSpool(store, signal))) return false;
    while (this.#pending.length > 0) {
      if (this.#superseded(signal)) return false;
      const object = this.#pending[0];
      const key = objectKey(this.#config.bucketPrefix, object.name);
      this.#inFlight = object;
      try {
        await store.put(key, object.body, requestSignal);
      } catch (err) {
        object.attempts++;
        this.#uploadFailed("kept and retried under the same key", err, key, object.records);
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

  /**
   * A pass started before `stop()` (it has no stop signal) ends at the next object, so the stop
   * is not held up by a long replay; the stop's own passes carry its deadline's signal.
   */
  #superseded(signal: AbortSignal | undefined): boolean {
    return this.#stopped && signal === undefined;
  }

  /**
   * Uploads the spool's objects oldest first under their stored keys; stops at a failed upload
   * or read. A cursor that cannot be written after an upload is counted and logged, and the
   * replay goes on (the object has left the spool's counters).
   */
  async #uploadSpool(store: ObjectStore, signal?: AbortSignal): Promise<boolean> {
    const spool = this.#spool;
    if (spool === undefined) return true;
    for (;;) {
      if (this.#superseded(signal)) return false;
      let o: SpoolObjectLease | undefined;
      try {
        o = await spool.oldest();
      } catch (err) {
        this.#spoolReplayError("S3 spool read failed; replay retried at the next upload tick", err);
        return false;
      }
      if (o === undefined) return true;
      try {
        await store.put(o.key, o.body, this.#deadline.signal);
      } catch (err) {
        spool.release(o);
        this.#uploadFailed(
          "kept in the spool and retried under the same key",
          err,
          o.key,
          o.records,
        );
        return false;
      }
      const uploaded = o;
      try {
        await spool.ack(uploaded, () => {
          if (uploaded.recovered) this.#stats.recoveredUploaded += uploaded.records;
          else this.#stats.exported += uploaded.records;
          this.#stats.objectsUploaded++;
        });
      } catch (err) {
        this.#spoolReplayError(
          "S3 spool cursor not written after an upload; a restart may upload the object again under the same key",
          err,
          { key: uploaded.key },
        );
      }
    }
  }

  /**
   * Counts and logs a failed upload of `key` (`kept`: what becomes of the object); a refusal for
   * good (wrong credentials, bucket or region) is counted apart and logged as such. A 301 naming
   * the bucket's region makes the next pass discover it again.
   */
  #uploadFailed(kept: string, err: unknown, key: string, records: number): void {
    this.#stats.uploadFailures++;
    this.#stats.errors++;
    const moved = movedToRegion(err);
    if (moved !== undefined) this.#regionKnown = false;
    const permanent = isPermanentS3Error(err);
    if (permanent) this.#stats.permanentFailures++;
    this.#logError(
      permanent
        ? `permanent error when uploading file to S3 (check the credentials, bucket and region); ${kept}`
        : `error when uploading file to S3; ${kept}`,
      err,
      {
        bucket: this.#config.bucketName,
        key,
        records,
        code: s3ErrorCode(err),
        ...(moved === undefined ? {} : { bucketRegion: moved }),
      },
    );
  }

  #spoolReplayError(msg: string, err: unknown, fields: Record<string, unknown> = {}): void {
    this.#stats.spoolReplayErrors++;
    this.#stats.errors++;
    this.#logError(msg, err, { ...fields, dir: this.#spool?.config.dir });
  }

  #drop(
    records: number,
    counter: "pendingDropped" | "stopDropped" | "spoolWriteDropped" | undefined,
    msg: string,
    err?: unknown,
    fields: Record<string, unknown> = {},
  ): void {
    this.#stats.dropped += records;
    if (counter !== undefined) this.#stats[counter] += records;
    this.#logError(msg, err, { ...fields, records });
  }

  #logError(msg: string, err: unknown, fields: Record<string, unknown> = {}): void {
    noteDenied(err);
    // One limit per message and error code: a flood of one error hides no other.
    const suppressed = this.#errLog.allow(err === undefined ? msg : `${msg} ${s3ErrorCode(err)}`);
    if (suppressed < 0) return;
    log.error(msg, {
      ...fields,
      ...(err === undefined ? {} : { err: describeS3Error(err) }),
      suppressed,
    });
  }
}
