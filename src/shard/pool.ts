/**
 * The aggregation core sharded over worker threads (issue #15, item 2): `n` shard workers
 * (`worker.ts`), each owning the flows whose key hashes to it (`aggregation/sharded.ts`, whose
 * in-thread `ShardedCore` is the reference these workers are tested against). The main thread
 * decodes and routes: {@linkcode ShardPool.ingest} writes each record as a binary row
 * (`input_rows.ts`) into its shard's ring (`ring.ts`, shared memory), frames sent when full, at
 * the end of the task once one holds {@linkcode FLUSH_NOW_BYTES}, else within
 * {@linkcode FLUSH_DELAY_MS} (so a shard wakes for batches of records, not for every record of
 * a slow stream: each wake costs its thread tens of µs); every shard runs its own expiry and
 * posts its expired flows back in binary batches (`exporters/batch.ts`), which the pool hands
 * to `onBatch` (the export loop) undecoded.
 *
 * Bounds and failures:
 * - a shard's ring holds at most {@linkcode ShardPoolOptions.ringBytes}; when it is full, ingest
 *   waits for the shard (`Atomics.wait`), so a slow shard slows reading (TCP back-pressure)
 *   instead of growing a queue. A shard that makes no progress for {@linkcode STALL_MS} with its
 *   ring full is marked stalled: its records are dropped and counted (`recordsDroppedNoShard`)
 *   until its ring has room again, so the main thread never hangs on it;
 * - a shard worker that dies is reported (logged, `shardsFailed`); the flows it held are counted
 *   lost (`flowsLostWithShard`), and the records its last report did not account for and those
 *   routed to it until it is back are counted dropped (`recordsDroppedNoShard`, rejected as
 *   `shardFailed` in the core counters), so the loss ledger still balances. It is started again
 *   after a backoff (1 s doubling to 30 s; `shardRestarts`), empty, with a fresh ring.
 *
 * @module
 */

import type { AggregatedRecord, FlowInput, FlowKey } from "../aggregation/record.ts";
import { type AggregationStats, CoreCounters } from "../aggregation/counters.ts";
import { shardOf, sumStats } from "../aggregation/sharded.ts";
import { KEY_WORDS } from "../aggregation/flow_table.ts";
import { joinRecordTexts } from "../aggregation/records_json.ts";
import { logger, logSettings, RateLimitedLog, writeLogLine } from "../log.ts";
import { workerModule } from "../worker_module.ts";
import type { PodChange, PodReplicaSource } from "../k8s/pod_store.ts";
import { InputRowWriter } from "./input_rows.ts";
import { RawRowWriter, rawShardOf, RawTemplateIds } from "./raw_rows.ts";
import type { RawRecords } from "../ipfix/decoder.ts";
import type { DataRecord } from "../ipfix/types.ts";
import { type BatchBuffer, batchCount } from "../exporters/batch.ts";
import {
  type FromShard,
  type ShardReport,
  type ShardSettings,
  type ToShard,
  USAGE_WORDS,
} from "./protocol.ts";
import { ReportCell } from "./report_cell.ts";
import { createRing, RingWriter } from "./ring.ts";
import type { ThreadMemory } from "../thread_memory.ts";

const log = logger("shard-pool");

/** A shard whose full ring has not moved for this long is stalled (see the module doc). */
export const STALL_MS = 1000;

/**
 * Most a record waits in the main thread's pending frame for more (ms): at low rates a shard is
 * woken about this often instead of once per record. Nothing it holds waits on it for long (its
 * flows are exported after seconds), and a query, a reload and the stop send it at once. Was 10
 * ms: a wake costs a worker 80-200 µs of CPU on these VMs whatever it brings, which made the
 * shards the largest cost at low rates (docs/udp-ingest.md, "Wake-ups at low rates").
 */
export const FLUSH_DELAY_MS = 50;

/**
 * A pending frame of this many bytes is sent at the end of the task (high rates); a smaller one
 * waits for more, at most {@linkcode FLUSH_DELAY_MS}. When this was measured a TCP read was at
 * most 64 KiB (now 256 KiB), about 32 KiB per shard of 2: from 16 KiB each read woke each shard
 * once (3,700 wakes/s per shard at 1.2M records/s); at 128 KiB a shard woke once per 4 reads or
 * so. e2e A/B against 16 KiB with 64 KiB raw frames (now 256 KiB, `RAW_FRAME_BYTES` in
 * raw_rows.ts), CPU per record: 0.951 at 400k records/s paced (paired 0.918, 8 rounds), 0.981
 * unpaced (paired 0.936, 6 rounds; records/s 0.988, paired 1.000).
 */
export const FLUSH_NOW_BYTES = 128 * 1024;

/** Options of {@linkcode ShardPool}. */
export interface ShardPoolOptions {
  /** Number of shard workers (>= 1). */
  shards: number;
  /** The cores' settings. */
  settings: ShardSettings;
  /**
   * Receives every expired flow of every shard, in each shard's export order, as the shards'
   * batches (`exporters/batch.ts`: `openBatch`, `readBatch`); the shard never writes a posted
   * batch again, so the receiver may keep and share it.
   */
  onBatch: (buf: BatchBuffer) => void;
  /** Records per frame sent to a shard (default 256). */
  frameRecords?: number;
  /** Bytes of each shard's ring (default 4 MiB: about 24k records). */
  ringBytes?: number;
  /**
   * With a cluster: the Pod store, replicated into every shard (which fill Pod metadata and
   * labels at export from their copy).
   */
  pods?: PodReplicaSource;
  /** The shard worker's module (tests); default the product's (`worker.ts`). */
  workerModule?: URL;
  /** First wait before a dead shard is started again (default 1 s; doubles up to 30 s). */
  restartBackoffMs?: number;
}

/** Counters of the pool itself (the shards' own are in {@linkcode ShardPool.stats}). */
export interface ShardPoolStats {
  /** Shard workers that died. */
  shardsFailed: number;
  /** Flows a dead shard held when it died (their deltas are lost). */
  flowsLostWithShard: number;
  /** Records routed to a dead or stalled shard (or lost with a dead one), dropped. */
  recordsDroppedNoShard: number;
  /** Times ingest waited for a shard whose ring was full. */
  ingestWaits: number;
  /** Times a shard was marked stalled. */
  shardStalls: number;
  /** Shard workers started again after dying. */
  shardRestarts: number;
  /**
   * String values the shards' decoders cut to `limits.maxStringBytes` (the collector counts
   * none of them: in a sharded process it does not decode).
   */
  stringsTruncated: number;
}

/** One shard; its worker, ring and writers are replaced when it is started again. */
interface Shard {
  readonly index: number;
  worker: Worker;
  ring: RingWriter;
  /** Decoded records (in-process feeds, tests). */
  rows: InputRowWriter;
  /** Undecoded records (the collector's, see {@linkcode ShardPool.ingestRaw}). */
  raw: RawRowWriter;
  /** Workers started for this shard before the current one. */
  generation: number;
  /** Monotonic ms when the current worker started. */
  startedMs: number;
  /** Wait before the next start after a death. */
  backoffMs: number;
  restartTimer: ReturnType<typeof setTimeout> | undefined;
  /** Records written to its ring (or pending in its frame). */
  sentRecords: number;
  /** Flows its final flush (the stop's) has handed over so far (`FromShard` `final`). */
  finalFlows: number;
  /** See the module doc. */
  stalled: boolean;
  /**
   * Its counters as its worker last wrote them (`report_cell.ts`; the final ones once it
   * stopped); undefined once retired with a dead worker, until the next one starts.
   */
  cell: ReportCell | undefined;
  dead: boolean;
  ready: PromiseWithResolvers<void>;
}

/** A shard's page in a query round: records or their texts; {@linkcode NO_PAGE}: none given. */
interface ShardPage {
  records: readonly (AggregatedRecord | string)[];
  /** Where its next page starts; -1: done. */
  next: number;
}

/** The page of a shard that died or did not answer in time: nothing, and no more. */
const NO_PAGE: ShardPage = { records: [], next: -1 };

/** See the module doc. */
export class ShardPool {
  readonly #opts: ShardPoolOptions;
  readonly #shards: Shard[] = [];
  readonly #usage: Float64Array;
  readonly #scratch = new Uint32Array(KEY_WORDS);
  readonly #tids = new RawTemplateIds();
  readonly #decoded: DataRecord[] = [];
  /** Query rounds waiting for their shards' pages, by id (`#round`). */
  readonly #queries = new Map<
    number,
    { pages: Map<Shard, ShardPage | undefined>; done: () => void }
  >();
  /** Pending stop requests by id, with the shard each waits on. */
  readonly #stops = new Map<number, { shard: Shard; done: () => void }>();
  #nextId = 1;
  #flushQueued = false;
  #flushTimer: ReturnType<typeof setTimeout> | undefined;
  #stopping = false;
  /** stop() has ended: the workers are gone (a query answers nothing at once). */
  #stopped = false;
  /** The core settings in force (a restarted shard starts with them). */
  #settings: ShardSettings;
  readonly #usageSab: SharedArrayBuffer;
  /** The process's live flows, counted atomically by the shards (`maxFlows`). */
  readonly #flowsSab = new SharedArrayBuffer(4);
  /** Last counters of the shard workers that died (their totals stay in the sums). */
  readonly #retired: AggregationStats[] = [];
  #retiredTruncated = 0;
  /** Records of {@linkcode ingest} with a value that does not fit its field, rejected. */
  #badValues = 0;
  readonly #badValueLog = new RateLimitedLog(10_000);
  readonly #counters: Omit<ShardPoolStats, "stringsTruncated"> = {
    shardsFailed: 0,
    flowsLostWithShard: 0,
    recordsDroppedNoShard: 0,
    ingestWaits: 0,
    shardStalls: 0,
    shardRestarts: 0,
  };

  /** Starts the shard workers; await {@linkcode ready} before the first records. */
  constructor(opts: ShardPoolOptions) {
    const n = opts.shards;
    if (!Number.isInteger(n) || n < 1) throw new RangeError(`shards: ${n}: must be >= 1`);
    this.#opts = opts;
    this.#settings = opts.settings;
    const usage = new SharedArrayBuffer(n * USAGE_WORDS * 8);
    this.#usage = new Float64Array(usage);
    // The Pod store's changes go to every shard once per task, after the seed in its init.
    let changes: PodChange[] = [];
    const seed = opts.pods?.replicate((c) => {
      if (changes.length === 0) {
        queueMicrotask(() => {
          const batch = changes;
          changes = [];
          for (const s of this.#shards) {
            if (!s.dead) s.worker.postMessage({ t: "pods", changes: batch } satisfies ToShard);
          }
        });
      }
      changes.push(c);
    });
    this.#usageSab = usage;
    for (let index = 0; index < n; index++) {
      const shard = { index, generation: -1, backoffMs: opts.restartBackoffMs ?? 1000 } as Shard;
      this.#start(shard, seed);
      this.#shards.push(shard);
    }
  }

  /** Starts (again) the worker of a shard, with a fresh ring and writers. */
  #start(shard: Shard, pods: PodChange[] | undefined): void {
    const opts = this.#opts;
    const worker = new Worker((opts.workerModule ?? workerModule("shard")).href, {
      type: "module",
      name: `shard-${shard.index}`,
      deno: { permissions: "none" },
    } as WorkerOptions);
    const sab = createRing(opts.ringBytes ?? 4 << 20);
    const ring = new RingWriter(sab);
    const report = ReportCell.create();
    Object.assign(shard, {
      worker,
      ring,
      rows: new InputRowWriter(ring, { maxRecords: opts.frameRecords ?? 256 }),
      raw: new RawRowWriter(ring, this.#tids),
      generation: shard.generation + 1,
      startedMs: performance.now(),
      restartTimer: undefined,
      sentRecords: 0,
      finalFlows: 0,
      stalled: false,
      cell: new ReportCell(report),
      dead: false,
      ready: Promise.withResolvers<void>(),
    });
    // A first start's failure is the caller's (ready() rejects); later ones are logged.
    if (shard.generation > 0) shard.ready.promise.catch(() => {});
    worker.onmessage = (e: MessageEvent<FromShard>) => {
      if (shard.worker === worker) this.#onMessage(shard, e.data);
    };
    worker.onerror = (e: ErrorEvent) => {
      e.preventDefault();
      if (shard.worker === worker) this.#died(shard, e.message);
    };
    worker.postMessage(
      {
        t: "init",
        index: shard.index,
        shards: opts.shards,
        generation: shard.generation,
        settings: this.#settings,
        usage: this.#usageSab,
        report,
        flows: this.#flowsSab,
        ring: sab,
        log: logSettings(),
        pods,
      } satisfies ToShard,
    );
  }

  /** Number of shards. */
  get size(): number {
    return this.#shards.length;
  }

  /** Resolves once every shard worker has started (rejects if one died first). */
  async ready(): Promise<void> {
    await Promise.all(this.#shards.map((s) => s.ready.promise));
  }

  #onMessage(shard: Shard, m: FromShard): void {
    switch (m.t) {
      case "log":
        writeLogLine(m.line, m.level);
        return;
      case "ready":
        shard.ready.resolve();
        return;
      case "flows":
        if (m.final) this.#handedOver(shard, batchCount(m.buf));
        this.#opts.onBatch(m.buf);
        return;
      case "query": {
        const q = this.#queries.get(m.id);
        if (q === undefined || !q.pages.has(shard) || q.pages.get(shard) !== undefined) return;
        q.pages.set(shard, { records: m.records, next: m.next });
        if (![...q.pages.values()].includes(undefined)) q.done();
        return;
      }
      case "stopped": {
        this.#stops.get(m.id)?.done();
        return;
      }
    }
  }

  /**
   * `n` flows of `shard`'s final flush reached the pool: still held by its usage word and not
   * exported by its report until the flush ends, so a shard given up on mid-flush counts them
   * exported, not lost (a batch that arrives after that moves from the one count to the other).
   */
  #handedOver(shard: Shard, n: number): void {
    if (!shard.dead) {
      shard.finalFlows += n;
      return;
    }
    this.#counters.flowsLostWithShard -= n;
    this.#retired.push({ ...NO_STATS, exported: n });
  }

  #died(shard: Shard, message: string): void {
    if (shard.dead) return;
    shard.dead = true;
    const at = shard.index * USAGE_WORDS;
    const flows = this.#usage[at];
    const last = reportOf(shard);
    // Given up on mid-flush: what it handed over is exported, the rest lost. Its report counts
    // the flush exported only once written after the flush (then it holds no flow).
    const lost = Math.max(0, flows - shard.finalFlows);
    const handedOver = last !== undefined && last.stats.flows === 0 ? 0 : shard.finalFlows;
    // The other shards' limits no longer count what it held.
    Atomics.sub(new Int32Array(this.#flowsSab), 0, flows);
    this.#usage[at] = this.#usage[at + 1] = 0;
    this.#counters.shardsFailed++;
    this.#counters.flowsLostWithShard += lost;
    // Records sent (or pending) that its last report does not account for.
    shard.rows.discard();
    shard.raw.discard();
    this.#counters.recordsDroppedNoShard += shard.sentRecords - (last?.stats.recordsIn ?? 0);
    const stats = last?.stats ?? NO_STATS;
    this.#retired.push({ ...stats, exported: stats.exported + handedOver, flows: 0, flowBytes: 0 });
    this.#retiredTruncated += last?.stringsTruncated ?? 0;
    // Its counters are retired: until a new worker writes its own, the shard counts nothing.
    shard.cell = undefined;
    shard.sentRecords = 0;
    shard.finalFlows = 0;
    // A worker that lived a minute starts again after the first backoff.
    const initial = this.#opts.restartBackoffMs ?? 1000;
    if (performance.now() - shard.startedMs > 60_000) shard.backoffMs = initial;
    log.error("shard worker died: the flows it held are lost, its records are dropped", {
      shard: shard.index,
      flows: lost,
      error: message,
      restartInMs: this.#stopping ? undefined : shard.backoffMs,
    });
    shard.worker.terminate();
    shard.ready.reject(new Error(`shard ${shard.index} died: ${message}`));
    if (!this.#stopping) {
      shard.restartTimer = setTimeout(() => {
        if (this.#stopping) return;
        this.#counters.shardRestarts++;
        this.#start(shard, this.#opts.pods?.snapshot());
        log.info("shard worker started again", {
          shard: shard.index,
          generation: shard.generation,
        });
      }, shard.backoffMs);
      shard.backoffMs = Math.min(shard.backoffMs * 2, 30_000);
    }
    // Whoever waits on this shard (a query, the stop) must not wait forever.
    for (const [, q] of this.#queries) {
      if (q.pages.has(shard) && q.pages.get(shard) === undefined) {
        q.pages.set(shard, NO_PAGE);
        if (![...q.pages.values()].includes(undefined)) q.done();
      }
    }
    // Only this shard's stop: the others are still exporting what they hold.
    for (const [, stop] of this.#stops) if (stop.shard === shard) stop.done();
  }

  /** Routes records to their shards (see the module doc for the bound). */
  ingest(records: readonly FlowInput[]): void {
    const shards = this.#shards;
    const n = shards.length;
    for (const r of records) {
      const shard = shards[shardOf(r, n, this.#scratch)];
      if (!this.#open(shard, shard.raw)) continue;
      let added: boolean;
      try {
        added = shard.rows.add(r) || (this.#waitForRing(shard, shard.rows) && shard.rows.add(r));
      } catch (err) {
        // A value that does not fit its field (the row writer takes nothing of it): rejected
        // and counted as the one-shard core counts it, and the batch goes on.
        this.#badValues++;
        if (this.#badValueLog.allow("badFieldType") >= 0) {
          log.warn("record with a value that does not fit its field dropped", { err });
        }
        continue;
      }
      if (!added) {
        this.#counters.recordsDroppedNoShard++;
        continue;
      }
      shard.sentRecords++;
    }
    this.#flushLater();
  }

  /**
   * Sends what is left at the end of this task when a shard's frame is big enough to be worth
   * a wake, else within {@linkcode FLUSH_DELAY_MS}: small data sets still travel in frames.
   */
  #flushLater(): void {
    if (this.#flushQueued) return;
    // Index loop and closures made once: this runs per data set (per record from an Agent), and
    // an iterator or a closure per call was garbage per record.
    const shards = this.#shards;
    for (let i = 0; i < shards.length; i++) {
      const s = shards[i];
      if (s.raw.pendingBytes >= FLUSH_NOW_BYTES || s.rows.pendingBytes >= FLUSH_NOW_BYTES) {
        this.#flushQueued = true;
        queueMicrotask(this.#flushNow);
        return;
      }
    }
    this.#flushTimer ??= setTimeout(this.#flushNow, FLUSH_DELAY_MS);
  }

  readonly #flushNow = (): void => this.flush();

  /**
   * True when `shard` can take a record now: alive, not stalled, and the other writer's pending
   * frame sent first (one writer's frame at a time on a ring, so records keep their order).
   * Otherwise the record is counted dropped.
   */
  #open(shard: Shard, other: FrameWriter): boolean {
    if (
      shard.dead || (shard.stalled && !this.#recovered(shard)) ||
      (other.pendingRecords > 0 && !this.#send(shard, other))
    ) {
      this.#counters.recordsDroppedNoShard++;
      return false;
    }
    return true;
  }

  /**
   * Routes undecoded records (a data set's spans, `ipfix/skim.ts`) to their shards, which
   * decode them: the flow key is read straight from the bytes when the template has it at fixed
   * offsets (the Agents' templates), else the record is decoded here to find it.
   */
  ingestRaw(raw: RawRecords): void {
    const shards = this.#shards;
    const n = shards.length;
    const t = raw.compiled.template;
    const key = raw.skim.key;
    const { bytes, spans } = raw;
    for (let i = 0; i < spans.length; i += 2) {
      const start = spans[i];
      const end = spans[i + 1];
      const shard = shards[
        n === 1
          ? 0
          : key !== undefined
          ? rawShardOf(bytes, start, key, n, this.#scratch)
          : this.#shardOfDecoded(raw, start, end, n)
      ];
      if (!this.#open(shard, shard.rows)) continue;
      const w = shard.raw;
      if (
        !w.add(t, bytes, start, end) &&
        !(this.#waitForRing(shard, w) && w.add(t, bytes, start, end))
      ) {
        this.#counters.recordsDroppedNoShard++;
        continue;
      }
      shard.sentRecords++;
    }
    this.#flushLater();
  }

  /** The shard of a record whose key is not at fixed offsets: decoded here to read it. */
  #shardOfDecoded(raw: RawRecords, start: number, end: number, n: number): number {
    const out = this.#decoded;
    out.length = 0;
    try {
      raw.compiled.decodeRecords(raw.bytes, start, end, out, 1);
    } catch {
      return 0; // shard 0 decodes it again and counts it
    }
    const r = out[0] as unknown as FlowInput;
    out.length = 0;
    return shardOf(r, n, this.#scratch);
  }

  /** Sends every shard's pending frames now. */
  flush(): void {
    this.#flushQueued = false;
    clearTimeout(this.#flushTimer);
    this.#flushTimer = undefined;
    for (const s of this.#shards) {
      if (s.dead) continue;
      if (s.rows.pendingRecords > 0) this.#send(s, s.rows);
      if (s.raw.pendingRecords > 0) this.#send(s, s.raw);
    }
  }

  /** Sends a writer's pending frame, waiting for room; false when it was dropped instead. */
  #send(shard: Shard, w: FrameWriter): boolean {
    return w.flush() || (this.#waitForRing(shard, w) && w.flush());
  }

  /**
   * Waits until the shard's ring takes the writer's pending frame (back-pressure). False, with
   * the frame dropped and counted, when the shard is dead or made no progress for
   * {@linkcode STALL_MS}.
   */
  #waitForRing(shard: Shard, w: FrameWriter): boolean {
    this.#counters.ingestWaits++;
    let used = shard.ring.usedBytes;
    let since = performance.now();
    while (!shard.dead) {
      if (shard.ring.waitForSpace(w.pendingBytes, 100) === "ready") return true;
      const now = performance.now();
      const u = shard.ring.usedBytes;
      if (u < used) {
        used = u;
        since = now;
      } else if (now - since >= STALL_MS) {
        shard.stalled = true;
        this.#counters.shardStalls++;
        log.error(
          "shard made no progress with its ring full: its records are dropped until it does",
          {
            shard: shard.index,
            waitedMs: Math.round(now - since),
          },
        );
        break;
      }
    }
    const lost = w.discard();
    shard.sentRecords -= lost;
    this.#counters.recordsDroppedNoShard += lost;
    return false;
  }

  /** True (no longer stalled) once a stalled shard's ring has half its room again. */
  #recovered(shard: Shard): boolean {
    if (shard.ring.usedBytes > shard.ring.capacity / 2) return false;
    shard.stalled = false;
    log.info("stalled shard is taking records again", { shard: shard.index });
    return true;
  }

  /** Applies new core settings to every shard (and to those started later). */
  update(settings: ShardSettings): void {
    // The records sent before the new settings are ingested under the old ones.
    this.flush();
    this.#settings = settings;
    for (const s of this.#shards) {
      if (!s.dead) s.worker.postMessage({ t: "settings", settings } satisfies ToShard);
    }
  }

  /**
   * Held flows matching `filter` over every shard, at most `limit` (records sent so far). A
   * shard that has not answered a round within `timeoutMs` is left out of the query (logged),
   * so a stuck shard cannot hang an API request (a round each waits at most `timeoutMs`; see
   * {@linkcode #gather} for the rounds).
   */
  query(
    filter: Partial<FlowKey> | null,
    limit: number,
    timeoutMs = 10_000,
  ): Promise<AggregatedRecord[]> {
    return this.#gather(filter, limit, false, timeoutMs) as Promise<AggregatedRecord[]>;
  }

  /**
   * {@linkcode query} as the `/flowrecords` body (`records_json.ts`), written by the shards: the
   * main thread only joins their texts.
   */
  async queryJson(
    filter: Partial<FlowKey> | null,
    limit: number,
    timeoutMs = 10_000,
  ): Promise<string> {
    return joinRecordTexts(await this.#gather(filter, limit, true, timeoutMs) as string[]);
  }

  /**
   * Pages the shards until `limit` matches are gathered or every shard is done. Each round asks
   * the shards that may hold more for an even share of what is missing, from where their last
   * page ended: no shard builds records beyond its share, and a shard that holds fewer leaves
   * its share to the others in the next round (at most one round more than there are shards: a
   * round either completes the answer or finds at least one shard done).
   */
  async #gather(
    filter: Partial<FlowKey> | null,
    limit: number,
    texts: boolean,
    timeoutMs: number,
  ): Promise<(AggregatedRecord | string)[]> {
    const got = new Map<Shard, { items: (AggregatedRecord | string)[]; from: number }>();
    if (!this.#stopped) {
      for (const s of this.#shards) if (!s.dead) got.set(s, { items: [], from: 0 });
    }
    let total = 0;
    // Every live shard is asked at least once, even for no record: a query is answered after
    // the records sent before it (a barrier the tests use).
    let asked = [...got.keys()];
    while (asked.length > 0) {
      const share = Math.ceil((limit - total) / asked.length);
      // Each round has its own timeout: a shard that missed one is left out of the rest (its
      // page is none), and the healthy shards' later pages are not cut by a deadline the late
      // one spent (found by review: one stuck shard halved the other's answer).
      const pages = await this.#round(asked, filter, share, texts, timeoutMs, got);
      for (const [s, page] of pages) {
        const g = got.get(s)!;
        for (const r of page.records) g.items.push(r);
        total += page.records.length;
        g.from = page.next;
      }
      asked = total < limit ? asked.filter((s) => got.get(s)!.from >= 0) : [];
    }
    const out: (AggregatedRecord | string)[] = [];
    for (const [, g] of got) for (const r of g.items) out.push(r);
    return out.length > limit ? out.slice(0, limit) : out;
  }

  /** One round of {@linkcode #gather}: a page of at most `limit` from each of `shards`. */
  #round(
    shards: Shard[],
    filter: Partial<FlowKey> | null,
    limit: number,
    texts: boolean,
    timeoutMs: number,
    at: Map<Shard, { from: number }>,
  ): Promise<Map<Shard, ShardPage>> {
    this.flush();
    const id = this.#nextId++;
    const pages = new Map<Shard, ShardPage | undefined>();
    for (const s of shards) pages.set(s, s.dead ? NO_PAGE : undefined);
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.#queries.delete(id);
        resolve(pages as Map<Shard, ShardPage>);
      };
      const timer = setTimeout(() => {
        const late = shards.filter((s) => pages.get(s) === undefined);
        log.error("shards did not answer a query in time: their flows are left out", {
          shards: late.map((s) => s.index).join(","),
          timeoutMs,
        });
        for (const s of late) pages.set(s, NO_PAGE);
        done();
      }, timeoutMs);
      if (![...pages.values()].includes(undefined)) return done();
      this.#queries.set(id, { pages, done });
      for (const s of shards) {
        if (s.dead) continue;
        const from = at.get(s)!.from;
        s.worker.postMessage({ t: "query", id, filter, limit, from, texts } satisfies ToShard);
      }
    });
  }

  /** Live flows over every shard (each shard's count as of its last report). */
  get flowCount(): number {
    let n = 0;
    for (const s of this.#shards) if (!s.dead) n += this.#usage[s.index * USAGE_WORDS];
    return n;
  }

  /**
   * The shards' counters summed, each as of its last slice of ingest or sweep (its report cell);
   * records routed to a dead shard are rejected as `shardFailed`.
   */
  stats(): AggregationStats {
    return this.snapshot().stats;
  }

  /**
   * {@linkcode stats} and, from the same reads of the shards' report cells, the records in
   * flight: handed to a live shard (in its ring or pending frame) that its last report does not
   * count yet. Every record given to {@linkcode ingest} or {@linkcode ingestRaw} is in exactly
   * one of `stats.recordsIn` and `inFlight` at every read (a dead shard's are counted dropped
   * when it dies, and it has none in flight until a new worker takes records again).
   */
  snapshot(): { stats: AggregationStats; inFlight: number } {
    let inFlight = 0;
    const reports = this.#shards.map((s) => {
      const stats = reportOf(s)?.stats ?? NO_STATS;
      inFlight += s.sentRecords - stats.recordsIn;
      return stats;
    });
    const sum = sumStats([...reports, ...this.#retired]);
    sum.recordsRejected.shardFailed += this.#counters.recordsDroppedNoShard;
    sum.recordsRejected.badFieldType += this.#badValues;
    sum.recordsIn += this.#counters.recordsDroppedNoShard + this.#badValues;
    sum.flows = this.flowCount;
    return { stats: sum, inFlight };
  }

  /** The pool's own counters, and the shards' truncated strings. */
  counters(): ShardPoolStats {
    let stringsTruncated = this.#retiredTruncated;
    for (const s of this.#shards) stringsTruncated += reportOf(s)?.stringsTruncated ?? 0;
    return { ...this.#counters, stringsTruncated };
  }

  /** Each live shard's thread memory as of its last report, by `shard<index>`. */
  threadMemory(): Record<string, ThreadMemory> {
    const out: Record<string, ThreadMemory> = {};
    for (const s of this.#shards) {
      const memory = s.dead ? undefined : reportOf(s)?.memory;
      if (memory !== undefined) out[`shard${s.index}`] = memory;
    }
    return out;
  }

  /**
   * Stops every shard: each ingests what its ring holds, exports its due flows, then every flow
   * it still holds (through `onBatch`), then its worker ends. Resolves when all are done; a
   * shard that has not finished within `timeoutMs` is given up on as dead (its flows counted
   * lost), so a stuck shard cannot hang the shutdown.
   */
  async stop(timeoutMs = 10_000): Promise<void> {
    this.#stopping = true;
    for (const s of this.#shards) clearTimeout(s.restartTimer);
    this.flush();
    await Promise.all(this.#shards.map((s) => {
      if (s.dead) return Promise.resolve();
      const id = this.#nextId++;
      return new Promise<void>((resolve) => {
        const timer = setTimeout(() => this.#died(s, "did not stop in time"), timeoutMs);
        this.#stops.set(id, {
          shard: s,
          done: () => {
            clearTimeout(timer);
            this.#stops.delete(id);
            resolve();
          },
        });
        s.worker.postMessage({ t: "stop", id } satisfies ToShard);
      });
    }));
    for (const s of this.#shards) {
      s.ring.close();
      s.worker.terminate();
    }
    this.#stopped = true;
  }
}

/** What the pool needs of a ring's frame writer (decoded or raw rows). */
interface FrameWriter {
  readonly pendingBytes: number;
  readonly pendingRecords: number;
  flush(): boolean;
  discard(): number;
}

/** Counters of a shard that has not reported yet. */
const NO_STATS: AggregationStats = new CoreCounters().snapshot(0, 0);

/** A shard's counters as its worker last wrote them (the final ones once it stopped). */
function reportOf(shard: Shard): ShardReport | undefined {
  return shard.cell?.read();
}
