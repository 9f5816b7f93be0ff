/**
 * A simulated Antrea v1.13 Agent for the end-to-end tests: one transport session (UDP socket,
 * TCP connection or mutual-TLS connection through `node:tls`) with the Agent's observation
 * domain (FNV-1 of the Node name), templates 256 (IPv4) and 257 (IPv6) each in its own message
 * first, then one data record per message with the Agent's sequence numbering (ipfix.md §6).
 * The message encoders are the traffic generator's (`src/flowgen/sender.ts`).
 */

import tls from "node:tls";
import { agentDataMessage, agentTemplateMessage } from "../../../src/flowgen/mod.ts";
import { fnv1_32 } from "../../../src/ipfix/mod.ts";
import type { DataRecord } from "../../../src/ipfix/mod.ts";
import type { FaProcess } from "../../_helpers/process.ts";
import { readUntilClosed } from "../../collector/helpers.ts";
import { NODES, type ScenarioFlow, scenarioFlows } from "./scenarios.ts";

/** Transport of a simulated Agent. */
export type AgentTransport = "udp" | "tcp" | "tls";

/** TLS material of an Agent (PEM text). Omit `cert`/`key` to connect without a certificate. */
export interface AgentTls {
  /** CA that signed the collector's certificate. */
  ca: string;
  /** Client certificate. */
  cert?: string;
  /** Client key. */
  key?: string;
  /** Name checked against the server certificate; default `flow-aggregator.flow-aggregator.svc`. */
  servername?: string;
}

interface Wire {
  send(bytes: Uint8Array): Promise<void>;
  close(): void;
}

class UdpWire implements Wire {
  readonly #sock: Deno.DatagramConn;
  readonly #addr: Deno.NetAddr;
  constructor(host: string, port: number) {
    this.#sock = Deno.listenDatagram({
      transport: "udp",
      hostname: host.includes(":") ? "::1" : "127.0.0.1",
      port: 0,
    });
    this.#addr = { transport: "udp", hostname: host, port };
  }
  async send(bytes: Uint8Array): Promise<void> {
    await this.#sock.send(bytes, this.#addr);
  }
  close(): void {
    try {
      this.#sock.close();
    } catch {
      // already closed
    }
  }
}

class TcpWire implements Wire {
  readonly #conn: Deno.TcpConn;
  constructor(conn: Deno.TcpConn) {
    this.#conn = conn;
    conn.setNoDelay(true);
  }
  async send(bytes: Uint8Array): Promise<void> {
    let off = 0;
    while (off < bytes.length) off += await this.#conn.write(bytes.subarray(off));
  }
  /** True when the collector closed the connection within `timeoutMs` (it never writes). */
  closedByPeer(timeoutMs: number): Promise<boolean> {
    return readUntilClosed(this.#conn, timeoutMs);
  }
  close(): void {
    try {
      this.#conn.close();
    } catch {
      // already closed
    }
  }
}

/** A `node:tls` client connection; `error` holds the first socket error. */
class TlsWire implements Wire {
  readonly socket: tls.TLSSocket;
  error: Error | undefined;
  /** Resolves when the socket closed. */
  readonly closed: Promise<void>;
  constructor(socket: tls.TLSSocket) {
    this.socket = socket;
    socket.on("error", (e: Error) => this.error ??= e);
    this.closed = new Promise((r) => socket.on("close", () => r()));
    socket.resume();
  }
  send(bytes: Uint8Array): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.socket.destroyed) {
        reject(this.error ?? new Error("tls socket closed"));
        return;
      }
      this.socket.write(bytes, (err?: Error | null) => err ? reject(err) : resolve());
    });
  }
  close(): void {
    this.socket.end();
  }
}

function connectTls(host: string, port: number, t: AgentTls): Promise<TlsWire> {
  return new Promise((resolve, reject) => {
    const s = tls.connect({
      host,
      port,
      ca: [t.ca],
      servername: t.servername ?? "flow-aggregator.flow-aggregator.svc",
      ...(t.cert && t.key ? { cert: t.cert, key: t.key } : {}),
    });
    const wire = new TlsWire(s);
    s.once("secureConnect", () => resolve(wire));
    s.once("error", (e: Error) => reject(e));
  });
}

/** One simulated Agent (one Node). */
export class SimAgent {
  /** Node name, e.g. `k8s-node-1`. */
  readonly nodeName: string;
  /** Observation domain id: FNV-1 of the Node name. */
  readonly odid: number;
  /** Data records sent (the sequence number of the last data message). */
  sent = 0;
  readonly #wire: Wire;

  private constructor(nodeName: string, wire: Wire) {
    this.nodeName = nodeName;
    this.odid = fnv1_32(nodeName);
    this.#wire = wire;
  }

  /** Opens the Agent's session to the collector at `host:port`. */
  static async connect(
    nodeName: string,
    port: number,
    transport: AgentTransport,
    opts: { host?: string; tls?: AgentTls } = {},
  ): Promise<SimAgent> {
    const host = opts.host ?? "127.0.0.1";
    let wire: Wire;
    if (transport === "udp") {
      wire = new UdpWire(host, port);
    } else if (transport === "tcp") {
      wire = new TcpWire(await Deno.connect({ hostname: host, port }));
    } else {
      if (opts.tls === undefined) throw new Error("SimAgent: tls transport needs tls material");
      wire = await connectTls(host, port, opts.tls);
    }
    return new SimAgent(nodeName, wire);
  }

  /** The `node:tls` socket of a TLS Agent (undefined otherwise). */
  get tlsSocket(): tls.TLSSocket | undefined {
    return this.#wire instanceof TlsWire ? this.#wire.socket : undefined;
  }

  /** First socket error of a TLS Agent. */
  get tlsError(): Error | undefined {
    return this.#wire instanceof TlsWire ? this.#wire.error : undefined;
  }

  /** Resolves when a TLS Agent's socket closed. */
  get tlsClosed(): Promise<void> | undefined {
    return this.#wire instanceof TlsWire ? this.#wire.closed : undefined;
  }

  /** Sends templates 256 and 257, each in its own message (sequence = records sent so far). */
  async sendTemplates(exportTime = nowSeconds()): Promise<void> {
    await this.#wire.send(agentTemplateMessage(256, this.odid, exportTime, this.sent));
    await this.#wire.send(agentTemplateMessage(257, this.odid, exportTime, this.sent));
  }

  /** Sends one data record in its own message; the template follows the source address family. */
  async sendRecord(record: DataRecord, exportTime = nowSeconds()): Promise<void> {
    const templateId = record.sourceIPv6Address !== undefined ? 257 : 256;
    this.sent++;
    await this.#wire.send(agentDataMessage(templateId, record, this.odid, exportTime, this.sent));
  }

  /** Sends raw bytes as one datagram / stream write (malformed input). */
  async sendRaw(bytes: Uint8Array): Promise<void> {
    await this.#wire.send(bytes);
  }

  /** Throws unless the collector closes this TCP Agent's connection within `timeoutMs`. */
  async whenClosedByCollector(timeoutMs: number): Promise<void> {
    if (!(this.#wire instanceof TcpWire)) throw new Error("whenClosedByCollector: TCP Agents only");
    if (!await this.#wire.closedByPeer(timeoutMs)) {
      throw new Error(`${this.nodeName}: not closed by the collector within ${timeoutMs} ms`);
    }
  }

  /** Closes the session. */
  close(): void {
    this.#wire.close();
  }
}

/** Current Unix seconds. */
export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

/** A message of bytes that are not IPFIX at all (version field 0x6e6f = "no"). */
export function garbageMessage(): Uint8Array {
  return new TextEncoder().encode("not an IPFIX message, just some garbage bytes!!");
}

/** A valid data message of `odid` cut short: the header announces more bytes than follow. */
export function truncatedMessage(odid: number, record: DataRecord): Uint8Array {
  const full = agentDataMessage(256, record, odid, nowSeconds(), 1);
  return full.slice(0, Math.floor(full.length / 2));
}

/** A valid-looking message with version 9 (NetFlow v9) instead of 10. */
export function wrongVersionMessage(odid: number, record: DataRecord): Uint8Array {
  const m = agentDataMessage(256, record, odid, nowSeconds(), 1);
  new DataView(m.buffer, m.byteOffset).setUint16(0, 9);
  return m;
}

/**
 * Sends `records` from one TCP Agent (`k8s-node-1`) to the process's collector at `port`, waits
 * until the process has read them all (its debug event "session closed" after the Agent's EOF),
 * then stops it with `signal` (SIGTERM) and returns the exit status.
 */
export async function sendThenStop(
  fa: FaProcess,
  port: number,
  records: readonly DataRecord[],
  signal: Deno.Signal = "SIGTERM",
): Promise<Deno.CommandStatus> {
  const agent = await SimAgent.connect("k8s-node-1", port, "tcp");
  await agent.sendTemplates();
  for (const r of records) await agent.sendRecord(r);
  agent.close();
  await fa.waitFor({ msg: "session closed" }, 10_000);
  return await fa.stop(signal);
}

/**
 * Connects one TCP Agent per Node of {@linkcode NODES} to `port`, announces their templates
 * and sends every record of {@linkcode scenarioFlows}`(portBase)`; the Agents stay open.
 */
export async function sendScenarioFlows(
  port: number,
  portBase: number,
): Promise<{ agents: SimAgent[]; flows: ScenarioFlow[] }> {
  const agents = [
    await SimAgent.connect(NODES[0], port, "tcp"),
    await SimAgent.connect(NODES[1], port, "tcp"),
  ];
  for (const a of agents) await a.sendTemplates();
  const flows = scenarioFlows(portBase);
  for (const f of flows) for (const s of f.sends) await agents[s.node].sendRecord(s.record);
  return { agents, flows };
}
