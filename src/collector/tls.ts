/**
 * Mutual-TLS listener. `Deno.listenTls` cannot request client certificates, so this uses the
 * `node:tls` server (`requestCert` + `rejectUnauthorized` + `ca`): a client without a
 * certificate, or with one not signed by the CA, fails the handshake and is counted.
 * After the handshake a connection behaves exactly like a TCP one ({@linkcode StreamSession}).
 * The caps count a connection from accept (before its handshake, which is capped and timed
 * too), so half-open handshakes cannot hold sockets or memory without bound.
 */

import tls from "node:tls";
import type { Socket } from "node:net";
import { exporterAddress, type ListenAddress, sessionPeer } from "./address.ts";
import { ConnectionTable, countUnfinished, type TrackedConnection } from "./connections.ts";
import type { DrainOptions } from "./drain.ts";
import { Session, type SessionEnv } from "./session.ts";
import { StreamSession } from "./stream.ts";
import type { StreamListenerOptions } from "./tcp.ts";

/** PEM material of the TLS listener. */
export interface TlsMaterial {
  /** CA that client certificates must chain to. */
  readonly caPem: string;
  /** Server certificate. */
  readonly certPem: string;
  /** Server private key. */
  readonly keyPem: string;
}

/** A mutual-TLS IPFIX listener. */
export class TlsListener {
  readonly #env: SessionEnv;
  readonly #address: ListenAddress;
  readonly #server: tls.Server;
  readonly #table: ConnectionTable;
  readonly #drain: DrainOptions;
  /** Admitted connections by `remoteAddress|remotePort`, from accept to close. */
  readonly #pending = new Map<string, TlsConnection>();
  /** The same connections by their raw socket. */
  readonly #byRaw = new WeakMap<Socket, TlsConnection>();
  readonly #handlers = new Set<Promise<void>>();
  #port = 0;
  #closing = false;

  /** Creates the server (not yet listening). */
  constructor(
    address: ListenAddress,
    material: TlsMaterial,
    env: SessionEnv,
    options: StreamListenerOptions,
  ) {
    this.#env = env;
    this.#address = address;
    this.#table = new ConnectionTable(env, { limits: options.limits, releaseIdleBuffers: true });
    this.#drain = options.drain;
    this.#server = tls.createServer({
      requestCert: true,
      rejectUnauthorized: true,
      ca: [material.caPem],
      cert: material.certPem,
      key: material.keyPem,
      minVersion: "TLSv1.2",
    });
    // Before the TLS layer wraps the socket: a connection over a cap costs no handshake.
    this.#server.prependListener("connection", (s: Socket) => this.#onConnection(s));
    this.#server.on("secureConnection", (s: tls.TLSSocket) => this.#onSecure(s));
    this.#server.on("tlsClientError", (err: Error, socket: Socket) => {
      const c = this.#connectionOf(socket);
      socket?.destroy();
      // A connection we closed (over a cap, timed out, stopping) is counted for that reason.
      if (c === undefined || c.closedBy !== undefined) return;
      env.counters.tlsHandshakeFailures++;
      const key = `tls|${socket?.remoteAddress ?? "?"}`;
      const suppressed = env.rateLog.allow(key);
      if (suppressed >= 0) {
        env.log.warn("TLS handshake failed", {
          peer: exporterAddress(socket?.remoteAddress ?? "?"),
          error: err,
          ...(suppressed > 0 ? { suppressed } : {}),
        });
      }
    });
  }

  /** The bound port (after {@linkcode start}). */
  get port(): number {
    return this.#port;
  }

  /** Starts listening; a wildcard address binds `::` (dual-stack) with an IPv4 fallback. */
  async start(): Promise<void> {
    const listen = (host: string): Promise<void> =>
      new Promise((resolve, reject) => {
        const onError = (e: Error): void => reject(e);
        this.#server.once("error", onError);
        this.#server.listen({ port: this.#address.port, host }, () => {
          this.#server.off("error", onError);
          resolve();
        });
      });
    if (this.#address.wildcard) {
      try {
        await listen("::");
      } catch {
        await listen("0.0.0.0");
      }
    } else {
      await listen(this.#address.hostname);
    }
    this.#port = (this.#server.address() as { port: number }).port;
    this.#server.on("error", (e: Error) => {
      // Accept-time errors (e.g. EMFILE): the node server keeps listening; count and go on.
      this.#env.counters.acceptErrors++;
      this.#env.log.warn("TLS server error", { error: e });
    });
    this.#table.start();
  }

  /**
   * Stops listening, drains every established connection (close_notify, then what the peer
   * had sent is read and decoded, bounded by the drain deadline), closes those still in their
   * handshake and waits for their handlers.
   */
  async stop(): Promise<void> {
    this.#closing = true;
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    await this.#table.drain(this.#drain);
    await Promise.all(this.#handlers);
    if (this.#port !== 0) await closed;
  }

  #onConnection(raw: Socket): void {
    const c: TlsConnection = { socket: raw, closedBy: undefined, tracked: undefined };
    const handle = {
      close(reason: string): void {
        c.closedBy ??= reason;
        c.socket.destroy();
      },
      closeWrite(): void {
        c.socket.end();
      },
      // The raw socket's count covers the handshake and the records after it.
      progress: () => raw.bytesRead,
    };
    // Known even when refused: its handshake error is then not a handshake failure.
    this.#byRaw.set(raw, c);
    c.tracked = this.#table.admit(exporterAddress(raw.remoteAddress ?? "?"), handle, {
      handshake: true,
    });
    if (c.tracked === undefined) {
      c.closedBy = "refused";
      raw.destroy();
      return;
    }
    const key = socketKey(raw);
    this.#pending.set(key, c);
    raw.on("close", () => {
      if (this.#pending.get(key) === c) this.#pending.delete(key);
      this.#table.remove(c.tracked!);
    });
  }

  /**
   * The accepted connection a TLS socket wraps: node's TLS server keeps the raw socket as
   * `_parent` (Node and Deno's polyfill); the peer's address and port are the fallback (the
   * socket of a failed handshake may no longer know them).
   */
  #connectionOf(socket: Socket | undefined): TlsConnection | undefined {
    const parent = (socket as { _parent?: unknown } | undefined)?._parent;
    const c = parent === undefined ? undefined : this.#byRaw.get(parent as Socket);
    return c ?? this.#pending.get(socketKey(socket));
  }

  #onSecure(socket: tls.TLSSocket): void {
    const c = this.#connectionOf(socket);
    if (c === undefined || c.closedBy !== undefined) {
      socket.destroy();
      return;
    }
    c.socket = socket;
    const host = socket.remoteAddress ?? "unknown";
    const session = new Session(this.#env, {
      transport: "tls",
      exporterAddress: exporterAddress(host),
      peer: sessionPeer(host, socket.remotePort ?? 0),
      templateTtlMs: 0,
    });
    const stream = new StreamSession(session, this.#env.clock);
    this.#table.attach(c.tracked!, stream);
    let reason = "eof";
    let onError = false;
    const done = new Promise<void>((resolve) => {
      socket.on("data", (chunk: Uint8Array) => {
        if (session.closed || onError || c.closedBy !== undefined) return;
        const r = stream.feed(chunk);
        if (!r.ok) {
          reason = r.reason;
          onError = true;
          socket.destroy();
        }
      });
      socket.on("end", () => {
        stream.end();
        socket.destroy();
      });
      socket.on("error", (e: Error) => {
        if (!onError) reason = this.#closing ? "collector stopped" : `read error: ${e.message}`;
      });
      socket.on("close", () => {
        if (c.closedBy !== undefined) countUnfinished(this.#env, stream, this.#closing);
        session.close(c.closedBy ?? reason, onError);
        resolve();
      });
    });
    this.#handlers.add(done);
    done.finally(() => this.#handlers.delete(done));
    // Established while draining: read what the peer sent, after asking it to stop.
    if (this.#closing) socket.end();
  }
}

/** One accepted connection: the raw socket, then the TLS socket over it. */
interface TlsConnection {
  socket: Socket;
  closedBy: string | undefined;
  tracked: TrackedConnection | undefined;
}

/** Identifies a connection in both its raw and its TLS socket. */
function socketKey(s: Socket | undefined): string {
  return `${s?.remoteAddress}|${s?.remotePort}`;
}
