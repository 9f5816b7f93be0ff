/**
 * Micro benchmark of the shard input rows (src/shard/input_rows.ts) on one thread: records/s
 * encoding the replay sender's realistic stream into frames, decoding those frames back, and
 * both through a ring (write, read, decode on the same thread), next to the IPFIX decode of the
 * same stream in wire-number mode (what the main thread does before encoding). Each figure is
 * the median of 5 timed passes over the whole stream, after a warm-up pass; the four passes are
 * interleaved (the machine is shared, so their ratios are the steadier figures).
 *
 *     deno run -A scripts/bench/shard_rows.ts [--flows=20000] [--rounds=3]
 */

import { decodeMessage, TemplateStore } from "../../src/ipfix/mod.ts";
import type { FlowInput } from "../../src/aggregation/record.ts";
import { ReplayStream } from "../../src/flowgen/mod.ts";
import { InputRowReader, InputRowWriter } from "../../src/shard/input_rows.ts";
import { createRing, RingReader, RingWriter } from "../../src/shard/ring.ts";
import { median } from "./baseline.ts";
import { REPLAY_UNIQUE_NAMES } from "./core.ts";

/** The replay stream's messages in arrival order and the template stores to decode them. */
export interface RealisticStream {
  /** Messages of every round, the Agents taken in turn; `agent` selects the store. */
  readonly messages: readonly { readonly msg: Uint8Array; readonly agent: number }[];
  /** One store per Agent, holding its templates, in wire-number mode. */
  readonly stores: readonly TemplateStore[];
}

/**
 * `rounds` export rounds of the replay sender's stream (4 Agents, seed 1, `flows` flows: inter
 * and intra Node, Services, external, denied, IPv6), as the collector would receive them.
 */
export function realisticStream(flows: number, rounds: number): RealisticStream {
  const stream = new ReplayStream({ agents: 4, flows, seed: 1, uniqueNames: REPLAY_UNIQUE_NAMES });
  const t0 = 1_700_000_000;
  const stores = stream.rounds.map((_, a) => {
    const store = new TemplateStore({ wireNumbers: true });
    for (const m of stream.templateMessages(a, t0)) decodeMessage(m, store);
    return store;
  });
  const messages: { msg: Uint8Array; agent: number }[] = [];
  for (let r = 0; r < rounds; r++) {
    const copies = stream.rounds.map((ar) => {
      ar.patch(0, ar.messages, r, t0 + 10 * r);
      return ar.views.map((v) => v.slice());
    });
    const longest = Math.max(...copies.map((c) => c.length));
    for (let i = 0; i < longest; i++) {
      copies.forEach((c, agent) => {
        if (i < c.length) messages.push({ msg: c[i], agent });
      });
    }
  }
  return { messages, stores };
}

/** The records of a stream decoded in wire-number mode, as the collector hands them on. */
export function decodeStream(s: RealisticStream): FlowInput[] {
  const out: FlowInput[] = [];
  for (const { msg, agent } of s.messages) {
    for (const ds of decodeMessage(msg, s.stores[agent]).dataSets) {
      for (const r of ds.records) out.push(r as unknown as FlowInput);
    }
  }
  return out;
}

/**
 * Median records/s of each pass (each handles `n` records) over `runs` rounds after a warm-up
 * round; a round runs every pass once, so a change of the machine's load (it is shared) spreads
 * over all of them and their ratios hold.
 */
function rates(n: number, runs: number, passes: readonly (() => void)[]): number[] {
  for (const pass of passes) pass();
  const out: number[][] = passes.map(() => []);
  for (let i = 0; i < runs; i++) {
    passes.forEach((pass, k) => {
      const t0 = performance.now();
      pass();
      out[k].push(n / ((performance.now() - t0) / 1000));
    });
  }
  return out.map((r) => median(r)!);
}

/** Results of {@linkcode benchShardRows} (records/s unless said otherwise). */
export interface ShardRowsRates {
  readonly records: number;
  readonly ipfixDecode: number;
  readonly encode: number;
  readonly decode: number;
  readonly ringRoundTrip: number;
  /** Frame bytes per record in the steady state (strings already in the dictionary). */
  readonly bytesPerRecord: number;
}

/** Measures the input rows on the realistic stream (see the module doc). */
export function benchShardRows(flows: number, rounds: number): ShardRowsRates {
  const stream = realisticStream(flows, rounds);
  const records = decodeStream(stream);
  let sink = 0;
  const ipfixDecode = (): void => {
    for (const { msg, agent } of stream.messages) {
      sink += decodeMessage(msg, stream.stores[agent]).dataSets.length;
    }
  };

  // Encode: one writer for all passes (the dictionary is warm after the first, as on a ring).
  let bytes = 0;
  const writer = new InputRowWriter((f) => {
    bytes += f.length;
    return true;
  });
  const encode = (): void => {
    bytes = 0;
    for (const r of records) writer.add(r);
    writer.flush();
  };

  // Decode: the frames of a fresh writer (its first frames define the strings), a fresh reader
  // per pass.
  const frames: Uint8Array[] = [];
  const w2 = new InputRowWriter((f) => {
    frames.push(f.slice());
    return true;
  });
  for (const r of records) w2.add(r);
  w2.flush();
  const decode = (): void => {
    const reader = new InputRowReader();
    for (const f of frames) reader.read(f, () => sink++);
  };

  // Through a ring on one thread: each frame is read back and decoded as soon as it is written.
  const sab = createRing(1 << 20);
  const ringWriter = new RingWriter(sab);
  const ringReader = new RingReader(sab);
  const reader = new InputRowReader();
  const onRecord = (): void => {
    sink++;
  };
  const w3 = new InputRowWriter((f) => {
    if (!ringWriter.write(f)) return false;
    const got = ringReader.next()!;
    reader.read(got, onRecord);
    ringReader.release();
    return true;
  });
  const ringRoundTrip = (): void => {
    for (const r of records) w3.add(r);
    w3.flush();
  };
  const [a, b, c, d] = rates(records.length, 5, [ipfixDecode, encode, decode, ringRoundTrip]);
  if (sink <= 0) throw new Error("unreachable");
  return {
    records: records.length,
    ipfixDecode: a,
    encode: b,
    decode: c,
    ringRoundTrip: d,
    bytesPerRecord: bytes / records.length,
  };
}

function flag(name: string, fallback: number): number {
  const a = Deno.args.find((x) => x.startsWith(`--${name}=`));
  return a === undefined ? fallback : Number(a.slice(name.length + 3));
}

if (import.meta.main) {
  const r = benchShardRows(flag("flows", 20_000), flag("rounds", 3));
  const fmt = (x: number): string => `${Math.round(x).toLocaleString("en-US")} records/s`;
  console.log(`realistic stream: ${r.records} records (median of 5 passes, one thread)`);
  console.log(`  IPFIX decode (wire-number mode):  ${fmt(r.ipfixDecode)}`);
  console.log(`  input rows encode:                ${fmt(r.encode)}`);
  console.log(`  input rows decode:                ${fmt(r.decode)}`);
  console.log(`  encode + ring + decode:           ${fmt(r.ringRoundTrip)}`);
  console.log(`  frame bytes per record:           ${r.bytesPerRecord.toFixed(1)}`);
}
