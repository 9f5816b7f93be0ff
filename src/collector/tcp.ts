/**
 * Plain TCP listener (`Deno.listen`): one read loop per connection feeding a
 * {@linkcode StreamSession}, reading straight into the session's buffer (1 KiB while idle,
 * 256 KiB while busy). Unlike upstream, accept errors are retried with backoff instead of
 * ending the accept loop, a connection is closed as soon as the peer is gone (ipfix.md §2.13),
 * and the caps and timeouts of the `limits:` section apply ({@linkcode ConnectionTable}).
 * Connections are read fairly: each yields after a bounded turn (`fairness.ts`).
 */

import {
  bindDualStack,
  closeQuietly,
  exporterAddress,
  type ListenAddress,
  sessionPeer,
} from "./address.ts";
import { type ConnectionLimits, ConnectionTable, countUnfinished } from "./connections.ts";
import type { DrainOptions } from "./drain.ts";
import { FairTurn, ReadClock, ReadGate } from "./fairness.ts";
import { Session, type SessionEnv } from "./session.ts";
import { StreamSession } from "./stream.ts";

const BACKOFF_MIN_MS = 5;
const BACKOFF_MAX_MS = 1000;

/** Options of the stream listeners (TCP and TLS). */
export interface StreamListenerOptions {
  /** Connection caps and timeouts (the `limits:` section); an absent one is unbounded. */
  readonly limits: ConnectionLimits;
  /** The drain at stop (real time). */
  readonly drain: DrainOptions;
}

/** A TCP IPFIX listener. */
export class TcpListener {
  readonly #env: SessionEnv;
  readonly #listener: Deno.TcpListener;
  readonly #table: ConnectionTable;
  readonly #drain: DrainOptions;
  readonly #handlers = new Set<Promise<void>>();
  readonly #reads = new ReadClock();
  readonly #gate: ReadGate;
  #accepting: { stop(): Promise<void> } | undefined;
  #closing = false;

  /** Binds the listener (dual-stack `::` for a wildcard address, IPv4 fallback). */
  constructor(address: ListenAddress, env: SessionEnv, options: StreamListenerOptions) {
    this.#env = env;
    this.#gate = new ReadGate();
    this.#table = new ConnectionTable(env, { limits: options.limits });
    this.#drain = options.drain;
    this.#listener = bindTcp(address);
  }

  /** The bound port. */
  get port(): number {
    return (this.#listener.addr as Deno.NetAddr).port;
  }

  /** Starts accepting connections. */
  start(): void {
    if (this.#accepting !== undefined) return;
    this.#table.start();
    this.#accepting = acceptLoop(this.#listener, this.#env, this.#handlers, (c) => this.#handle(c));
  }

  /**
   * Stops accepting, drains every connection (what the kernel already acknowledged is read and
   * decoded, bounded by the drain deadline) and waits for their handlers.
   */
  async stop(): Promise<void> {
    this.#closing = true;
    if (this.#accepting !== undefined) await this.#accepting.stop();
    else closeQuietly(this.#listener);
    await this.#table.drain(this.#drain);
    await Promise.all(this.#handlers);
  }

  /** Admits the connection (or closes it, counted) and starts its read loop. */
  #handle(conn: Deno.TcpConn): Promise<void> | undefined {
    const remote = conn.remoteAddr;
    const address = exporterAddress(remote.hostname);
    let closedBy: string | undefined;
    const tracked = this.#table.admit(address, {
      close(reason: string): void {
        closedBy ??= reason;
        closeQuietly(conn);
      },
      closeWrite(): void {
        conn.closeWrite().catch(() => {});
      },
    });
    if (tracked === undefined) {
      closeQuietly(conn);
      return undefined;
    }
    const session = new Session(this.#env, {
      transport: "tcp",
      exporterAddress: address,
      peer: sessionPeer(remote.hostname, remote.port),
      templateTtlMs: 0,
    });
    const stream = new StreamSession(session, this.#env.clock, this.#env.counters.readBuffers);
    this.#table.attach(tracked, stream);
    return this.#read(conn, stream).then((r) => {
      closeQuietly(conn);
      // What the peer had sent of a message it never finished: counted as discarded when we
      // closed the connection, as truncated (as at EOF) when a read error (a reset) ended it.
      if (closedBy !== undefined) countUnfinished(this.#env, stream, this.#closing);
      else if (r.readError) stream.end("a read error");
      this.#table.remove(tracked);
      session.close(closedBy ?? r.reason, r.onError);
    });
  }

  /** Reads until EOF, an error or a bad message; never rejects. */
  async #read(
    conn: Deno.TcpConn,
    stream: StreamSession,
  ): Promise<{ reason: string; onError: boolean; readError?: boolean }> {
    const turn = new FairTurn(this.#reads);
    try {
      for (;;) {
        const space = stream.readSpace();
        const n = await conn.read(space);
        if (n === null) {
          stream.end();
          return { reason: "eof", onError: false };
        }
        const r = stream.commit(n);
        if (!r.ok) return { reason: r.reason, onError: true };
        // Caught up with the peer: wait for its next bytes in the idle-sized buffer.
        if (n < space.length) stream.release();
        // Caught up: let the peer's next writes gather (ReadGate).
        const tick = this.#gate.after(n, space.length);
        if (tick !== undefined) await tick;
        // Fairness: after a turn's worth of bytes, let the other connections read.
        if (turn.spend(n) && this.#table.size > 1) await turn.pause();
      }
    } catch (e) {
      return {
        reason: this.#closing ? "collector stopped" : `read error: ${(e as Error).message}`,
        onError: false,
        readError: true,
      };
    }
  }
}

/** Binds a TCP listener on `address` (dual-stack `::` for a wildcard, IPv4 fallback). */
export function bindTcp(address: ListenAddress): Deno.TcpListener {
  return bindDualStack(
    address,
    (hostname) => Deno.listen({ transport: "tcp", hostname, port: address.port }),
  );
}

/**
 * Accepts connections from `listener` until stopped, handing each to `handle` (its handler, kept
 * in `handlers` until it settles, or undefined when refused). Accept errors (e.g. EMFILE) are
 * counted and retried with backoff instead of ending the loop (unlike upstream). A handler that
 * throws, at once or later, is logged (at once: its connection closed and counted as an accept
 * error) and the loop goes on: never an unhandled rejection, which would end the process.
 * `stop()` closes the listener, cuts a backoff short and waits for the loop to end. (Also the API
 * port's, `src/api/front.ts`.)
 */
export function acceptLoop(
  listener: Deno.TcpListener,
  env: Pick<SessionEnv, "log"> & { counters: { acceptErrors: number } },
  handlers: Set<Promise<void>>,
  handle: (conn: Deno.TcpConn) => Promise<void> | undefined,
): { stop(): Promise<void> } {
  let closing = false;
  let wake: (() => void) | undefined;
  const loop = (async () => {
    let backoff = BACKOFF_MIN_MS;
    while (!closing) {
      let conn: Deno.TcpConn;
      try {
        conn = await listener.accept();
        backoff = BACKOFF_MIN_MS;
      } catch (e) {
        if (closing) break;
        env.counters.acceptErrors++;
        env.log.warn("accept failed, retrying", { error: e, backoffMs: backoff });
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, backoff);
          wake = () => {
            clearTimeout(t);
            resolve();
          };
        });
        wake = undefined;
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
        continue;
      }
      if (closing) {
        closeQuietly(conn);
        break;
      }
      let started: Promise<void> | undefined;
      try {
        started = handle(conn);
      } catch (e) {
        closeQuietly(conn);
        env.counters.acceptErrors++;
        env.log.error("connection handler failed at accept: connection closed", { error: e });
        continue;
      }
      if (started === undefined) continue;
      const h: Promise<void> = started.catch((e) => {
        env.log.error("connection handler failed", { error: e });
      }).finally(() => handlers.delete(h));
      handlers.add(h);
    }
  })();
  return {
    async stop(): Promise<void> {
      closing = true;
      wake?.();
      closeQuietly(listener);
      await loop;
    },
  };
}
