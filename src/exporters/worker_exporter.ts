/**
 * Runs a sink in its own Deno Worker started with exactly the permissions its component
 * computed from its configuration, so a bug or a compromised dependency in one sink cannot read
 * the TLS keys, write outside its directory or reach another host. To the export loop it is an
 * ordinary {@linkcode Exporter}: `addRecord` appends the flow to a binary batch that is
 * posted to the worker at the end of the current task (or when full).
 *
 * The ledger stays exact across the thread boundary: every record taken is, at any time,
 * exported, dropped, filtered, buffered (here, in flight, or inside the sink) or unacknowledged
 * (written by a network sink, not proven delivered; or left in a spool, below), from the
 * counters the worker sends with every batch acknowledgement and every second. A worker that
 * dies or stops answering is terminated and restarted with backoff, and the batches not yet
 * sent go to the new worker. Of the records it held, those its last counters had durably in
 * its sink's spool (`inSpool`: ClickHouse, S3) are not lost: the next worker (or process)
 * finds them there and counts them as its sink's `recovered`. They are counted `leftInSpool`,
 * a part of `unacknowledged` (handed on, their delivery no longer this ledger's to prove), and
 * only the rest is dropped (`lostInWorker`). The same holds for a worker abandoned at stop, and
 * for what a sink kept in its spool at a clean stop (it would otherwise stay buffered for good).
 *
 * Needs `--unstable-worker-options` (Deno's `deno.permissions` Worker option).
 *
 * @module
 */

import type { SectionConfig } from "../config/section.ts";
import { type Clock, type ClockTimer, systemClock } from "../clock.ts";
import { logger, logSettings, writeLogLine } from "../log.ts";
import type { ExportedFlow } from "../aggregation/record.ts";
import {
  type BatchBuffer,
  batchBuffer,
  batchCount,
  BatchWriter,
  type FlowBatch,
  readFlowAt,
} from "./batch.ts";
import type { ExporterComponent, ExporterContext, ExporterPermissions } from "./component.ts";
import type { Exporter, ExporterStats } from "./exporter.ts";
import { queryableHost } from "../permission_entry.ts";
import type { ThreadMemory } from "../thread_memory.ts";
import {
  emptyWorkerStats,
  type FromWorker,
  type ToWorker,
  type WorkerStats,
} from "./worker_protocol.ts";

const log = logger("exporter-worker");

/** How often a worker's last sign of life is checked, ms. */
const HEARTBEAT_CHECK_MS = 1000;

/** Tuning of {@linkcode WorkerExporter}. */
export interface WorkerExporterOptions {
  /** Flows per batch. Default 1024. */
  batchRecords?: number;
  /** Flows taken but not yet acknowledged by the worker beyond which new ones are dropped. */
  maxBufferedRecords?: number;
  /** First restart delay after a worker died; doubles up to `restartMaxMs`. Default 1000. */
  restartInitialMs?: number;
  /** Restart delay cap. Default 30000. */
  restartMaxMs?: number;
  /** A worker silent for this long (it reports every second) is declared dead. Default 15 s. */
  heartbeatTimeoutMs?: number;
  /** Time source of the heartbeat, start timeout and restart backoff; default system clock. */
  clock?: Clock;
}

/** Counters of a sink running in a worker. */
export interface WorkerExporterStats extends ExporterStats {
  /**
   * Records taken and not yet exported, dropped, filtered or unacknowledged (batches, in
   * flight, queued in the sink, in its spool).
   */
  buffered: number;
  /**
   * Records the sink wrote and cannot prove delivered: its own `unacknowledged` (a stream
   * sink's), plus {@linkcode leftInSpool}.
   */
  unacknowledged: number;
  /**
   * Gauge: of `buffered`, records the running worker's last counters had durably in its sink's
   * spool (the sink's `inSpool`): kept, not lost, should the worker die.
   */
  inSpool: number;
  /**
   * Records a worker that ended (died, stopped answering, was abandoned or stopped) left in its
   * sink's durable spool, as its last counters had them, counted in `unacknowledged` and never
   * in `dropped`.
   *
   * Why `unacknowledged` and not a ledger term of its own: like a stream sink's written records,
   * they have left this ledger's hands with their delivery unproven, and the ledger identity
   * (`received = exported + dropped + filtered + buffered + unacknowledged`, checked on
   * `/metrics`) stays as it was. Their fate is counted by the sink that opens the spool next
   * (a restarted worker, the next process): its `recovered`, then `recoveredInserted` (or
   * `recoveredUploaded`) or `recoveredDropped`; never again in this exporter's `exported` or
   * `dropped`. Only what the worker reported counts: a batch delivered from the spool after its
   * last report is counted here (and not recovered, its cursor moved), one spooled after it in
   * `lostInWorker` (and recovered too).
   */
  leftInSpool: number;
  /** Records the sink chose not to export (flow log filters). */
  filtered: number;
  /** Operations the sink attempted outside its permissions (`NotCapable`). */
  permissionDenied: number;
  /** Errors that escaped the sink inside its worker. */
  uncaught: number;
  /** Workers started after the first one (after a death or hang). */
  workerRestarts: number;
  /**
   * Records held by a worker that died (or was abandoned at stop) and not in its spool, counted
   * as dropped.
   */
  lostInWorker: number;
  /** Records dropped because `maxBufferedRecords` were outstanding. */
  overflowDropped: number;
  /** The sink's own further counters (reconnects, rotations, …), from its worker. */
  sink: Record<string, number | boolean>;
}

/** The Deno Worker permission descriptor for `p`: everything not listed is denied. */
export function workerPermissions(p: ExporterPermissions): Deno.PermissionOptionsObject {
  const list = (a: string[]): string[] | false => a.length === 0 ? false : a;
  return {
    net: list(p.net),
    read: list(p.read),
    write: list(p.write),
    env: list(p.env),
    sys: p.sys === true,
    run: false,
    ffi: false,
    import: false,
  };
}

/**
 * True when a worker module is a local file that does not exist: a single-file build
 * (`deno bundle`) has no module next to it, and its sinks then run in process.
 */
export function workerModuleMissing(url: URL): boolean {
  if (url.protocol !== "file:") return false;
  try {
    Deno.statSync(url);
    return false;
  } catch (err) {
    return err instanceof Deno.errors.NotFound;
  }
}

/**
 * The permissions of `p` the process itself lacks, as `deno run` flags. A worker can only be
 * given what its parent has, so these make its start fail; naming them beats Deno's generic
 * "can't escalate" error.
 */
export function missingPermissions(p: ExporterPermissions): string[] {
  const missing: string[] = [];
  const check = (d: Deno.PermissionDescriptor, flag: string) => {
    if (Deno.permissions.querySync(d).state !== "granted") missing.push(flag);
  };
  for (const host of p.net) {
    check({ name: "net", host: queryableHost(host) }, `--allow-net=${host}`);
  }
  for (const path of p.read) check({ name: "read", path }, `--allow-read=${path}`);
  for (const path of p.write) check({ name: "write", path }, `--allow-write=${path}`);
  for (const variable of p.env) check({ name: "env", variable }, `--allow-env=${variable}`);
  if (p.sys === true) {
    check({ name: "sys", kind: "ca" } as Deno.PermissionDescriptor, "--allow-sys");
  }
  return missing;
}

/**
 * A sink's worker that did not answer its start within the bound (`heartbeatTimeoutMs`): on a
 * machine too busy to load it in time, so the process tries the sink again later.
 */
export class WorkerStartTimeout extends Error {
  /** `exporter` is the sink's name, `ms` the bound it passed. */
  constructor(exporter: string, ms: number) {
    super(`exporter ${exporter}: worker did not start within ${ms} ms`);
    this.name = "WorkerStartTimeout";
  }
}

/**
 * A sink that cannot start because the process lacks permissions it needs ({@linkcode flags},
 * as `deno run` flags): a worker can only be given what its parent has.
 */
export class MissingPermissionsError extends Error {
  /** The missing permissions as `deno run` flags (`--allow-net=host:port`, ...). */
  readonly flags: readonly string[];

  /** `exporter` is the sink's name, `flags` what the process lacks. */
  constructor(exporter: string, flags: readonly string[]) {
    super(
      `exporter ${exporter} needs ${flags.join(" ")}, which this process was not given ` +
        "(print the flags a configuration needs: deno task permissions --config FILE)",
    );
    this.name = "MissingPermissionsError";
    this.flags = flags;
  }
}

type Waiter = (stats: WorkerStats | undefined) => void;

/** A sink in a permission-scoped worker. */
export class WorkerExporter<C extends SectionConfig = SectionConfig> implements Exporter {
  /** Exporter name in logs and metrics (the component's). */
  readonly name: string;
  /** The batch takes the key's addresses from the core's words, never from their text. */
  readonly addressWordsOnly = true;
  readonly #component: ExporterComponent<string, C>;
  #config: C;
  readonly #ctx: ExporterContext;
  readonly #opts: Required<WorkerExporterOptions>;
  #worker: Worker | undefined;
  #ready = false;
  #batch: BatchWriter;
  #postQueued = false;
  /** Finished batches waiting for a (re)started worker. */
  readonly #queue: BatchBuffer[] = [];
  #queuedRecords = 0;
  /** seq → flows of batches sent to the current worker and not yet acknowledged. */
  readonly #inFlight = new Map<number, number>();
  /** Sum of {@linkcode #inFlight}'s values, kept with it (read on every addRecord). */
  #inFlightRecords = 0;
  #seq = 0;
  #nextId = 0;
  readonly #waiters = new Map<number, Waiter>();
  /** Flows sent to the current worker (acknowledged or not). */
  #sentToWorker = 0;
  #w: WorkerStats = emptyWorkerStats();
  /** Counters of workers that are gone, folded together. */
  #past = emptyWorkerStats();
  #received = 0;
  #overflow = 0;
  #lost = 0;
  /** See {@linkcode WorkerExporterStats.leftInSpool}. */
  #leftInSpool = 0;
  #restarts = 0;
  #restartDelayMs: number;
  #restartTimer: ClockTimer | undefined;
  #heartbeat: ClockTimer | undefined;
  #lastHeard = 0;
  /** When the heartbeat was last checked (see {@linkcode WorkerExporter.#checkHeartbeat}). */
  #lastCheck = 0;
  #skippedCheck = false;
  #stopping = false;

  /** Prepares the proxy; the worker starts in {@linkcode start}. */
  constructor(
    component: ExporterComponent<string, C>,
    config: C,
    ctx: ExporterContext,
    options: WorkerExporterOptions = {},
  ) {
    if (component.workerModule === undefined) {
      throw new Error(`exporter ${component.name} has no worker module`);
    }
    this.name = component.name;
    this.#component = component;
    this.#config = config;
    this.#ctx = ctx;
    this.#opts = {
      batchRecords: options.batchRecords ?? 1024,
      maxBufferedRecords: options.maxBufferedRecords ?? 200_000,
      restartInitialMs: options.restartInitialMs ?? 1000,
      restartMaxMs: options.restartMaxMs ?? 30_000,
      heartbeatTimeoutMs: options.heartbeatTimeoutMs ?? 15_000,
      clock: options.clock ?? systemClock,
    };
    this.#restartDelayMs = this.#opts.restartInitialMs;
    this.#batch = new BatchWriter(this.#opts.batchRecords);
  }

  /** The permissions the worker runs with. */
  get permissions(): ExporterPermissions {
    return this.#component.permissions(this.#config);
  }

  /** Starts the worker and the sink in it; rejects when the sink cannot start. */
  async start(): Promise<void> {
    await this.#spawn();
    this.#armHeartbeat();
  }

  #armHeartbeat(): void {
    this.#lastCheck = this.#opts.clock.nowMs();
    this.#heartbeat = this.#opts.clock.setTimer(HEARTBEAT_CHECK_MS, () => {
      this.#checkHeartbeat();
      if (!this.#stopping) this.#armHeartbeat();
    }, { unref: true });
  }

  /** Appends the flow to the current batch. Never throws, never blocks. */
  addRecord(flow: ExportedFlow): void {
    this.#received++;
    if (this.#outstanding() >= this.#opts.maxBufferedRecords) {
      this.#overflow++;
      return;
    }
    this.#batch.add(flow);
    if (this.#batch.full) this.#post();
    else if (!this.#postQueued) {
      this.#postQueued = true;
      queueMicrotask(() => {
        this.#postQueued = false;
        this.#post();
      });
    }
  }

  /**
   * Takes every flow of a batch that is already in the workers' row format (an aggregation
   * shard's): the batch is copied and queued whole, after the flows taken one by one before it,
   * with no flow decoded or re-encoded on this thread. When fewer than its rows fit under
   * `maxBufferedRecords`, the rows that fit are decoded and taken one by one
   * ({@linkcode addRecord}) and the rest counted as overflow, as `addRecord` would count them,
   * without decoding them. Never throws.
   */
  addBatch(batch: FlowBatch): void {
    const n = batch.count;
    if (n === 0) return;
    const room = this.#opts.maxBufferedRecords - this.#outstanding();
    if (n > room) {
      const fit = Math.max(0, room);
      for (let r = 0; r < fit; r++) this.addRecord(readFlowAt(batch, r));
      this.#received += n - fit;
      this.#overflow += n - fit;
      return;
    }
    this.#received += n;
    this.#finishBatch();
    // Shared with this thread and the other sinks, not copied (batch.ts).
    this.#queue.push(batchBuffer(batch));
    this.#queuedRecords += n;
    this.#post();
  }

  /** Resolves once every record taken so far has been handed to the sink and it flushed. */
  async flush(): Promise<void> {
    this.#post();
    await this.#request((id) => ({ t: "flush", id }));
  }

  /** Applies a changed section in place (keys the component declares live). */
  async update(config: unknown): Promise<void> {
    this.#config = config as C;
    this.#post();
    await this.#request((id) => ({ t: "update", id, config }));
  }

  /** Sends what is left, stops the sink (its final flush) and terminates the worker. */
  async stop(): Promise<void> {
    this.#stopping = true;
    this.#heartbeat?.cancel();
    this.#restartTimer?.cancel();
    this.#post();
    if (this.#ready) {
      const last = await this.#request((id) => ({ t: "stop", id }));
      // The sink stopped: what it kept in its spool is the next start's (its `recovered`).
      // Undefined: the worker was terminated meanwhile (abandoned), which counted it already.
      if (last !== undefined) this.#leaveSpool(last);
    } else if (this.#queuedRecords > 0) {
      // No worker to take them (it died and its restart is pending): lost, counted.
      this.#lost += this.#queuedRecords;
      log.error("exporter stopped while its worker was down: records dropped", {
        exporter: this.name,
        records: this.#queuedRecords,
      });
      this.#queue.length = 0;
      this.#queuedRecords = 0;
    }
    this.#terminate("stopped");
  }

  /**
   * See {@linkcode Exporter.abandon}: the worker is terminated, what it held counted lost except
   * what its last counters had in its spool ({@linkcode WorkerExporterStats.leftInSpool}).
   */
  abandon(reason: string): void {
    this.#stopping = true;
    if (this.#worker !== undefined) this.#died(reason);
  }

  /** The worker thread's V8 memory as of its last counters; undefined while none runs. */
  threadMemory(): ThreadMemory | undefined {
    return this.#worker === undefined ? undefined : this.#w.memory;
  }

  /**
   * The ledger: received = exported + dropped + filtered + buffered + unacknowledged, where
   * `unacknowledged` includes `leftInSpool`.
   */
  stats(): WorkerExporterStats {
    const exported = this.#past.exported + this.#w.exported;
    const filtered = this.#past.filtered + this.#w.filtered;
    const dropped = this.#past.dropped + this.#w.dropped + this.#overflow + this.#lost;
    const unacknowledged = this.#past.unacknowledged + this.#w.unacknowledged +
      this.#leftInSpool;
    return {
      received: this.#received,
      exported,
      dropped,
      errors: this.#past.errors + this.#w.errors,
      buffered: this.#received - exported - dropped - filtered - unacknowledged,
      unacknowledged,
      inSpool: this.#w.inSpool,
      leftInSpool: this.#leftInSpool,
      filtered,
      permissionDenied: this.#past.permissionDenied + this.#w.permissionDenied,
      uncaught: this.#past.uncaught + this.#w.uncaught,
      workerRestarts: this.#restarts,
      lostInWorker: this.#lost,
      overflowDropped: this.#overflow,
      sink: { ...this.#w.extra },
    };
  }

  #outstanding(): number {
    return this.#batch.count + this.#queuedRecords + this.#inFlightRecords;
  }

  /** Queues the flows taken one by one so far as one batch. */
  #finishBatch(): void {
    if (this.#batch.count > 0) {
      const count = this.#batch.count;
      this.#queue.push(this.#batch.finish());
      this.#queuedRecords += count;
    }
  }

  /** Finishes the current batch and sends it (or queues it while no worker is ready). */
  #post(): void {
    this.#finishBatch();
    if (!this.#ready || this.#worker === undefined) return;
    while (this.#queue.length > 0) {
      const buf = this.#queue.shift()!;
      const count = batchCount(buf);
      this.#queuedRecords -= count;
      const seq = ++this.#seq;
      this.#inFlight.set(seq, count);
      this.#inFlightRecords += count;
      this.#sentToWorker += count;
      // Shared, not transferred: this is the ingest thread (batch.ts).
      this.#send({ t: "batch", seq, buf });
    }
  }

  #send(m: ToWorker): void {
    this.#worker?.postMessage(m);
  }

  #request(make: (id: number) => ToWorker): Promise<WorkerStats | undefined> {
    if (!this.#ready) return Promise.resolve(undefined);
    const id = ++this.#nextId;
    return new Promise<WorkerStats | undefined>((resolve) => {
      this.#waiters.set(id, resolve);
      this.#send(make(id));
    });
  }

  #spawn(): Promise<void> {
    const permissions = this.#component.permissions(this.#config);
    const missing = missingPermissions(permissions);
    if (missing.length > 0) return Promise.reject(new MissingPermissionsError(this.name, missing));
    const worker = new Worker(this.#component.workerModule!.href, {
      type: "module",
      name: `exporter-${this.name}`,
      deno: { permissions: workerPermissions(permissions) },
    } as WorkerOptions);
    this.#worker = worker;
    this.#w = emptyWorkerStats();
    this.#sentToWorker = 0;
    this.#lastHeard = this.#opts.clock.nowMs();
    worker.postMessage(
      {
        t: "init",
        config: this.#config,
        ctx: this.#ctx,
        log: logSettings(),
      } satisfies ToWorker,
    );
    return new Promise<void>((resolve, reject) => {
      let settled = false;
      // A worker that never answers (stuck loading or starting its sink) fails the start.
      const startTimer = this.#opts.clock.setTimer(this.#opts.heartbeatTimeoutMs, () => {
        if (settled) return;
        settled = true;
        this.#terminate("start timed out");
        reject(new WorkerStartTimeout(this.name, this.#opts.heartbeatTimeoutMs));
      });
      worker.onmessage = (e: MessageEvent<FromWorker>) => {
        // Log lines of any worker, even a replaced one, reach the process's log output.
        if (e.data.t === "log") return writeLogLine(e.data.line, e.data.level);
        if (worker !== this.#worker) return;
        this.#lastHeard = this.#opts.clock.nowMs();
        const m = e.data;
        switch (m.t) {
          case "ready":
            this.#ready = true;
            settled = true;
            startTimer.cancel();
            log.info("exporter worker started", { exporter: this.name, ...flat(permissions) });
            resolve();
            this.#post();
            return;
          case "initError":
            settled = true;
            startTimer.cancel();
            this.#terminate("init failed");
            reject(new Error(`exporter ${this.name}: ${m.message}`));
            return;
          case "ack":
            this.#inFlightRecords -= this.#inFlight.get(m.seq) ?? 0;
            this.#inFlight.delete(m.seq);
            this.#w = m.stats;
            this.#restartDelayMs = this.#opts.restartInitialMs;
            return;
          case "stats":
            this.#w = m.stats;
            return;
          case "done": {
            this.#w = m.stats;
            const waiter = this.#waiters.get(m.id);
            this.#waiters.delete(m.id);
            waiter?.(m.stats);
            return;
          }
        }
      };
      worker.onerror = (e: ErrorEvent) => {
        e.preventDefault();
        if (worker !== this.#worker) return;
        log.error("exporter worker failed", { exporter: this.name, err: e.message });
        if (!settled) {
          settled = true;
          startTimer.cancel();
          this.#terminate("start failed");
          reject(new Error(`exporter ${this.name}: worker failed to start: ${e.message}`));
          return;
        }
        this.#died(e.message);
      };
    });
  }

  #checkHeartbeat(): void {
    const now = this.#opts.clock.nowMs();
    const late = now - this.#lastCheck > HEARTBEAT_CHECK_MS * 2;
    this.#lastCheck = now;
    if (!this.#ready || this.#stopping) return;
    // A check that itself ran late means this thread was held (a long parse, a GC pause): the
    // worker's heartbeats of that time wait, unread, behind it. Judged at the next check (one
    // skip in a row at most: a thread held again and again still judges its workers).
    const skip = late && !this.#skippedCheck;
    this.#skippedCheck = skip;
    if (skip) return;
    if (now - this.#lastHeard > this.#opts.heartbeatTimeoutMs) {
      this.#died(`no answer for ${this.#opts.heartbeatTimeoutMs} ms`);
    }
  }

  /**
   * The current worker ended: the records its last counters `w` had in its sink's spool are
   * left there for the next sink to open it, counted {@linkcode WorkerExporterStats.leftInSpool}
   * once (the gauge is cleared), and at most what the worker held by those same counters.
   * Returns them and the records it held besides them (lost, when it died).
   */
  #leaveSpool(w: WorkerStats): { left: number; rest: number } {
    const accounted = w.exported + w.dropped + w.filtered + w.unacknowledged;
    const held = Math.max(0, this.#sentToWorker - accounted);
    const left = Math.min(held, Math.max(0, w.inSpool));
    this.#leftInSpool += left;
    this.#w = { ...w, inSpool: 0 };
    return { left, rest: held - left };
  }

  /** The worker is gone: count what it held, fold its counters, restart it later. */
  #died(reason: string): void {
    const w = this.#w;
    const { left, rest: lost } = this.#leaveSpool(w);
    this.#lost += lost;
    this.#past = addStats(this.#past, w);
    this.#w = emptyWorkerStats();
    this.#inFlight.clear();
    this.#inFlightRecords = 0;
    this.#terminate(reason);
    log.error(
      "exporter worker died; the records it held and had not spooled are counted as dropped",
      {
        exporter: this.name,
        reason,
        lost,
        leftInSpool: left,
        ...(this.#stopping ? {} : { restartInMs: this.#restartDelayMs }),
      },
    );
    if (this.#stopping) return;
    this.#restartTimer = this.#opts.clock.setTimer(this.#restartDelayMs, () => this.#restart());
    this.#restartDelayMs = Math.min(this.#restartDelayMs * 2, this.#opts.restartMaxMs);
  }

  async #restart(): Promise<void> {
    this.#restartTimer = undefined;
    if (this.#stopping) return;
    this.#restarts++;
    try {
      await this.#spawn();
    } catch (err) {
      log.error("cannot restart exporter worker", { exporter: this.name, err });
      this.#restartTimer = this.#opts.clock.setTimer(this.#restartDelayMs, () => this.#restart());
      this.#restartDelayMs = Math.min(this.#restartDelayMs * 2, this.#opts.restartMaxMs);
    }
  }

  #terminate(why: string): void {
    this.#ready = false;
    const w = this.#worker;
    this.#worker = undefined;
    w?.terminate();
    // Nobody answers the requests of a terminated worker: release their callers.
    for (const waiter of this.#waiters.values()) waiter(undefined);
    this.#waiters.clear();
    log.debug("exporter worker terminated", { exporter: this.name, why });
  }
}

function addStats(a: WorkerStats, b: WorkerStats): WorkerStats {
  return {
    received: a.received + b.received,
    exported: a.exported + b.exported,
    dropped: a.dropped + b.dropped,
    errors: a.errors + b.errors,
    permissionDenied: a.permissionDenied + b.permissionDenied,
    uncaught: a.uncaught + b.uncaught,
    filtered: a.filtered + b.filtered,
    unacknowledged: a.unacknowledged + b.unacknowledged,
    // A gauge of the running worker only: what a gone one had there is in #leftInSpool.
    inSpool: 0,
    extra: b.extra,
  };
}

function flat(p: ExporterPermissions): Record<string, string> {
  return {
    net: p.net.join(",") || "-",
    read: p.read.join(",") || "-",
    write: p.write.join(",") || "-",
    env: p.env.join(",") || "-",
  };
}
