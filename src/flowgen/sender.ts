/**
 * Sends the records of a {@linkcode FlowModel} the way Antrea v1.13 Agents do (ipfix.md §6):
 * one transport session per Agent (own observation domain, own UDP source port or TCP/TLS
 * connection), the IPv4 (256) and IPv6 (257) Agent templates in their own messages first, then
 * one data record per message with the Agent's sequence numbering (records sent including this
 * one). Pacing targets a records/s rate by sending small batches on a schedule (pace.ts);
 * on TCP/TLS a batch of messages goes out in one write per Agent. Needs `--allow-net`.
 */

import {
  encodeMessage,
  encodeTemplateSet,
  fieldsFor,
  type FieldValue,
  MESSAGE_HEADER_LENGTH,
  MessageBuilder,
  type MessageHeaderFields,
  parseIP,
  RecordEncoder,
  SET_HEADER_LENGTH,
  type TemplateRecord,
  VARIABLE_LENGTH,
} from "../ipfix/mod.ts";
import { openTransport, type Transport, type TransportTlsOptions } from "../net/transport.ts";
import { type PaceClock, Pacer } from "./pace.ts";
import {
  type AgentUpdate,
  FlowModel,
  type FlowModelOptions,
  type FlowRef,
  type Scenario,
  SCENARIOS,
} from "./model.ts";
import {
  AGENT_IPV4_FIELDS,
  AGENT_IPV6_ADDRESS_FIELDS,
  AGENT_IPV6_FIELDS,
  AGENT_UPDATE_FIELDS,
} from "../record/schema.ts";

/** Options of {@linkcode runFlowgen}. */
export interface FlowgenOptions extends FlowModelOptions {
  /** Collector `host:port` (IPv6 host in brackets). */
  target: string;
  /** Transport, default udp. */
  proto?: "udp" | "tcp" | "tls";
  /** Target records per second; 0 or absent = as fast as possible. */
  rate?: number;
  /** Stop after this many records. */
  records?: number;
  /** Stop after this many seconds (when `records` is absent; default 10). */
  durationSec?: number;
  /** TLS material (PEM text) for `tls`. */
  tls?: TransportTlsOptions;
  /** Aborts the run early (the report covers what was sent). */
  signal?: AbortSignal;
  /** The pacing's clock (tests); default `performance.now()` and timers. */
  clock?: PaceClock;
}

/** What a run sent. */
export interface FlowgenReport {
  /** Data records sent. */
  records: number;
  /** Data records per scenario. */
  perScenario: Record<Scenario, number>;
  /** Data records per Agent node name. */
  perAgent: Record<string, number>;
  /** IPv4 / IPv6 data records. */
  ipv4Records: number;
  /** IPv6 data records. */
  ipv6Records: number;
  /** IPFIX messages sent (templates included). */
  messages: number;
  /** Template messages among them. */
  templateMessages: number;
  /** Bytes sent (IPFIX messages, excluding transport headers). */
  bytes: number;
  /** Wall time of the data phase in seconds. */
  elapsedSec: number;
  /** Achieved records per second. */
  rate: number;
  /** Requested records per second (0 = unlimited). */
  targetRate: number;
  /** Transport used. */
  proto: string;
  /** Agents simulated. */
  agents: number;
  /** Send errors (the run stops at the first one). */
  errors: number;
}

const AGENT_TEMPLATES: readonly TemplateRecord[] = [
  { id: 256, fields: fieldsFor(AGENT_IPV4_FIELDS), scopeFieldCount: 0 },
  { id: 257, fields: fieldsFor(AGENT_IPV6_FIELDS), scopeFieldCount: 0 },
];
const ENCODERS = AGENT_TEMPLATES.map((t) => new RecordEncoder(t.id, t.fields));
/** Bytes around the record of a one-record data message: message and set headers. */
const DATA_OVERHEAD = MESSAGE_HEADER_LENGTH + SET_HEADER_LENGTH;

/** Encodes an Agent template message (288 bytes for the 39-field templates). */
export function agentTemplateMessage(
  templateId: 256 | 257,
  odid: number,
  exportTime: number,
  seq: number,
): Uint8Array {
  return encodeMessage(
    { exportTime, sequenceNumber: seq, observationDomainId: odid },
    [encodeTemplateSet([AGENT_TEMPLATES[templateId - 256]])],
  );
}

/** Encodes one Agent data message holding one record (Agents never batch). */
export function agentDataMessage(
  templateId: 256 | 257,
  record: Readonly<Record<string, FieldValue | undefined>>,
  odid: number,
  exportTime: number,
  seq: number,
): Uint8Array {
  const enc = ENCODERS[templateId - 256];
  const n = enc.encodedLength(record);
  const out = new MessageBuilder(DATA_OVERHEAD + n);
  const header = { exportTime, sequenceNumber: seq, observationDomainId: odid };
  enc.write(out.view, out.appendMessage(header, templateId, n), record);
  return out.bytes();
}

// The fields an update changes, all in the fixed-length head of the Agent templates (before
// their first variable-length field), so their offsets are the same in every record. `append`
// writes them by index: flowEndSeconds, flowEndReason, then the eight counters in template order.
const PATCHED = AGENT_UPDATE_FIELDS;

interface Layout {
  /** Offset of each PATCHED field in the record, same order. */
  readonly at: number[];
  /** Field lengths in wire order (VARIABLE_LENGTH for variable ones). */
  readonly lengths: number[];
  /** Index of tcpState, the one variable-length field an update changes. */
  readonly tcpStateIndex: number;
}

function layoutOf(enc: RecordEncoder): Layout {
  const lengths = enc.fields.map((f) => f.length);
  const at: number[] = [];
  for (const name of PATCHED) {
    const i = enc.names.indexOf(name);
    let off = 0;
    for (let j = 0; j < i; j++) {
      if (lengths[j] === VARIABLE_LENGTH) throw new Error(`flowgen: ${name} not at a fixed offset`);
      off += lengths[j];
    }
    if (i < 0 || lengths[i] === VARIABLE_LENGTH) throw new Error(`flowgen: no fixed ${name}`);
    at.push(off);
  }
  return { at, lengths, tcpStateIndex: enc.names.indexOf("tcpState") };
}

const LAYOUTS = ENCODERS.map(layoutOf);

/**
 * Offsets, from the start of an Agent data record of `templateId`, of the fields an update
 * changes, in the order of `AGENT_UPDATE_FIELDS` (src/record/schema.ts): flowEndSeconds,
 * flowEndReason, then the eight counters in template order. They are the same in every record
 * of the template (all sit before its first variable-length field).
 */
export function agentUpdateOffsets(templateId: 256 | 257): readonly number[] {
  return LAYOUTS[templateId - 256].at;
}

/** A flow side's encoded record as first sent, with where its tcpState value sits. */
interface CachedRecord {
  /** The record bytes. */
  readonly bytes: Uint8Array;
  /** The tcpState value they hold. */
  readonly tcpState: string;
  /** Offset of tcpState's length prefix. */
  readonly tcpAt: number;
  /** Offset after tcpState's value. */
  readonly tcpEnd: number;
}

const IPV6_FIELDS = AGENT_IPV6_ADDRESS_FIELDS;

/**
 * Encodes the Agent data messages of a {@linkcode FlowModel}'s updates. Each flow side is
 * encoded with the codec once, on its first export; later exports copy those bytes and patch
 * the few values that change (counters, flow end, end reason, tcpState), so the output is
 * byte-identical to {@linkcode agentDataMessage} of {@linkcode FlowModel.recordOf} at a fraction
 * of the cost (no record object, no IP text parsing, no string encoding per record).
 */
export class AgentMessageEncoder {
  readonly #model: FlowModel;
  readonly #cache = new Map<FlowRef, [CachedRecord | undefined, CachedRecord | undefined]>();
  // Pod IPv6 addresses repeat across flows: parse each text once.
  readonly #ipv6 = new Map<string, Uint8Array>();

  /** An encoder for the updates of `model`. */
  constructor(model: FlowModel) {
    this.#model = model;
  }

  /** Flows with a cached encoding (their flows have not ended yet). */
  get cachedFlows(): number {
    return this.#cache.size;
  }

  /** Appends the one-record data message of `u` to `batch`; returns its length in bytes. */
  append(batch: MessageBuilder, u: AgentUpdate, header: Readonly<MessageHeaderFields>): number {
    const sides = this.#cache.get(u.flow);
    const rec = sides?.[u.side];
    if (rec === undefined) return this.#appendFirst(batch, u, header, sides);
    if (u.last) this.#cache.delete(u.flow);
    const bytes = rec.bytes;
    const ts = u.tcpState;
    // Only a flow's final export changes its tcpState (and so the record's length).
    const same = ts === rec.tcpState;
    const len = same ? bytes.length : bytes.length - (rec.tcpEnd - rec.tcpAt - 1) + ts.length;
    const r = batch.appendMessage(header, u.templateId, len);
    const b = batch.buffer;
    const v = batch.view;
    if (same) {
      b.set(bytes, r);
    } else {
      b.set(bytes.subarray(0, rec.tcpAt), r);
      let p = r + rec.tcpAt;
      b[p++] = ts.length; // short ASCII states
      for (let i = 0; i < ts.length; i++) b[p++] = ts.charCodeAt(i);
      b.set(bytes.subarray(rec.tcpEnd), p);
    }
    const at = LAYOUTS[u.templateId - 256].at;
    v.setUint32(r + at[0], u.flowEndSeconds >>> 0);
    v.setUint8(r + at[1], u.flowEndReason);
    v.setBigUint64(r + at[2], u.packetTotalCount);
    v.setBigUint64(r + at[3], u.octetTotalCount);
    v.setBigUint64(r + at[4], u.packetDeltaCount);
    v.setBigUint64(r + at[5], u.octetDeltaCount);
    v.setBigUint64(r + at[6], u.reversePacketTotalCount);
    v.setBigUint64(r + at[7], u.reverseOctetTotalCount);
    v.setBigUint64(r + at[8], u.reversePacketDeltaCount);
    v.setBigUint64(r + at[9], u.reverseOctetDeltaCount);
    return DATA_OVERHEAD + len;
  }

  /** A flow side's first export: the codec writes it into the batch, then it is cached. */
  #appendFirst(
    batch: MessageBuilder,
    u: AgentUpdate,
    header: Readonly<MessageHeaderFields>,
    sides: [CachedRecord | undefined, CachedRecord | undefined] | undefined,
  ): number {
    const enc = ENCODERS[u.templateId - 256];
    const record = this.#model.recordOf(u);
    if (u.templateId === 257) {
      for (const name of IPV6_FIELDS) {
        const text = record[name];
        if (typeof text !== "string") continue;
        let ip = this.#ipv6.get(text);
        if (ip === undefined) {
          ip = parseIP(text);
          if (ip === undefined) continue; // let the codec report it
          if (this.#ipv6.size >= 65536) this.#ipv6.clear();
          this.#ipv6.set(text, ip);
        }
        record[name] = ip;
      }
    }
    const n = enc.encodedLength(record);
    const r = batch.appendMessage(header, u.templateId, n);
    enc.write(batch.view, r, record);
    const len = DATA_OVERHEAD + n;
    if (u.last) return len; // a one-export flow (denied) is never seen again
    const bytes = batch.buffer.slice(r, r + n);
    // Walk the record to tcpState: fixed fields by length, variable ones by their prefix.
    const layout = LAYOUTS[u.templateId - 256];
    let p = 0;
    for (let i = 0; i < layout.tcpStateIndex; i++) {
      const f = layout.lengths[i];
      if (f !== VARIABLE_LENGTH) p += f;
      else if (bytes[p] < 255) p += 1 + bytes[p];
      else p += 3 + ((bytes[p + 1] << 8) | bytes[p + 2]);
    }
    const rec: CachedRecord = { bytes, tcpState: u.tcpState, tcpAt: p, tcpEnd: p + 1 + bytes[p] };
    if (sides === undefined) {
      this.#cache.set(u.flow, [u.side === 0 ? rec : undefined, u.side === 1 ? rec : undefined]);
    } else sides[u.side] = rec;
    return len;
  }
}

/** Splits a `host:port` target (IPv6 host in brackets); throws naming what is wrong. */
export function splitHostPort(target: string): { host: string; port: number } {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(target) ?? /^([^:]+):(\d+)$/.exec(target);
  if (m === null) throw new Error(`flowgen: target "${target}" is not host:port`);
  const port = Number(m[2]);
  if (port < 1 || port > 65535) throw new Error(`flowgen: port ${port} out of range`);
  return { host: m[1], port };
}

/** Runs the generator to completion and returns what it sent. */
export async function runFlowgen(options: FlowgenOptions): Promise<FlowgenReport> {
  const { host, port } = splitHostPort(options.target);
  const proto = options.proto ?? "udp";
  const rate = options.rate ?? 0;
  const limit = options.records;
  const durationMs = limit === undefined ? (options.durationSec ?? 10) * 1000 : Infinity;
  const model = new FlowModel(options);
  const agents = model.agents;
  const report: FlowgenReport = {
    records: 0,
    perScenario: Object.fromEntries(SCENARIOS.map((s) => [s, 0])) as Record<Scenario, number>,
    perAgent: Object.fromEntries(agents.map((a) => [a.nodeName, 0])),
    ipv4Records: 0,
    ipv6Records: 0,
    messages: 0,
    templateMessages: 0,
    bytes: 0,
    elapsedSec: 0,
    rate: 0,
    targetRate: rate,
    proto,
    agents: agents.length,
    errors: 0,
  };
  const transports: Transport[] = [];
  try {
    for (const _ of agents) {
      transports.push(
        await openTransport({
          host,
          port,
          kind: proto,
          tls: options.tls,
          tlsEngine: "deno",
          connectTimeoutMs: 5000,
        }),
      );
    }
    const seqs = agents.map(() => 0);
    const now = Math.floor(Date.now() / 1000);
    // Each Agent announces both templates, each in its own message, before any data.
    await Promise.all(agents.map((a, i) => {
      const msgs = [
        agentTemplateMessage(256, a.observationDomainId, now, 0),
        agentTemplateMessage(257, a.observationDomainId, now, 0),
      ];
      report.templateMessages += 2;
      report.messages += 2;
      report.bytes += msgs[0].length + msgs[1].length;
      return transports[i].send(msgs);
    }));

    // An inter-node flow yields two records; one may wait for the next batch.
    const pending: AgentUpdate[] = [];
    let pendingAt = 0;
    const encoder = new AgentMessageEncoder(model);
    // One reused buffer per Agent: a whole batch goes out in one write per Agent (UDP: one
    // datagram per message), and the next batch starts only once every write has completed.
    const batches = agents.map(() => new MessageBuilder());
    const stream = proto !== "udp";
    const perScenario = SCENARIOS.map(() => 0);
    const scenarioIndex = new Map(SCENARIOS.map((s, i) => [s, i]));
    const perAgent = agents.map(() => 0);
    const header: MessageHeaderFields = {
      exportTime: 0,
      sequenceNumber: 0,
      observationDomainId: 0,
    };
    const pacer = new Pacer(rate, { unpacedBatch: 512, clock: options.clock });
    while (!options.signal?.aborted) {
      if (pacer.elapsedMs() >= durationMs) break;
      if (limit !== undefined && report.records >= limit) break;
      let due = pacer.due(report.records);
      if (limit !== undefined) due = Math.min(due, limit - report.records);
      if (due <= 0) {
        await pacer.wait(report.records);
        continue;
      }
      for (const b of batches) b.reset();
      header.exportTime = Math.floor(Date.now() / 1000);
      for (let n = 0; n < due; n++) {
        if (pendingAt === pending.length) {
          pending.length = 0;
          pendingAt = 0;
          for (const u of model.nextUpdates()) pending.push(u);
        }
        const u = pending[pendingAt++];
        const a = u.agent;
        seqs[a] = (seqs[a] + 1) >>> 0;
        header.observationDomainId = agents[a].observationDomainId;
        header.sequenceNumber = seqs[a];
        report.bytes += encoder.append(batches[a], u, header);
        perScenario[scenarioIndex.get(u.scenario)!]++;
        perAgent[a]++;
        if (u.templateId === 257) report.ipv6Records++;
        else report.ipv4Records++;
      }
      await Promise.all(
        batches.map((b, i) =>
          b.count === 0 ? null : transports[i].send(stream ? [b.bytes()] : b.messages())
        ),
      );
      report.records += due;
      report.messages += due;
      SCENARIOS.forEach((s, i) => report.perScenario[s] = perScenario[i]);
      agents.forEach((a, i) => report.perAgent[a.nodeName] = perAgent[i]);
    }
    const elapsedMs = pacer.elapsedMs();
    report.elapsedSec = elapsedMs / 1000;
    report.rate = elapsedMs > 0 ? report.records / report.elapsedSec : 0;
  } catch (e) {
    report.errors++;
    throw new Error(`flowgen: ${e instanceof Error ? e.message : String(e)}`);
  } finally {
    for (const t of transports) t.close();
  }
  return report;
}

/** Formats a report as human-readable text. */
export function formatReport(r: FlowgenReport): string {
  const pct = r.targetRate > 0
    ? ` (${((r.rate / r.targetRate - 1) * 100).toFixed(2)}% vs target)`
    : "";
  const lines = [
    `flowgen: ${r.records} records from ${r.agents} agents over ${r.proto} in ${
      r.elapsedSec.toFixed(3)
    } s`,
    `  rate      ${r.rate.toFixed(0)} records/s, target ${
      r.targetRate > 0 ? r.targetRate : "unlimited"
    }${pct}`,
    `  messages  ${r.messages} (${r.templateMessages} template), ${r.bytes} bytes`,
    `  family    ipv4 ${r.ipv4Records}, ipv6 ${r.ipv6Records}`,
    `  scenarios ${Object.entries(r.perScenario).map(([k, v]) => `${k}=${v}`).join(" ")}`,
    `  agents    ${Object.entries(r.perAgent).map(([k, v]) => `${k}=${v}`).join(" ")}`,
  ];
  return lines.join("\n");
}
