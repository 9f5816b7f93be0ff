/**
 * A durable, bounded FIFO of batches on disk for a network sink whose peer is slow or down:
 * append-only segment files in one directory, each batch one checksummed frame, consumed in
 * order and across process restarts. It knows nothing of what a batch holds (the ClickHouse
 * sink stores the exact insert body): only its id, its record count and a flag.
 *
 * Layout of `dir`: `LOCK` (held with an exclusive `flock` while open, so a sink replaced by a
 * reload waits for the old one to let go), `<16-digit seq>.seg` segments, and `cursor` (the
 * next frame to consume, JSON padded to 128 bytes, replaced atomically by rename after every
 * consumed batch; rewritten in place when the disk is full).
 *
 * Frame: magic `FASP` (u32), body length (u32), CRC-32 of the body (u32), then the body:
 * flags (u8), three zero bytes, record count (u32), the batch id (16 bytes), the payload. All
 * big-endian.
 *
 * Bounds and losses, all counted: a segment is closed at `segmentBytes`; when the segments
 * would exceed `maxBytes` the oldest is removed and its unconsumed records are counted as
 * dropped. On open every segment is scanned; a torn or corrupt frame (crash mid-write, a bad
 * disk block) ends its segment there: the file is truncated at the last good frame, the event
 * and the bytes cut are counted, and the following segments still replay. A frame whose body
 * no longer matches its checksum when read later ends its segment the same way.
 *
 * Durability: frames are written with `write(2)` and survive the process being killed; they
 * are not `fsync`ed per batch (a host crash may cut the tail, which the checksums catch).
 *
 * A full disk: a frame whose write fails part-way (no space left) is cut off again (the file
 * truncated back to its last whole frame), so only that batch is lost (the caller counts it)
 * and later frames land where they are read. Consuming is what frees the space (a consumed
 * segment is removed, the open one included), so a cursor write must not stop it: see
 * {@linkcode Spool} for how the cursor is kept or, failing that, counted.
 *
 * @module
 */

import { crc32 } from "./crc32.ts";
import { writeAll } from "../bytes.ts";
import { type LogFields, logger, RateLimitedLog } from "../log.ts";

const log = logger("spool");

const MAGIC = 0x46415350; // "FASP"
const HEADER_BYTES = 12;
const BODY_FIXED_BYTES = 24;
/** Largest body accepted when scanning: a length beyond it is corruption, not a frame. */
const MAX_BODY_BYTES = 1 << 30;
/** Size of the cursor file: its JSON padded with spaces, so it can be rewritten in place. */
const CURSOR_BYTES = 128;

/** Flag of an entry: an earlier attempt to deliver it may have landed (outcome unknown). */
export const FLAG_OUTCOME_UNKNOWN = 1;

/** One batch in the spool. */
export interface SpoolEntry {
  /** Stable batch id (16 bytes, hex): the same on every retry and after a restart. */
  readonly id: string;
  /** Records in the batch (for the ledger). */
  readonly records: number;
  /** {@linkcode FLAG_OUTCOME_UNKNOWN} and sink-defined bits. */
  readonly flags: number;
  /** The batch as the sink serialised it. */
  readonly payload: Uint8Array;
  /** The entry was in the spool when it was opened (written by an earlier process). */
  readonly recovered: boolean;
}

/** What the spool needs of a segment file open for writing (a {@linkcode Deno.FsFile}). */
export type SegmentWriter = Pick<Deno.FsFile, "write" | "truncate" | "seek" | "close">;

/** Bounds of a spool. */
export interface SpoolOptions {
  /** Total size of the segment files beyond which the oldest segment is dropped. */
  maxBytes: number;
  /** Size at which a segment is closed and a new one started. Default `maxBytes / 8`. */
  segmentBytes?: number;
  /**
   * Opens a segment file for writing (created, truncated). Default `Deno.open`; tests wrap it
   * to make writes fail part-way.
   */
  openSegment?: (path: string) => Promise<SegmentWriter>;
}

/** Counters of a spool (monotonic except the gauges `records`, `bytes`, `segments`). */
export interface SpoolStats {
  /** Records appended by this process. */
  appended: number;
  /** Records found in the spool when it was opened (earlier process). */
  recovered: number;
  /** Records consumed (acknowledged). */
  consumed: number;
  /** Records lost: oldest segments removed when full, batches larger than the bound, corrupt frames read after the scan, segment files gone. */
  dropped: number;
  /** Of `dropped`, records that were {@linkcode recovered}. */
  droppedRecovered: number;
  /** Of `dropped`, records of frames found corrupt when read (after the scan at open). */
  corruptRecords: number;
  /** Torn or corrupt frames detected (each ends its segment). */
  corruptFrames: number;
  /** Bytes cut off segment files at a torn or corrupt frame. */
  truncatedBytes: number;
  /**
   * Segment files gone when their turn to be read came (removed behind the spool's back): their
   * records not yet consumed count in `dropped`.
   */
  segmentsMissing: number;
  /**
   * Cursor moves not saved for lack of space, neither by rename nor in place (consumption went
   * on; after a crash the batches since the last saved cursor are delivered again).
   */
  cursorWriteFailures: number;
  /** Gauge: records in the spool. */
  records: number;
  /** Gauge: bytes of the segment files. */
  bytes: number;
  /** Gauge: segment files. */
  segments: number;
}

interface Segment {
  readonly seq: number;
  size: number;
  /** Records of every frame in the file (consumed or not). */
  records: number;
  /** Records of the frames before `readOffset` (consumed), for the oldest segment. */
  consumed: number;
  /** Offset of the next frame to read (oldest segment only). */
  readOffset: number;
  /** Written by an earlier process. */
  readonly recovered: boolean;
}

/** An entry handed out by {@linkcode Spool.peek}, with where it lives. */
export interface SpoolLease extends SpoolEntry {
  /** Segment and offset of the frame; the lease is void once its segment was dropped. */
  readonly seq: number;
  /** Offset of the frame in its segment. */
  readonly offset: number;
  /** Bytes of the frame. */
  readonly frameBytes: number;
}

function segName(seq: number): string {
  return `${String(seq).padStart(16, "0")}.seg`;
}

function hex(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += b.toString(16).padStart(2, "0");
  return s;
}

function unhex(id: string): Uint8Array {
  const out = new Uint8Array(16);
  for (let i = 0; i < 16 && i * 2 + 2 <= id.length; i++) {
    out[i] = parseInt(id.slice(i * 2, i * 2 + 2), 16) || 0;
  }
  return out;
}

/** A new random batch id (16 bytes, hex). */
export function newBatchId(): string {
  return hex(crypto.getRandomValues(new Uint8Array(16)));
}

/** Encodes one frame. */
export function encodeFrame(entry: Omit<SpoolEntry, "recovered">): Uint8Array {
  const bodyLen = BODY_FIXED_BYTES + entry.payload.length;
  const frame = new Uint8Array(HEADER_BYTES + bodyLen);
  const v = new DataView(frame.buffer);
  v.setUint32(0, MAGIC);
  v.setUint32(4, bodyLen);
  frame[HEADER_BYTES] = entry.flags & 0xff;
  v.setUint32(HEADER_BYTES + 4, entry.records);
  frame.set(unhex(entry.id), HEADER_BYTES + 8);
  frame.set(entry.payload, HEADER_BYTES + BODY_FIXED_BYTES);
  v.setUint32(8, crc32(frame.subarray(HEADER_BYTES)));
  return frame;
}

/** Result of decoding the frame at the start of `bytes`. */
type Decoded =
  | {
    ok: true;
    frameBytes: number;
    flags: number;
    records: number;
    id: string;
    payload: Uint8Array;
  }
  | { ok: false; why: "torn" | "corrupt" };

/** Decodes the frame at the start of `bytes` (a torn frame: `bytes` ends inside it). */
export function decodeFrame(bytes: Uint8Array): Decoded {
  if (bytes.length < HEADER_BYTES) return { ok: false, why: "torn" };
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (v.getUint32(0) !== MAGIC) return { ok: false, why: "corrupt" };
  const bodyLen = v.getUint32(4);
  if (bodyLen < BODY_FIXED_BYTES || bodyLen > MAX_BODY_BYTES) return { ok: false, why: "corrupt" };
  if (bytes.length < HEADER_BYTES + bodyLen) return { ok: false, why: "torn" };
  const body = bytes.subarray(HEADER_BYTES, HEADER_BYTES + bodyLen);
  if (crc32(body) !== v.getUint32(8)) return { ok: false, why: "corrupt" };
  return {
    ok: true,
    frameBytes: HEADER_BYTES + bodyLen,
    flags: body[0],
    records: v.getUint32(HEADER_BYTES + 4),
    id: hex(body.subarray(8, 24)),
    payload: body.slice(BODY_FIXED_BYTES),
  };
}

interface Cursor {
  seq: number;
  offset: number;
  /** A delivery of the frame at the cursor was started (its outcome is unknown after a crash). */
  inflight: boolean;
}

/**
 * A durable FIFO of batches in one directory (see the module doc).
 *
 * The cursor on a full disk: it is normally replaced atomically (a new `cursor.tmp` renamed
 * over `cursor`), which needs a free block. When that fails for lack of space (`ENOSPC`,
 * `EDQUOT`) the existing `cursor` file is overwritten in place instead: it is always
 * 128 bytes long (padded with spaces), so the overwrite needs no new space on an
 * overwrite-in-place file system (ext4, xfs, tmpfs), and one small `write(2)` at offset 0 is
 * not torn by the process being killed; the crash guarantees stay whole (an in-flight batch
 * still comes back flagged {@linkcode FLAG_OUTCOME_UNKNOWN}). Only when that fails too (no
 * cursor file yet, a copy-on-write file system) is the move not saved: consumption goes on
 * anyway, since it is what frees the space and a spool that cannot drain never recovers. That
 * is counted (`cursorWriteFailures`) and logged at most every 10 s; a crash then replays the
 * batches since the last saved cursor (delivered again, possibly without the flag; nothing is
 * lost). Other cursor write errors reject as before.
 */
export class Spool {
  readonly #dir: string;
  readonly #maxBytes: number;
  readonly #segmentBytes: number;
  readonly #openSegment: (path: string) => Promise<SegmentWriter>;
  readonly #segments: Segment[] = [];
  readonly #rateLog = new RateLimitedLog(10_000);
  #lock: Deno.FsFile | undefined;
  #writer: SegmentWriter | undefined;
  #nextSeq = 1;
  #writerSeq = 0;
  /** The frame whose last delivery had an unknown outcome (in this process or the last one). */
  #uncertain: { seq: number; offset: number } | undefined;
  /** The entry handed out by the last peek and not yet acknowledged or released. */
  #lease: SpoolLease | undefined;
  /** The lease being delivered whose segment was dropped meanwhile (its records are nowhere). */
  readonly #orphans = new Set<string>();
  #busy: Promise<unknown> = Promise.resolve();
  readonly #s: SpoolStats = {
    appended: 0,
    recovered: 0,
    consumed: 0,
    dropped: 0,
    droppedRecovered: 0,
    corruptRecords: 0,
    corruptFrames: 0,
    truncatedBytes: 0,
    segmentsMissing: 0,
    cursorWriteFailures: 0,
    records: 0,
    bytes: 0,
    segments: 0,
  };

  private constructor(dir: string, options: SpoolOptions) {
    this.#dir = dir;
    this.#maxBytes = options.maxBytes;
    this.#openSegment = options.openSegment ??
      ((path) => Deno.open(path, { write: true, create: true, truncate: true }));
    this.#segmentBytes = Math.max(
      4096,
      Math.min(options.segmentBytes ?? Math.floor(options.maxBytes / 8), options.maxBytes),
    );
  }

  /**
   * Opens (creating) the spool in `dir`: waits for its lock (another sink of this process or
   * another process may still hold it), then scans the segments, truncating torn or corrupt
   * tails. Rejects only when the directory cannot be used.
   */
  static async open(dir: string, options: SpoolOptions): Promise<Spool> {
    if (!(options.maxBytes > 0)) throw new Error(`spool ${dir}: maxBytes must be positive`);
    await Deno.mkdir(dir, { recursive: true });
    const spool = new Spool(dir, options);
    const lock = await Deno.open(`${dir}/LOCK`, { read: true, write: true, create: true });
    try {
      await lock.lock(true);
      spool.#lock = lock;
      await spool.#scan();
    } catch (err) {
      lock.close();
      throw err;
    }
    return spool;
  }

  /** The directory. */
  get dir(): string {
    return this.#dir;
  }

  /** True when no record waits in the spool. */
  get empty(): boolean {
    return this.#s.records === 0;
  }

  /** Counters and gauges. */
  stats(): SpoolStats {
    return { ...this.#s, segments: this.#segments.length };
  }

  async #scan(): Promise<void> {
    const cursor = await this.#readCursor();
    const seqs: number[] = [];
    for await (const e of Deno.readDir(this.#dir)) {
      const m = /^(\d{16})\.seg$/.exec(e.name);
      if (e.isFile && m) seqs.push(Number(m[1]));
    }
    seqs.sort((a, b) => a - b);
    // New segments come after the cursor's, even when that one is gone (drained to empty).
    if (cursor !== undefined) this.#nextSeq = Math.max(this.#nextSeq, cursor.seq + 1);
    for (const seq of seqs) {
      this.#nextSeq = Math.max(this.#nextSeq, seq + 1);
      const path = `${this.#dir}/${segName(seq)}`;
      if (cursor !== undefined && seq < cursor.seq) {
        await Deno.remove(path).catch(() => {});
        continue;
      }
      const bytes = await Deno.readFile(path);
      const seg: Segment = {
        seq,
        size: 0,
        records: 0,
        consumed: 0,
        readOffset: 0,
        recovered: true,
      };
      const start = cursor !== undefined && seq === cursor.seq ? cursor.offset : 0;
      let off = 0;
      while (off < bytes.length) {
        const d = decodeFrame(bytes.subarray(off));
        if (!d.ok) {
          this.#s.corruptFrames++;
          this.#s.truncatedBytes += bytes.length - off;
          await Deno.truncate(path, off);
          break;
        }
        seg.records += d.records;
        if (off < start) seg.consumed += d.records;
        off += d.frameBytes;
      }
      seg.size = off;
      seg.readOffset = Math.min(start, off);
      if (seg.readOffset >= seg.size) {
        await Deno.remove(path).catch(() => {});
        continue;
      }
      if (cursor?.inflight && seq === cursor.seq) this.#uncertain = cursor;
      this.#segments.push(seg);
      this.#s.records += seg.records - seg.consumed;
      this.#s.recovered += seg.records - seg.consumed;
      this.#s.bytes += seg.size;
    }
    // A cursor file from the start, so that on a full disk it can be rewritten in place.
    if (cursor === undefined) {
      const first = this.#segments[0];
      await this.#writeCursor({
        seq: first?.seq ?? 0,
        offset: first?.readOffset ?? 0,
        inflight: false,
      });
    }
  }

  async #readCursor(): Promise<Cursor | undefined> {
    try {
      const c = JSON.parse(await Deno.readTextFile(`${this.#dir}/cursor`)) as Cursor;
      if (typeof c.seq === "number" && typeof c.offset === "number") return c;
    } catch {
      // absent or unreadable: start from the oldest segment
    }
    return undefined;
  }

  /**
   * Saves the cursor: atomically by rename; on a full disk in place, else not at all, counted
   * (see {@linkcode Spool}).
   */
  async #writeCursor(c: Cursor): Promise<void> {
    const path = `${this.#dir}/cursor`;
    const tmp = `${path}.tmp`;
    const text = JSON.stringify(c);
    try {
      await Deno.writeTextFile(tmp, text.padEnd(CURSOR_BYTES));
      await Deno.rename(tmp, path);
      return;
    } catch (err) {
      if (!isNoSpace(err)) throw err;
      await Deno.remove(tmp).catch(() => {});
    }
    try {
      const f = await Deno.open(path, { write: true });
      try {
        // Never shorter than the file (one written by an earlier version may be longer).
        const size = (await f.stat()).size;
        await writeAll(f, new TextEncoder().encode(text.padEnd(Math.max(CURSOR_BYTES, size))));
      } finally {
        f.close();
      }
      if (this.#rateLog.allow("inplace") >= 0) {
        log.warn("spool disk full: cursor rewritten in place", { dir: this.#dir });
      }
    } catch (err) {
      this.#s.cursorWriteFailures++;
      const suppressed = this.#rateLog.allow("failed");
      if (suppressed >= 0) {
        log.warn(
          "spool disk full: cursor not saved; consuming anyway (a crash would deliver the batches since the last saved cursor again)",
          {
            dir: this.#dir,
            err: err instanceof Error ? err.message : String(err),
            cursorWriteFailures: this.#s.cursorWriteFailures,
            suppressed,
          },
        );
      }
    }
  }

  /** Runs `f` after every earlier operation (the spool's file state is not reentrant). */
  #serial<T>(f: () => Promise<T>): Promise<T> {
    const run = this.#busy.then(f, f);
    this.#busy = run.catch(() => {});
    return run;
  }

  /**
   * Appends one batch. Drops the oldest segments (counted) to stay within `maxBytes`; a batch
   * larger than the whole bound is itself dropped and counted. Resolves `false` then.
   * Rejects on an I/O error (the batch is not in the spool; the caller counts it).
   *
   * `applied` is called in the same synchronous step in which the batch's records enter the
   * counters (`records`, or `dropped` when it is too large), so a caller that counts them as
   * "being appended" until then keeps an exact ledger at every moment.
   */
  append(entry: Omit<SpoolEntry, "recovered">, applied?: () => void): Promise<boolean> {
    return this.#serial(async () => {
      const frame = encodeFrame(entry);
      if (frame.length > this.#maxBytes) {
        this.#s.dropped += entry.records;
        applied?.();
        return false;
      }
      while (this.#s.bytes + frame.length > this.#maxBytes && this.#segments.length > 0) {
        // Never remove the open segment while it is the only one: start a new one first.
        if (this.#segments.length === 1 && this.#isWriter(this.#segments[0])) await this.#roll();
        await this.#dropOldest();
      }
      let last = this.#segments.at(-1);
      if (
        last === undefined || !this.#isWriter(last) ||
        (last.size > 0 && last.size + frame.length > this.#segmentBytes)
      ) {
        await this.#roll();
        last = this.#segments.at(-1)!;
      }
      try {
        await writeAll(this.#writer!, frame);
      } catch (err) {
        await this.#cutPartialFrame(last);
        throw err;
      }
      last.size += frame.length;
      last.records += entry.records;
      this.#s.bytes += frame.length;
      this.#s.records += entry.records;
      this.#s.appended += entry.records;
      applied?.();
      return true;
    });
  }

  /**
   * After a failed write (disk full): cuts the open segment back to its last whole frame, so
   * the next frame lands where its offset says. When that fails the segment is closed instead
   * (the next append starts a new one): its stray bytes lie past `seg.size`, where nothing reads
   * them, and the scan of the next open cuts them.
   */
  async #cutPartialFrame(seg: Segment): Promise<void> {
    const w = this.#writer!;
    try {
      await w.truncate(seg.size);
      await w.seek(seg.size, Deno.SeekMode.Start);
    } catch {
      this.#closeWriter();
    }
  }

  #isWriter(seg: Segment): boolean {
    return this.#writer !== undefined && seg.seq === this.#writerSeq;
  }

  /** Closes the open segment's file (the next append starts a new segment). */
  #closeWriter(): void {
    this.#writer?.close();
    this.#writer = undefined;
  }

  async #roll(): Promise<void> {
    this.#closeWriter();
    const seq = this.#nextSeq++;
    this.#writerSeq = seq;
    this.#writer = await this.#openSegment(`${this.#dir}/${segName(seq)}`);
    this.#segments.push({
      seq,
      size: 0,
      records: 0,
      consumed: 0,
      readOffset: 0,
      recovered: false,
    });
  }

  async #dropOldest(): Promise<void> {
    const seg = this.#segments.shift()!;
    const lost = seg.records - seg.consumed;
    this.#s.dropped += lost;
    if (seg.recovered) this.#s.droppedRecovered += lost;
    this.#s.records -= lost;
    this.#s.bytes -= seg.size;
    this.#warnLost("spool full: oldest segment dropped", "full", lost, {
      limit: "spool.maxBytes",
    });
    if (this.#uncertain?.seq === seg.seq) this.#uncertain = undefined;
    this.#orphanLeasesOf(seg.seq);
    await Deno.remove(`${this.#dir}/${segName(seg.seq)}`).catch(() => {});
  }

  /** The lease handed out of a dropped segment: its records were counted as dropped. */
  #orphanLeasesOf(seq: number): void {
    if (this.#lease !== undefined && this.#lease.seq === seq) {
      this.#orphans.add(`${this.#lease.seq}:${this.#lease.offset}`);
    }
  }

  /**
   * The oldest batch, without consuming it (`undefined` when empty). Pass it to
   * {@linkcode ack} once delivered, or to {@linkcode release} when the delivery failed.
   * `markInflight` records on disk that a delivery starts (so after a crash the batch comes
   * back flagged {@linkcode FLAG_OUTCOME_UNKNOWN}).
   */
  peek(options: { markInflight?: boolean } = {}): Promise<SpoolLease | undefined> {
    return this.#serial(async () => {
      for (;;) {
        const seg = this.#segments[0];
        if (seg === undefined) return undefined;
        if (seg.readOffset >= seg.size) {
          if (this.#isWriter(seg)) return undefined;
          await this.#retire();
          continue;
        }
        const frame = await this.#readFrame(seg);
        if (frame === undefined) continue; // corrupt: the segment was ended, try the next
        if (options.markInflight) {
          await this.#writeCursor({ seq: seg.seq, offset: seg.readOffset, inflight: true });
        }
        const unknown = this.#uncertain?.seq === seg.seq &&
          this.#uncertain.offset === seg.readOffset;
        const lease: SpoolLease = {
          id: frame.id,
          records: frame.records,
          flags: frame.flags | (unknown ? FLAG_OUTCOME_UNKNOWN : 0),
          payload: frame.payload,
          recovered: seg.recovered,
          seq: seg.seq,
          offset: seg.readOffset,
          frameBytes: frame.frameBytes,
        };
        this.#lease = lease;
        return lease;
      }
    });
  }

  async #readFrame(
    seg: Segment,
  ): Promise<Extract<Decoded, { ok: true }> | undefined> {
    const path = `${this.#dir}/${segName(seg.seq)}`;
    let f: Deno.FsFile;
    try {
      f = await Deno.open(path, { read: true });
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
      // Removed behind our back: retrying would stall every later batch for good (the next
      // segments were never read), so its records are lost, counted, and the next one is read.
      this.#s.segmentsMissing++;
      await this.#loseRest(seg, "spool segment file gone: its records are lost", "missing");
      return undefined;
    }
    try {
      await f.seek(seg.readOffset, Deno.SeekMode.Start);
      const header = await readExactly(f, HEADER_BYTES);
      let d: Decoded = { ok: false, why: "torn" };
      if (header !== undefined) {
        const bodyLen = new DataView(header.buffer).getUint32(4);
        const fits = bodyLen >= BODY_FIXED_BYTES && bodyLen <= seg.size - seg.readOffset;
        const body = fits ? await readExactly(f, bodyLen) : undefined;
        if (body !== undefined) {
          const all = new Uint8Array(HEADER_BYTES + bodyLen);
          all.set(header);
          all.set(body, HEADER_BYTES);
          d = decodeFrame(all);
        } else d = { ok: false, why: "corrupt" };
      }
      if (d.ok) return d;
    } finally {
      f.close();
    }
    // The frame went bad after the scan: the rest of this segment is lost, counted.
    this.#s.corruptFrames++;
    this.#s.truncatedBytes += seg.size - seg.readOffset;
    this.#s.corruptRecords += seg.records - seg.consumed;
    await this.#loseRest(
      seg,
      "spool frame corrupt when read: the rest of its segment is lost",
      "corrupt",
    );
    return undefined;
  }

  /** The records of `seg` not consumed yet are lost: counted and logged, the segment ended. */
  async #loseRest(seg: Segment, msg: string, kind: string): Promise<void> {
    const lost = seg.records - seg.consumed;
    this.#s.dropped += lost;
    if (seg.recovered) this.#s.droppedRecovered += lost;
    this.#s.records -= lost;
    seg.consumed = seg.records;
    seg.readOffset = seg.size;
    this.#warnLost(msg, kind, lost, { segment: segName(seg.seq) });
    if (this.#isWriter(seg)) await this.#roll();
  }

  #warnLost(msg: string, kind: string, records: number, fields: LogFields): void {
    const suppressed = this.#rateLog.allow(kind);
    if (suppressed >= 0) log.warn(msg, { dir: this.#dir, records, ...fields, suppressed });
  }

  /** Removes the oldest segment, fully consumed. */
  async #retire(): Promise<void> {
    const seg = this.#segments.shift()!;
    this.#s.bytes -= seg.size;
    await Deno.remove(`${this.#dir}/${segName(seg.seq)}`).catch(() => {});
    // Drained to empty: the cursor names the segment to come (nothing in flight any more).
    const next = this.#segments[0];
    await this.#writeCursor(
      next === undefined
        ? { seq: this.#nextSeq, offset: 0, inflight: false }
        : { seq: next.seq, offset: next.readOffset, inflight: false },
    );
  }

  /**
   * The batch of `lease` was delivered: it leaves the spool (durably: the cursor moves).
   * `applied` is called in the same synchronous step in which its records leave the counters
   * (`records`, or `dropped` when its segment was dropped during the delivery), so the caller
   * can count them delivered at that exact moment.
   */
  ack(lease: SpoolLease, applied?: () => void): Promise<void> {
    return this.#serial(async () => {
      this.#lease = undefined;
      if (this.#orphans.delete(`${lease.seq}:${lease.offset}`)) {
        // Its segment was dropped while it was delivered: counted dropped then, but delivered.
        this.#s.dropped -= lease.records;
        if (lease.recovered) this.#s.droppedRecovered -= lease.records;
        this.#s.consumed += lease.records;
        applied?.();
        return;
      }
      const seg = this.#segments[0];
      if (seg === undefined || seg.seq !== lease.seq || seg.readOffset !== lease.offset) {
        applied?.();
        return;
      }
      seg.readOffset += lease.frameBytes;
      seg.consumed += lease.records;
      this.#s.records -= lease.records;
      this.#s.consumed += lease.records;
      applied?.();
      if (this.#uncertain?.seq === lease.seq) this.#uncertain = undefined;
      if (seg.readOffset >= seg.size) {
        // The open segment too: draining must free its space (the next append starts anew).
        if (this.#isWriter(seg)) this.#closeWriter();
        await this.#retire();
      } else await this.#writeCursor({ seq: seg.seq, offset: seg.readOffset, inflight: false });
    });
  }

  /**
   * The delivery of `lease` failed: it stays first in the spool (unless dropped meanwhile).
   * With `outcomeUnknown` (it may have landed), the next peek flags it
   * {@linkcode FLAG_OUTCOME_UNKNOWN}.
   */
  release(lease: SpoolLease, outcomeUnknown = false): void {
    this.#lease = undefined;
    this.#orphans.delete(`${lease.seq}:${lease.offset}`);
    if (outcomeUnknown) this.#uncertain = { seq: lease.seq, offset: lease.offset };
  }

  /** Closes the files and lets go of the lock. */
  close(): Promise<void> {
    return this.#serial(() => {
      this.#closeWriter();
      this.#lock?.close();
      this.#lock = undefined;
      return Promise.resolve();
    });
  }
}

/** The error says the disk (or the quota) is full. */
function isNoSpace(err: unknown): boolean {
  const code = (err as { code?: unknown } | undefined)?.code;
  return code === "ENOSPC" || code === "EDQUOT";
}

async function readExactly(f: Deno.FsFile, n: number): Promise<Uint8Array | undefined> {
  const out = new Uint8Array(n);
  let off = 0;
  while (off < n) {
    const got = await f.read(out.subarray(off));
    if (got === null) return undefined;
    off += got;
  }
  return out;
}
