/**
 * Stream framing for IPFIX over TCP/TLS (ipfix.md §2.3): messages are back to back and framed
 * only by the header Length. Unlike upstream, a Length below 16 or a Version other than 10 is a
 * framing error: the stream cannot be resynchronised, so the caller closes the session.
 */

/** Result of {@linkcode StreamFramer.next}. */
export type FrameResult =
  | { readonly kind: "message"; readonly message: Uint8Array }
  | { readonly kind: "error"; readonly reason: string }
  | { readonly kind: "need-more" };

const HEADER_LENGTH = 16;

/** Accumulates stream chunks and cuts them into whole IPFIX messages. */
export class StreamFramer {
  #buf = new Uint8Array(65536 * 2);
  #start = 0;
  #end = 0;
  #failed = false;
  #failure: string | undefined = undefined;

  /** Bytes buffered that do not form a complete message yet. */
  get buffered(): number {
    return this.#end - this.#start;
  }

  /** Appends a chunk read from the stream (copied; the caller may reuse its buffer). */
  push(chunk: Uint8Array): void {
    if (this.#failed || chunk.length === 0) return;
    const need = this.#end - this.#start + chunk.length;
    if (this.#end + chunk.length > this.#buf.length) {
      if (need > this.#buf.length) {
        const bigger = new Uint8Array(Math.max(need, this.#buf.length * 2));
        bigger.set(this.#buf.subarray(this.#start, this.#end));
        this.#buf = bigger;
      } else {
        this.#buf.copyWithin(0, this.#start, this.#end);
      }
      this.#end -= this.#start;
      this.#start = 0;
    }
    this.#buf.set(chunk, this.#end);
    this.#end += chunk.length;
  }

  /**
   * Returns the next complete message (a view valid until the next `push`), a framing error
   * (after which the framer yields nothing more), or `need-more`.
   */
  next(): FrameResult {
    const message = this.nextMessage();
    if (message !== undefined) return { kind: "message", message };
    const reason = this.takeError();
    return reason === undefined ? { kind: "need-more" } : { kind: "error", reason };
  }

  /**
   * {@linkcode StreamFramer.next} without a result object per message (the receive path calls
   * it once per Agent record): the next complete message, or undefined when more bytes are
   * needed or on a framing error, which {@linkcode StreamFramer.takeError} then reports once.
   */
  nextMessage(): Uint8Array | undefined {
    if (this.#failed) return undefined;
    const avail = this.#end - this.#start;
    if (avail < 4) return undefined;
    const b = this.#buf;
    const s = this.#start;
    const version = (b[s] << 8) | b[s + 1];
    const length = (b[s + 2] << 8) | b[s + 3];
    if (version !== 10) {
      this.#failed = true;
      this.#failure = `framing: version ${version} is not IPFIX (10)`;
      return undefined;
    }
    if (length < HEADER_LENGTH) {
      this.#failed = true;
      this.#failure = `framing: message length ${length} < 16`;
      return undefined;
    }
    if (avail < length) return undefined;
    this.#start += length;
    if (this.#start === this.#end) {
      // Empty: rewind. The returned view stays valid because nothing is written before `push`.
      this.#start = 0;
      this.#end = 0;
    }
    return b.subarray(s, s + length);
  }

  /** The framing error found by the last `nextMessage`, once; undefined otherwise. */
  takeError(): string | undefined {
    const reason = this.#failure;
    this.#failure = undefined;
    return reason;
  }
}
