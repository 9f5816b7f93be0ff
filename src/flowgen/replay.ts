/**
 * The replay sender: a load generator cheap enough that a benchmark measures the collector, not
 * the generator. It encodes one round of a realistic Agent stream once (every flow of a
 * {@linkcode FlowModel} exported once, by both Nodes when inter-node, through the same encoder
 * as flowgen: {@linkcode AgentMessageEncoder}), then sends that round again and again, patching
 * in place only what changes from one export of a flow to the next: the message header's export
 * time and sequence number, flowEndSeconds, and the four total counters (each grows by its
 * record's delta per round, so counters keep growing). Export time and flowEndSeconds are the
 * flows' own clock, one second later each round from the start's wall-clock second, so every
 * record is a newer export of its flow, as an Agent's are. (With the wall clock, an unpaced
 * run's many rounds per second all carried the same second, and the collector took 86 % of them
 * as stale updates, the cheapest path of an update.) Every flow is kept alive (active-timeout
 * end reason, TCP state ESTABLISHED), so the collector sees a steady population of flows.
 * Per record that is a handful of 32-bit writes: no record object, no encoding.
 */

import { MessageBuilder, type MessageHeaderFields } from "../ipfix/mod.ts";
import { Pacer } from "./pace.ts";
import { openTransport, type Transport, type TransportTlsOptions } from "../net/transport.ts";
import { AGENT_UPDATE_FIELDS } from "../record/schema.ts";
import {
  type Agent,
  type AgentUpdate,
  FlowModel,
  type FlowModelOptions,
  type Scenario,
} from "./model.ts";
import {
  AgentMessageEncoder,
  agentTemplateMessage,
  agentUpdateOffsets,
  splitHostPort,
} from "./sender.ts";

/** Where each patched value sits in {@linkcode AGENT_UPDATE_FIELDS}. */
const FLOW_END = AGENT_UPDATE_FIELDS.indexOf("flowEndSeconds");
/** Each total counter and the delta it grows by per round: their indices in the fields. */
const COUNTERS: readonly (readonly [number, number])[] = [
  ["packetTotalCount", "packetDeltaCount"],
  ["octetTotalCount", "octetDeltaCount"],
  ["reversePacketTotalCount", "reversePacketDeltaCount"],
  ["reverseOctetTotalCount", "reverseOctetDeltaCount"],
].map(([t, d]) => [AGENT_UPDATE_FIELDS.indexOf(t), AGENT_UPDATE_FIELDS.indexOf(d)] as const);
if ([FLOW_END, ...COUNTERS.flat()].some((i) => i < 0)) {
  throw new Error("replay: AGENT_UPDATE_FIELDS lacks flowEndSeconds or a counter");
}
const TWO_32 = 4294967296;
/** Offset of the export time and of the sequence number in a message header. */
const EXPORT_TIME_AT = 4;
const SEQUENCE_AT = 8;
/** Offset of the record in a one-record message (message and set headers before it). */
const RECORD_AT = 20;

function u64(v: DataView, at: number): number {
  return v.getUint32(at) * TWO_32 + v.getUint32(at + 4);
}

/**
 * One Agent's round: its one-record data messages back to back, and where in them the values
 * that change sit. {@linkcode AgentRound.patch} makes a range of them the messages of a given
 * round.
 */
export class AgentRound {
  /** The Agent (its observation domain id is in every message header). */
  readonly agent: Agent;
  /** The messages, back to back (one write on a stream transport). */
  readonly bytes: Uint8Array;
  /** Start offset of each message, plus the end of the last one. */
  readonly starts: Int32Array;
  readonly #view: DataView;
  /** Absolute offset of flowEndSeconds per message. */
  readonly #flowEndAt: Int32Array;
  /** Absolute offsets of the four totals, four per message. */
  readonly #totalAt: Int32Array;
  /** The totals as encoded (round 0) and the matching deltas, four per message. */
  readonly #base: Float64Array;
  readonly #delta: Float64Array;
  #views: Uint8Array[] | undefined;

  /** Wraps the messages `bytes` (starting at `starts`) of `agent`, reading their counters. */
  constructor(agent: Agent, bytes: Uint8Array, starts: Int32Array, templateIds: Uint16Array) {
    this.agent = agent;
    this.bytes = bytes;
    this.starts = starts;
    this.#view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const n = starts.length - 1;
    this.#flowEndAt = new Int32Array(n);
    this.#totalAt = new Int32Array(4 * n);
    this.#base = new Float64Array(4 * n);
    this.#delta = new Float64Array(4 * n);
    for (let i = 0; i < n; i++) {
      const at = agentUpdateOffsets(templateIds[i] as 256 | 257);
      const r = starts[i] + RECORD_AT;
      this.#flowEndAt[i] = r + at[FLOW_END];
      COUNTERS.forEach(([total, delta], c) => {
        this.#totalAt[4 * i + c] = r + at[total];
        this.#base[4 * i + c] = u64(this.#view, r + at[total]);
        this.#delta[4 * i + c] = u64(this.#view, r + at[delta]);
      });
    }
  }

  /** Data messages (= records) per round. */
  get messages(): number {
    return this.starts.length - 1;
  }

  /** One view per message (one datagram each), over {@linkcode AgentRound.bytes}. */
  get views(): readonly Uint8Array[] {
    if (this.#views === undefined) {
      this.#views = [];
      for (let i = 0; i < this.messages; i++) {
        this.#views.push(this.bytes.subarray(this.starts[i], this.starts[i + 1]));
      }
    }
    return this.#views;
  }

  /**
   * Makes messages `from` to `to` (exclusive) those of round `round` (0 = as encoded) sent at
   * `exportTime` (Unix seconds): export time, sequence number (records sent by the Agent
   * including this one, as flowgen numbers them), flowEndSeconds = export time, and each total
   * = its round-0 value + `round` × its delta. Exact while totals stay below 2^53.
   */
  patch(from: number, to: number, round: number, exportTime: number): void {
    const v = this.#view;
    const seq0 = round * this.messages + 1;
    const t = exportTime >>> 0;
    for (let i = from; i < to; i++) {
      const m = this.starts[i];
      v.setUint32(m + EXPORT_TIME_AT, t);
      v.setUint32(m + SEQUENCE_AT, (seq0 + i) >>> 0);
      v.setUint32(this.#flowEndAt[i], t);
      for (let k = 4 * i; k < 4 * i + 4; k++) {
        const x = this.#base[k] + round * this.#delta[k];
        const at = this.#totalAt[k];
        v.setUint32(at, Math.floor(x / TWO_32));
        v.setUint32(at + 4, x % TWO_32);
      }
    }
  }
}

/** Options of {@linkcode ReplayStream}: the flow model's (agents, flows, mix, uniqueNames...). */
export type ReplayStreamOptions = FlowModelOptions;

/** One round of a realistic Agent stream, encoded once, per Agent. */
export class ReplayStream {
  /** Per Agent, in {@linkcode FlowModel.agents} order. */
  readonly rounds: readonly AgentRound[];
  /** Records per round, all Agents together. */
  readonly recordsPerRound: number;
  /** Records per round by scenario. */
  readonly perScenario: Readonly<Record<Scenario, number>>;
  /** Records per round that carry a Service ClusterIP (the source Node's half of a Service flow). */
  readonly clusterIpRecords: number;

  /** Encodes one export of each of `options.flows` flows. */
  constructor(options: ReplayStreamOptions) {
    const model = new FlowModel(options);
    const encoder = new AgentMessageEncoder(model);
    const builders = model.agents.map(() => new MessageBuilder());
    const starts: number[][] = model.agents.map(() => []);
    const templates: number[][] = model.agents.map(() => []);
    const header: MessageHeaderFields = {
      exportTime: 0,
      sequenceNumber: 0,
      observationDomainId: 0,
    };
    const perScenario: Partial<Record<Scenario, number>> = {};
    let clusterIp = 0;
    for (let f = 0; f < options.flows; f++) {
      for (const u of model.nextUpdates()) {
        const live = keptAlive(u);
        const b = builders[u.agent];
        starts[u.agent].push(b.length);
        templates[u.agent].push(u.templateId);
        header.observationDomainId = model.agents[u.agent].observationDomainId;
        encoder.append(b, live, header);
        perScenario[u.scenario] = (perScenario[u.scenario] ?? 0) + 1;
        if (u.scenario === "interNodeService" && u.side === 0) clusterIp++;
      }
    }
    this.rounds = model.agents.map((a, i) => {
      const b = builders[i];
      return new AgentRound(
        a,
        b.bytes().slice(),
        Int32Array.from([...starts[i], b.length]),
        Uint16Array.from(templates[i]),
      );
    });
    this.recordsPerRound = this.rounds.reduce((s, r) => s + r.messages, 0);
    this.perScenario = perScenario as Record<Scenario, number>;
    this.clusterIpRecords = clusterIp;
  }

  /** The Agent's two template messages (IPv4 256, IPv6 257), sent first on each session. */
  templateMessages(agent: number, exportTime: number): Uint8Array[] {
    const odid = this.rounds[agent].agent.observationDomainId;
    return [
      agentTemplateMessage(256, odid, exportTime, 0),
      agentTemplateMessage(257, odid, exportTime, 0),
    ];
  }
}

/**
 * The update as a flow that goes on: no last export, active-timeout end reason, and an open TCP
 * connection, whatever the model drew for this export.
 */
function keptAlive(u: AgentUpdate): AgentUpdate {
  return { ...u, last: false, flowEndReason: 2, tcpState: u.tcpState === "" ? "" : "ESTABLISHED" };
}

/** Options of {@linkcode runReplay}. */
export interface ReplayOptions extends ReplayStreamOptions {
  /** Collector `host:port` (IPv6 host in brackets). */
  target: string;
  /** Transport: one TCP or mutual-TLS connection, or one UDP socket, per Agent. */
  proto: "tcp" | "udp" | "tls";
  /** TLS material (PEM text) for `tls`: the CA of the collector, the Agent's certificate. */
  tls?: TransportTlsOptions;
  /** Target records/s, all Agents together; 0 or absent = as fast as the collector reads. */
  rate?: number;
  /** Send this many whole rounds, then stop. */
  rounds?: number;
  /** Otherwise stop after this many seconds (default 10). */
  durationSec?: number;
  /** Aborts the run early (the report covers what was sent). */
  signal?: AbortSignal;
}

/** What a replay run sent; the field names match flowgen's report where they overlap. */
export interface ReplayReport {
  /** Data records (= messages) sent. */
  records: number;
  /** Bytes of data messages sent (templates excluded). */
  bytes: number;
  /** Wall time of the data phase in seconds. */
  elapsedSec: number;
  /** Achieved records per second. */
  rate: number;
  /** Requested records per second (0 = unlimited). */
  targetRate: number;
  /** Send errors: always 0 in a report (the run throws at the first one), as in flowgen's. */
  errors: number;
  /** Transport used. */
  proto: string;
  /** Agents (= connections or sockets). */
  agents: number;
  /** Records per round of the stream. */
  recordsPerRound: number;
  /** Milliseconds spent encoding the round before sending. */
  buildMs: number;
  /** Data records sent per Agent (connection or socket), in Agent order. */
  perAgent: number[];
}

/** Sends one Agent's rounds over its transport until the end condition; resolves with records sent. */
async function sendAgent(
  round: AgentRound,
  transport: Transport,
  opts: {
    rate: number;
    rounds: number;
    endAt: number;
    stream: boolean;
    /** Unix seconds of round 0's export, the same for every Agent. */
    t0: number;
    signal?: AbortSignal;
  },
  counted: { bytes: number },
): Promise<number> {
  const n = round.messages;
  const limit = opts.rounds * n;
  // Paced: what came due per write (up to 50 ms worth after a stall); unpaced: 1,024 messages.
  const pacer = new Pacer(opts.rate, { unpacedBatch: 1024 });
  // The flows' own time: round r is exported at t0 + r seconds (see the module doc).
  const t0 = opts.t0;
  let sent = 0;
  let pos = 0;
  let r = 0;
  while (sent < limit && !opts.signal?.aborted) {
    if (performance.now() >= opts.endAt) break;
    let due = pacer.due(sent);
    if (due <= 0) {
      await pacer.wait(sent);
      continue;
    }
    due = Math.min(due, n - pos, limit - sent);
    round.patch(pos, pos + due, r, t0 + r);
    const from = round.starts[pos];
    const to = round.starts[pos + due];
    await transport.send(
      opts.stream ? [round.bytes.subarray(from, to)] : round.views.slice(pos, pos + due),
    );
    counted.bytes += to - from;
    sent += due;
    pos += due;
    if (pos === n) {
      pos = 0;
      r++;
    }
  }
  return sent;
}

/**
 * Builds the stream, opens one transport per Agent, sends each Agent's templates and then its
 * rounds (paced at its share of `rate`, or as fast as the transport takes them), and reports.
 */
export async function runReplay(options: ReplayOptions): Promise<ReplayReport> {
  const rate = options.rate ?? 0;
  const t0 = performance.now();
  const stream = new ReplayStream(options);
  const buildMs = performance.now() - t0;
  const transports: Transport[] = [];
  try {
    const { host, port } = splitHostPort(options.target);
    for (const _ of stream.rounds) {
      transports.push(
        await openTransport({
          host,
          port,
          kind: options.proto,
          tls: options.tls,
          tlsEngine: "deno",
          connectTimeoutMs: 5000,
        }),
      );
    }
    const now = Math.floor(Date.now() / 1000);
    await Promise.all(transports.map((t, i) => t.send(stream.templateMessages(i, now))));
    const start = performance.now();
    const endAt = options.rounds !== undefined
      ? Infinity
      : start + (options.durationSec ?? 10) * 1000;
    const counted = { bytes: 0 };
    const sent = await Promise.all(stream.rounds.map((r, i) =>
      sendAgent(r, transports[i], {
        rate: rate * r.messages / stream.recordsPerRound,
        rounds: options.rounds ?? Infinity,
        endAt,
        stream: options.proto !== "udp",
        // One clock reading for all: each Agent reading its own, those started after a second
        // boundary (an earlier Agent's first write in between) exported their rounds 1 s later.
        t0: now,
        signal: options.signal,
      }, counted)
    ));
    const elapsedSec = (performance.now() - start) / 1000;
    const records = sent.reduce((a, b) => a + b, 0);
    return {
      records,
      bytes: counted.bytes,
      elapsedSec,
      rate: elapsedSec > 0 ? records / elapsedSec : 0,
      targetRate: rate,
      errors: 0,
      proto: options.proto,
      agents: stream.rounds.length,
      recordsPerRound: stream.recordsPerRound,
      buildMs,
      perAgent: sent,
    };
  } catch (e) {
    throw new Error(`replay: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  } finally {
    for (const t of transports) t.close();
  }
}
