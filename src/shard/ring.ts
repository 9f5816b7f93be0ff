/**
 * A single-producer single-consumer ring of variable-length byte frames in a
 * `SharedArrayBuffer`: how the main thread hands batches of records to a shard worker without a
 * `postMessage` (and its structured clone) per batch. One thread writes through a
 * {@linkcode RingWriter}, one other thread reads through a {@linkcode RingReader}; both wrap
 * the same buffer made by {@linkcode createRing} (the buffer is what crosses to the worker).
 *
 * Layout: a 192-byte header of Int32 words, then the data area (a power of two of bytes). The
 * write and read positions are byte counters that only grow (wrapping at 2^32, which a power of
 * two capacity divides), each on its own cache line; the producer publishes a frame by storing
 * the write counter with `Atomics.store` after the frame's bytes, the consumer frees it by
 * storing the read counter. A frame is an 8-byte header (Int32 payload length) and the payload,
 * padded to 8 bytes, so payloads are 8-aligned and counters are multiples of 8. A frame never
 * wraps: when it does not fit before the end of the data area, the producer writes a skip
 * marker (length -1) there and starts the frame at offset 0. Bit 0 of the write counter is the
 * producer's "closed" flag, so that closing and the consumer's `Atomics.wait` on that word
 * cannot miss each other.
 *
 * The ring never drops: a frame that does not fit yet is refused (`reserve` returns null) and
 * the caller waits for space or counts a drop. A frame larger than the data area less its
 * header can never fit and throws.
 *
 * Blocking: `Atomics.wait` is allowed on Deno's main thread as well as in workers (checked on
 * Deno 2.9.6, unlike browsers), but it blocks the event loop, so the main thread should use the
 * async variants, built on `Atomics.waitAsync` (supported by Deno 2.9.6). A pending
 * `Atomics.waitAsync` does not keep Deno's event loop alive by itself (a script awaiting only
 * it exits with "top-level await promise never resolved"), so the async variants race it with
 * a timer for their timeout. A worker blocked in `Atomics.wait` runs no event loop: it handles
 * no `postMessage` until the wait ends, so a worker that also takes messages waits with short
 * timeouts (or the async variant).
 *
 * @module
 */

const MAGIC = 0x52494e47; // "RING"
/** Int32 word indices of the header. */
const W_MAGIC = 0;
const W_CAPACITY = 1;
const W_WRITE = 16; // byte 64: its own cache line
const W_READ = 32; // byte 128
const HEADER_BYTES = 192;
const FRAME_HEADER = 8;
const SKIP = -1;
const CLOSED_BIT = 1;
const POSITION_MASK = ~7;

/** Smallest data area (bytes): {@linkcode createRing} rounds a smaller capacity up to it. */
export const RING_MIN_CAPACITY = 64;
/** Largest data area (bytes): counters compare as Int32, so at most 2^30. */
export const RING_MAX_CAPACITY = 1 << 30;

/** Outcome of a wait: a frame (or space) is there, the producer closed an empty ring, or not yet. */
export type RingWait = "ready" | "closed" | "timeout";

function align8(n: number): number {
  return (n + 7) & ~7;
}

/**
 * A shared buffer for a ring whose data area is `capacityBytes` rounded up to a power of two
 * (at least {@linkcode RING_MIN_CAPACITY}). Throws above {@linkcode RING_MAX_CAPACITY}.
 */
export function createRing(capacityBytes: number): SharedArrayBuffer {
  if (!Number.isInteger(capacityBytes) || capacityBytes <= 0) {
    throw new RangeError(`ring: capacity ${capacityBytes}: not a positive integer`);
  }
  if (capacityBytes > RING_MAX_CAPACITY) {
    throw new RangeError(`ring: capacity ${capacityBytes}: more than ${RING_MAX_CAPACITY} bytes`);
  }
  let cap = RING_MIN_CAPACITY;
  while (cap < capacityBytes) cap *= 2;
  const sab = new SharedArrayBuffer(HEADER_BYTES + cap);
  const h = new Int32Array(sab, 0, HEADER_BYTES / 4);
  h[W_MAGIC] = MAGIC;
  h[W_CAPACITY] = cap;
  return sab;
}

/** The header words and data area of a ring buffer, checked. */
function open(sab: SharedArrayBuffer): { h: Int32Array; data: Uint8Array; cap: number } {
  if (!(sab instanceof SharedArrayBuffer) || sab.byteLength < HEADER_BYTES + RING_MIN_CAPACITY) {
    throw new TypeError("ring: not a ring buffer (made by createRing)");
  }
  const h = new Int32Array(sab, 0, HEADER_BYTES / 4);
  const cap = h[W_CAPACITY];
  if (h[W_MAGIC] !== MAGIC || sab.byteLength !== HEADER_BYTES + cap) {
    throw new TypeError("ring: not a ring buffer (made by createRing)");
  }
  return { h, data: new Uint8Array(sab, HEADER_BYTES, cap), cap };
}

/**
 * Awaits a change of header word `index` from `value` (or a notify), at most `timeoutMs`:
 * `Atomics.waitAsync`, raced with a timer that keeps the event loop alive meanwhile and ends
 * the wait itself (the loop may not see the wait's own timeout fire).
 */
async function waitWordAsync(
  h: Int32Array,
  index: number,
  value: number,
  timeoutMs: number,
): Promise<boolean> {
  if (timeoutMs === Infinity) {
    // Until a notify: no timer to arm and cancel (in a worker, whose event loop stays alive
    // without one; a timer and its race cost the thread about as much as the wake itself).
    const r = Atomics.waitAsync(h, index, value);
    if (!r.async) return false;
    await r.value;
    return true;
  }
  const r = Atomics.waitAsync(h, index, value, timeoutMs);
  if (!r.async) return false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, Math.min(Math.ceil(timeoutMs), 2 ** 31 - 1));
  });
  try {
    await Promise.race([r.value, expired]);
  } finally {
    clearTimeout(timer);
  }
  return true;
}

/** What both ends of a ring hold: its header words, its data area and its capacity. */
abstract class RingEnd {
  protected readonly h: Int32Array;
  protected readonly data: Uint8Array;
  protected readonly dv: DataView;
  protected readonly cap: number;

  constructor(sab: SharedArrayBuffer) {
    const { h, data, cap } = open(sab);
    this.h = h;
    this.data = data;
    this.dv = new DataView(sab, HEADER_BYTES, cap);
    this.cap = cap;
  }

  /** Bytes of the data area. */
  get capacity(): number {
    return this.cap;
  }
}

/** The producer side of a ring (one per ring, on one thread). */
export class RingWriter extends RingEnd {
  #write: number;
  /** Data offset of the reserved frame's header, or -1 when none is reserved. */
  #reserved = -1;
  #reservedBytes = 0;

  /** Wraps a buffer made by {@linkcode createRing}. */
  constructor(sab: SharedArrayBuffer) {
    super(sab);
    this.#write = Atomics.load(this.h, W_WRITE);
  }

  /** Largest payload a frame can have (the data area less the frame header). */
  get maxFrameBytes(): number {
    return this.cap - FRAME_HEADER;
  }

  /** True once {@linkcode close} was called. */
  get closed(): boolean {
    return (this.#write & CLOSED_BIT) !== 0;
  }

  /** Bytes published and not yet released by the reader (frame headers and padding included). */
  get usedBytes(): number {
    return (this.#write - Atomics.load(this.h, W_READ)) & POSITION_MASK;
  }

  /**
   * Makes room for a frame of `need` bytes (header included) at the write position if it fits:
   * writes a skip marker first when the frame would cross the end and the rest of the area is
   * free (publishing it, so the reader moves past it). False when it does not fit yet.
   */
  #prepare(need: number): boolean {
    const cap = this.cap;
    let free = cap - ((this.#write - Atomics.load(this.h, W_READ)) | 0);
    const p = this.#write & (cap - 1);
    if (cap - p < need) {
      const tail = cap - p;
      if (free < tail) return false;
      this.dv.setInt32(p, SKIP, true);
      this.#write = (this.#write + tail) | 0;
      Atomics.store(this.h, W_WRITE, this.#write);
      free -= tail;
    }
    return free >= need;
  }

  #check(bytes: number): void {
    if (this.closed) throw new Error("ring: write after close");
    if (this.#reserved >= 0) throw new Error("ring: reserve before commit of the previous frame");
    if (!Number.isInteger(bytes) || bytes < 0) {
      throw new RangeError(`ring: frame of ${bytes} bytes`);
    }
    if (bytes > this.cap - FRAME_HEADER) {
      throw new RangeError(
        `ring: frame of ${bytes} bytes is larger than the ring allows (${
          this.cap - FRAME_HEADER
        } bytes)`,
      );
    }
  }

  /**
   * Reserves a frame of `bytes` payload bytes and returns its view in the shared buffer, to be
   * filled and then published by {@linkcode commit}; null when the ring has no room for it now
   * (the caller waits with {@linkcode waitForSpace} or counts a drop). Throws when the frame can
   * never fit ({@linkcode maxFrameBytes}), after {@linkcode close}, or while a frame is reserved.
   */
  reserve(bytes: number): Uint8Array | null {
    this.#check(bytes);
    const need = align8(FRAME_HEADER + bytes);
    if (!this.#prepare(need)) return null;
    const p = this.#write & (this.cap - 1);
    this.#reserved = p;
    this.#reservedBytes = bytes;
    return this.data.subarray(p + FRAME_HEADER, p + FRAME_HEADER + bytes);
  }

  /**
   * Publishes the reserved frame with its first `bytes` bytes (default: all that was reserved)
   * and wakes a waiting reader.
   */
  commit(bytes: number = this.#reservedBytes): void {
    const p = this.#reserved;
    if (p < 0) throw new Error("ring: commit without a reserved frame");
    if (!Number.isInteger(bytes) || bytes < 0 || bytes > this.#reservedBytes) {
      throw new RangeError(`ring: commit of ${bytes} bytes, ${this.#reservedBytes} reserved`);
    }
    this.dv.setInt32(p, bytes, true);
    this.#reserved = -1;
    this.#write = (this.#write + align8(FRAME_HEADER + bytes)) | 0;
    Atomics.store(this.h, W_WRITE, this.#write);
    Atomics.notify(this.h, W_WRITE);
  }

  /** Copies `frame` into the ring as one frame; false (nothing written) when it does not fit now. */
  write(frame: Uint8Array): boolean {
    const view = this.reserve(frame.length);
    if (view === null) return false;
    view.set(frame);
    this.commit();
    return true;
  }

  /**
   * Blocks (`Atomics.wait`) until a frame of `bytes` payload bytes fits, at most `timeoutMs`:
   * "ready" or "timeout". It blocks the thread's event loop: on the main thread only where that
   * is the point (the shard pool's back-pressure on ingest); else {@linkcode waitForSpaceAsync}.
   */
  waitForSpace(bytes: number, timeoutMs: number): RingWait {
    this.#check(bytes);
    const need = align8(FRAME_HEADER + bytes);
    const end = performance.now() + timeoutMs;
    for (;;) {
      const read = Atomics.load(this.h, W_READ);
      if (this.#prepare(need)) return "ready";
      const left = end - performance.now();
      if (left <= 0) return "timeout";
      Atomics.wait(this.h, W_READ, read, left);
    }
  }

  /** {@linkcode waitForSpace} without blocking the thread (`Atomics.waitAsync`). */
  async waitForSpaceAsync(bytes: number, timeoutMs: number): Promise<RingWait> {
    this.#check(bytes);
    const need = align8(FRAME_HEADER + bytes);
    const end = performance.now() + timeoutMs;
    for (;;) {
      const read = Atomics.load(this.h, W_READ);
      if (this.#prepare(need)) return "ready";
      const left = end - performance.now();
      if (left <= 0) return "timeout";
      await waitWordAsync(this.h, W_READ, read, left);
    }
  }

  /**
   * Marks the ring closed: the producer is done. The reader still gets every published frame,
   * then its waits return "closed". Idempotent; a reserved, uncommitted frame is abandoned.
   */
  close(): void {
    if (this.closed) return;
    this.#reserved = -1;
    this.#write |= CLOSED_BIT;
    Atomics.store(this.h, W_WRITE, this.#write);
    Atomics.notify(this.h, W_WRITE);
  }
}

/** The consumer side of a ring (one per ring, on one thread). */
export class RingReader extends RingEnd {
  #read: number;
  /** Bytes the held frame takes (header and padding), or 0 when no frame is held. */
  #held = 0;

  /** Wraps a buffer made by {@linkcode createRing} (the one its writer wraps). */
  constructor(sab: SharedArrayBuffer) {
    super(sab);
    this.#read = Atomics.load(this.h, W_READ);
  }

  /** True when the producer closed the ring and every frame has been read and released. */
  get done(): boolean {
    const w = Atomics.load(this.h, W_WRITE);
    return (w & CLOSED_BIT) !== 0 && this.#held === 0 && !this.#available(w);
  }

  /**
   * The next frame's payload (a view into the shared buffer, valid until {@linkcode release}),
   * or undefined when no frame is published. Throws while a frame is held (not released).
   */
  next(): Uint8Array | undefined {
    if (this.#held !== 0) throw new Error("ring: next() before release() of the previous frame");
    if (!this.#available(Atomics.load(this.h, W_WRITE))) return undefined;
    const p = this.#read & (this.cap - 1);
    const len = this.dv.getInt32(p, true);
    this.#held = align8(FRAME_HEADER + len);
    return this.data.subarray(p + FRAME_HEADER, p + FRAME_HEADER + len);
  }

  /**
   * True when a frame is published at the read position, given the write counter `w`. Moves
   * past a skip marker there first (frames never wrap: the next one starts at offset 0), and
   * wakes the writer, which may be waiting for exactly that space.
   */
  #available(w: number): boolean {
    const end = w & POSITION_MASK;
    if (end === this.#read) return false;
    const p = this.#read & (this.cap - 1);
    if (this.dv.getInt32(p, true) !== SKIP) return true;
    this.#read = (this.#read + this.cap - p) | 0;
    Atomics.store(this.h, W_READ, this.#read);
    Atomics.notify(this.h, W_READ);
    // A skip marker is published before its frame: the frame may not be there yet.
    return end !== this.#read;
  }

  /** Frees the frame returned by {@linkcode next} for the writer, and wakes a waiting writer. */
  release(): void {
    if (this.#held === 0) throw new Error("ring: release() without a frame from next()");
    this.#read = (this.#read + this.#held) | 0;
    this.#held = 0;
    Atomics.store(this.h, W_READ, this.#read);
    Atomics.notify(this.h, W_READ);
  }

  /** "ready" when a frame is published (or held), "closed" when done, else undefined. */
  #state(w: number): RingWait | undefined {
    if (this.#held !== 0 || this.#available(w)) return "ready";
    return (w & CLOSED_BIT) !== 0 ? "closed" : undefined;
  }

  /**
   * Blocks (`Atomics.wait`) until a frame is published, at most `timeoutMs`: "ready", "closed"
   * (the producer closed and every frame was read) or "timeout". For a worker; the main thread
   * should use {@linkcode waitForDataAsync}.
   */
  waitForData(timeoutMs: number): RingWait {
    const end = performance.now() + timeoutMs;
    for (;;) {
      const w = Atomics.load(this.h, W_WRITE);
      const s = this.#state(w);
      if (s !== undefined) return s;
      const left = end - performance.now();
      if (left <= 0) return "timeout";
      Atomics.wait(this.h, W_WRITE, w, left);
    }
  }

  /** True when a frame is published at the read position (or held). */
  ready(): boolean {
    return this.#state(Atomics.load(this.h, W_WRITE)) === "ready";
  }

  /**
   * {@linkcode waitForData} without blocking the thread (`Atomics.waitAsync`). With
   * `timeoutMs` Infinity it waits for the writer's notify alone, arming no timer: for a worker
   * (a pending `Atomics.waitAsync` does not keep the main thread's event loop alive).
   */
  async waitForDataAsync(timeoutMs: number): Promise<RingWait> {
    const end = performance.now() + timeoutMs;
    this.waited = false;
    for (;;) {
      const w = Atomics.load(this.h, W_WRITE);
      const s = this.#state(w);
      if (s !== undefined) return s;
      const left = end - performance.now();
      if (left <= 0) return "timeout";
      if (await waitWordAsync(this.h, W_WRITE, w, left)) this.waited = true;
    }
  }

  /**
   * Whether the last {@linkcode waitForDataAsync} really waited (the thread's event loop took
   * a turn), rather than finding a frame or the close at once.
   */
  waited = false;
}
