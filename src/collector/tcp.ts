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
  #acceptLoop: Promise<void> | undefined;
  #closing = false;
  #wake: (() => void) | undefined;

  /** Binds the listener (dual-stack `::` for a wildcard address, IPv4 fallback). */
  constructor(address: ListenAddress, env: SessionEnv, options: StreamListenerOptions) {
    this.#env = env;
    this.#gate = new ReadGate(env.clock);
    this.#table = new ConnectionTable(env, { limits: options.limits });
    this.#drain = options.drain;
    this.#listener = bind(address);
  }

  /** The bound port. */
  get port(): number {
    return (this.#listener.addr as Deno.NetAddr).port;
  }

  /** Starts accepting connections. */
  start(): void {
    this.#table.start();
    this.#acceptLoop ??= this.#accept();
  }

  /**
   * Stops accepting, drains every connection (what the kernel already acknowledged is read and
   * decoded, bounded by the drain deadline) and waits for their handlers.
   */
  async stop(): Promise<void> {
    this.#closing = true;
    this.#wake?.();
    closeQuietly(this.#listener);
    await this.#acceptLoop;
    await this.#table.drain(this.#drain);
    await Promise.all(this.#handlers);
  }

  async #accept(): Promise<void> {
    let backoff = BACKOFF_MIN_MS;
    while (!this.#closing) {
      let conn: Deno.TcpConn;
      try {
        conn = await this.#listener.accept();
        backoff = BACKOFF_MIN_MS;
      } catch (e) {
        if (this.#closing) break;
        this.#env.counters.acceptErrors++;
        this.#env.log.warn("accept failed, retrying", { error: e, backoffMs: backoff });
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, backoff);
          this.#wake = () => {
            clearTimeout(t);
            resolve();
          };
        });
        this.#wake = undefined;
        backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
        continue;
      }
      if (this.#closing) {
        closeQuietly(conn);
        break;
      }
      const h = this.#handle(conn);
      if (h === undefined) continue;
      this.#handlers.add(h);
      h.finally(() => this.#handlers.delete(h));
    }
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
    const stream = new StreamSession(session, this.#env.clock);
    this.#table.attach(tracked, stream);
    return this.#read(conn, stream).then((r) => {
      closeQuietly(conn);
      this.#table.remove(tracked);
      if (closedBy !== undefined) countUnfinished(this.#env, stream, this.#closing);
      session.close(closedBy ?? r.reason, r.onError);
    });
  }

  /** Reads until EOF, an error or a bad message; never rejects. */
  async #read(
    conn: Deno.TcpConn,
    stream: StreamSession,
  ): Promise<{ reason: string; onError: boolean }> {
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
        // Caught up while nobody is busy: let the peer's next writes gather (ReadGate).
        const tick = this.#gate.after(n, space.length);
        if (tick !== undefined) await tick;
        // Fairness: after a turn's worth of bytes, let the other connections read.
        if (turn.spend(n) && this.#table.size > 1) await turn.pause();
      }
    } catch (e) {
      return {
        reason: this.#closing ? "collector stopped" : `read error: ${(e as Error).message}`,
        onError: false,
      };
    }
  }
}

function bind(address: ListenAddress): Deno.TcpListener {
  return bindDualStack(
    address,
    (hostname) => Deno.listen({ transport: "tcp", hostname, port: address.port }),
  );
}
