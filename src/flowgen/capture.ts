/**
 * A small IPFIX capture endpoint (TCP, TLS or UDP) that keeps every message it receives, raw and
 * decoded with the project codec (one template scope per TCP connection / UDP source). It is the
 * "external collector" of the exporter tests and of `flowgen --self-test`; it is deliberately
 * not the production collector, so a bug in one is not hidden by the same bug in the other.
 * It can also drop its connections or stop listening to simulate a collector that goes away.
 */

import {
  type DataRecord,
  decodeMessage,
  type MessageHeader,
  readMessageLength,
  TemplateStore,
} from "../ipfix/mod.ts";

/** One received message. */
export interface CapturedMessage {
  /** Raw bytes as received (one UDP datagram or one framed TCP message). */
  readonly bytes: Uint8Array;
  /** Decoded header, when the message decoded. */
  readonly header?: MessageHeader;
  /** Set ids in message order. */
  readonly setIds: number[];
  /** Template records in the message. */
  readonly templateRecords: number;
  /** Connection (TCP/TLS) or source address (UDP) it came from. */
  readonly session: string;
}

/** One received data record. */
export interface CapturedRecord {
  /** Template id of its data set. */
  readonly templateId: number;
  /** Observation domain id of its message. */
  readonly observationDomainId: number;
  /** Sequence number of its message. */
  readonly sequenceNumber: number;
  /** Decoded values keyed by IE name. */
  readonly record: DataRecord;
}

/** Options of {@linkcode CaptureServer.listen}. */
export interface CaptureOptions {
  /** Transport; default tcp. */
  kind?: "tcp" | "udp" | "tls";
  /** Port; default 0 (ephemeral). */
  port?: number;
  /** Address; default 127.0.0.1. */
  hostname?: string;
  /** Server certificate and key (PEM), kind tls. */
  cert?: string;
  /** Server key (PEM), kind tls. */
  key?: string;
  /** When true keep JSON lines instead of decoding IPFIX (recordFormat JSON). */
  json?: boolean;
}

function splitSets(bytes: Uint8Array): number[] {
  const ids: number[] = [];
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let off = 16;
  while (off + 4 <= bytes.length) {
    const id = v.getUint16(off);
    const len = v.getUint16(off + 2);
    ids.push(id);
    if (len < 4) break;
    off += len;
  }
  return ids;
}

/** An IPFIX capture endpoint. */
export class CaptureServer {
  /** Every message, in arrival order. */
  readonly messages: CapturedMessage[] = [];
  /** Every decoded data record, in arrival order. */
  readonly records: CapturedRecord[] = [];
  /** JSON lines (json mode). */
  readonly lines: string[] = [];
  /** Messages or sets that did not decode. */
  decodeErrors = 0;
  /** Data sets whose template was unknown. */
  templateMisses = 0;
  /** Connections accepted (stream kinds). */
  connections = 0;
  /** Set when a peer closed its connection. */
  peerCloses = 0;
  readonly #kind: "tcp" | "udp" | "tls";
  readonly #json: boolean;
  readonly #opts: CaptureOptions;
  #listener?: Deno.Listener;
  #udp?: Deno.DatagramConn;
  readonly #conns = new Set<Deno.Conn>();
  #port = 0;
  #loops: Promise<void>[] = [];

  private constructor(opts: CaptureOptions) {
    this.#opts = opts;
    this.#kind = opts.kind ?? "tcp";
    this.#json = opts.json ?? false;
  }

  /** Starts listening. */
  static listen(opts: CaptureOptions = {}): CaptureServer {
    const s = new CaptureServer(opts);
    s.#open(opts.port ?? 0);
    return s;
  }

  /** The bound port. */
  get port(): number {
    return this.#port;
  }

  /** Data records received for `templateId` (all when omitted). */
  recordsFor(templateId?: number): CapturedRecord[] {
    return templateId === undefined
      ? this.records
      : this.records.filter((r) => r.templateId === templateId);
  }

  #open(port: number): void {
    const hostname = this.#opts.hostname ?? "127.0.0.1";
    if (this.#kind === "udp") {
      this.#udp = Deno.listenDatagram({ transport: "udp", hostname, port });
      this.#port = (this.#udp.addr as Deno.NetAddr).port;
      this.#loops.push(this.#udpLoop(this.#udp));
      return;
    }
    this.#listener = this.#kind === "tls"
      ? Deno.listenTls({ hostname, port, cert: this.#opts.cert!, key: this.#opts.key! })
      : Deno.listen({ hostname, port });
    this.#port = (this.#listener.addr as Deno.NetAddr).port;
    this.#loops.push(this.#acceptLoop(this.#listener));
  }

  /** Closes every accepted connection (the exporter sees EOF) but keeps listening. */
  dropConnections(): void {
    for (const c of this.#conns) {
      try {
        c.close();
      } catch {
        // already closed
      }
    }
    this.#conns.clear();
  }

  /** Stops listening and closes everything; `reopen()` listens again on the same port. */
  async close(): Promise<void> {
    this.dropConnections();
    try {
      this.#listener?.close();
    } catch {
      // already closed
    }
    try {
      this.#udp?.close();
    } catch {
      // already closed
    }
    this.#listener = undefined;
    this.#udp = undefined;
    await Promise.allSettled(this.#loops);
    this.#loops = [];
  }

  /** Listens again on the port used before. */
  reopen(): void {
    this.#open(this.#port);
  }

  /** Resolves once `pred()` holds; rejects after `timeoutMs` (polls every 5 ms). */
  async waitFor(pred: () => boolean, timeoutMs = 5000, what = "condition"): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (!pred()) {
      if (performance.now() > deadline) throw new Error(`capture: timeout waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 5));
    }
  }

  #handle(bytes: Uint8Array, session: string, store: TemplateStore): void {
    if (this.#json) {
      for (const line of new TextDecoder().decode(bytes).split("\n")) {
        if (line !== "") this.lines.push(line);
      }
      this.messages.push({ bytes, setIds: [], templateRecords: 0, session });
      return;
    }
    try {
      const m = decodeMessage(bytes, store);
      this.messages.push({
        bytes,
        header: m.header,
        setIds: splitSets(bytes),
        templateRecords: m.templateRecords,
        session,
      });
      this.templateMisses += m.templateMisses.length;
      this.decodeErrors += m.setErrors.length;
      for (const ds of m.dataSets) {
        for (const record of ds.records) {
          this.records.push({
            templateId: ds.templateId,
            observationDomainId: m.header.observationDomainId,
            sequenceNumber: m.header.sequenceNumber,
            record,
          });
        }
      }
    } catch {
      this.decodeErrors++;
      this.messages.push({ bytes, setIds: [], templateRecords: 0, session });
    }
  }

  async #udpLoop(sock: Deno.DatagramConn): Promise<void> {
    const stores = new Map<string, TemplateStore>();
    try {
      for await (const [data, addr] of sock) {
        const a = addr as Deno.NetAddr;
        const session = `${a.hostname}:${a.port}`;
        let store = stores.get(session);
        if (store === undefined) {
          store = new TemplateStore();
          stores.set(session, store);
        }
        this.#handle(data.slice(), session, store);
      }
    } catch {
      // closed
    }
  }

  async #acceptLoop(listener: Deno.Listener): Promise<void> {
    const conns: Promise<void>[] = [];
    try {
      for await (const conn of listener) {
        this.connections++;
        this.#conns.add(conn);
        conns.push(this.#connLoop(conn, `conn-${this.connections}`));
      }
    } catch {
      // closed
    }
    await Promise.allSettled(conns);
  }

  async #connLoop(conn: Deno.Conn, session: string): Promise<void> {
    const store = new TemplateStore();
    let buf = new Uint8Array(0);
    const chunk = new Uint8Array(65536);
    try {
      while (true) {
        const n = await conn.read(chunk);
        if (n === null) {
          this.peerCloses++;
          break;
        }
        const next = new Uint8Array(buf.length + n);
        next.set(buf);
        next.set(chunk.subarray(0, n), buf.length);
        buf = next;
        if (this.#json) {
          const nl = buf.lastIndexOf(10);
          if (nl >= 0) {
            this.#handle(buf.slice(0, nl + 1), session, store);
            buf = buf.slice(nl + 1);
          }
          continue;
        }
        let off = 0;
        while (buf.length - off >= 4) {
          const len = readMessageLength(buf, off);
          if (len < 16) {
            this.decodeErrors++;
            throw new Error("bad length");
          }
          if (buf.length - off < len) break;
          this.#handle(buf.slice(off, off + len), session, store);
          off += len;
        }
        buf = buf.slice(off);
      }
    } catch {
      // reset, closed locally or unframeable
    }
    this.#conns.delete(conn);
    try {
      conn.close();
    } catch {
      // already closed
    }
  }
}
