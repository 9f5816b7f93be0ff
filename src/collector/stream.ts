/**
 * The part of TCP and TLS sessions that does not depend on the socket API: framing the byte
 * stream and deciding when the session must be closed. A framing error (Length < 16, Version ≠
 * 10), a message the decoder rejects, or a message with a malformed set closes the session, as
 * go-ipfix ≥ 0.12 does: the peer is evidently broken and will resend its templates on reconnect.
 * A data set for an unknown template is not malformed and keeps the session.
 */

import { StreamFramer } from "./framing.ts";
import type { Session } from "./session.ts";

/** Result of feeding a chunk: keep reading, or close with a reason. */
export type FeedResult = { readonly ok: true } | { readonly ok: false; readonly reason: string };

const FEED_OK: FeedResult = Object.freeze({ ok: true });

/** Frames one TCP/TLS byte stream into messages for its {@linkcode Session}. */
export class StreamSession {
  /** The session the messages belong to. */
  readonly session: Session;
  readonly #framer = new StreamFramer();

  /** Wraps a freshly opened session. */
  constructor(session: Session) {
    this.session = session;
  }

  /** Feeds bytes read from the socket; decodes every complete message synchronously. */
  feed(chunk: Uint8Array): FeedResult {
    this.session.addBytes(chunk.length);
    const framer = this.#framer;
    framer.push(chunk);
    for (;;) {
      const message = framer.nextMessage();
      if (message === undefined) {
        const reason = framer.takeError();
        if (reason === undefined) return FEED_OK;
        this.session.reject("framing", reason);
        this.session.discardBytes(framer.buffered);
        return { ok: false, reason };
      }
      const r = this.session.handleMessage(message);
      if (!r.ok || r.setErrors > 0) {
        // What the peer sent behind the bad message is never decoded: count it.
        this.session.discardBytes(framer.buffered);
        return { ok: false, reason: r.ok ? "malformed set" : `decode error: ${r.reason}` };
      }
    }
  }

  /** Called at EOF: a partial message left in the buffer is counted as a truncated message. */
  end(): void {
    if (this.#framer.buffered > 0) {
      this.session.reject(
        "truncated",
        `${this.#framer.buffered} bytes of a partial message at EOF`,
      );
    }
  }
}
