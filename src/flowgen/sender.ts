/**
 * Sends the records of a {@linkcode FlowModel} the way Antrea v1.13 Agents do (ipfix.md §6):
 * one transport session per Agent (own observation domain, own UDP source port or TCP/TLS
 * connection), the IPv4 (256) and IPv6 (257) Agent templates in their own messages first, then
 * one data record per message with the Agent's sequence numbering (records sent including this
 * one). Pacing targets a records/s rate by sending small batches against `performance.now()`;
 * on TCP/TLS a batch of messages goes out in one write per Agent. Needs `--allow-net`.
 */

import {
  AGENT_IPV4_FIELDS,
  AGENT_IPV6_FIELDS,
  encodeTemplateSet,
  fieldsFor,
  type FieldValue,
  RecordEncoder,
  type TemplateRecord,
} from "../ipfix/mod.ts";
import {
  openTransport,
  type Transport,
  type TransportTlsOptions,
} from "../exporters/ipfix_transport.ts";
import { FlowModel, type FlowModelOptions, type Scenario, SCENARIOS } from "./model.ts";

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

function header(m: Uint8Array, exportTime: number, seq: number, odid: number): DataView {
  const v = new DataView(m.buffer, m.byteOffset, m.byteLength);
  v.setUint16(0, 10);
  v.setUint16(2, m.length);
  v.setUint32(4, exportTime >>> 0);
  v.setUint32(8, seq >>> 0);
  v.setUint32(12, odid >>> 0);
  return v;
}

/** Encodes an Agent template message (288 bytes for the 39-field templates). */
export function agentTemplateMessage(
  templateId: 256 | 257,
  odid: number,
  exportTime: number,
  seq: number,
): Uint8Array {
  const set = encodeTemplateSet([AGENT_TEMPLATES[templateId - 256]]);
  const m = new Uint8Array(16 + set.length);
  header(m, exportTime, seq, odid);
  m.set(set, 16);
  return m;
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
  const len = 20 + enc.encodedLength(record);
  const m = new Uint8Array(len);
  const v = header(m, exportTime, seq, odid);
  v.setUint16(16, templateId);
  v.setUint16(18, len - 16);
  enc.write(v, 20, record);
  return m;
}

function splitHostPort(target: string): { host: string; port: number } {
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
        await openTransport({ host, port, kind: proto, tls: options.tls, connectTimeoutMs: 5000 }),
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

    // On schedule each pass sends what ~1 ms of traffic is due; after a stall (CPU contention,
    // TCP back-pressure) up to 50 ms worth goes out at once so the average rate recovers.
    const maxBatch = rate > 0 ? Math.max(1, Math.min(8192, Math.ceil(rate / 20))) : 512;
    const pending: ReturnType<FlowModel["next"]> = [];
    const start = performance.now();
    let elapsedMs = 0;
    while (!options.signal?.aborted) {
      elapsedMs = performance.now() - start;
      if (elapsedMs >= durationMs) break;
      if (limit !== undefined && report.records >= limit) break;
      let due = rate > 0
        ? Math.min(maxBatch, Math.floor((rate * elapsedMs) / 1000) + 1 - report.records)
        : maxBatch;
      if (limit !== undefined) due = Math.min(due, limit - report.records);
      if (due <= 0) {
        // Sleep until the next record is due (timers have ~1 ms granularity).
        const nextAt = ((report.records) / rate) * 1000;
        await new Promise((r) => setTimeout(r, Math.max(0, Math.min(5, nextAt - elapsedMs))));
        continue;
      }
      const perAgent: Uint8Array[][] = agents.map(() => []);
      const exportTime = Math.floor(Date.now() / 1000);
      for (let n = 0; n < due; n++) {
        if (pending.length === 0) pending.push(...model.next());
        const r = pending.shift()!;
        seqs[r.agent] = (seqs[r.agent] + 1) >>> 0;
        const msg = agentDataMessage(
          r.templateId,
          r.record,
          agents[r.agent].observationDomainId,
          exportTime,
          seqs[r.agent],
        );
        perAgent[r.agent].push(msg);
        report.bytes += msg.length;
        report.perScenario[r.scenario]++;
        report.perAgent[agents[r.agent].nodeName]++;
        if (r.templateId === 257) report.ipv6Records++;
        else report.ipv4Records++;
      }
      await Promise.all(perAgent.map((msgs, i) => msgs.length ? transports[i].send(msgs) : null));
      report.records += due;
      report.messages += due;
    }
    elapsedMs = performance.now() - start;
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
