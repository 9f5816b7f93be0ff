/**
 * Mutual-TLS listener. `Deno.listenTls` cannot request client certificates, so the TLS layer
 * is `node:tls` (`requestCert` + `rejectUnauthorized` + `ca`): a client without a certificate,
 * or with one not signed by the CA, fails the handshake and is counted. After the handshake a
 * connection behaves exactly like a TCP one ({@linkcode StreamSession}).
 *
 * The sockets are ours, not node's: connections are accepted with `Deno.listen` and their
 * encrypted bytes read by this listener, with the TCP listener's bounded turns and shared read
 * tick (`fairness.ts`), then handed through a `Duplex` to a `node:tls` server of the
 * connection's own (never listening), which decrypts them. node's TLS server read its sockets itself, without bound: a connection whose
 * peer paused for 300 ms was not read again for 4.4-5.7 s while three busy ones delivered ~490k
 * records each (over TCP: 0.3-0.4 s), and `pause()` did not stop those reads. The raw bytes
 * wait in the kernel until this listener reads them, and no more than the Duplex's buffer is
 * read ahead of what the TLS layer has taken.
 *
 * The caps count a connection from accept (before its handshake, which is capped and timed
 * too), so half-open handshakes cannot hold sockets or memory without bound.
 */

import tls from "node:tls";
import { Duplex } from "node:stream";
import { writeAll } from "../bytes.ts";
import { closeQuietly, exporterAddress, type ListenAddress, sessionPeer } from "./address.ts";
import { ConnectionTable, countUnfinished } from "./connections.ts";
import type { DrainOptions } from "./drain.ts";
import { FairTurn, ReadClock, ReadGate, TURN_BYTES } from "./fairness.ts";
import { Session, type SessionEnv } from "./session.ts";
import { StreamSession } from "./stream.ts";
import { acceptLoop, bindTcp, type StreamListenerOptions } from "./tcp.ts";

/** PEM material of the TLS listener. */
export interface TlsMaterial {
  /** CA that client certificates must chain to. */
  readonly caPem: string;
  /** Server certificate. */
  readonly certPem: string;
  /** Server private key. */
  readonly keyPem: string;
}

/**
 * Size of a connection's first read of encrypted bytes, and what it shrinks back to once the
 * peer is caught up with; it doubles while reads fill it, up to one turn ({@linkcode TURN_BYTES}).
 */
const MIN_READ_BYTES = 1024;

/** A mutual-TLS IPFIX listener. */
export class TlsListener {
  readonly #env: SessionEnv;
  readonly #address: ListenAddress;
  readonly #serverOptions: tls.TlsOptions;
  readonly #table: ConnectionTable;
  readonly #drain: DrainOptions;
  readonly #handlers = new Set<Promise<void>>();
  readonly #reads = new ReadClock();
  readonly #gate: ReadGate;
  #listener: Deno.TcpListener | undefined;
  #accepting: { stop(): Promise<void> } | undefined;
  #closing = false;

  /** Prepares the TLS context (not yet listening). */
  constructor(
    address: ListenAddress,
    material: TlsMaterial,
    env: SessionEnv,
    options: StreamListenerOptions,
  ) {
    this.#env = env;
    this.#address = address;
    this.#gate = new ReadGate();
    this.#table = new ConnectionTable(env, { limits: options.limits, releaseIdleBuffers: true });
    this.#drain = options.drain;
    this.#serverOptions = {
      requestCert: true,
      rejectUnauthorized: true,
      ca: [material.caPem],
      cert: material.certPem,
      key: material.keyPem,
      minVersion: "TLSv1.2",
    };
  }

  /** The bound port (after {@linkcode start}). */
  get port(): number {
    return this.#listener === undefined ? 0 : (this.#listener.addr as Deno.NetAddr).port;
  }

  /** Starts listening; a wildcard address binds `::` (dual-stack) with an IPv4 fallback. */
  start(): Promise<void> {
    if (this.#listener !== undefined) return Promise.resolve();
    try {
      this.#listener = bindTcp(this.#address);
    } catch (e) {
      return Promise.reject(e);
    }
    this.#table.start();
    this.#accepting = acceptLoop(this.#listener, this.#env, this.#handlers, (c) => this.#handle(c));
    return Promise.resolve();
  }

  /**
   * Stops listening, drains every established connection (close_notify, then what the peer
   * had sent is read and decoded, bounded by the drain deadline), closes those still in their
   * handshake and waits for their handlers.
   */
  async stop(): Promise<void> {
    this.#closing = true;
    await this.#accepting?.stop();
    await this.#table.drain(this.#drain);
    await Promise.all(this.#handlers);
  }

  /** Admits the connection (or closes it, counted), then runs its handshake and reads. */
  #handle(conn: Deno.TcpConn): Promise<void> | undefined {
    const remote = conn.remoteAddr;
    const address = exporterAddress(remote.hostname);
    let closedBy: string | undefined;
    let bytesRead = 0;
    let secure: tls.TLSSocket | undefined;
    // The pump waits on `wanted` while the TLS layer has not taken what it pushed; `gone` ends
    // the pump once the socket is destroyed (it then takes nothing more).
    let wanted: (() => void) | undefined;
    const flow = { gone: false };
    const wake = (): void => {
      const w = wanted;
      wanted = undefined;
      w?.();
    };
    const raw = new Duplex({
      read: wake,
      write(chunk: Uint8Array, _encoding: string, done: (e?: Error | null) => void): void {
        writeAll(conn, chunk).then(() => done(), (e) => done(e as Error));
      },
      final(done: (e?: Error | null) => void): void {
        conn.closeWrite().then(() => done(), () => done());
      },
      destroy(err: Error | null, done: (e?: Error | null) => void): void {
        flow.gone = true;
        closeQuietly(conn);
        wake();
        done(err);
      },
    });
    const tracked = this.#table.admit(address, {
      close(reason: string): void {
        closedBy ??= reason;
        closeQuietly(conn);
        secure?.destroy();
        raw.destroy();
      },
      closeWrite(): void {
        // close_notify, then the TCP half-close (the Duplex's final).
        secure?.end();
      },
      // The raw count covers the handshake and the records after it.
      progress: () => bytesRead,
    }, { handshake: true });
    if (tracked === undefined) {
      closeQuietly(conn);
      return undefined;
    }
    // A TLS server of its own, never listening, is handed the connection: node's server, not a
    // bare server-side TLSSocket, verifies the client certificate against the CA (a bare one
    // in Deno accepts a certificate of any CA), and its events name this connection.
    const server = tls.createServer(this.#serverOptions);
    let session: Session | undefined;
    let stream: StreamSession | undefined;
    let reason = "eof";
    let onError = false;
    let tlsClosed = Promise.resolve();
    const rawClosed = new Promise<void>((resolve) => raw.on("close", () => resolve()));
    server.on("secureConnection", (socket: tls.TLSSocket) => {
      tlsClosed = new Promise<void>((resolve) =>
        socket.on("close", () => {
          raw.destroy();
          resolve();
        })
      );
      if (closedBy !== undefined) {
        socket.destroy();
        return;
      }
      secure = socket;
      session = new Session(this.#env, {
        transport: "tls",
        exporterAddress: address,
        peer: sessionPeer(remote.hostname, remote.port),
        templateTtlMs: 0,
      });
      const st = new StreamSession(session, this.#env.clock);
      stream = st;
      this.#table.attach(tracked, st);
      socket.on("data", (chunk: Uint8Array) => {
        if (onError || closedBy !== undefined) return;
        const r = st.feed(chunk);
        if (!r.ok) {
          reason = r.reason;
          onError = true;
          socket.destroy();
        }
      });
      socket.on("end", () => {
        st.end();
        socket.destroy();
      });
      socket.on("error", (e: Error) => {
        if (!onError) reason = this.#closing ? "collector stopped" : `read error: ${e.message}`;
      });
      // Established while draining: read what the peer sent, after asking it to stop.
      if (this.#closing) socket.end();
    });
    server.on("tlsClientError", (e: Error, socket: tls.TLSSocket | undefined) => {
      socket?.destroy();
      raw.destroy();
      // A connection we closed (over a cap, timed out, stopping) is counted for that reason.
      if (closedBy !== undefined) return;
      this.#env.counters.tlsHandshakeFailures++;
      const suppressed = this.#env.rateLog.allow(`tls|${remote.hostname}`);
      if (suppressed >= 0) {
        this.#env.log.warn("TLS handshake failed", {
          peer: address,
          error: e,
          ...(suppressed > 0 ? { suppressed } : {}),
        });
      }
    });
    server.emit("connection", raw);
    const pumped = this.#pump(conn, raw, flow, () => new Promise<void>((r) => wanted = r), (n) => {
      bytesRead += n;
    });
    return Promise.all([rawClosed, pumped]).then(() => tlsClosed).then(() => {
      closeQuietly(conn);
      this.#table.remove(tracked);
      if (stream !== undefined && closedBy !== undefined) {
        countUnfinished(this.#env, stream, this.#closing);
      }
      session?.close(closedBy ?? reason, onError);
    });
  }

  /**
   * Reads the connection's encrypted bytes into `raw` until EOF or an error, in the TCP
   * listener's fair turns; waits (`more`) while the TLS layer has not taken what was pushed.
   * Never rejects.
   */
  async #pump(
    conn: Deno.TcpConn,
    raw: Duplex,
    flow: { readonly gone: boolean },
    more: () => Promise<void>,
    counted: (n: number) => void,
  ): Promise<void> {
    const turn = new FairTurn(this.#reads);
    let size = MIN_READ_BYTES;
    try {
      while (!flow.gone) {
        const buf = new Uint8Array(size);
        const n = await conn.read(buf);
        if (n === null) break;
        counted(n);
        if (!raw.push(buf.subarray(0, n)) && !flow.gone) await more();
        const tick = this.#gate.after(n, size);
        size = n === size ? Math.min(size * 2, TURN_BYTES) : MIN_READ_BYTES;
        if (tick !== undefined) await tick;
        if (turn.spend(n) && this.#table.size > 1) await turn.pause();
      }
    } catch {
      // Closed under the read (stop, a timeout, the TLS layer gave up), or a reset: the TLS
      // socket reports what happened.
    }
    if (!flow.gone) raw.push(null);
  }
}
