/**
 * In-process benchmarks of the pure parts: the IPFIX decoder (src/ipfix) and the aggregation
 * core (src/aggregation). Inputs are built from the golden Antrea messages of spec/ipfix.md
 * §1.13 through the public APIs only, so a change of either module's internals needs no change
 * here. Each loop runs for a fixed wall time after a warm-up and reports operations/s.
 */

import { decodeMessage, TemplateStore, type TemplateStore as Store } from "../../src/ipfix/mod.ts";
import { AggregationCore, type FlowInput } from "../../src/aggregation/mod.ts";
import { ManualClock } from "../../src/clock.ts";
import { GOLDEN_DATA_HEX, GOLDEN_TEMPLATE_HEX, hexToBytes } from "./udp.ts";
import { ReplayStream } from "../../src/flowgen/mod.ts";
import { alternate, median } from "./baseline.ts";
import { KEY_WORDS } from "../../src/aggregation/flow_table.ts";
import { skimOf } from "../../src/ipfix/skim.ts";
import {
  RawRowReader,
  RawRowWriter,
  rawShardOf,
  RawTemplateIds,
} from "../../src/shard/raw_rows.ts";
import { coreViewSink } from "../../src/shard/views.ts";
import { createRing, RingReader, RingWriter } from "../../src/shard/ring.ts";

/**
 * Share of Pods with a name of their own in the replay benchmarks' streams (decode and e2e):
 * the rest share 16 names per app, so most flows' Pod names were seen before, as in a cluster
 * where each Pod has many flows.
 */
export const REPLAY_UNIQUE_NAMES = 0.2;

/** Runs `step` (which does `perStep` operations) for `seconds` after a warm-up; ops/s. */
export function timeLoop(step: () => void, perStep: number, seconds: number): number {
  const warm = performance.now() + Math.min(300, seconds * 300);
  while (performance.now() < warm) step();
  let ops = 0;
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  let now = t0;
  while (now < end) {
    for (let i = 0; i < 16; i++) step();
    ops += 16 * perStep;
    now = performance.now();
  }
  return ops / ((now - t0) / 1000);
}

function storeWithTemplate(wireNumbers = false): Store {
  const store = new TemplateStore({ wireNumbers });
  decodeMessage(hexToBytes(GOLDEN_TEMPLATE_HEX), store);
  return store;
}

/**
 * Builds one message carrying `n` copies of the golden data record (the message and set
 * headers are rewritten; the record bytes are the golden ones).
 */
export function multiRecordMessage(n: number): Uint8Array {
  const one = hexToBytes(GOLDEN_DATA_HEX);
  const record = one.subarray(20); // after the 16-byte message and 4-byte set header
  const out = new Uint8Array(20 + n * record.length);
  out.set(one.subarray(0, 20));
  for (let i = 0; i < n; i++) out.set(record, 20 + i * record.length);
  const dv = new DataView(out.buffer);
  dv.setUint16(2, out.length);
  dv.setUint16(18, out.length - 16);
  return out;
}

/** Records/s decoding one-record messages (the Agent's format), and 50-record messages. */
export function benchDecodeRates(seconds: number): { single: number; batch: number } {
  const store = storeWithTemplate();
  const single = hexToBytes(GOLDEN_DATA_HEX);
  const check = decodeMessage(single, store);
  if (check.dataSets[0]?.records.length !== 1) throw new Error("golden data did not decode");
  let sink = 0;
  const s = timeLoop(
    () => {
      sink += decodeMessage(single, store).dataSets[0].records.length;
    },
    1,
    seconds,
  );
  const multi = multiRecordMessage(50);
  if (decodeMessage(multi, store).dataSets[0]?.records.length !== 50) {
    throw new Error("50-record message did not decode to 50 records");
  }
  const b = timeLoop(
    () => {
      sink += decodeMessage(multi, store).dataSets[0].records.length;
    },
    50,
    seconds,
  );
  if (sink <= 0) throw new Error("unreachable");
  return { single: s, batch: b };
}

/**
 * One round of the replay stream's messages in arrival order, each with its Agent's template
 * store (templates announced, in the given decoder mode): the input of the realistic benches.
 */
function realisticMessages(
  flows: number,
  uniqueNames: number | undefined,
  wireNumbers: boolean,
): { msgs: Uint8Array[]; msgStores: Store[] } {
  const stream = replayStream(flows, uniqueNames);
  const now = Math.floor(Date.now() / 1000);
  const stores = agentStores(stream, now, wireNumbers);
  const order = arrivalOrder(stream, 0, now);
  return { msgs: order.map((m) => m.msg), msgStores: order.map((m) => stores[m.agent]) };
}

/**
 * Records/s decoding the replay sender's realistic stream (src/flowgen/replay.ts): 4 Agents,
 * each with its own template store (one session each), `flows` flows exported once per round by
 * one or both Nodes (the default scenario mix: intra/inter-node, Service ClusterIP, external,
 * denied, IPv6), messages taken from the Agents in turn as they would arrive. One record per
 * message, as Agents send them; every message is a different flow. In the codec's default mode
 * unless `wireNumbers` (the collector's mode).
 */
export function benchDecodeRealistic(
  seconds: number,
  opts: { flows: number; uniqueNames?: number; wireNumbers?: boolean },
): { recordsPerSec: number; messages: number } {
  const { msgs, msgStores } = realisticMessages(
    opts.flows,
    opts.uniqueNames,
    opts.wireNumbers ?? false,
  );
  let decoded = 0;
  for (let i = 0; i < msgs.length; i++) {
    decoded += decodeMessage(msgs[i], msgStores[i]).dataSets[0]?.records.length ?? 0;
  }
  if (decoded !== msgs.length) throw new Error(`realistic stream: ${decoded} of ${msgs.length}`);
  let at = 0;
  let sink = 0;
  const rate = timeLoop(
    () => {
      for (let k = 0; k < 1000; k++) {
        sink += decodeMessage(msgs[at], msgStores[at]).dataSets.length;
        if (++at === msgs.length) at = 0;
      }
    },
    1000,
    seconds,
  );
  if (sink <= 0) throw new Error("unreachable");
  return { recordsPerSec: rate, messages: msgs.length };
}

/**
 * Records/s of the main thread's share of a sharded process on the realistic stream (the same
 * messages as {@linkcode benchDecodeRealistic}): each message walked without decoding (the
 * collector's raw mode), each record's key read from its bytes and the record copied into the
 * ring of its shard (`shards` rings; the frames are released in the same thread, standing in
 * for the shards). What the main thread does per record instead of decoding and aggregating.
 */
export function benchRouteRealistic(
  seconds: number,
  opts: { flows: number; shards: number; uniqueNames?: number },
): number {
  const { msgs, msgStores } = realisticMessages(opts.flows, opts.uniqueNames, true);
  const ids = new RawTemplateIds();
  const rings = Array.from({ length: opts.shards }, () => createRing(4 << 20));
  const writers = rings.map((r) => new RawRowWriter(new RingWriter(r), ids));
  const readers = rings.map((r) => new RingReader(r));
  const scratch = new Uint32Array(KEY_WORDS);
  const drain = (): void => {
    for (const r of readers) {
      while (r.next() !== undefined) r.release();
    }
  };
  let routed = 0;
  const route = (i: number): void => {
    for (const ds of decodeMessage(msgs[i], msgStores[i], true).dataSets) {
      const raw = ds.raw!;
      const t = raw.compiled.template;
      const key = skimOf(t).key!;
      for (let s = 0; s < raw.spans.length; s += 2) {
        const w = writers[rawShardOf(raw.bytes, raw.spans[s], key, opts.shards, scratch)];
        if (!w.add(t, raw.bytes, raw.spans[s], raw.spans[s + 1])) {
          drain();
          w.add(t, raw.bytes, raw.spans[s], raw.spans[s + 1]);
        }
        routed++;
      }
    }
  };
  for (let i = 0; i < msgs.length; i++) route(i);
  if (routed !== msgs.length) throw new Error(`realistic stream: ${routed} of ${msgs.length}`);
  let at = 0;
  return timeLoop(
    () => {
      for (let k = 0; k < 1000; k++) {
        route(at);
        if (++at === msgs.length) at = 0;
      }
      for (const w of writers) if (!w.flush()) drain();
    },
    1000,
    seconds,
  );
}

/**
 * Records/s of one shard's share of a sharded process on the replay stream: the frames the main
 * thread writes for one shard (all of `flows` flows routed to it, `rounds` export rounds, times
 * advancing) read back as a shard worker does (`RawRowReader` views into `addRecordView`), in a
 * fresh core per measurement: the first round creates the flows, the others update them (what
 * most records of a steady stream do). Expiry is not included (timeouts of an hour). The
 * median of `runs` measurements. With `steady`, the first round is fed untimed and only the
 * updates are timed (the per-record cost of a stream whose flows all exist).
 */
export function benchShardRealistic(
  opts: { flows: number; rounds?: number; runs?: number; uniqueNames?: number; steady?: boolean },
): number {
  const stream = replayStream(opts.flows, opts.uniqueNames);
  const t0 = 1_700_000_000;
  const stores = agentStores(stream, t0, true);
  const ring = createRing(4 << 20);
  const writer = new RawRowWriter(new RingWriter(ring), new RawTemplateIds());
  const reader = new RingReader(ring);
  const frames: Uint8Array[] = [];
  const take = (): void => {
    for (let f = reader.next(); f !== undefined; f = reader.next()) {
      frames.push(f.slice());
      reader.release();
    }
  };
  let records = 0;
  let firstRound = 0;
  for (let r = 0; r < (opts.rounds ?? 4); r++) {
    if (r === 1) {
      if (!writer.flush()) take();
      writer.flush();
      take();
      firstRound = frames.length;
    }
    for (const { msg, agent } of arrivalOrder(stream, r, t0 + 10 * r)) {
      for (const ds of decodeMessage(msg, stores[agent], true).dataSets) {
        const raw = ds.raw!;
        const t = raw.compiled.template;
        for (let s = 0; s < raw.spans.length; s += 2) {
          if (!writer.add(t, raw.bytes, raw.spans[s], raw.spans[s + 1])) {
            take();
            writer.add(t, raw.bytes, raw.spans[s], raw.spans[s + 1]);
          }
          records++;
        }
      }
    }
  }
  if (!writer.flush()) take();
  writer.flush();
  take();
  const once = (): number => {
    const core = new AggregationCore({
      activeTimeoutMs: 3_600_000,
      inactiveTimeoutMs: 3_600_000,
      clock: new ManualClock(),
    });
    const rows = new RawRowReader();
    const add = (r: FlowInput): void => {
      core.addRecord(r);
    };
    const invalid = (): void => {};
    const view = coreViewSink(core);
    let f = 0;
    let before = 0;
    if (opts.steady) {
      for (; f < firstRound; f++) rows.read(frames[f], add, invalid, view);
      before = core.stats().recordsIn;
    }
    const start = performance.now();
    for (; f < frames.length; f++) rows.read(frames[f], add, invalid, view);
    const ms = performance.now() - start;
    const s = core.stats();
    if (s.recordsIn !== records || s.recordsAccepted === 0) {
      throw new Error(`shard: ${s.recordsIn} records in of ${records}`);
    }
    return (records - before) / ms * 1000;
  };
  once();
  const rates = Array.from({ length: opts.runs ?? 5 }, once);
  return median(rates)!;
}

/**
 * The golden record decoded as the collector hands it to the core: in wire-number mode (u64
 * counters and IPv4 addresses as numbers).
 */
export function goldenFlowInput(): FlowInput {
  const store = storeWithTemplate(true);
  const rec = decodeMessage(hexToBytes(GOLDEN_DATA_HEX), store).dataSets[0].records[0];
  return rec as unknown as FlowInput;
}

/**
 * Agent records for `flows` InterNode flows: each flow has a source-Node half and a
 * destination-Node half (to be correlated), derived from the golden record with a distinct
 * 5-tuple per flow, for `rounds` export rounds (flowEndSeconds and counters grow each round).
 * In wire-number mode, as the collector hands them to the core (a checkout before that mode
 * built text addresses and bigint counters: `ab_core.ts --records` across it compares nothing).
 */
export function flowRecords(flows: number, rounds: number): FlowInput[] {
  const g = goldenFlowInput();
  const out: FlowInput[] = [];
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < flows; i++) {
      const base: FlowInput = {
        ...g,
        sourceIPv4Address: 0x0a000000 + (i & 0xffffff), // 10.x.y.z as its u32
        sourceTransportPort: 1024 + (i % 60_000),
        flowEndSeconds: 1_700_000_010 + r * 5,
        packetTotalCount: 100 * (r + 1),
        octetTotalCount: 15_000 * (r + 1),
      };
      out.push(base);
      out.push({
        ...base,
        sourcePodName: "",
        sourcePodNamespace: "",
        sourceNodeName: "",
        destinationPodName: `perftest-b-${i % 300}`,
        destinationPodNamespace: "antrea-test",
        destinationNodeName: "k8s-node-2",
      });
    }
  }
  return out;
}

/** Records/s through AggregationCore.addRecord (creates, correlation, updates; no expiry). */
export function benchAggregateRate(flows: number, rounds: number, seconds: number): number {
  const records = flowRecords(flows, rounds);
  const clock = new ManualClock();
  let core = new AggregationCore({
    activeTimeoutMs: 3_600_000,
    inactiveTimeoutMs: 3_600_000,
    clock,
  });
  let i = 0;
  let accepted = 0;
  const rate = timeLoop(
    () => {
      for (let k = 0; k < 1000; k++) {
        if (core.addRecord(records[i])) accepted++;
        if (++i === records.length) {
          // Start over on a fresh core so that later rounds are updates again, not stale.
          i = 0;
          core = new AggregationCore({
            activeTimeoutMs: 3_600_000,
            inactiveTimeoutMs: 3_600_000,
            clock,
          });
        }
      }
    },
    1000,
    seconds,
  );
  if (accepted === 0) throw new Error("aggregation accepted no record");
  return rate;
}

/** Result of {@linkcode benchPipelineRealistic}. */
export interface PipelineRates {
  /** Records/s decoded in wire-number mode (as the collector does) and aggregated. */
  wire: number;
  /** The same with the decoder's default mode (text addresses, bigint counters), same run. */
  text: number;
}

/**
 * Decode + aggregate of the replay stream on one thread (what the collector's main thread does
 * per record, sockets and export aside): `rounds` export rounds of `flows` flows from 4 Agents,
 * decoded in wire-number mode into one core, against the decoder's default mode into another,
 * alternated `pairs` times in this process (medians), so the reference is measured in the same
 * run under the same load.
 */
export function benchPipelineRealistic(
  opts: { flows: number; rounds?: number; pairs?: number; uniqueNames?: number },
): PipelineRates {
  const stream = replayStream(opts.flows, opts.uniqueNames);
  const t0 = 1_700_000_000;
  const rounds = Array.from(
    { length: opts.rounds ?? 3 },
    (_, r) => arrivalOrder(stream, r, t0 + 10 * r),
  );
  const once = (stores: Store[]): number => {
    const core = new AggregationCore({
      activeTimeoutMs: 3_600_000,
      inactiveTimeoutMs: 3_600_000,
      clock: new ManualClock(),
    });
    const start = performance.now();
    let n = 0;
    for (const order of rounds) {
      for (const { msg, agent } of order) {
        for (const ds of decodeMessage(msg, stores[agent]).dataSets) {
          for (const r of ds.records) if (core.addRecord(r as unknown as FlowInput)) n++;
        }
      }
    }
    if (n === 0) throw new Error("pipeline: no record aggregated");
    return n / (performance.now() - start) * 1000;
  };
  const wireStores = agentStores(stream, t0, true);
  const textStores = agentStores(stream, t0, false);
  const r = alternate(opts.pairs ?? 10, () => once(wireStores), () => once(textStores));
  return { wire: median(r.a)!, text: median(r.b)! };
}

/** The replay benchmarks' stream: 4 Agents, seed 1, `flows` flows. */
function replayStream(flows: number, uniqueNames = REPLAY_UNIQUE_NAMES): ReplayStream {
  return new ReplayStream({ agents: 4, flows, seed: 1, uniqueNames });
}

/** One template store per Agent of `stream`, holding that Agent's templates. */
function agentStores(stream: ReplayStream, exportTime: number, wireNumbers: boolean): Store[] {
  return stream.rounds.map((_, a) => {
    const store = new TemplateStore({ wireNumbers });
    for (const m of stream.templateMessages(a, exportTime)) decodeMessage(m, store);
    return store;
  });
}

/**
 * Round `round` of the Agents' messages (copies, patched for `exportTime`) in the order they would
 * reach the collector: the Agents taken in turn.
 */
function arrivalOrder(
  stream: ReplayStream,
  round: number,
  exportTime: number,
): { msg: Uint8Array; agent: number }[] {
  const copies = stream.rounds.map((ar) => {
    ar.patch(0, ar.messages, round, exportTime);
    return ar.views.map((v) => v.slice());
  });
  const order: { msg: Uint8Array; agent: number }[] = [];
  const longest = Math.max(...copies.map((c) => c.length));
  for (let i = 0; i < longest; i++) {
    copies.forEach((c, agent) => {
      if (i < c.length) order.push({ msg: c[i], agent });
    });
  }
  return order;
}
