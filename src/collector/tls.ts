/**
 * Mutual-TLS listener. `Deno.listenTls` cannot request client certificates, so the TLS layer
 * is `node:tls` (`requestCert` + `rejectUnauthorized` + `ca`): a client without a certificate,
 * or with one not signed by the CA, fails the handshake and is counted. After the handshake a
 * connection behaves exactly like a TCP one ({@linkcode StreamSession}).
 *
 * The sockets are ours, not node's: connections are accepted with `Deno.listen` and their
 * encrypted bytes read by this listener, with the TCP listener's bounded turns and shared read
 * tick (`fairness.ts`), then handed through a `Duplex` to the listener's one `node:tls` server
 * (never listening; `connectionServer` ties each handshake's events to its connection), which
 * decrypts them. node's TLS server read its sockets itself, without bound: a connection whose
 * peer paused for 300 ms was not read again for 4.4-5.7 s while three busy ones delivered ~490k
 * records each (over TCP: 0.3-0.4 s), and `pause()` did not stop those reads. The raw bytes
 * wait in the kernel until this listener reads them, and no more than the Duplex's buffer is
 * read ahead of what the TLS layer has taken.
 *
 * The caps count a connection from accept (before its handshake, which is capped and timed
 * too), so half-open handshakes cannot hold sockets or memory without bound.
 *
 * Memory: an established idle connection costs ~27-28 KiB of RSS once V8 has collected the
 * handshakes' garbage (1,000 mutually authenticated connections from another process to the
 * real process, lowest VmRSS in the 30 s after, V8's idle-time GC coming 5-20 s in: 28.0 /
 * 27.1 KiB, against 31.2 / 31.8 with a server per connection, runs alternated), ~59 KiB before
 * that GC (`tls_idle_connection_bytes`, 3 s after: 60.5 / 60.3 KB, against 64.4 / 64.0). About
 * 15 KiB is JS heap (in-process heap snapshots): node:tls's TLSSocket, JSStreamSocket and
 * TLSWrap objects with some 46 closures ~10 KiB, the rest as over TCP (session, framer) plus
 * the pending read's 1 KiB buffer. The rest is native, out of this module's reach: Deno's
 * TLSWrap builds its rustls configuration from the PEM strings for every connection (~29 KiB of
 * RSS outside the JS heap per TLSWrap before any handshake, not all of it resident later), and
 * rustls's state. A connection that has been busy holds more: see {@linkcode TLS_PIECE_BYTES}.
 */

import tls from "node:tls";
import type { Duplex } from "node:stream";
import { failHandshakeAfterEof, socketDuplex } from "../net/socket_duplex.ts";
import { closeQuietly, exporterAddress, type ListenAddress, sessionPeer } from "./address.ts";
import { ConnectionTable, countUnfinished } from "./connections.ts";
import type { DrainOptions } from "./drain.ts";
import {
  FairTurn,
  ReadClock,
  ReadGate,
  TLS_BUSY_READ_BYTES,
  TRICKLE_WAIT_MS,
  TURN_BYTES,
} from "./fairness.ts";
import { Session, type SessionEnv, warnRateLimited } from "./session.ts";
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

/**
 * Most encrypted bytes handed to the TLS layer at once: a read (up to a turn) is pushed in pieces
 * of this size. Deno's TLS layer copies each piece into an input buffer of the connection's that
 * grows to the largest piece (plus an unfinished record) and never shrinks, and decrypts it into
 * one plaintext chunk of about its size. Whole 256 KiB reads left every once-busy connection
 * holding ~285 KiB of native memory until it closed. 200 connections each sending 2 MB flat out,
 * then idle: native memory in use per connection 285 / 288 KiB, 54 / 66 KiB in pieces (in-process
 * runs, glibc's mallinfo2). The real process's VmRSS per connection (lowest over the 30 s idle)
 * went from +1,045 to +1,126 KiB (3 runs) to +430 / +453, its peak from +1,130 to +1,214 to +561 /
 * +596. Most of the rest is allocator high-water (freed heap that glibc keeps, V8's grown heap),
 * set by the peak of concurrent activity: closing the connections gave no RSS back either way.
 * Throughput held: end-to-end mutual TLS with the replay sender flat out, 13 alternated trials
 * each: 507k vs 512k records/s (medians) at 3.44 vs 3.41 µs of CPU per record. Reading 16 KiB at
 * a time instead: 370k records/s at 4.27 µs.
 */
const TLS_PIECE_BYTES = 16 * 1024;

/** A mutual-TLS IPFIX listener. */
export class TlsListener {
  readonly #env: SessionEnv;
  readonly #address: ListenAddress;
  /** Handshakes from now on; replaced by {@linkcode setMaterial}. */
  #server: tls.Server;
  #accept: (this: tls.Server, socket: Duplex) => void;
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
    this.#gate = new ReadGate(TRICKLE_WAIT_MS, { busyFrom: TLS_BUSY_READ_BYTES });
    this.#table = new ConnectionTable(env, { limits: options.limits, releaseIdleBuffers: true });
    this.#drain = options.drain;
    this.#server = this.#serverFor(material);
    this.#accept = tlsConnectionListener(this.#server, "tls");
  }

  /**
   * Serves `material` to the handshakes from now on (certificates re-issued while running).
   * Established connections keep their session: TLS checks certificates at the handshake only.
   */
  setMaterial(material: TlsMaterial): void {
    const server = this.#serverFor(material);
    this.#accept = tlsConnectionListener(server, "tls");
    this.#server = server;
  }

  /** The `node:tls` server (never listening) that runs the handshakes with `material`. */
  #serverFor(material: TlsMaterial): tls.Server {
    const server = tls.createServer({
      requestCert: true,
      rejectUnauthorized: true,
      ca: [material.caPem],
      cert: material.certPem,
      key: material.keyPem,
      minVersion: "TLSv1.2",
    });
    // Fail closed: an event reaching the shared server itself names no connection (a runtime
    // whose listener no longer reports through `this`), so its socket is dropped, loudly, and
    // counted as a failed handshake (the connection never got a session).
    const unrouted = (socket: { destroy(): void } | undefined): void => {
      socket?.destroy();
      this.#env.counters.tlsHandshakeFailures++;
      if (this.#env.rateLog.allow("tls|unrouted") >= 0) {
        this.#env.log.error("TLS connection event not tied to its connection: dropped");
      }
    };
    server.on("secureConnection", unrouted);
    server.on("tlsClientError", (_e: Error, socket?: tls.TLSSocket) => unrouted(socket));
    return server;
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
    const raw = socketDuplex(conn, wake, () => {
      flow.gone = true;
      wake();
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
    let session: Session | undefined;
    let stream: StreamSession | undefined;
    let reason = "eof";
    let onError = false;
    let tlsClosed = Promise.resolve();
    const rawClosed = new Promise<void>((resolve) => raw.on("close", () => resolve()));
    // Set once the TLS layer finished the handshake or gave up on it.
    let decided = false;
    const secured = (socket: tls.TLSSocket): void => {
      decided = true;
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
      // node's check destroys a client whose certificate failed verification, but only notes
      // one that sent none (`authorizationError`) if the TLS layer let its handshake finish:
      // refused here too, before a byte of its data is read.
      if (!socket.authorized) {
        failed(new Error(`client not authorized: ${socket.authorizationError}`), socket);
        return;
      }
      secure = socket;
      session = new Session(this.#env, {
        transport: "tls",
        exporterAddress: address,
        peer: sessionPeer(remote.hostname, remote.port),
        templateTtlMs: 0,
      });
      const st = new StreamSession(session, this.#env.clock, this.#env.counters.readBuffers);
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
      // The TLS layer gave up (a record it cannot decrypt or parse, an alert sent) or the socket
      // failed: the connection is closed at once. node's TLSSocket does not destroy itself
      // then, and its failed TLS layer would go on taking every byte the pump reads (a corrupt
      // record followed by 1,000 MiB of junk took the process from 134 to 1,211 MB), decrypting
      // none, until the idle timeout. A TLS error (`ERR_SSL_*`) is the peer's bad input. A
      // partial message is counted as truncated, as at EOF (a reset can end a connection here,
      // with no "end" after it).
      socket.on("error", (e: Error) => {
        if (!onError) {
          reason = this.#closing ? "collector stopped" : `read error: ${e.message}`;
          onError = isTlsFault(e);
          if (closedBy === undefined) st.end(onError ? "a TLS error" : "a read error");
        }
        socket.destroy();
      });
      // Established while draining: read what the peer sent, after asking it to stop.
      if (this.#closing) socket.end();
    };
    let failedOnce = false;
    const failed = (e: Error, socket: { destroy(): void } | undefined): void => {
      decided = true;
      socket?.destroy();
      raw.destroy();
      // A connection we closed (over a cap, timed out, stopping) is counted for that reason;
      // one failed here is counted once (the TLS layer reports the destroy as another failure).
      if (closedBy !== undefined || failedOnce) return;
      failedOnce = true;
      this.#env.counters.tlsHandshakeFailures++;
      warnRateLimited(this.#env, `tls|${remote.hostname}`, "TLS handshake failed", {
        peer: address,
        error: e,
      });
    };
    // node's server, not a bare server-side TLSSocket, verifies the client certificate against
    // the CA (a bare one in Deno accepts a certificate of any CA): its connection listener makes
    // this connection's TLSSocket, as a listening server would, but on a view of the server
    // whose `emit` is this connection's (see connectionServer).
    this.#accept.call(connectionServer(this.#server, secured, failed), raw);
    const pumped = this.#pump(conn, raw, flow, () => new Promise<void>((r) => wanted = r), (n) => {
      bytesRead += n;
    }).then(() => {
      // The peer closed its side (or reset) before the handshake ended.
      if (decided || closedBy !== undefined || flow.gone) return;
      failHandshakeAfterEof(
        this.#env.clock,
        () => !decided && closedBy === undefined,
        () =>
          failed(new Error("the peer closed the connection during the TLS handshake"), undefined),
      );
    });
    return Promise.all([rawClosed, pumped]).then(() => tlsClosed).then(() => {
      closeQuietly(conn);
      if (stream !== undefined && closedBy !== undefined) {
        countUnfinished(this.#env, stream, this.#closing);
      }
      this.#table.remove(tracked);
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
    // The read buffer grows while reads fill it, within the collector's read budget, which
    // counts it above MIN_READ_BYTES.
    const budget = this.#env.counters.readBuffers;
    const held = (bytes: number): number => bytes > MIN_READ_BYTES ? bytes : 0;
    let size = MIN_READ_BYTES;
    try {
      while (!flow.gone) {
        const buf = new Uint8Array(size);
        const n = await conn.read(buf);
        if (n === null) break;
        counted(n);
        let taken = true;
        for (let at = 0; at < n && !flow.gone; at += TLS_PIECE_BYTES) {
          taken = raw.push(buf.subarray(at, Math.min(n, at + TLS_PIECE_BYTES)));
        }
        if (!taken && !flow.gone) await more();
        const tick = this.#gate.after(n, size);
        let next = n === size ? Math.min(size * 2, TURN_BYTES) : MIN_READ_BYTES;
        if (next > size && !budget.allows(next - held(size))) next = size;
        budget.adjust(held(next) - held(size));
        size = next;
        if (tick !== undefined) await tick;
        if (turn.spend(n) && this.#table.size > 1) await turn.pause();
      }
    } catch {
      // Closed under the read (stop, a timeout, the TLS layer gave up), or a reset: the TLS
      // socket reports what happened.
    }
    budget.adjust(-held(size));
    if (!flow.gone) raw.push(null);
  }
}

/**
 * True for an error of the TLS layer itself (node's `ERR_SSL_*` codes: a record that does not
 * decrypt, a malformed or oversized record), as opposed to one of the socket under it.
 */
function isTlsFault(e: Error): boolean {
  const code = (e as { code?: unknown }).code;
  return typeof code === "string" && code.startsWith("ERR_SSL");
}

/**
 * The connection listener a `node:tls` server installs, which makes a connection's TLSSocket:
 * called with {@linkcode connectionServer} as `this` on a {@linkcode socketDuplex} (`what` names
 * the caller in the error of a runtime whose server installs another number of them).
 */
export function tlsConnectionListener(
  server: tls.Server,
  what: string,
): (this: tls.Server, socket: Duplex) => void {
  const accept = server.listeners("connection");
  if (accept.length !== 1) {
    throw new Error(`${what}: node:tls server has ${accept.length} connection listeners, not 1`);
  }
  return accept[0] as (this: tls.Server, socket: Duplex) => void;
}

/**
 * The shared server as node's TLS connection listener sees it for one connection: options and
 * context are the server's (the prototype), `emit` reaches this connection's handlers. The
 * listener reads its options from `this` and creates the TLSSocket with `server: this`, and
 * that socket reports the end of its handshake to `server.emit` (`secureConnection` once the
 * client certificate is verified, `tlsClientError` otherwise), so these events name their
 * connection without a server per connection (a per-connection object and closure instead of
 * ~1.7 KiB of server and a `SecureContext` built, key checked, per handshake).
 */
export function connectionServer(
  shared: tls.Server,
  secured: (socket: tls.TLSSocket) => void,
  failed: (e: Error, socket: { destroy(): void } | undefined) => void,
): tls.Server {
  const emit = (event: string | symbol, ...args: unknown[]): boolean => {
    if (event === "secureConnection") secured(args[0] as tls.TLSSocket);
    else if (event === "tlsClientError") {
      failed(args[0] as Error, args[1] as { destroy(): void } | undefined);
    } else return false;
    return true;
  };
  return Object.create(shared, { emit: { value: emit } }) as tls.Server;
}
