/**
 * The bound on read buffers over every TCP/TLS connection of a collector (`limits.
 * maxReadBufferBytes`). A connection reads into a 1 KiB buffer while its peer is idle and grows
 * it (to 256 KiB) while bytes keep coming, for fewer, larger reads; without a bound, thousands
 * of connections busy at once would hold 256 KiB each. Growth for speed is granted only while
 * the total fits; over it a connection keeps reading into the buffer it has (smaller reads, the
 * same bytes: nothing is dropped) and the held-back read is counted (`readBuffersLimited`). What
 * a started message needs to complete (at most twice an IPFIX message's 64 KiB) is always
 * granted, and still counted in the total, so the bound never stalls a connection.
 *
 * @module
 */

/** Bytes of grown read buffers held by a collector's connections, against their limit. */
export class ReadBudget {
  /** The most bytes growth for speed may bring the total to. */
  readonly limit: number;
  /** Reads made into a smaller buffer because growing it would pass {@linkcode limit}. */
  limited = 0;
  #held = 0;
  readonly #onLimited: (() => void) | undefined;

  /**
   * A budget of `limit` bytes (default: unbounded); `onLimited` is called at every held-back
   * growth (the collector logs it, rate-limited).
   */
  constructor(limit = Infinity, onLimited?: () => void) {
    this.limit = limit;
    this.#onLimited = onLimited;
  }

  /** Bytes of grown buffers held now. */
  get held(): number {
    return this.#held;
  }

  /**
   * Whether growing a buffer by `bytes` for speed fits under the limit; when it does not, the
   * read is counted in {@linkcode limited}. Takes nothing: {@linkcode adjust} does.
   */
  allows(bytes: number): boolean {
    if (this.#held + bytes <= this.limit) return true;
    this.limited++;
    this.#onLimited?.();
    return false;
  }

  /** Accounts a buffer grown (`bytes` > 0) or given back (`bytes` < 0), whatever the limit. */
  adjust(bytes: number): void {
    this.#held += bytes;
  }
}
