/**
 * The IPFIX exporter's queue of records waiting for the collector, held as their encoded bytes
 * (an IPFIX data record, or a JSON document's `ipfix` object) back to back in a few large
 * chunks, not as record objects: an aggregated record object with its strings and bigints took
 * about 1.5 KB of V8 heap, its IPFIX encoding is about 630 bytes of one buffer, and a queue of
 * byte ranges gives the garbage collector nothing to trace. A record's encoding does not depend
 * on the connection (the template ids are fixed; the message header, with the export time and
 * sequence number, is written when the batch is framed), so encoding at queue time sends the
 * same bytes as encoding at send time.
 *
 * Each entry is a 5-byte header (u32 length, u8 kind: the template's index, 0 IPv4, 1 IPv6)
 * then the bytes. Records put back after a failed write ({@linkcode RecordQueue.pushFront})
 * wait ahead of the chunks, in their own copies. The views {@linkcode RecordQueue.take} returns
 * point into the chunks and are valid until the queue is next written: the exporter copies them
 * into its message buffer at once.
 *
 * @module
 */

/** One queued record: its kind (template index: 0 IPv4, 1 IPv6) and its encoded bytes. */
export interface QueuedRecord {
  /** Template index (0: IPv4 template 256, 1: IPv6 template 257). */
  readonly kind: number;
  /** The record's encoding. */
  readonly bytes: Uint8Array;
}

/** Bytes of an entry's header in a chunk: u32 length, u8 kind. */
export const ENTRY_HEADER_BYTES = 5;
/** Size of a chunk (a record larger than that gets a chunk of its own size). */
export const CHUNK_BYTES = 1 << 20;

interface Chunk {
  readonly buf: Uint8Array;
  readonly view: DataView;
  /** Offset of the oldest entry not yet taken or dropped. */
  read: number;
  /** End of the committed entries. */
  write: number;
}

function newChunk(size: number): Chunk {
  const buf = new Uint8Array(size);
  return { buf, view: new DataView(buf.buffer), read: 0, write: 0 };
}

/**
 * A FIFO of encoded records, counted in records and in bytes (each entry's bytes plus its
 * header), so the owner can bound both. Not thread-safe, no I/O.
 */
export class RecordQueue {
  #chunks: Chunk[] = [];
  #chunkHead = 0;
  /** One emptied chunk kept for reuse, so a queue that keeps draining allocates nothing. */
  #spare: Chunk | undefined;
  /** Records put back ahead of the chunks, oldest first from `#frontHead`. */
  #front: QueuedRecord[] = [];
  #frontHead = 0;
  #count = 0;
  #bytes = 0;
  /** Chunk {@linkcode reserve} prepared, and where the entry starts in it. */
  #reserved: Chunk | undefined;

  /** Records held. */
  get length(): number {
    return this.#count;
  }

  /** Bytes held: each record's encoding plus its {@linkcode ENTRY_HEADER_BYTES}. */
  get bytes(): number {
    return this.#bytes;
  }

  /**
   * Makes room for an entry of at most `n` bytes at the tail and returns the offset where its
   * bytes go in {@linkcode tailView} / {@linkcode tailBuffer}. Nothing is queued until
   * {@linkcode commit}; a reservation never committed is overwritten by the next.
   */
  reserve(n: number): number {
    let tail = this.#chunks.length > this.#chunkHead
      ? this.#chunks[this.#chunks.length - 1]
      : undefined;
    if (tail === undefined || tail.buf.length - tail.write < ENTRY_HEADER_BYTES + n) {
      tail = this.#takeFreeChunk(ENTRY_HEADER_BYTES + n);
      this.#chunks.push(tail);
    }
    this.#reserved = tail;
    return tail.write + ENTRY_HEADER_BYTES;
  }

  /** The chunk of the last {@linkcode reserve}, as a DataView. */
  get tailView(): DataView {
    return this.#reserved!.view;
  }

  /** The chunk of the last {@linkcode reserve}, as bytes. */
  get tailBuffer(): Uint8Array {
    return this.#reserved!.buf;
  }

  /** Queues the `n` bytes (at most what was reserved) written at the reserved offset. */
  commit(kind: number, n: number): void {
    const c = this.#reserved!;
    this.#reserved = undefined;
    c.view.setUint32(c.write, n);
    c.view.setUint8(c.write + 4, kind);
    c.write += ENTRY_HEADER_BYTES + n;
    this.#count++;
    this.#bytes += ENTRY_HEADER_BYTES + n;
  }

  /** Puts `records` (copied) back at the head, in their order: they are taken next. */
  pushFront(records: readonly QueuedRecord[]): void {
    if (records.length === 0) return;
    const copies = records.map((r) => ({ kind: r.kind, bytes: r.bytes.slice() }));
    this.#front = [...copies, ...this.#front.slice(this.#frontHead)];
    this.#frontHead = 0;
    for (const r of copies) {
      this.#count++;
      this.#bytes += ENTRY_HEADER_BYTES + r.bytes.length;
    }
  }

  /** Drops the oldest record; false when empty. */
  dropOldest(): boolean {
    if (this.#frontHead < this.#front.length) {
      this.#takeFront();
      return true;
    }
    const c = this.#headChunk();
    if (c === undefined) return false;
    const n = c.view.getUint32(c.read);
    this.#advance(c, n);
    return true;
  }

  /**
   * Takes up to `max` records, oldest first. Their bytes are views valid until the queue is
   * next written (reserve, commit, pushFront).
   */
  take(max: number): QueuedRecord[] {
    const out: QueuedRecord[] = [];
    while (out.length < max && this.#frontHead < this.#front.length) out.push(this.#takeFront());
    while (out.length < max) {
      const c = this.#headChunk();
      if (c === undefined) break;
      const n = c.view.getUint32(c.read);
      const kind = c.view.getUint8(c.read + 4);
      const at = c.read + ENTRY_HEADER_BYTES;
      out.push({ kind, bytes: c.buf.subarray(at, at + n) });
      this.#advance(c, n);
    }
    return out;
  }

  /** Empties the queue. */
  clear(): void {
    this.#chunks = [];
    this.#chunkHead = 0;
    this.#front = [];
    this.#frontHead = 0;
    this.#count = 0;
    this.#bytes = 0;
  }

  #takeFront(): QueuedRecord {
    const r = this.#front[this.#frontHead++];
    this.#count--;
    this.#bytes -= ENTRY_HEADER_BYTES + r.bytes.length;
    if (this.#frontHead === this.#front.length) {
      this.#front = [];
      this.#frontHead = 0;
    }
    return r;
  }

  /** The oldest chunk holding an entry, or undefined when the chunks are empty. */
  #headChunk(): Chunk | undefined {
    while (this.#chunkHead < this.#chunks.length) {
      const c = this.#chunks[this.#chunkHead];
      if (c.read < c.write) return c;
      if (this.#chunkHead === this.#chunks.length - 1) return undefined;
      this.#release();
    }
    return undefined;
  }

  /** Passes the entry of `n` bytes at `c.read`; an emptied chunk is released. */
  #advance(c: Chunk, n: number): void {
    c.read += ENTRY_HEADER_BYTES + n;
    this.#count--;
    this.#bytes -= ENTRY_HEADER_BYTES + n;
    if (c.read === c.write) this.#release();
  }

  /**
   * Releases the emptied head chunk. The tail chunk is kept and rewound (the next record is
   * written at its start); an older one becomes the spare when of the standard size.
   */
  #release(): void {
    const c = this.#chunks[this.#chunkHead];
    if (this.#chunkHead === this.#chunks.length - 1) {
      c.read = 0;
      c.write = 0;
      this.#chunks = [c];
      this.#chunkHead = 0;
      return;
    }
    this.#chunkHead++;
    if (this.#spare === undefined && c.buf.length === CHUNK_BYTES) {
      c.read = 0;
      c.write = 0;
      this.#spare = c;
    }
    if (this.#chunkHead >= 64 && this.#chunkHead * 2 > this.#chunks.length) {
      this.#chunks = this.#chunks.slice(this.#chunkHead);
      this.#chunkHead = 0;
    }
  }

  #takeFreeChunk(need: number): Chunk {
    if (need > CHUNK_BYTES) return newChunk(need);
    const s = this.#spare;
    this.#spare = undefined;
    return s ?? newChunk(CHUNK_BYTES);
  }
}
