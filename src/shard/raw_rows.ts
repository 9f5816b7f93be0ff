/**
 * Undecoded IPFIX data records as ring frames (`ring.ts`): how the main thread of a sharded
 * process hands a shard the records it owns without decoding them (the shard decodes; the main
 * thread only walks each data set and reads the flow key, `ipfix/skim.ts`). A record travels as
 * its bytes from the message, under a template id of this ring protocol (`tid`): one id per
 * distinct field list, so the thousands of sessions of one Agent version share one id and the
 * shard compiles that layout once.
 *
 * A frame is an 8-byte header (magic, item count; little-endian) and items, each a tag byte:
 * - template: u32 tid, u16 IPFIX template id, u16 field count, u16 scope field count, then
 *   per field u32 enterprise number, u16 element id, u16 length. Sent before the first records
 *   of that tid on the ring (again after a reset or a lost frame);
 * - records: u32 tid, u32 byte length, the bytes of whole records (consecutive records of one
 *   tid share the item);
 * - reset: the reader forgets every tid (the writer's tid table was full and started over).
 *
 * Frames must reach the reader in order and none may be lost unnoticed: a writer that drops its
 * pending frame ({@linkcode RawRowWriter.discard}) sends every template again.
 *
 * @module
 */

import type { FlowInput } from "../aggregation/record.ts";
import { type CompiledTemplate, compileTemplate } from "../ipfix/compile.ts";
import { fieldKey } from "../ipfix/compile.ts";
import type { KeyOffsets } from "../ipfix/skim.ts";
import { type CompiledView, compileView, readRawKey, RecordViews, type ViewSink } from "./views.ts";

export { readRawKey, type ViewSink };
import { shardOfKey } from "../aggregation/sharded.ts";
import type { FieldSpecifier, TemplateRecord } from "../ipfix/types.ts";
import type { RingWriter } from "./ring.ts";

/** Frame magic ("RAW1"), distinct from the decoded rows' frames (`input_rows.ts`). */
export const RAW_MAGIC = 0x31574152;
const HEADER = 8;
const TAG_TEMPLATE = 1;
const TAG_RECORDS = 2;
const TAG_RESET = 3;

/**
 * Bytes of a raw frame before it is sent whatever the task (`RawRowWriterOptions.maxBytes`'s
 * default; see the pool's `FLUSH_NOW_BYTES` for when a smaller one goes).
 */
export const RAW_FRAME_BYTES = 256 * 1024;

/** Distinct field lists a writer names before it starts its table over (a reset). */
export const MAX_RAW_TEMPLATES = 4096;

/**
 * The shard (of `n`) of the record at `start` whose flow key sits at the fixed offsets `key`:
 * the words `readFlowKey` would read from its decoded values, hashed as `shardOf` does, so a
 * record lands where its decoded form would (`scratch`: `KEY_WORDS` words, reused).
 */
export function rawShardOf(
  b: Uint8Array,
  start: number,
  key: KeyOffsets,
  n: number,
  scratch: Uint32Array,
): number {
  readRawKey(b, start, key, scratch);
  return shardOfKey(scratch, n);
}

/**
 * The tids of field lists, shared by the writers of every ring of a process (so one template
 * object maps to one tid everywhere). Bounded: when full it starts over and its generation
 * changes, which tells each writer to send a reset.
 */
export class RawTemplateIds {
  #byTemplate = new WeakMap<TemplateRecord, number>();
  readonly #bySignature = new Map<string, number>();
  readonly #max: number;
  #next = 1;
  #lastTemplate: TemplateRecord | undefined;
  #lastTid = 0;
  /** Bumped each time the table starts over. */
  generation = 0;

  /** A table of at most `max` field lists (default {@linkcode MAX_RAW_TEMPLATES}). */
  constructor(max = MAX_RAW_TEMPLATES) {
    this.#max = max;
  }

  /** The tid of a template's field list. */
  of(t: TemplateRecord): number {
    // Records come in runs of one template (one session's data sets): skip the map for those.
    if (t === this.#lastTemplate) return this.#lastTid;
    let tid = this.#byTemplate.get(t);
    if (tid === undefined) tid = this.#name(t);
    this.#lastTemplate = t;
    this.#lastTid = tid;
    return tid;
  }

  /** Names a template not seen before: the tid of its field list, a new one if need be. */
  #name(t: TemplateRecord): number {
    let sig = `${t.id}|${t.scopeFieldCount}`;
    for (const f of t.fields) sig += fieldKey(f);
    let tid = this.#bySignature.get(sig);
    if (tid === undefined) {
      if (this.#bySignature.size >= this.#max) {
        this.#bySignature.clear();
        this.#byTemplate = new WeakMap();
        this.generation++;
      }
      tid = this.#next++;
      this.#bySignature.set(sig, tid);
    }
    this.#byTemplate.set(t, tid);
    return tid;
  }
}

/** Options of a {@linkcode RawRowWriter}. */
export interface RawRowWriterOptions {
  /**
   * Bytes per frame before it is sent (default {@linkcode RAW_FRAME_BYTES}, at most a quarter of
   * the ring's frame).
   */
  readonly maxBytes?: number;
}

/** Writes one ring's raw frames (see the module doc). */
export class RawRowWriter {
  readonly #ring: RingWriter;
  readonly #ids: RawTemplateIds;
  readonly #maxBytes: number;
  #buf: Uint8Array;
  #view: DataView;
  #at = HEADER;
  #items = 0;
  #records = 0;
  /** Offset of the open records item's length, and its tid (-1: none open). */
  #runLengthAt = -1;
  #runTid = -1;
  /** Tids the reader knows (as of the frames sent or pending). */
  #known = new Set<number>();
  #generation: number;
  /** Tids defined in the pending frame (forgotten if it is discarded). */
  #pendingDefs: number[] = [];
  /** The buffer records were last copied from, and a view of it (see `#copy`). */
  #src: Uint8Array | undefined;
  /** The buffer of the last record copied without a view (see `#copy`). */
  #seen: Uint8Array | undefined;
  #srcView: DataView = new DataView(new ArrayBuffer(0));

  /** A writer onto `ring`, naming templates through the shared `ids`. */
  constructor(ring: RingWriter, ids: RawTemplateIds, options: RawRowWriterOptions = {}) {
    this.#ring = ring;
    this.#ids = ids;
    this.#generation = ids.generation;
    this.#maxBytes = Math.min(
      options.maxBytes ?? RAW_FRAME_BYTES,
      Math.floor(ring.maxFrameBytes / 4),
    );
    this.#buf = new Uint8Array(this.#maxBytes + 4096);
    this.#view = new DataView(this.#buf.buffer);
  }

  /** Records in the pending frame. */
  get pendingRecords(): number {
    return this.#records;
  }

  /** Bytes of the pending frame. */
  get pendingBytes(): number {
    return this.#at;
  }

  #room(n: number): void {
    if (this.#at + n <= this.#buf.length) return;
    const next = new Uint8Array(Math.max(this.#buf.length * 2, this.#at + n));
    next.set(this.#buf.subarray(0, this.#at));
    this.#buf = next;
    this.#view = new DataView(next.buffer);
  }

  /**
   * Appends the record at `bytes[start..end)` of template `t`. False when not taken: the
   * pending frame is full and the ring refused it (wait for space, then call again).
   */
  add(t: TemplateRecord, bytes: Uint8Array, start: number, end: number): boolean {
    if (this.#at >= this.#maxBytes && !this.flush()) return false;
    const tid = this.#ids.of(t);
    if (this.#ids.generation !== this.#generation) {
      this.#generation = this.#ids.generation;
      this.#known.clear();
      this.#closeRun();
      this.#room(1);
      this.#buf[this.#at++] = TAG_RESET;
      this.#items++;
    }
    const v = this.#view;
    const n = end - start;
    if (this.#runTid !== tid) {
      // A run's tid was defined before the run started (a reset ends the run).
      if (!this.#known.has(tid)) this.#define(tid, t);
      this.#room(9 + n);
      this.#buf[this.#at] = TAG_RECORDS;
      v.setUint32(this.#at + 1, tid, true);
      this.#runLengthAt = this.#at + 5;
      v.setUint32(this.#runLengthAt, 0, true);
      this.#at += 9;
      this.#runTid = tid;
      this.#items++;
    } else {
      this.#room(n);
    }
    this.#copy(bytes, start, n);
    this.#at += n;
    v.setUint32(this.#runLengthAt, v.getUint32(this.#runLengthAt, true) + n, true);
    this.#records++;
    return true;
  }

  /**
   * Copies `bytes[start..start + n)` to the frame at `#at`, 8 bytes at a time through DataViews
   * (a view made once per source buffer). Not `set(bytes.subarray(…))`: that allocates a typed
   * array per record, about 100 bytes, a third of what the main thread allocated per record in
   * the e2e run (heap sampling); these u64 moves copy the bits exactly and allocate nothing once
   * optimized.
   */
  #copy(bytes: Uint8Array, start: number, n: number): void {
    if (bytes !== this.#src) {
      // A buffer's first record: copied with set(), and a view made only when the next record
      // comes from the same buffer too (a stream's read buffer holds hundreds; a datagram or a
      // message of its own holds one, and a view per record would cost more than set()).
      if (bytes !== this.#seen) {
        this.#seen = bytes;
        this.#buf.set(bytes.subarray(start, start + n), this.#at);
        return;
      }
      this.#src = bytes;
      this.#srcView = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    }
    const sv = this.#srcView;
    const dv = this.#view;
    const buf = this.#buf;
    const at = this.#at;
    let i = 0;
    // 32 bytes a turn, little-endian on both sides (no byte swap; the bits are the same): twice
    // as fast as 8 bytes a turn in big-endian, and faster than set(subarray) (measured, 195
    // bytes: 25 ns against 43-52 and 35).
    for (; i + 32 <= n; i += 32) {
      dv.setBigUint64(at + i, sv.getBigUint64(start + i, true), true);
      dv.setBigUint64(at + i + 8, sv.getBigUint64(start + i + 8, true), true);
      dv.setBigUint64(at + i + 16, sv.getBigUint64(start + i + 16, true), true);
      dv.setBigUint64(at + i + 24, sv.getBigUint64(start + i + 24, true), true);
    }
    for (; i + 8 <= n; i += 8) dv.setBigUint64(at + i, sv.getBigUint64(start + i, true), true);
    for (; i < n; i++) buf[at + i] = bytes[start + i];
  }

  #define(tid: number, t: TemplateRecord): void {
    this.#closeRun();
    const n = t.fields.length;
    this.#room(11 + 8 * n);
    const v = this.#view;
    let at = this.#at;
    this.#buf[at] = TAG_TEMPLATE;
    v.setUint32(at + 1, tid, true);
    v.setUint16(at + 5, t.id, true);
    v.setUint16(at + 7, n, true);
    v.setUint16(at + 9, t.scopeFieldCount, true);
    at += 11;
    for (const f of t.fields) {
      v.setUint32(at, f.enterprise, true);
      v.setUint16(at + 4, f.id, true);
      v.setUint16(at + 6, f.length, true);
      at += 8;
    }
    this.#at = at;
    this.#items++;
    this.#known.add(tid);
    this.#pendingDefs.push(tid);
  }

  #closeRun(): void {
    this.#runTid = -1;
    this.#runLengthAt = -1;
  }

  /** Sends the pending frame: true when sent (or empty), false when the ring is full. */
  flush(): boolean {
    if (this.#items === 0) return true;
    this.#view.setUint32(0, RAW_MAGIC, true);
    this.#view.setUint32(4, this.#items, true);
    if (!this.#ring.write(this.#buf.subarray(0, this.#at))) return false;
    this.#reset();
    return true;
  }

  #reset(): void {
    this.#at = HEADER;
    this.#items = 0;
    this.#records = 0;
    this.#pendingDefs = [];
    this.#closeRun();
  }

  /**
   * Drops the pending frame; returns its records. The templates it defined are sent again
   * before their next records.
   */
  discard(): number {
    const n = this.#records;
    for (const tid of this.#pendingDefs) this.#known.delete(tid);
    this.#reset();
    return n;
  }
}

/** Options of a {@linkcode RawRowReader}. */
export interface RawRowReaderOptions {
  /** `limits.maxStringBytes` for the shard's decoders (default unbounded). */
  readonly maxStringBytes?: number;
}

/** A tid's field list and its decoders once compiled (under the current string bound). */
interface RawTemplate {
  readonly t: TemplateRecord;
  /** Every field. */
  ct?: CompiledTemplate;
  /** The view decoder (`UPDATE_VIEW_FIELDS`). */
  view?: CompiledView;
}

/** Reads one ring's raw frames: compiles each template once and decodes the records. */
export class RawRowReader {
  readonly #templates = new Map<number, RawTemplate>();
  #maxStringBytes: number | undefined;
  readonly #views: RecordViews;

  /** A reader with the decoders' string bound. */
  constructor(options: RawRowReaderOptions = {}) {
    this.#maxStringBytes = options.maxStringBytes;
    this.#views = new RecordViews();
  }

  /** Changes the decoders' string bound (a reload): each field list is compiled again. */
  setMaxStringBytes(n: number | undefined): void {
    if (n === this.#maxStringBytes) return;
    this.#maxStringBytes = n;
    for (const e of this.#templates.values()) e.ct = e.view = undefined;
  }

  /** Field lists known. */
  get templates(): number {
    return this.#templates.size;
  }

  /**
   * Decodes a frame: `onRecord` for every record, `onInvalid` for a record that cannot be
   * decoded (its bytes are bad; the others are kept). With `onView`, each record goes there
   * instead as its view and its whole decoding on demand (see {@linkcode ViewSink}). Throws on
   * a frame that is not a raw frame or names a tid it never defined (frames lost or out of
   * order: a bug, never input).
   */
  read(
    frame: Uint8Array,
    onRecord: (r: FlowInput) => void,
    onInvalid: (why: string) => void,
    onView?: ViewSink,
  ): void {
    const v = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
    if (v.getUint32(0, true) !== RAW_MAGIC) throw new Error("raw rows: not a raw frame");
    const items = v.getUint32(4, true);
    let at = HEADER;
    for (let i = 0; i < items; i++) {
      const tag = frame[at];
      if (tag === TAG_RECORDS) {
        const tid = v.getUint32(at + 1, true);
        const n = v.getUint32(at + 5, true);
        const e = this.#templates.get(tid);
        if (e === undefined) throw new Error(`raw rows: records of undefined template ${tid}`);
        const ct = e.ct ??= compileTemplate(e.t, {
          wireNumbers: true,
          maxStringBytes: this.#maxStringBytes,
        });
        at += 9;
        if (onView === undefined) {
          this.#views.decodeWhole(ct, frame, at, at + n, onRecord, onInvalid);
        } else {
          const view = e.view ??= compileView(e.t, this.#maxStringBytes);
          this.#views.readRun(view, ct, frame, at, at + n, onView, onInvalid);
        }
        at += n;
      } else if (tag === TAG_TEMPLATE) {
        const tid = v.getUint32(at + 1, true);
        const id = v.getUint16(at + 5, true);
        const n = v.getUint16(at + 7, true);
        const scope = v.getUint16(at + 9, true);
        at += 11;
        const fields: FieldSpecifier[] = [];
        for (let f = 0; f < n; f++, at += 8) {
          fields.push({
            enterprise: v.getUint32(at, true),
            id: v.getUint16(at + 4, true),
            length: v.getUint16(at + 6, true),
          });
        }
        const t = { id, fields, scopeFieldCount: scope };
        this.#templates.set(tid, { t });
      } else if (tag === TAG_RESET) {
        this.#templates.clear();
        at += 1;
      } else {
        throw new Error(`raw rows: bad item tag ${tag}`);
      }
    }
  }
}
