/**
 * The bounds of the API port. `Deno.serve` has none (no cap on connections, no TLS handshake or
 * idle timeout: denoland/deno#3515), and the API port faces the cluster as port 4739 does: measured
 * before this, 3,000 TCP connections to it that never began a TLS handshake were all held for as
 * long as the client wished (70 s and counting), +35-44 MB of RSS, one file descriptor each, the
 * descriptors the collector's accepts need too.
 *
 * So the API serves its port itself: it accepts TCP connections (`Deno.listen`), admits at
 * most `limits.maxApiConnections` (`maxApiConnectionsPerAddress` from one source address), closes
 * a connection whose TLS handshake, or the head of a request once begun, outlasts
 * `limits.apiRequestTimeout`, or that passes no byte either way for `limits.apiIdleTimeout`, and
 * answers each connection's requests with the API's handler over HTTP/1.1 (`http1.ts`). TLS is
 * `node:tls` over the accepted connection, as on the collector's TLS port (`collector/tls.ts`):
 * closing a `Deno.listenTls` connection whose client never began its handshake does not close
 * its socket (the client still waited after 3 s), which would leave a silent client's file
 * descriptor held whatever the timeouts. Every refusal and timeout is counted by the limit's
 * name and logged (rate-limited), as the collector's are. Through this front, the same 3,000
 * connections: 2,968 refused at once (32 from one address), the other 32 closed at the request
 * timeout, +10 MB at most.
 *
 * @module
 */

import tls from "node:tls";
import type { Duplex } from "node:stream";
import { type Clock, type ClockTimer, systemClock } from "../clock.ts";
import { AddressCaps, closeQuietly, exporterAddress } from "../collector/address.ts";
import { sweepPeriodMs } from "../collector/connections.ts";
import { connectionServer, tlsConnectionListener } from "../collector/tls.ts";
import { failHandshakeAfterEof, socketDuplex } from "../net/socket_duplex.ts";
import { acceptLoop } from "../collector/tcp.ts";
import { warnRateLimited } from "../collector/session.ts";
import { type Logger, RateLimitedLog } from "../log.ts";
import { noReissues, type ReissueCounts, type ReissueReason } from "../pki/validity.ts";
import {
  bodyLength,
  errorResponse,
  headEnd,
  HttpError,
  keepsAlive,
  MAX_HEAD_BYTES,
  parseHead,
  responseHead,
} from "./http1.ts";

/** The `limits:` keys the front enforces. */
export interface ApiFrontLimits {
  /** `limits.maxApiConnections`. */
  maxConnections: number;
  /** `limits.maxApiConnectionsPerAddress`. */
  maxConnectionsPerAddress: number;
  /** `limits.apiRequestTimeout`, ms. */
  requestTimeoutMs: number;
  /** `limits.apiIdleTimeout`, ms. */
  idleTimeoutMs: number;
  /**
   * Bytes of answers built and not yet taken by their clients, across connections, past which a
   * new request is refused (503) before it is handled; default
   * {@linkcode MAX_PENDING_RESPONSE_BYTES}.
   */
  maxPendingResponseBytes?: number;
}

/**
 * Default {@linkcode ApiFrontLimits.maxPendingResponseBytes}: a few of the largest answers
 * (`/flowrecords` at its 10,000-record limit is ~20 MB), so that clients that ask and do not
 * read cannot make the process build and hold answers without bound (128 such held 6 GB).
 */
export const MAX_PENDING_RESPONSE_BYTES = 64 << 20;

/** What a request refused as busy ran into (the keys of `ApiFrontStats.refusedBusy`). */
export type BusyReason = "pendingResponseBytes" | "queries" | "liveViews";

/**
 * The health checks: anonymous (the handler), and always handled whatever is pending (tiny
 * answers).
 */
export const HEALTH_PATHS: ReadonlySet<string> = new Set(["/healthz", "/livez", "/readyz"]);

/** The front's counters (the metrics line's `api.*`). */
export interface ApiFrontStats {
  /** Connections open now. */
  connections: number;
  /** Connections closed at accept, by the limit reached. */
  connectionsRefused: { maxApiConnections: number; maxApiConnectionsPerAddress: number };
  /** Connections closed by a timeout, by the limit's name. */
  connectionsTimedOut: { apiRequestTimeout: number; apiIdleTimeout: number };
  /** Handshakes that failed (a client that is not TLS, an alert...). */
  handshakeFailures: number;
  /** Requests answered with an error before the handler (bad head, too large: 4xx/5xx). */
  badRequests: number;
  /** Requests the handler failed on (answered 500, logged at error level). */
  handlerErrors: number;
  /** Accepts that failed (e.g. EMFILE), retried. */
  acceptErrors: number;
  /**
   * Requests refused (503/429) because a bound was reached: answers pending over
   * `maxPendingResponseBytes` (refused by the front, before the handler), `/flowrecords`
   * queries or live views at their cap (refused by the handler, see {@linkcode countBusy}).
   */
  refusedBusy: Record<BusyReason, number>;
  /**
   * Live views dropped because their page did not read its events (its queue, and the
   * kernel's send buffer, full): its place freed.
   */
  liveViewsDropped: number;
  /**
   * Times the serving certificate was issued again while running, by why: the wall clock
   * before its validity (`notValidYet`: it was ahead at start and has been set back) or its end
   * near (`expiring`, under 90 days left). See `src/pki/validity.ts`.
   */
  certificatesReissued: ReissueCounts;
}

/** One admitted connection. */
interface Tracked {
  readonly address: string;
  /** `request`: in the TLS handshake or a request's head (the request timeout applies). */
  phase: "request" | "other";
  phaseMs: number;
  lastMs: number;
  closedBy?: keyof ApiFrontStats["connectionsTimedOut"];
  /** Closes the connection at once (TLS layer and socket) and stops a streamed body. */
  readonly close: () => void;
  /** Stops the body being streamed, if any (set by the stream, cleared when it ends). */
  stopStream?: () => void;
}

/** A response body is written in pieces of this size, each moving the idle clock. */
const WRITE_PIECE_BYTES = 16 * 1024;

const encoder = new TextEncoder();

/** A request handler (the API's). */
export type Handler = (req: Request) => Response | Promise<Response>;

/** Accepts the API's connections on `listener` and answers them with `handler` within `limits`. */
export class ApiFront {
  readonly #listener: Deno.TcpListener;
  readonly #handler: Handler;
  /** Handshakes from now on; replaced by {@linkcode setCertificate}. */
  #tls: tls.Server;
  #accept: (this: tls.Server, socket: Duplex) => void;
  readonly #limits: ApiFrontLimits;
  readonly #clock: Clock;
  readonly #log: Logger;
  readonly #rateLog: RateLimitedLog;
  readonly #conns = new Set<Tracked>();
  readonly #caps: AddressCaps;
  readonly #handlers = new Set<Promise<void>>();
  readonly #stats: ApiFrontStats = {
    connections: 0,
    connectionsRefused: { maxApiConnections: 0, maxApiConnectionsPerAddress: 0 },
    connectionsTimedOut: { apiRequestTimeout: 0, apiIdleTimeout: 0 },
    handshakeFailures: 0,
    badRequests: 0,
    handlerErrors: 0,
    acceptErrors: 0,
    refusedBusy: { pendingResponseBytes: 0, queries: 0, liveViews: 0 },
    liveViewsDropped: 0,
    certificatesReissued: noReissues(),
  };
  /** Bytes of answers built and not yet written (see `maxPendingResponseBytes`). */
  #pendingBytes = 0;
  #timer: ClockTimer | undefined;
  #closing = false;
  #accepting: { stop(): Promise<void> } | undefined;

  /** A front for `listener` (not accepting until {@linkcode start}), serving TLS with `pem`. */
  constructor(
    listener: Deno.TcpListener,
    pem: { cert: string; key: string },
    handler: Handler,
    limits: ApiFrontLimits,
    opts: { log: Logger; clock?: Clock },
  ) {
    this.#listener = listener;
    this.#handler = handler;
    this.#tls = serverFor(pem);
    this.#accept = tlsConnectionListener(this.#tls, "api");
    this.#limits = limits;
    this.#caps = new AddressCaps(limits.maxConnections, limits.maxConnectionsPerAddress);
    this.#clock = opts.clock ?? systemClock;
    this.#log = opts.log;
    this.#rateLog = new RateLimitedLog(10_000, () => this.#clock.nowMs());
  }

  /**
   * Serves `pem` to the handshakes from now on, counted under `reason`; open connections keep
   * theirs (the certificate is checked at the handshake only).
   */
  setCertificate(pem: { cert: string; key: string }, reason: ReissueReason): void {
    const server = serverFor(pem);
    this.#accept = tlsConnectionListener(server, "api");
    this.#tls = server;
    this.#stats.certificatesReissued[reason]++;
  }

  /** The counters now. */
  stats(): ApiFrontStats {
    return {
      ...this.#stats,
      certificatesReissued: { ...this.#stats.certificatesReissued },
      connections: this.#conns.size,
      connectionsRefused: { ...this.#stats.connectionsRefused },
      connectionsTimedOut: { ...this.#stats.connectionsTimedOut },
      refusedBusy: { ...this.#stats.refusedBusy },
    };
  }

  /** Counts (and logs, rate-limited) a request refused because `reason`'s bound was reached. */
  countBusy(reason: BusyReason, fields: Record<string, unknown> = {}): void {
    this.#stats.refusedBusy[reason]++;
    this.#warn(`busy|${reason}`, "API request refused: busy", {
      reason,
      ...fields,
      refused: this.#stats.refusedBusy[reason],
    });
  }

  /** Counts (and logs, rate-limited) a live view dropped because its page did not read. */
  countLiveViewDropped(): void {
    this.#stats.liveViewsDropped++;
    this.#warn("liveViewDropped", "API live view dropped: its page does not read its events", {
      dropped: this.#stats.liveViewsDropped,
    });
  }

  /** Starts accepting (accept errors, e.g. EMFILE, counted and retried with backoff). */
  start(): void {
    this.#accepting ??= acceptLoop(
      this.#listener,
      { log: this.#log, counters: this.#stats },
      this.#handlers,
      (conn) => this.#handle(conn),
    );
  }

  /** Stops accepting, closes every connection and waits for their handlers. */
  async close(): Promise<void> {
    this.#closing = true;
    this.#timer?.cancel();
    if (this.#accepting !== undefined) await this.#accepting.stop();
    else closeQuietly(this.#listener);
    for (const c of this.#conns) c.close();
    await Promise.all(this.#handlers);
  }

  /** Admits `conn` (or closes it, counted), then serves its requests until it ends. */
  async #handle(conn: Deno.TcpConn): Promise<void> {
    const address = exporterAddress(conn.remoteAddr.hostname);
    // Requests and answers: an answer's last segment must not wait for the client's delayed
    // ACK of the one before (Nagle), which cost each kept-alive request about 40 ms.
    try {
      conn.setNoDelay(true);
    } catch {
      // already closed: the reads below end it
    }
    const l = this.#limits;
    const cap = this.#caps.exceeded(address);
    const refused = cap === "total"
      ? "maxApiConnections"
      : cap === "perAddress"
      ? "maxApiConnectionsPerAddress"
      : undefined;
    if (refused !== undefined || this.#closing) {
      closeQuietly(conn);
      if (refused === undefined) return;
      this.#stats.connectionsRefused[refused]++;
      this.#warn(`refused|${refused}`, "API connection refused: limit reached", {
        limit: refused,
        value: refused === "maxApiConnections" ? l.maxConnections : l.maxConnectionsPerAddress,
        peer: address,
      });
      return;
    }
    const now = this.#clock.nowMs();
    const secure = tlsOver(conn, this.#tls, this.#accept, {
      clock: this.#clock,
      // Bytes moving either way on the socket: not idle (a large answer read slowly).
      activity: () => c.lastMs = this.#clock.nowMs(),
      // The client left: a streamed answer stops (its source may be silent).
      gone: () => c.stopStream?.(),
    });
    const c: Tracked = {
      address,
      phase: "request",
      phaseMs: now,
      lastMs: now,
      close: () => {
        c.stopStream?.();
        secure.close();
      },
    };
    this.#conns.add(c);
    this.#caps.add(address);
    this.#arm();
    try {
      try {
        await secure.handshake;
      } catch {
        if (c.closedBy === undefined && !this.#closing) this.#stats.handshakeFailures++;
        return;
      }
      c.phase = "other";
      c.lastMs = this.#clock.nowMs();
      await this.#serve(secure, c);
      // Done with it (asked to close, HTTP/1.0, the peer's end): close_notify, then the socket.
      if (c.closedBy === undefined && !this.#closing) await secure.end();
    } catch {
      // a closed or reset connection: it ends
    } finally {
      c.close();
      this.#conns.delete(c);
      this.#caps.remove(address);
    }
  }

  /** Answers the requests of `conn` one after the other until it ends or asks to close. */
  async #serve(conn: PlainConn, c: Tracked): Promise<void> {
    const buf = new Uint8Array(MAX_HEAD_BYTES);
    let have = 0;
    const touch = () => (c.lastMs = this.#clock.nowMs());
    // In pieces, so a client reading a large body slowly but steadily is not idle.
    const write = async (bytes: Uint8Array) => {
      for (let at = 0; at < bytes.length; at += WRITE_PIECE_BYTES) {
        await conn.write(bytes.subarray(at, at + WRITE_PIECE_BYTES));
        touch();
      }
    };
    while (!this.#closing) {
      // The head: from its first byte on, the request timeout runs.
      let end = headEnd(buf, have);
      if (have > 0 && end < 0) {
        c.phase = "request";
        c.phaseMs = this.#clock.nowMs();
      }
      while (end < 0) {
        if (have === buf.length) {
          return await this.#refuse(write, new HttpError(431, "head too large"));
        }
        const n = await conn.read(buf.subarray(have));
        if (n === null) return;
        touch();
        if (have === 0) {
          c.phase = "request";
          c.phaseMs = c.lastMs;
        }
        have += n;
        end = headEnd(buf, have, have - n);
      }
      let head, body;
      try {
        head = parseHead(buf.subarray(0, end));
        body = bodyLength(head);
      } catch (e) {
        if (e instanceof HttpError) return await this.#refuse(write, e);
        throw e;
      }
      // The body, read and dropped (the API's requests carry none).
      const fromBuf = Math.min(body, have - end);
      buf.copyWithin(0, end + fromBuf, have);
      have -= end + fromBuf;
      body -= fromBuf;
      // The request timeout runs until the body's last byte too: one byte of a long body per
      // idle timeout would hold the connection for days.
      while (body > 0) {
        const n = await conn.read(buf.subarray(have, have + Math.min(body, buf.length - have)));
        if (n === null) return;
        touch();
        body -= n;
      }
      c.phase = "other";
      const keepAlive = keepsAlive(head) && !this.#closing;
      let req: Request;
      try {
        // Only the path and query reach the handler: the host is not ours to trust.
        req = new Request(`https://localhost${head.target}`, {
          method: head.method,
          headers: head.headers,
        });
      } catch {
        // A method fetch refuses (CONNECT, TRACE) or a target no URL can hold.
        return await this.#refuse(write, new HttpError(400, "bad request"));
      }
      const maxPending = this.#limits.maxPendingResponseBytes ?? MAX_PENDING_RESPONSE_BYTES;
      if (this.#pendingBytes >= maxPending && !HEALTH_PATHS.has(new URL(req.url).pathname)) {
        // Answers already built wait for clients that do not read them: build no more.
        this.countBusy("pendingResponseBytes", { pendingBytes: this.#pendingBytes });
        return await write(errorResponse(new HttpError(503, "busy: answers waiting to be read")));
      }
      let res: Response;
      try {
        res = await this.#handler(req);
      } catch (e) {
        this.#stats.handlerErrors++;
        this.#log.error("API request failed", { err: e });
        res = new Response("internal error\n", { status: 500 });
      }
      const streamed = res.headers.get("content-type") === "text/event-stream";
      const headOnly = head.method === "HEAD";
      if (!streamed) {
        const bytes = new Uint8Array(await res.arrayBuffer());
        this.#pendingBytes += bytes.length;
        try {
          await write(encoder.encode(responseHead(res, bytes.length, keepAlive)));
          if (!headOnly && bytes.length > 0) await write(bytes);
        } finally {
          this.#pendingBytes -= bytes.length;
        }
      } else if (headOnly) {
        await res.body?.cancel();
        const framing = head.version === "HTTP/1.1" ? "chunked" : "close";
        await write(encoder.encode(responseHead(res, framing, keepAlive)));
        if (framing === "close") return;
      } else if (!(await this.#stream(res, head.version === "HTTP/1.1", write, c))) return;
      if (!keepAlive) return;
    }
  }

  /**
   * Sends a streamed body (chunked over HTTP/1.1, to the connection's end over HTTP/1.0); false
   * when the connection must close. Closing `c` stops it even while its source is silent.
   */
  async #stream(
    res: Response,
    chunked: boolean,
    write: (bytes: Uint8Array) => Promise<void>,
    c: Tracked,
  ): Promise<boolean> {
    const reader = res.body!.getReader();
    c.stopStream = () => void reader.cancel().catch(() => {});
    try {
      await write(encoder.encode(responseHead(res, chunked ? "chunked" : "close", chunked)));
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (value.length === 0) continue;
        if (!chunked) await write(value);
        else {
          await write(encoder.encode(`${value.length.toString(16)}\r\n`));
          await write(value);
          await write(encoder.encode("\r\n"));
        }
      }
      if (chunked) await write(encoder.encode("0\r\n\r\n"));
      return chunked;
    } finally {
      c.stopStream = undefined;
      // The client left (or the stream ended): its source stops.
      await reader.cancel().catch(() => {});
    }
  }

  async #refuse(write: (bytes: Uint8Array) => Promise<void>, e: HttpError): Promise<void> {
    this.#stats.badRequests++;
    await write(errorResponse(e));
  }

  /** Closes the connections past a timeout; runs while any is open. */
  #sweep(): void {
    const now = this.#clock.nowMs();
    const l = this.#limits;
    for (const c of this.#conns) {
      if (c.closedBy !== undefined) continue;
      const reason = c.phase === "request" && now - c.phaseMs >= l.requestTimeoutMs
        ? "apiRequestTimeout"
        : now - c.lastMs >= l.idleTimeoutMs
        ? "apiIdleTimeout"
        : undefined;
      if (reason === undefined) continue;
      c.closedBy = reason;
      this.#stats.connectionsTimedOut[reason]++;
      this.#warn(`timeout|${reason}`, "API connection closed: timeout", {
        limit: reason,
        peer: c.address,
      });
      c.close();
    }
  }

  /** Arms the sweep ({@linkcode sweepPeriodMs} of the timeouts) while connections are open. */
  #arm(): void {
    if (this.#timer !== undefined || this.#closing) return;
    const l = this.#limits;
    const every = sweepPeriodMs(l.requestTimeoutMs, l.idleTimeoutMs);
    this.#timer = this.#clock.setTimer(every, () => {
      this.#timer = undefined;
      this.#sweep();
      if (this.#conns.size > 0) this.#arm();
    }, { unref: true });
  }

  #warn(key: string, msg: string, fields: Record<string, unknown>): void {
    warnRateLimited({ log: this.#log, rateLog: this.#rateLog }, key, msg, fields);
  }
}

/** A connection's plaintext, after its TLS handshake. */
interface PlainConn {
  /** Resolves when the handshake is done; rejects when it failed or the connection closed. */
  readonly handshake: Promise<void>;
  /** Reads plaintext into `buf`: its length, or null at the end. */
  read(buf: Uint8Array): Promise<number | null>;
  /** Writes all of `bytes`. */
  write(bytes: Uint8Array): Promise<void>;
  /**
   * Ends the connection cleanly: TLS close_notify and the TCP half-close, then closes it once
   * the peer closed too or after {@linkcode END_GRACE_MS}.
   */
  end(): Promise<void>;
  /** Closes the TLS layer and the socket at once. */
  close(): void;
}

/** Plaintext queued per connection before the socket is read no more. */
const PLAIN_HIGH_WATER = 64 * 1024;
/**
 * Encrypted bytes handed to the TLS layer that it has not yet turned into plaintext: past this
 * the socket is read no more (the TLS layer takes what it is given whether its plaintext is
 * delivered or not, e.g. while a response cannot be written, so the plaintext bound alone
 * would let a client that sends without reading fill memory).
 */
const RAW_AHEAD_BYTES = 64 * 1024;
/** How long {@linkcode PlainConn.end} waits for the peer before closing the socket. */
const END_GRACE_MS = 1000;

/** The `node:tls` server (never listening) that runs the API's handshakes with `pem`. */
function serverFor(pem: { cert: string; key: string }): tls.Server {
  return tls.createServer({
    cert: pem.cert,
    key: pem.key,
    minVersion: "TLSv1.2",
    // Both HTTP/1 versions this front speaks (a client offering only http/1.0, as
    // `curl --http1.0` does, would otherwise fail the handshake).
    ALPNProtocols: ["http/1.1", "http/1.0"],
  });
}

/**
 * TLS over `conn` by `server`'s connection listener (`accept`): the socket's encrypted bytes are
 * pumped into the TLS layer as it asks for them, its plaintext queued for {@linkcode
 * PlainConn.read}; the socket is read only while both bounds above hold. A peer that closes its
 * side during the handshake fails it after a grace on `clock` ({@linkcode failHandshakeAfterEof}).
 * `activity` is called for every read from and write to the socket, `gone` when the peer's side
 * ended.
 */
function tlsOver(
  conn: Deno.TcpConn,
  server: tls.Server,
  accept: (this: tls.Server, socket: Duplex) => void,
  hooks: { clock: Clock; activity: () => void; gone: () => void },
): PlainConn {
  const { clock, activity, gone } = hooks;
  let want: (() => void) | undefined;
  let pumping = false;
  let socket: tls.TLSSocket | undefined;
  const raw = socketDuplex(conn, () => {
    const w = want;
    want = undefined;
    w?.();
    if (!pumping) {
      pumping = true;
      pump();
    }
  }, () => {
    want?.();
    room?.();
  }, activity);
  const queue: Uint8Array[] = [];
  let queued = 0;
  let ahead = 0;
  let ended = false;
  let waiting: (() => void) | undefined;
  let room: (() => void) | undefined;
  const full = () => queued > PLAIN_HIGH_WATER || ahead > RAW_AHEAD_BYTES;
  const wakeReader = () => {
    const w = waiting;
    waiting = undefined;
    w?.();
  };
  const wakePump = () => {
    if (full()) return;
    const r = room;
    room = undefined;
    r?.();
  };
  const pump = async () => {
    const buf = new Uint8Array(16 * 1024);
    try {
      for (;;) {
        while (full() && !raw.destroyed) await new Promise<void>((r) => room = r);
        if (raw.destroyed) return;
        const n = await conn.read(buf);
        if (n === null) break;
        if (raw.destroyed) return;
        activity();
        ahead += n;
        if (!raw.push(buf.slice(0, n))) await new Promise<void>((r) => want = r);
      }
    } catch {
      // closed under the read, or reset
    }
    if (raw.destroyed) return;
    raw.push(null);
    // Gone before the handshake ended: fed the end of its input, the TLS layer neither
    // finishes nor fails it; past the grace the connection fails (the handshake rejects).
    if (socket === undefined) {
      failHandshakeAfterEof(clock, () => socket === undefined, () => raw.destroy());
    }
  };
  const handshake = new Promise<void>((resolve, reject) => {
    const secured = (s: tls.TLSSocket) => {
      socket = s;
      s.on("data", (chunk: Uint8Array) => {
        queue.push(chunk);
        queued += chunk.length;
        ahead = 0;
        wakeReader();
        wakePump();
      });
      const end = () => {
        ended = true;
        wakeReader();
        gone();
      };
      s.on("end", end);
      s.on("close", end);
      s.on("error", end);
      resolve();
    };
    const failed = (e: Error, s: { destroy(): void } | undefined) => {
      s?.destroy();
      raw.destroy();
      reject(e);
    };
    raw.on("close", () => reject(new Error("closed")));
    accept.call(connectionServer(server, secured, failed), raw);
  });
  handshake.catch(() => {});
  const close = (): void => {
    socket?.destroy();
    raw.destroy();
    closeQuietly(conn);
    ended = true;
    wakeReader();
  };
  return {
    handshake,
    async read(buf: Uint8Array): Promise<number | null> {
      while (queue.length === 0) {
        if (ended) return null;
        await new Promise<void>((r) => waiting = r);
      }
      const head = queue[0];
      const n = Math.min(head.length, buf.length);
      buf.set(head.subarray(0, n));
      if (n === head.length) queue.shift();
      else queue[0] = head.subarray(n);
      queued -= n;
      wakePump();
      return n;
    },
    write(bytes: Uint8Array): Promise<void> {
      const s = socket;
      if (s === undefined || s.destroyed) return Promise.reject(new Error("closed"));
      return new Promise<void>((resolve, reject) =>
        s.write(bytes, (e?: Error | null) => e ? reject(e) : resolve())
      );
    },
    end(): Promise<void> {
      const s = socket;
      if (s === undefined || s.destroyed) {
        close();
        return Promise.resolve();
      }
      return new Promise<void>((resolve) => {
        const timer = clock.setTimer(END_GRACE_MS, done, { unref: true });
        function done(): void {
          timer.cancel();
          close();
          resolve();
        }
        s.once("close", done);
        s.end();
      });
    },
    close,
  };
}
