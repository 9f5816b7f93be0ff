/**
 * A shard worker: one aggregation core owning the flows whose key hashes to this shard
 * (`aggregation/sharded.ts` routes). It ingests the record frames the main thread writes to its
 * ring (draining it in slices of at most {@linkcode SLICE_MS}, so its timers and messages get
 * their turn), runs its own expiry timer, and posts the expired flows to the main thread as the
 * exporters' binary batches; its counters it writes to a shared report cell after every slice
 * and sweep (`report_cell.ts`), which the main thread reads when it needs them. It counts the
 * process's flows in one shared atomic word and publishes its held bytes in the shared usage
 * array, so every shard applies `maxFlows` and `maxFlowBytes` to the whole process.
 * With a cluster it holds a replica of the Pod store (fed by the main thread's store) and fills
 * the Pod metadata and labels of the flows it exports, as the one-shard core does. It needs no
 * permission: the pool starts it with none.
 *
 * @module
 */

import { AggregationCore } from "../aggregation/core.ts";
import { recordTexts } from "../aggregation/records_json.ts";
import { systemClock, TaskCachedClock } from "../clock.ts";
import type { ExportHooks } from "../aggregation/snapshot.ts";
import { PodStore } from "../k8s/pod_store.ts";
import { BatchWriter } from "../exporters/batch.ts";
import { logger, setLogFormat, setLogLevel, setLogWriter } from "../log.ts";
import { InputRowReader } from "./input_rows.ts";
import { RAW_MAGIC, RawRowReader } from "./raw_rows.ts";
import { applyCoreSettings, type FromShard, type ToShard, USAGE_WORDS } from "./protocol.ts";
import { stringsTruncatedTotal } from "../ipfix/compile.ts";
import { RingReader } from "./ring.ts";
import { ReportCell } from "./report_cell.ts";
import { threadMemory } from "../thread_memory.ts";
import { rowHooks, SLOT_BATCH_FLOWS, SlotRowWriter, viaRows } from "./slot_rows.ts";
import { coreViewSink } from "./views.ts";

/** Most due flows one timer tick exports, so a large sweep does not hold up ingest. */
const SWEEP_SLICE = 10_000;

/** Upper bound of the expiry timer (new flows are never swept late by more). */
const MAX_TIMER_MS = 1000;

/** Longest stretch of ring draining before messages (and, every TIMER_TURN_MS, timers) get a turn. */
const SLICE_MS = 5;

/** Longest time between two turns that let the timers run (the expiry sweep). */
const TIMER_TURN_MS = 20;

// Two ways to yield: a message to ourselves lets the main thread's messages in but not the
// timers (they starve behind it), and costs nothing; a zero timeout lets everything in but
// waits about a millisecond (several on a busy machine). The drain takes the first, and the
// second every TIMER_TURN_MS.
const channel = new MessageChannel();
let channelDone: (() => void) | undefined;
channel.port1.onmessage = () => channelDone?.();
let lastTimerTurn = 0;
function nextTurn(): Promise<void> {
  const now = performance.now();
  if (now - lastTimerTurn >= TIMER_TURN_MS) {
    lastTimerTurn = now;
    return new Promise((resolve) => setTimeout(resolve, 0));
  }
  return new Promise((resolve) => {
    channelDone = resolve;
    channel.port2.postMessage(null);
  });
}

// deno-lint-ignore no-explicit-any
const scope = self as any;
const post = (m: FromShard): void => scope.postMessage(m);

let core: AggregationCore | undefined;
let usage: Float64Array;
let ring: RingReader;
/** The Pod store's replica and the export hooks reading it (with a cluster). */
let pods: PodStore | undefined;
let hooks: ExportHooks | undefined;
const rows = new InputRowReader();
let raw = new RawRowReader();
let index = 0;
let timer: ReturnType<typeof setTimeout> | undefined;
let cell: ReportCell;
const clock = new TaskCachedClock();
const batch = new BatchWriter(SLOT_BATCH_FLOWS);
const log = logger("shard");

/**
 * Ingests the frames in the ring: all of them, or (with `sliceMs`) until that much time has
 * passed. Returns the frames read.
 */
function drain(c: AggregationCore, sliceMs = Infinity): number {
  const add = (r: Parameters<AggregationCore["addRecord"]>[0]): void => {
    c.addRecord(r);
  };
  const invalid = (why: string): void => c.countUndecodable(why);
  const view = coreViewSink(c);
  const end = performance.now() + sliceMs;
  let n = 0;
  for (let f = ring.next(); f !== undefined; f = ring.next()) {
    // Undecoded records (the collector's) or decoded rows: told apart by the frame's magic.
    if (
      f[0] === (RAW_MAGIC & 0xff) &&
      new DataView(f.buffer, f.byteOffset).getUint32(0, true) === RAW_MAGIC
    ) {
      raw.read(f, add, invalid, view);
    } else {
      rows.read(f, add);
    }
    ring.release();
    n++;
    if ((n & 7) === 0 && performance.now() >= end) break;
  }
  if (n > 0) {
    publish(c);
    // A first flow arms the timer for its expiry (the timer may be at its idle maximum).
    if (timer === undefined) arm(c);
  }
  return n;
}

/**
 * Drains the ring as frames arrive, yielding to timers and messages: a turn of its own
 * ({@linkcode nextTurn}) once {@linkcode SLICE_MS} passed since the last, else, when the ring
 * is empty, the wait for the next frame, which is a turn. Each turn wakes the thread (74-150 µs
 * of CPU per wake on these VMs, `scripts/bench/wake_cost.ts`), so at low rates a batch costs
 * one wake, not two (it was a turn after every drain, then the wait).
 */
async function pump(c: AggregationCore): Promise<void> {
  let lastTurn = performance.now();
  for (;;) {
    drain(c, SLICE_MS);
    // A turn once one is due, whether frames are left (the slice ran out, or more came) or
    // not: a wait that finds a frame at once takes none.
    if (performance.now() - lastTurn >= SLICE_MS) {
      await nextTurn();
      lastTurn = performance.now();
      continue;
    }
    if (ring.ready()) continue;
    // Emptied: wait for the writer's notify of the next frame or its close, which is a turn.
    // No timeout: the writer notifies both (`ring.ts`).
    const state = await ring.waitForDataAsync(Infinity);
    if (ring.waited) lastTurn = performance.now();
    if (state === "closed" && ring.done) return;
  }
}

/**
 * Publishes what this shard holds and has counted: its bytes in the shared usage array (its
 * flows are counted there as they change) and its counters in its report cell, where the main
 * thread reads them.
 */
function publish(c: AggregationCore): void {
  usage[index * USAGE_WORDS + 1] = c.flowBytes;
  cell.write({
    stats: c.stats(),
    stringsTruncated: stringsTruncatedTotal(),
    memory: threadMemory(),
  });
}

/** The stop's final flush is under way (its flows are still counted held: see `final`). */
let finalFlush = false;

function flushBatch(): void {
  if (batch.count === 0) return;
  const buf = batch.finish();
  // Shared, not transferred: a detach would slow every typed-array access here (batch.ts).
  post({ t: "flows", buf, final: finalFlush });
}

/** Writes exported flows from their slots into the batch, posting it when full. */
const slotRows = new SlotRowWriter(batch, flushBatch);

/**
 * The export hooks of a sweep: flows go into the batch straight from their slots, and whoever
 * needs address text makes it from the rows' address words (`readBatch`).
 */
function exportHooks(): ExportHooks {
  return rowHooks(hooks, slotRows);
}

function arm(c: AggregationCore, delayMs?: number): void {
  if (timer !== undefined) clearTimeout(timer);
  const delay = delayMs ?? Math.min(Math.max(c.nextExpiryDelayMs(), 0), MAX_TIMER_MS);
  timer = setTimeout(() => sweep(c), delay);
}

function sweep(c: AggregationCore): void {
  timer = undefined;
  c.expire(viaRows, { ...exportHooks(), limit: SWEEP_SLICE });
  flushBatch();
  publish(c);
  arm(c, c.hasExpired() ? 0 : undefined);
}

function settingsOf(m: Extract<ToShard, { t: "init" | "settings" }>["settings"]) {
  return {
    activeTimeoutMs: m.activeTimeoutMs,
    inactiveTimeoutMs: m.inactiveTimeoutMs,
    maxFlows: m.maxFlows,
    maxFlowBytes: m.maxFlowBytes,
    includePodLabels: m.includePodLabels,
  };
}

scope.onmessage = (e: MessageEvent<ToShard>): void => {
  const m = e.data;
  switch (m.t) {
    case "init": {
      setLogLevel(m.log.level);
      setLogFormat(m.log.format);
      setLogWriter((line, level) => post({ t: "log", line, level }));
      index = m.index;
      usage = new Float64Array(m.usage);
      cell = new ReportCell(m.report);
      ring = new RingReader(m.ring);
      if (m.pods !== undefined) {
        const store = new PodStore({ clock: systemClock });
        for (const c of m.pods) store.applyChange(c);
        pods = store;
        hooks = { lookupPod: (ip, t) => store.lookup(ip, t) };
      }
      raw = new RawRowReader({ maxStringBytes: m.settings.maxStringBytes });
      const shards = m.shards;
      const total = new Int32Array(m.flows);
      const at = index * USAGE_WORDS;
      const c = new AggregationCore({
        ...settingsOf(m.settings),
        clock,
        peers: {
          // The process's flows, one atomic count; this shard's own in its usage word (exact,
          // so the pool can take them out of the total if this shard dies).
          addFlows: (n) => {
            usage[at] += n;
            return Atomics.add(total, 0, n) + n;
          },
          bytes: () => {
            let sum = 0;
            for (let j = 0; j < shards; j++) if (j !== index) sum += usage[j * USAGE_WORDS + 1];
            return sum;
          },
          publishBytes: (n) => {
            usage[at + 1] = n;
          },
        },
      });
      core = c;
      arm(c);
      publish(c);
      void pump(c);
      post({ t: "ready" });
      return;
    }
    case "pods": {
      for (const c of m.changes) pods?.applyChange(c);
      return;
    }
    case "settings": {
      const c = core!;
      drain(c);
      const s = m.settings;
      applyCoreSettings(c, s);
      raw.setMaxStringBytes(s.maxStringBytes);
      publish(c);
      arm(c);
      return;
    }
    case "query": {
      drain(core!);
      const { records, next } = core!.queryPage(m.filter, m.limit, m.from);
      post({ t: "query", id: m.id, records: m.texts ? recordTexts(records) : records, next });
      return;
    }
    case "stop": {
      const c = core!;
      if (timer !== undefined) clearTimeout(timer);
      // Every record sent before the stop, then the expired flows first (normal export semantics), then every flow still held.
      drain(c);
      c.expire(viaRows, exportHooks());
      flushBatch();
      // Counters up to the final flush, whose batches are marked: should the pool give up on
      // this worker mid-flush, it counts them exported and only the rest lost.
      publish(c);
      finalFlush = true;
      const n = c.flushAll(viaRows, exportHooks());
      flushBatch();
      // The final counters, in the cell before the main thread hears of the stop.
      publish(c);
      log.debug("shard flushed the flows it held", { shard: index, flows: n });
      post({ t: "stopped", id: m.id });
      return;
    }
  }
};
