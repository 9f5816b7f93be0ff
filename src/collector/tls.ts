/**
 * Mutual-TLS listener. `Deno.listenTls` cannot request client certificates, so this uses the
 * `node:tls` server (`requestCert` + `rejectUnauthorized` + `ca`): a client without a
 * certificate, or with one not signed by the CA, fails the handshake and is counted.
 * After the handshake a connection behaves exactly like a TCP one ({@linkcode StreamSession}).
 */

import tls from "node:tls";
import type { Socket } from "node:net";
import { exporterAddress, type ListenAddress } from "./address.ts";
import { Session, type SessionEnv } from "./session.ts";
import { StreamSession } from "./stream.ts";

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
  readonly #sockets = new Set<tls.TLSSocket>();
  /** Every accepted TCP connection, handshake done or not: server.close() waits for all of them. */
  readonly #raw = new Set<Socket>();
  readonly #handlers = new Set<Promise<void>>();
  #port = 0;
  #closing = false;

  /** Creates the server (not yet listening). */
  constructor(address: ListenAddress, material: TlsMaterial, env: SessionEnv) {
    this.#env = env;
    this.#address = address;
    this.#server = tls.createServer({
      requestCert: true,
      rejectUnauthorized: true,
      ca: [material.caPem],
      cert: material.certPem,
      key: material.keyPem,
      minVersion: "TLSv1.2",
    });
    this.#server.on("connection", (s: Socket) => {
      this.#raw.add(s);
      s.on("close", () => this.#raw.delete(s));
    });
    this.#server.on("secureConnection", (s: tls.TLSSocket) => this.#onSecure(s));
    this.#server.on("tlsClientError", (err: Error, socket: Socket) => {
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
      socket?.destroy();
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
  }

  /** Stops listening, destroys every connection and waits for their handlers. */
  async stop(): Promise<void> {
    this.#closing = true;
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    for (const s of this.#sockets) s.destroy();
    // A peer still in (or never starting) the handshake would hold close() for up to 120 s.
    for (const s of this.#raw) s.destroy();
    await Promise.all(this.#handlers);
    if (this.#port !== 0) await closed;
  }

  #onSecure(socket: tls.TLSSocket): void {
    if (this.#closing) {
      socket.destroy();
      return;
    }
    this.#sockets.add(socket);
    const host = socket.remoteAddress ?? "unknown";
    const session = new Session(this.#env, {
      transport: "tls",
      exporterAddress: exporterAddress(host),
      peer: `[${host}]:${socket.remotePort ?? 0}`,
      templateTtlMs: 0,
    });
    const stream = new StreamSession(session);
    let reason = "eof";
    let onError = false;
    const done = new Promise<void>((resolve) => {
      socket.on("data", (chunk: Uint8Array) => {
        if (session.closed || onError) return;
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
        this.#sockets.delete(socket);
        session.close(this.#closing && !onError ? "collector stopped" : reason, onError);
        resolve();
      });
    });
    this.#handlers.add(done);
    done.finally(() => this.#handlers.delete(done));
  }
}
