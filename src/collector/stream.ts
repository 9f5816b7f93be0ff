/**
 * The part of TCP and TLS sessions that does not depend on the socket API: framing the byte
 * stream and deciding when the session must be closed. A framing error (Length < 16, Version ≠
 * 10), a message the decoder rejects, or a message with a malformed set closes the session, as
 * go-ipfix ≥ 0.12 does: the peer is evidently broken and will resend its templates on reconnect.
 * A data set for an unknown template is not malformed and keeps the session.
 */

import type { Clock } from "../clock.ts";
import { StreamFramer } from "./framing.ts";
import type { ReadBudget } from "./read_budget.ts";
import type { Session } from "./session.ts";

/** Result of feeding a chunk: keep reading, or close with a reason. */
export type FeedResult = { readonly ok: true } | { readonly ok: false; readonly reason: string };

const FEED_OK: FeedResult = Object.freeze({ ok: true });

/**
 * Frames one TCP/TLS byte stream into messages for its {@linkcode Session}, and keeps what the
 * connection bounds need: when bytes last arrived (idle timeout), when the message not complete
 * yet started (read timeout) and how many reads there were (the drain at stop).
 */
export class StreamSession {
  /** The session the messages belong to. */
  readonly session: Session;
  /** Monotonic time (the session's clock) of the last bytes read. */
  lastActivityMs: number;
  /** When the first bytes of the message not complete yet arrived; -1 when none is started. */
  startedMs = -1;
  /** Reads (chunks) fed so far. */
  reads = 0;
  readonly #framer: StreamFramer;
  readonly #clock: Clock;

  /**
   * Wraps a freshly opened session; `clock` times the activity, `budget` counts the grown read
   * buffer (default: unbounded).
   */
  constructor(session: Session, clock: Clock, budget?: ReadBudget) {
    this.session = session;
    this.#clock = clock;
    this.#framer = new StreamFramer(budget);
    this.lastActivityMs = clock.nowMs();
  }

  /** Bytes read that do not form a complete message yet. */
  get buffered(): number {
    return this.#framer.buffered;
  }

  /** Bytes allocated for the read buffer. */
  get capacity(): number {
    return this.#framer.capacity;
  }

  /** Where to read the next bytes directly (see {@linkcode StreamFramer.readSpace}). */
  readSpace(): Uint8Array {
    return this.#framer.readSpace();
  }

  /** Decodes what a read put into {@linkcode readSpace}: `n` bytes. */
  commit(n: number): FeedResult {
    this.#framer.commit(n);
    return this.#frame(n);
  }

  /** Feeds bytes read from the socket (copied); decodes every complete message synchronously. */
  feed(chunk: Uint8Array): FeedResult {
    this.#framer.push(chunk);
    return this.#frame(chunk.length);
  }

  /** Lets go of a grown read buffer once nothing is buffered; true when one was released. */
  release(): boolean {
    return this.#framer.release();
  }

  /** The connection is gone: its read buffer leaves the budget, whatever it held. */
  dispose(): void {
    this.#framer.dispose();
  }

  #frame(n: number): FeedResult {
    this.session.addBytes(n);
    this.reads++;
    const now = this.#clock.nowMs();
    this.lastActivityMs = now;
    const framer = this.#framer;
    let framed = false;
    for (;;) {
      const start = framer.nextMessageStart();
      if (start < 0) {
        const reason = framer.takeError();
        if (reason === undefined) {
          if (framer.buffered === 0) this.startedMs = -1;
          else if (framed || this.startedMs < 0) this.startedMs = now;
          return FEED_OK;
        }
        this.session.reject("framing", reason);
        this.session.discardBytes(framer.buffered);
        return { ok: false, reason };
      }
      framed = true;
      const r = this.session.handleMessage(framer.bytes, start, framer.messageEnd);
      if (!r.ok || r.setErrors > 0) {
        // What the peer sent behind the bad message is never decoded: count it.
        this.session.discardBytes(framer.buffered);
        return { ok: false, reason: r.ok ? "malformed set" : `decode error: ${r.reason}` };
      }
    }
  }
  /**
   * Called when the peer's stream ended (`at`: `"EOF"`, or the read or TLS error that ended it):
   * a partial message left in the buffer is counted as a truncated message, once (its bytes are
   * never decoded: the buffer is given back, so a later {@linkcode buffered} is 0).
   */
  end(at = "EOF"): void {
    if (this.#framer.buffered > 0) {
      this.session.reject(
        "truncated",
        `${this.#framer.buffered} bytes of a partial message at ${at}`,
      );
    }
    this.#framer.dispose();
  }
}
