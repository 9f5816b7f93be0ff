/**
 * The ClickHouse sink (exporters.md §3): flows become RowBinary rows at once (`addRecord`
 * never blocks), rows are sealed into batches every `commitInterval` or when a batch is full,
 * and batches are inserted with an explicit column list, two in flight at a time from memory
 * (one at a time from the spool, which hands out one batch at a time).
 *
 * A batch's body is spooled as it is sent, so its format is part of the spool entry: batches
 * carry {@linkcode FLAG_ROW_BINARY}; a spooled batch without it was written by a version that
 * rendered JSONEachRow, and is inserted as such.
 *
 * Never fatal, never blocking: the server being down at start or later only changes the
 * sink's state. `connected`: inserts go straight from memory. `retrying`: an attempt failed;
 * the next one waits an exponential backoff (1 s doubling to 30 s, from an injected clock).
 * `spooling`: batches wait in the durable spool (`src/spool/`), which is replayed in order,
 * oldest first, once the server answers again, and after a restart.
 *
 * Every batch has a stable id (kept in the spool). A batch whose insert ended with an unknown
 * outcome (timeout, reset after the request left) is retried with the same id as
 * `insert_deduplication_token` where the server has it; where the server cannot make that
 * exact (see {@linkcode ServerInfo.dedupExact}) the retried rows are counted as
 * `possiblyDuplicated`.
 *
 * The ledger: received = exported + dropped + buffered (memory + spool + in flight); records
 * found in the spool at start are counted apart (`recovered` = `recoveredInserted` +
 * `recoveredDropped` + what still waits). `inSpool` is this sink's share of the spool: a batch
 * inserted from the spool is counted (`exported` or `recoveredInserted`) in the step its
 * records leave the spool's counters, so at no moment is a record both inserted and in the
 * spool (a worker's proxy relies on it when the worker dies: `leftInSpool`).
 *
 * @module
 */

import type { ExportedFlow } from "../../aggregation/record.ts";
import { type Clock, type ClockTimer, systemClock } from "../../clock.ts";
import { logger, RateLimitedLog } from "../../log.ts";
import { FLAG_OUTCOME_UNKNOWN, newBatchId, Spool } from "../../spool/mod.ts";
import { type Exporter, type ExporterStats, SINK_STOP_DEADLINE_MS } from "../exporter.ts";
import { noteDenied } from "../denied.ts";
import { toFlatRecord } from "../flat_record.ts";
import {
  logSpoolOpened,
  ownSpoolShare,
  type SpoolSinkCounters,
  spoolSinkCounters,
} from "../spool_config.ts";
import { CLICKHOUSE_CA_PATH, type ClickHouseConfig } from "./config.ts";
import {
  ClientConnection,
  type Connection,
  type ConnectionSettings,
  type ServerInfo,
} from "./connection.ts";
import { INSERT_COLUMNS, type InsertFormat, RowBinaryWriter } from "./table.ts";
import { parseDatabaseUrl } from "./url.ts";

const log = logger("clickhouse");

export { CLICKHOUSE_CA_PATH };

/** Tuning and seams of {@linkcode ClickHouseExporter}. */
export interface ClickHouseExporterOptions {
  /** Time source of the commit timer and the backoff. Default the system clock. */
  clock?: Clock;
  /** Reads `CH_USERNAME` / `CH_PASSWORD`. Default `Deno.env.get`. */
  env?: (name: string) => string | undefined;
  /** Builds a connection (tests may wrap the real one). Default {@linkcode ClientConnection}. */
  connect?: (settings: ConnectionSettings) => Connection;
  /** Reads the custom CA file. Default `Deno.readTextFile` of {@linkcode CLICKHOUSE_CA_PATH}. */
  readCa?: () => Promise<string>;
  /** Inserts of memory batches in flight at once. Default 2. */
  maxInFlight?: number;
  /** Rows per insert at most (the size trigger). Default 20,000. */
  maxBatchRows?: number;
  /** Records held in memory beyond which new batches go to the spool (or, without one, the oldest are dropped). Default 524,288. */
  maxMemoryRecords?: number;
  /** First retry delay; doubles up to {@linkcode backoffMaxMs}. Default 1000. */
  backoffInitialMs?: number;
  /** Retry delay cap. Default 30,000. */
  backoffMaxMs?: number;
  /** Deadline of one insert or preparation, reading the answer included. Default 30,000. */
  requestTimeoutMs?: number;
  /**
   * Deadline of the final inserts at stop; what is left then goes to the spool. Default
   * {@linkcode SINK_STOP_DEADLINE_MS} (8 s: inside the process's 10 s wait for the sink).
   */
  stopTimeoutMs?: number;
}

/**
 * Spool entry flag (a sink-defined bit): the payload is RowBinary of the 50 insert columns.
 * Without it the payload is JSONEachRow (entries spooled before the sink rendered RowBinary).
 */
export const FLAG_ROW_BINARY = 2;

/** The sink's state, in logs and counters. */
export type ClickHouseState = "connected" | "retrying" | "spooling";

/** Counters of the sink (the worker reports every field). */
export interface ClickHouseStats extends ExporterStats, SpoolSinkCounters {
  /** Rows inserted, recovered ones included. */
  inserted: number;
  /** INSERT statements that succeeded. */
  batchesInserted: number;
  /** Failed inserts and preparations. */
  insertErrors: number;
  /** Attempts after a failure. */
  retries: number;
  /** New clients (first connection, reload of a connection setting). */
  reconnects: number;
  /** Rows retried after an unknown outcome where the server cannot deduplicate exactly. */
  possiblyDuplicated: number;
  /** Rows retried after an unknown outcome with a dedup token the table honours. */
  retriedDeduplicated: number;
  /** Records found in the spool at start (an earlier process). */
  recovered: number;
  /** Of them, inserted. */
  recoveredInserted: number;
  /** Of them, dropped (spool full or corrupt). */
  recoveredDropped: number;
  /** Records lost from memory (no spool and memory full). */
  memoryDropped: number;
  /** Records lost in the spool (oldest segment dropped when full, corrupt frames, files gone). */
  spoolDropped: number;
  /** Gauge: records waiting in memory (open batch and sealed batches). */
  memoryRecords: number;
  /** Gauge: records waiting in the spool. */
  spoolRecords: number;
  /** Gauge: bytes of the spool's segments. */
  spoolBytes: number;
  /** The spool is open (false while it waits for its lock, or when it could not be opened). */
  spoolOpen: boolean;
  /**
   * State `connected`: the last insert attempt succeeded. Of the state flags (see
   * {@linkcode ClickHouseState}) exactly one is true.
   */
  connected: boolean;
  /** State `retrying`: the last attempt failed and no records wait in the spool. */
  retrying: boolean;
  /** State `spooling`: the last attempt failed and records wait in the spool. */
  spooling: boolean;
  /** The server takes `insert_deduplication_token`. */
  dedupToken: boolean;
}

interface Batch {
  readonly id: string;
  readonly records: number;
  flags: number;
  readonly body: Uint8Array;
}

function settingsKey(c: ClickHouseConfig): string {
  return JSON.stringify([c.databaseURL, c.database, c.compress, c.tls.insecureSkipVerify]);
}

/** The ClickHouse sink. */
export class ClickHouseExporter implements Exporter {
  /** Name in logs and metrics. */
  readonly name = "clickhouse";
  #config: ClickHouseConfig;
  readonly #clusterUuid: string;
  readonly #clock: Clock;
  readonly #connect: (s: ConnectionSettings) => Connection;
  readonly #readCa: () => Promise<string>;
  readonly #opts: {
    maxInFlight: number;
    maxBatchRows: number;
    maxMemoryRecords: number;
    backoffInitialMs: number;
    backoffMaxMs: number;
    requestTimeoutMs: number;
    stopTimeoutMs: number;
  };
  readonly #username: string;
  readonly #password: string;
  readonly #errLog = new RateLimitedLog(10_000, () => this.#clock.nowMs());

  readonly #rows = new RowBinaryWriter();
  readonly #memory: Batch[] = [];
  #memoryRecords = 0;
  #spool: Spool | undefined;
  #spoolOpening: Promise<void> | undefined;
  /** Spool appends issued and not finished (the spool then holds, or will hold, work). */
  #spoolAppends = 0;
  #appendChain: Promise<void> = Promise.resolve();
  #conn: Connection | undefined;
  #connKey = "";
  #server: ServerInfo | undefined;
  /** The last attempt succeeded (the state is derived: see {@linkcode state}). */
  #connected = false;
  #loggedState: ClickHouseState | undefined;
  #pump: Promise<void> | undefined;
  /** Wakes the pump's wait for an insert to end, when a slot for another insert is free. */
  #wake: (() => void) | undefined;
  #again = false;
  #commitTimer: ClockTimer | undefined;
  #retryTimer: ClockTimer | undefined;
  #backoffMs: number;
  /** Requests under way (inserts, the preparation): the stop deadline aborts them. */
  readonly #inflight = new Set<AbortController>();
  #started = false;
  #stopping = false;
  /** The stop deadline passed: no new request starts. */
  #stopExpired = false;

  #received = 0;
  #inserted = 0;
  #batchesInserted = 0;
  #insertErrors = 0;
  #retries = 0;
  #reconnects = 0;
  #possiblyDuplicated = 0;
  #retriedDeduplicated = 0;
  #recoveredInserted = 0;
  #memoryDropped = 0;

  /**
   * Validates the URL and the credentials (upstream's errors; the caller reports them) and
   * prepares the sink. No I/O: the connection and the spool open in the background.
   */
  constructor(
    config: ClickHouseConfig,
    clusterUuid: string,
    options: ClickHouseExporterOptions = {},
  ) {
    const env = options.env ?? ((n: string) => Deno.env.get(n));
    this.#username = env("CH_USERNAME") ?? "";
    this.#password = env("CH_PASSWORD") ?? "";
    if (config.databaseURL === "" || this.#username === "" || this.#password === "") {
      throw new Error("DatabaseURL, Username or Password missing in ClickHouse config");
    }
    const url = parseDatabaseUrl(config.databaseURL);
    if (url.native) {
      log.info("ClickHouse native URL mapped to its HTTP interface", {
        databaseURL: config.databaseURL,
        url: url.httpUrl,
      });
    }
    // `debug` is only logged, as upstream (it never reached the driver).
    log.info("ClickHouse sink configured", {
      url: url.httpUrl,
      database: config.database,
      compress: config.compress,
      commitInterval: config.commitInterval,
      debug: config.debug,
      spoolDir: config.spool.dir,
    });
    this.#config = config;
    this.#clusterUuid = clusterUuid;
    this.#clock = options.clock ?? systemClock;
    this.#connect = options.connect ?? ((s) => new ClientConnection(s));
    this.#readCa = options.readCa ?? (() => Deno.readTextFile(CLICKHOUSE_CA_PATH));
    this.#opts = {
      maxInFlight: Math.max(1, options.maxInFlight ?? 2),
      maxBatchRows: options.maxBatchRows ?? 20_000,
      maxMemoryRecords: options.maxMemoryRecords ?? 524_288,
      backoffInitialMs: options.backoffInitialMs ?? 1000,
      backoffMaxMs: options.backoffMaxMs ?? 30_000,
      requestTimeoutMs: options.requestTimeoutMs ?? 30_000,
      stopTimeoutMs: options.stopTimeoutMs ?? SINK_STOP_DEADLINE_MS,
    };
    this.#backoffMs = this.#opts.backoffInitialMs;
  }

  /** Starts the commit timer; the spool and the connection open in the background. */
  start(): Promise<void> {
    if (this.#started) return Promise.resolve();
    this.#started = true;
    this.#spoolOpening = this.#openSpool();
    this.#armCommit();
    this.#kick();
    return Promise.resolve();
  }

  async #openSpool(): Promise<void> {
    const { dir, maxBytes } = this.#config.spool;
    try {
      const spool = await Spool.open(dir, { maxBytes });
      this.#spool = spool;
      logSpoolOpened(log, "ClickHouse", { config: this.#config.spool, stats: spool.stats() });
      if (!this.#connected) this.#spillMemory();
      this.#kick();
    } catch (err) {
      log.error("cannot open the ClickHouse spool: batches wait in memory only", { dir, err });
    }
  }

  /** Converts the flow to its row at once (the live record changes after this returns). */
  addRecord(flow: ExportedFlow): void {
    this.#received++;
    this.#rows.add(toFlatRecord(flow, this.#clusterUuid));
    if (this.#rows.rows >= this.#opts.maxBatchRows) {
      this.#seal();
      this.#kick();
    }
  }

  /** Seals the open batch and inserts or spools what waits; resolves when the pump is idle. */
  async flush(): Promise<void> {
    await this.#spoolOpening;
    this.#seal();
    this.#kick();
    await this.#idle();
  }

  /** Applies the live keys: the interval at once, a changed connection setting reconnects. */
  update(config: unknown): Promise<void> {
    const next = config as ClickHouseConfig;
    const prev = this.#config;
    this.#config = next;
    if (next.commitIntervalMs !== prev.commitIntervalMs) {
      this.#commitTimer?.cancel();
      this.#armCommit();
      log.info("ClickHouse commit interval updated", { commitInterval: next.commitInterval });
    }
    if (settingsKey(next) !== settingsKey(prev)) {
      // The next attempt builds a new client (the old one is closed then), at once: the new
      // settings may be what fixes a failing connection, so a pending backoff is cut short.
      this.#server = undefined;
      this.#backoffMs = this.#opts.backoffInitialMs;
      if (this.#retryTimer !== undefined && !this.#stopping) {
        this.#retryTimer.cancel();
        this.#retryTimer = undefined;
      }
      this.#kick();
    }
    return Promise.resolve();
  }

  /**
   * Stops the timers, inserts what is in memory (within `stopTimeoutMs`), keeps what could not
   * be inserted in the spool for the next start, and closes the client and the spool.
   */
  async stop(): Promise<void> {
    if (this.#stopping) return;
    this.#stopping = true;
    this.#commitTimer?.cancel();
    this.#retryTimer?.cancel();
    this.#retryTimer = undefined;
    this.#seal();
    const deadline = this.#clock.setTimer(this.#opts.stopTimeoutMs, () => {
      this.#stopExpired = true;
      for (const ctl of this.#inflight) ctl.abort(new Error("stop deadline"));
    });
    if (this.#connected || this.#pump !== undefined) {
      this.#kick();
      await this.#idle();
    }
    deadline.cancel();
    if (this.#spool === undefined) {
      // The spool may still wait for its lock (a sink replaced by a reload): bounded.
      const waited = Promise.withResolvers<void>();
      const t = this.#clock.setTimer(this.#opts.stopTimeoutMs, () => waited.resolve());
      await Promise.race([this.#spoolOpening, waited.promise]);
      t.cancel();
    }
    this.#spillMemory();
    await this.#appendChain;
    if (this.#memoryRecords > 0) {
      log.error("ClickHouse: records not inserted at stop and no spool to keep them", {
        records: this.#memoryRecords,
      });
      this.#memoryDropped += this.#memoryRecords;
      this.#memory.length = 0;
      this.#memoryRecords = 0;
    }
    await this.#spool?.close();
    await this.#conn?.close().catch(() => {});
    this.#conn = undefined;
    log.info("ClickHouse sink stopped", this.#ledger());
  }

  #ledger(): Record<string, number | boolean> {
    const s = this.stats();
    return {
      received: s.received,
      exported: s.exported,
      dropped: s.dropped,
      memoryRecords: s.memoryRecords,
      spoolRecords: s.spoolRecords,
      recovered: s.recovered,
      recoveredInserted: s.recoveredInserted,
      possiblyDuplicated: s.possiblyDuplicated,
    };
  }

  /** Counters; `exported` and `dropped` count this process's records only. */
  stats(): ClickHouseStats {
    const sp = this.#spool?.stats();
    const own = ownSpoolShare(sp, this.#recoveredInserted);
    return {
      received: this.#received,
      exported: this.#inserted - this.#recoveredInserted,
      dropped: this.#memoryDropped + own.dropped,
      inSpool: own.inSpool,
      errors: this.#insertErrors,
      inserted: this.#inserted,
      batchesInserted: this.#batchesInserted,
      insertErrors: this.#insertErrors,
      retries: this.#retries,
      reconnects: this.#reconnects,
      possiblyDuplicated: this.#possiblyDuplicated,
      retriedDeduplicated: this.#retriedDeduplicated,
      recovered: sp?.recovered ?? 0,
      recoveredInserted: this.#recoveredInserted,
      recoveredDropped: sp?.droppedRecovered ?? 0,
      memoryDropped: this.#memoryDropped,
      spoolDropped: sp?.dropped ?? 0,
      ...spoolSinkCounters(sp),
      memoryRecords: this.#memoryRecords + this.#rows.rows,
      spoolRecords: sp?.records ?? 0,
      spoolBytes: sp?.bytes ?? 0,
      spoolOpen: sp !== undefined,
      connected: this.state === "connected",
      retrying: this.state === "retrying",
      spooling: this.state === "spooling",
      dedupToken: this.#server?.dedupToken ?? false,
    };
  }

  #armCommit(): void {
    if (this.#stopping) return;
    this.#commitTimer = this.#clock.setTimer(this.#config.commitIntervalMs, () => {
      this.#seal();
      this.#kick();
      this.#armCommit();
    }, { unref: true });
  }

  /** Turns the open rows into a batch: into memory while inserts flow, else into the spool. */
  #seal(): void {
    if (this.#rows.rows === 0) return;
    const batch: Batch = {
      id: newBatchId(),
      records: this.#rows.rows,
      flags: FLAG_ROW_BINARY,
      body: this.#rows.take(),
    };
    const toSpool = this.#spool !== undefined &&
      (!this.#connected || this.#spoolAppends > 0 || !this.#spool.empty ||
        this.#memoryRecords + batch.records > this.#opts.maxMemoryRecords);
    if (toSpool) this.#toSpool(batch);
    else this.#toMemory(batch);
  }

  #toMemory(batch: Batch): void {
    this.#memory.push(batch);
    this.#memoryRecords += batch.records;
    while (this.#memoryRecords > this.#opts.maxMemoryRecords && this.#memory.length > 1) {
      const old = this.#memory.shift()!;
      this.#memoryRecords -= old.records;
      this.#memoryDropped += old.records;
      this.#warn("memory-full", "ClickHouse queue full without a spool: oldest batch dropped", {
        records: old.records,
      });
    }
  }

  #toSpool(batch: Batch): void {
    const spool = this.#spool!;
    this.#spoolAppends++;
    const payload = batch.body;
    this.#appendChain = this.#appendChain.then(async () => {
      try {
        await spool.append({ id: batch.id, records: batch.records, flags: batch.flags, payload });
      } catch (err) {
        // The disk failed: the batch stays in memory (bounded) rather than being lost.
        this.#warn("spool-write", "ClickHouse spool write failed; batch kept in memory", { err });
        this.#toMemory(batch);
      } finally {
        this.#spoolAppends--;
      }
      this.#noteState();
      // Connected and idle: what was just spooled goes out now.
      if (this.#connected && !this.#stopping) this.#kick();
    });
  }

  /** Moves every memory batch to the spool (in order), when there is one. */
  #spillMemory(): void {
    if (this.#spool === undefined) return;
    while (this.#memory.length > 0) {
      const b = this.#memory.shift()!;
      this.#memoryRecords -= b.records;
      this.#toSpool(b);
    }
  }

  /**
   * `connected` after a successful attempt; else `spooling` while records wait in the spool,
   * `retrying` otherwise.
   */
  get state(): ClickHouseState {
    if (this.#connected) return "connected";
    const spooled = (this.#spool?.stats().records ?? 0) + this.#spoolAppends;
    return spooled > 0 ? "spooling" : "retrying";
  }

  #setConnected(connected: boolean, why: Record<string, unknown> = {}): void {
    this.#connected = connected;
    this.#noteState(why);
  }

  /** Logs the state when it changed since the last time it was logged (start included). */
  #noteState(why: Record<string, unknown> = {}): void {
    const to = this.state;
    if (to === this.#loggedState) return;
    const fields = { from: this.#loggedState ?? "starting", to, ...why, ...this.#ledger() };
    this.#loggedState = to;
    if (to === "connected") log.info("ClickHouse sink state", fields);
    else log.warn("ClickHouse sink state", fields);
  }

  #warn(key: string, msg: string, fields: Record<string, unknown>): void {
    noteDenied(fields.err);
    const suppressed = this.#errLog.allow(key);
    if (suppressed >= 0) log.warn(msg, { ...fields, suppressed });
  }

  /** Runs the pump unless it runs or a retry is scheduled. */
  #kick(): void {
    if (this.#pump !== undefined) {
      this.#again = true;
      this.#wake?.();
      return;
    }
    if (this.#retryTimer !== undefined) return;
    this.#pump = this.#run().catch((err) => {
      // A bug, not an I/O failure (those are outcomes): logged, and the sink keeps going.
      log.error("ClickHouse sink pump failed", { err });
      this.#failed();
    }).finally(() => {
      this.#pump = undefined;
      if (this.#again && this.#retryTimer === undefined) {
        this.#again = false;
        this.#kick();
      }
    });
  }

  async #idle(): Promise<void> {
    while (this.#pump !== undefined) await this.#pump;
    await this.#appendChain;
  }

  async #run(): Promise<void> {
    this.#again = false;
    for (;;) {
      if (this.#stopExpired) return this.#failed(); // what waits stays for the next start
      if (this.#server === undefined && !(await this.#prepare())) return this.#failed();
      // Oldest first: memory batches are older than anything spooled by this process.
      if (this.#memory.length > 0) {
        if (!(await this.#sendMemory())) return this.#failed();
        continue;
      }
      await this.#appendChain;
      const spool = this.#spool;
      if (spool === undefined || this.#stopping) break;
      const lease = await spool.peek({ markInflight: true });
      if (lease === undefined) break;
      if (this.#server === undefined) {
        // A reload replaced the connection meanwhile: prepare the new one first.
        spool.release(lease);
        continue;
      }
      const batch: Batch = {
        id: lease.id,
        records: lease.records,
        flags: lease.flags,
        body: lease.payload,
      };
      const took = await this.#send(batch);
      if (took === undefined) {
        spool.release(lease, (batch.flags & FLAG_OUTCOME_UNKNOWN) !== 0);
        return this.#failed();
      }
      // Counted inserted as it leaves the spool's counters, never in both at once (`inSpool`).
      await spool.ack(lease, () => this.#countInserted(batch, lease.recovered, took));
    }
    this.#backoffMs = this.#opts.backoffInitialMs;
    this.#setConnected(true);
  }

  /**
   * Sends the memory batches, keeping up to `maxInFlight` (2) inserts in flight, so the round
   * trip and commit of one overlap the next one's transfer and parsing; a batch may then land
   * before an older one, as a retried batch lands after newer ones. Batches being sent leave
   * the queue, so a spill (the spool opening) cannot copy them into the spool too. After a
   * failure nothing new starts; once the other insert has ended, the failed batches go back to
   * the front in their order. False when one failed.
   */
  async #sendMemory(): Promise<boolean> {
    const flying = new Map<number, Promise<[number, Batch, boolean]>>();
    const failed: [number, Batch][] = [];
    let seq = 0;
    for (;;) {
      while (
        failed.length === 0 && flying.size < this.#opts.maxInFlight && this.#memory.length > 0 &&
        this.#server !== undefined && // (a reload may have dropped it: prepare first)
        !this.#stopExpired
      ) {
        const b = this.#memory.shift()!;
        const n = seq++;
        flying.set(
          n,
          this.#send(b).then((took): [number, Batch, boolean] => {
            if (took !== undefined) this.#countInserted(b, false, took);
            return [n, b, took !== undefined];
          }),
        );
      }
      if (flying.size === 0) break;
      // With a free slot, a batch sealed meanwhile (its #kick wakes this) starts at once.
      const woken = flying.size < this.#opts.maxInFlight && failed.length === 0
        ? new Promise<undefined>((res) => this.#wake = () => res(undefined))
        : undefined;
      const done = await Promise.race(woken ? [...flying.values(), woken] : flying.values());
      this.#wake = undefined;
      if (done === undefined) continue;
      const [n, b, ok] = done;
      flying.delete(n);
      if (ok) this.#memoryRecords -= b.records;
      else failed.push([n, b]);
    }
    this.#memory.unshift(...failed.sort((x, y) => x[0] - y[0]).map(([, b]) => b));
    return failed.length === 0;
  }

  /**
   * `b` was inserted by `server`: its rows are counted (by the caller, in the step they leave
   * memory or the spool).
   */
  #countInserted(b: Batch, recovered: boolean, server: ServerInfo): void {
    this.#inserted += b.records;
    this.#batchesInserted++;
    if (recovered) this.#recoveredInserted += b.records;
    if (b.flags & FLAG_OUTCOME_UNKNOWN) {
      if (server.dedupExact) this.#retriedDeduplicated += b.records;
      else this.#possiblyDuplicated += b.records;
    }
  }

  /**
   * One insert; on an unknown outcome the batch is flagged for its retries. Resolves the server
   * that took it, undefined when it failed; the caller counts it (`#countInserted`).
   */
  async #send(b: Batch): Promise<ServerInfo | undefined> {
    const server = this.#server!;
    const ctl = new AbortController();
    this.#inflight.add(ctl);
    // RowBinary rows hold the 50 columns: a table's `egressNodeName` then takes its default by
    // being left out of the list, as the JSON rows of older spooled batches left it out.
    const format: InsertFormat = b.flags & FLAG_ROW_BINARY ? "RowBinary" : "JSONEachRow";
    const r = await this.#conn!.insert(b.body, {
      format,
      columns: format === "RowBinary" ? INSERT_COLUMNS : server.columns,
      token: server.dedupToken ? b.id : undefined,
      signal: ctl.signal,
    });
    this.#inflight.delete(ctl);
    if (r.ok) return server;
    this.#insertErrors++;
    if (r.unknown) b.flags |= FLAG_OUTCOME_UNKNOWN;
    this.#server = undefined; // prepare again before the next attempt
    this.#warn("insert", "ClickHouse insert failed", {
      err: r.error,
      records: b.records,
      outcomeUnknown: r.unknown,
    });
    return undefined;
  }

  /** (Re)connects when needed and checks the server; false when it is not usable. */
  async #prepare(): Promise<boolean> {
    const key = settingsKey(this.#config);
    try {
      if (this.#conn === undefined || key !== this.#connKey) {
        const old = this.#conn;
        this.#conn = undefined;
        await old?.close().catch(() => {});
        const c = this.#config;
        this.#conn = this.#connect({
          url: parseDatabaseUrl(c.databaseURL).httpUrl,
          database: c.database,
          username: this.#username,
          password: this.#password,
          compress: c.compress,
          insecureSkipVerify: c.tls.insecureSkipVerify,
          // Re-read on every new client (so a reload sees a rotated CA), never blocking.
          caPem: c.tls.caCert ? await this.#readCaText() : undefined,
          requestTimeoutMs: this.#opts.requestTimeoutMs,
        });
        this.#connKey = key;
        this.#reconnects++;
      }
      const ctl = new AbortController();
      this.#inflight.add(ctl);
      try {
        this.#server = await this.#conn.prepare(ctl.signal);
      } finally {
        this.#inflight.delete(ctl);
      }
      log.info("ClickHouse ready", {
        version: this.#server.version,
        engine: this.#server.engine,
        columns: this.#server.columns.length,
        dedupToken: this.#server.dedupToken,
        dedupExact: this.#server.dedupExact,
      });
      return true;
    } catch (err) {
      this.#insertErrors++;
      this.#warn("prepare", "ClickHouse not reachable or not ready", {
        err,
        url: parseDatabaseUrl(this.#config.databaseURL).httpUrl,
      });
      return false;
    }
  }

  async #readCaText(): Promise<string> {
    try {
      return await this.#readCa();
    } catch (err) {
      throw new Error(`error when reading custom CA certificate: ${(err as Error).message}`);
    }
  }

  /** After a failure: state, backoff, next attempt. */
  #failed(): void {
    this.#spillMemory();
    this.#setConnected(false, { retryInMs: this.#backoffMs });
    if (this.#stopping) return;
    const delay = this.#backoffMs;
    this.#backoffMs = Math.min(this.#backoffMs * 2, this.#opts.backoffMaxMs);
    this.#retryTimer = this.#clock.setTimer(delay, () => {
      this.#retryTimer = undefined;
      this.#retries++;
      this.#kick();
    }, { unref: true });
  }
}
