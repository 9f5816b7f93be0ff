/**
 * Plain TCP listener (`Deno.listen`): one read loop per connection feeding a
 * {@linkcode StreamSession}. Unlike upstream, accept errors are retried with backoff instead of
 * ending the accept loop, and a connection is closed as soon as the peer is gone (ipfix.md §2.13).
 */

import { bindDualStack, closeQuietly, exporterAddress, type ListenAddress } from "./address.ts";
import { Session, type SessionEnv } from "./session.ts";
import { StreamSession } from "./stream.ts";

const READ_BUFFER = 65536;
const BACKOFF_MIN_MS = 5;
const BACKOFF_MAX_MS = 1000;

/** A TCP IPFIX listener. */
export class TcpListener {
  readonly #env: SessionEnv;
  readonly #listener: Deno.TcpListener;
  readonly #conns = new Set<Deno.TcpConn>();
  readonly #handlers = new Set<Promise<void>>();
  #acceptLoop: Promise<void> | undefined;
  #closing = false;
  #wake: (() => void) | undefined;

  /** Binds the listener (dual-stack `::` for a wildcard address, IPv4 fallback). */
  constructor(address: ListenAddress, env: SessionEnv) {
    this.#env = env;
    this.#listener = bind(address);
  }

  /** The bound port. */
  get port(): number {
    return (this.#listener.addr as Deno.NetAddr).port;
  }

  /** Starts accepting connections. */
  start(): void {
    this.#acceptLoop ??= this.#accept();
  }

  /** Stops accepting, closes every connection and waits for their handlers. */
  async stop(): Promise<void> {
    this.#closing = true;
    this.#wake?.();
    try {
      this.#listener.close();
    } catch {
      // Already closed.
    }
    for (const c of this.#conns) closeQuietly(c);
    await this.#acceptLoop;
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
      this.#handlers.add(h);
      h.finally(() => this.#handlers.delete(h));
    }
  }

  async #handle(conn: Deno.TcpConn): Promise<void> {
    this.#conns.add(conn);
    const remote = conn.remoteAddr;
    const session = new Session(this.#env, {
      transport: "tcp",
      exporterAddress: exporterAddress(remote.hostname),
      peer: `[${remote.hostname}]:${remote.port}`,
      templateTtlMs: 0,
    });
    const stream = new StreamSession(session);
    const buf = new Uint8Array(READ_BUFFER);
    let reason = "eof";
    let onError = false;
    try {
      for (;;) {
        const n = await conn.read(buf);
        if (n === null) {
          stream.end();
          break;
        }
        const r = stream.feed(buf.subarray(0, n));
        if (!r.ok) {
          reason = r.reason;
          onError = true;
          break;
        }
      }
    } catch (e) {
      reason = this.#closing ? "collector stopped" : `read error: ${(e as Error).message}`;
    } finally {
      closeQuietly(conn);
      this.#conns.delete(conn);
      session.close(reason, onError);
    }
  }
}

function bind(address: ListenAddress): Deno.TcpListener {
  return bindDualStack(
    address,
    (hostname) => Deno.listen({ transport: "tcp", hostname, port: address.port }),
  );
}
