/**
 * Agent records ({@linkcode FlowInput}) as binary frames, the form in which the main thread hands
 * decoded records to a shard worker over a ring (`./ring.ts`): many records per frame, one frame
 * per ring write. The row layout is derived from the record schema's Agent rows (an address row
 * gives its IPv4 and its IPv6 IE), so a field added there crosses too.
 *
 * A frame is an 8-byte header (magic, record count; little-endian) and a sequence of items, each
 * a tag byte and its body:
 *
 * - record: a presence bitmap (one bit per field, schema order), then the present fields in
 *   order: u8/u16/u32 (and `dateTimeSeconds`) in their size, unsigned64 in 8 bytes (exact over
 *   the whole range), an IPv4 address as its u32, an IPv6 address as its 16 bytes (network
 *   order), a string as the u32 id of a dictionary entry;
 * - string: a new dictionary entry: its u32 id (the next one), u32 byte length, UTF-8 bytes;
 * - reset: the dictionary is emptied (ids start again at 1).
 *
 * Id 0 is the empty string, predefined (and kept by a reset): many fields are empty (no policy,
 * no egress, a remote Pod), and the writer tells them without a dictionary lookup.
 *
 * The string dictionary lives as long as the ring, not a frame: Pod names, namespaces, Nodes and
 * policies repeat across the stream, so each crosses once and then costs 4 bytes. It is bounded:
 * the writer resets it when it would exceed its entries or bytes, or after a frame was dropped
 * (the reader would never see that frame's entries). Frames must therefore reach the reader in
 * order and none may be lost; the reader checks ids and fails loudly otherwise.
 *
 * Decoded records are in wire-number form, as the decoder's `wireNumbers` mode gives them: u64
 * values below 2^53 are numbers and others bigints, IPv4 addresses u32 numbers, IPv6 addresses
 * canonical text (RFC 5952, as the codec prints them), an absent field has no key. The writer
 * takes either form (bigint or number counters, IPv4 text or u32). Records are written and read
 * by code generated once from the field list (as `src/exporters/batch.ts` does for its rows).
 *
 * Records wait in the pending frame until it is full: the producer calls `flush()` at the end of
 * each input batch (e.g. each socket read), or its last records wait for the next ones.
 *
 * ```ts
 * // Main thread, per shard: records in, frames out, waiting when the ring is full.
 * const sab = createRing(1 << 20); // postMessage(sab) to the shard worker
 * const ring = new RingWriter(sab);
 * const rows = new InputRowWriter(ring);
 * while (!rows.add(record)) await ring.waitForSpaceAsync(rows.pendingBytes, 1000);
 * while (!rows.flush()) await ring.waitForSpaceAsync(rows.pendingBytes, 1000);
 *
 * // Shard worker: frames in, records out.
 * const reader = new RingReader(sab);
 * const records = new InputRowReader();
 * for (;;) {
 *   const frame = reader.next();
 *   if (frame === undefined) {
 *     if (reader.waitForData(100) === "closed") break;
 *     continue;
 *   }
 *   records.read(frame, (r) => core.addRecord(r));
 *   reader.release();
 * }
 * ```
 *
 * @module
 */

import type { FlowInput } from "../aggregation/record.ts";
import { ipv4Word } from "../aggregation/values.ts";
import { formatIPv6, parseIPv4Word, parseIPv6Words } from "../ipfix/ip.ts";
import type { DataType } from "../ipfix/types.ts";
import { RECORD_SCHEMA, type SchemaRow } from "../record/schema.ts";
import type { RingWriter } from "./ring.ts";

/** How a field is stored in a record item. */
export type InputFieldKind = "u8" | "u16" | "u32" | "u64" | "ipv4" | "ipv6" | "string";

/** One field of the record item, in bitmap order. */
export interface InputField {
  /** IE name (the key in {@linkcode FlowInput}). */
  readonly name: string;
  /** How the value is stored. */
  readonly kind: InputFieldKind;
}

const KIND_OF: Partial<Record<DataType, InputFieldKind>> = {
  unsigned8: "u8",
  unsigned16: "u16",
  unsigned32: "u32",
  dateTimeSeconds: "u32",
  unsigned64: "u64",
  ipv4Address: "ipv4",
  ipv6Address: "ipv6",
  string: "string",
};

const BYTES: Readonly<Record<InputFieldKind, number>> = {
  u8: 1,
  u16: 2,
  u32: 4,
  u64: 8,
  ipv4: 4,
  ipv6: 16,
  string: 4,
};

/**
 * The record item's fields for a schema table: its Agent rows in order, an `ipAddress` row as
 * its IPv4 then its IPv6 IE. Throws on a type this format does not carry (exported for tests
 * that add rows; the module applies it to the record schema at load).
 */
export function inputFields(rows: readonly SchemaRow[]): readonly InputField[] {
  const out: InputField[] = [];
  const add = (name: string, type: DataType): void => {
    const kind = KIND_OF[type];
    if (kind === undefined) {
      throw new Error(
        `input_rows: ${name}: IE type ${type} is not handled by the shard input rows`,
      );
    }
    out.push({ name, kind });
  };
  for (const row of rows) {
    if (row[2] !== "agent") continue;
    if (row[1] === "ipAddress") {
      const extra = row[5];
      if (extra?.v4 === undefined || extra.v6 === undefined) {
        throw new Error(`input_rows: ${row[0]}: ipAddress without v4/v6 IEs`);
      }
      add(extra.v4, "ipv4Address");
      add(extra.v6, "ipv6Address");
    } else {
      add(row[0], row[1]);
    }
  }
  return Object.freeze(out);
}

/** The fields of a record item, in bitmap order (from the record schema). */
export const INPUT_FIELDS: readonly InputField[] = inputFields(RECORD_SCHEMA);

const BITMAP_BYTES = Math.ceil(INPUT_FIELDS.length / 8);
const STRING_FIELDS = INPUT_FIELDS.filter((f) => f.kind === "string").length;
/** Largest record item: tag, bitmap and every field present. */
const MAX_RECORD_BYTES = 1 + BITMAP_BYTES +
  INPUT_FIELDS.reduce((n, f) => n + BYTES[f.kind], 0);

const MAGIC = 0x314e4946; // "FIN1" little-endian
const FRAME_HEADER = 8;
const TAG_RECORD = 1;
const TAG_STRING = 2;
const TAG_RESET = 3;
const TWO_32 = 4294967296;
const MAX_U64 = (1n << 64n) - 1n;

// ---- Field helpers (called from the generated code, off its fast paths) -----------------------

function bad(name: string, x: unknown, what: string): never {
  const shown = typeof x === "bigint" ? `${x}n` : typeof x === "string" ? JSON.stringify(x) : x;
  throw new TypeError(`input_rows: ${name} ${shown} is not ${what}`);
}

/** Writes a u64 that is not a u32 number: a safe integer number or a bigint in range. */
function u64(v: DataView, at: number, x: unknown, name: string): void {
  if (typeof x === "number") {
    if (!Number.isSafeInteger(x) || x < 0) {
      bad(name, x, "an unsigned64 (a number must be a safe integer; 2^53 and above as bigint)");
    }
    const lo = x % TWO_32;
    v.setUint32(at, lo, true);
    v.setUint32(at + 4, (x - lo) / TWO_32, true);
  } else if (typeof x === "bigint" && x >= 0n && x <= MAX_U64) {
    v.setBigUint64(at, x, true);
  } else {
    bad(name, x, "an unsigned64");
  }
}

/** The u32 of an IPv4 address given as text or number. */
function v4(x: unknown, name: string): number {
  const w = ipv4Word(x as string | number | undefined);
  return w >= 0 ? w : bad(name, x, "an IPv4 address");
}

const mappedWords = new Uint32Array([0, 0, 0xffff, 0]);

/** The 4 words of IPv6 text (a dotted quad as IPv4-mapped, which the codec prints back so). */
function v6(x: unknown, name: string): Uint32Array {
  if (typeof x === "string") {
    const w = x.includes(":") ? parseIPv6Words(x) : undefined;
    if (w !== undefined) return w;
    const w4 = parseIPv4Word(x);
    if (w4 >= 0) {
      mappedWords[3] = w4;
      return mappedWords;
    }
  }
  return bad(name, x, "an IPv6 address");
}

function u64Out(v: DataView, at: number): number | bigint {
  const lo = v.getUint32(at, true);
  const hi = v.getUint32(at + 4, true);
  if (hi < 0x200000) return hi * TWO_32 + lo;
  return (BigInt(hi) << 32n) | BigInt(lo);
}

function noString(id: number): never {
  throw new Error(`input_rows: string id ${id} was never defined (a frame was lost or reordered)`);
}

const H = { bad, u64, v4, v6, u64Out, formatIPv6, noString };

// ---- Generated writer and readers -------------------------------------------------------------

/** What the generated record writer needs of its {@linkcode InputRowWriter}. */
interface WriteState {
  v: DataView;
  b: Uint8Array;
  at: number;
  /** Last string written per string field, and its id (a cache reset with the dictionary). */
  readonly last: unknown[];
  readonly lastId: number[];
  /** The id of `s` (defining it in the frame first when new), for string field `k`. */
  ref(s: unknown, k: number, name: string): number;
}

type RecordWriter = (rec: Record<string, unknown>, W: WriteState) => void;

function putValue(f: InputField, name: string): string {
  switch (f.kind) {
    case "u8":
      return `if ((x & 255) !== x) H.bad(${name}, x, "an unsigned8"); b[at] = x; at += 1;`;
    case "u16":
      return `if ((x & 65535) !== x) H.bad(${name}, x, "an unsigned16"); ` +
        `v.setUint16(at, x, true); at += 2;`;
    case "u32":
      return `if ((x >>> 0) !== x) H.bad(${name}, x, "an unsigned32"); ` +
        `v.setUint32(at, x, true); at += 4;`;
    case "u64":
      // A u32 number is the common case: no call, no division.
      return `if (typeof x === "number" && (x >>> 0) === x) { v.setUint32(at, x, true); ` +
        `v.setUint32(at + 4, 0, true); } else H.u64(v, at, x, ${name}); at += 8;`;
    case "ipv4":
      return `v.setUint32(at, typeof x === "number" && (x >>> 0) === x ? x : H.v4(x, ${name})); ` +
        `at += 4;`;
    case "ipv6":
      return `w = H.v6(x, ${name}); v.setUint32(at, w[0]); v.setUint32(at + 4, w[1]); ` +
        `v.setUint32(at + 8, w[2]); v.setUint32(at + 12, w[3]); at += 16;`;
    case "string":
      throw new Error("unreachable: strings are written from their ids");
  }
}

function compileWriter(): RecordWriter {
  const lines: string[] = [];
  const strings: string[] = [];
  // Pass 1: the ids of the string fields, defining new strings in the frame before the record.
  let k = 0;
  INPUT_FIELDS.forEach((f, i) => {
    if (f.kind !== "string") return;
    const name = JSON.stringify(f.name);
    strings.push(
      `let s${i} = rec[${name}]; let i${i} = 0; if (s${i} !== undefined) { ` +
        `if (s${i} === last[${k}]) i${i} = lastId[${k}]; ` +
        `else if (s${i} !== "") i${i} = W.ref(s${i}, ${k}, ${name}); }`,
    );
    k++;
  });
  lines.push(`const last = W.last; const lastId = W.lastId;`, ...strings);
  // Pass 2: the record item (the caller made room for the largest one).
  lines.push(
    `const v = W.v; const b = W.b; const start = W.at; let at = start + ${1 + BITMAP_BYTES};`,
  );
  const masks = Array.from({ length: BITMAP_BYTES }, (_, j) => `m${j} = 0`);
  lines.push(`let x; let w; let ${masks.join(", ")};`);
  INPUT_FIELDS.forEach((f, i) => {
    const bit = `m${i >> 3} |= ${1 << (i & 7)};`;
    if (f.kind === "string") {
      lines.push(`if (s${i} !== undefined) { ${bit} v.setUint32(at, i${i}, true); at += 4; }`);
    } else {
      const name = JSON.stringify(f.name);
      lines.push(`x = rec[${name}]; if (x !== undefined) { ${bit} ${putValue(f, name)} }`);
    }
  });
  lines.push(`b[start] = ${TAG_RECORD};`);
  for (let j = 0; j < BITMAP_BYTES; j++) lines.push(`b[start + ${1 + j}] = m${j};`);
  lines.push(`W.at = at;`);
  return new Function(
    "H",
    `return function writeRecord(rec, W) {\n${lines.join("\n")}\n};`,
  )(H) as RecordWriter;
}

/** Where a generated reader leaves the offset after the record it read. */
interface Cursor {
  at: number;
}

type RecordReader = (
  v: DataView,
  b: Uint8Array,
  S: readonly string[],
  c: Cursor,
) => FlowInput;

function getValue(f: InputField): { expr: string; bytes: number } {
  switch (f.kind) {
    case "u8":
      return { expr: `b[at]`, bytes: 1 };
    case "u16":
      return { expr: `v.getUint16(at, true)`, bytes: 2 };
    case "u32":
    case "ipv4":
      return { expr: `v.getUint32(at, ${f.kind === "u32"})`, bytes: 4 };
    case "u64":
      return { expr: `H.u64Out(v, at)`, bytes: 8 };
    case "ipv6":
      return { expr: `H.formatIPv6(b, at)`, bytes: 16 };
    case "string":
      return {
        expr:
          `((s = S[v.getUint32(at, true)]) !== undefined ? s : H.noString(v.getUint32(at, true)))`,
        bytes: 4,
      };
  }
}

/**
 * A reader for the records whose bitmap is `present` (one flag per field): one object literal
 * with exactly the present keys, so records of one shape share one hidden class.
 */
function compileShapeReader(present: readonly boolean[]): RecordReader {
  const lines = [`let at = c.at + ${1 + BITMAP_BYTES}; let s;`];
  const props: string[] = [];
  INPUT_FIELDS.forEach((f, i) => {
    if (!present[i]) return;
    const { expr, bytes } = getValue(f);
    lines.push(`const f${i} = ${expr}; at += ${bytes};`);
    props.push(`${JSON.stringify(f.name)}: f${i},`);
  });
  lines.push(`c.at = at;`, `return {\n${props.join("\n")}\n};`);
  return new Function(
    "H",
    `return function readShape(v, b, S, c) {\n${lines.join("\n")}\n};`,
  )(H) as RecordReader;
}

/**
 * Shapes compiled at most; a stream with more bitmaps reads the rest field by field (as does a
 * schema with more than 48 Agent fields, whose bitmap is no exact number key).
 */
const MAX_SHAPES = 256;
const shapeReaders = new Map<number, RecordReader>();

/** A reader for any bitmap (keys added one by one): the fallback past {@linkcode MAX_SHAPES}. */
function compileAnyReader(): RecordReader {
  const lines = [`const o = c.at + 1; let at = o + ${BITMAP_BYTES}; let s; const r = {};`];
  INPUT_FIELDS.forEach((f, i) => {
    const { expr, bytes } = getValue(f);
    lines.push(
      `if ((b[o + ${i >> 3}] & ${1 << (i & 7)}) !== 0) { r[${
        JSON.stringify(f.name)
      }] = ${expr}; at += ${bytes}; }`,
    );
  });
  lines.push(`c.at = at;`, `return r;`);
  return new Function(
    "H",
    `return function readAny(v, b, S, c) {\n${lines.join("\n")}\n};`,
  )(H) as RecordReader;
}

const writeRecord = compileWriter();
const readAny = compileAnyReader();

// The shape readers in use, by bitmap, in a direct-mapped table in front of the Map: the bitmap
// (48 bits at most) is two 24-bit halves, so a hit compares two small integers (a Map keyed by
// the 48-bit number boxed and hashed a heap number per record: an eighth of the decode time).
const SHAPE_SLOTS = 256;
const slotLo = new Int32Array(SHAPE_SLOTS).fill(-1);
const slotHi = new Int32Array(SHAPE_SLOTS).fill(-1);
const slotReader: RecordReader[] = new Array(SHAPE_SLOTS).fill(readAny);

/** The reader of the record at `at` (its tag byte): by its bitmap's shape. */
function readerFor(b: Uint8Array, at: number): RecordReader {
  if (BITMAP_BYTES > 6) return readAny;
  let lo = 0;
  let hi = 0;
  for (let j = Math.min(BITMAP_BYTES, 3); j >= 1; j--) lo = (lo << 8) | b[at + j];
  for (let j = BITMAP_BYTES; j >= 4; j--) hi = (hi << 8) | b[at + j];
  const slot = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca6b) >>> 24;
  if (slotLo[slot] === lo && slotHi[slot] === hi) return slotReader[slot];
  const key = hi * 16777216 + lo;
  let r = shapeReaders.get(key);
  if (r === undefined) {
    if (shapeReaders.size >= MAX_SHAPES) return readAny;
    const present = INPUT_FIELDS.map((_, i) => (b[at + 1 + (i >> 3)] & (1 << (i & 7))) !== 0);
    r = compileShapeReader(present);
    shapeReaders.set(key, r);
  }
  slotLo[slot] = lo;
  slotHi[slot] = hi;
  slotReader[slot] = r;
  return r;
}

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder();

// ---- Writer -----------------------------------------------------------------------------------

/** Where an {@linkcode InputRowWriter} sends its frames: a ring, or a function (tests). */
export type FrameSink = RingWriter | ((frame: Uint8Array) => boolean);

/** Options of an {@linkcode InputRowWriter}. */
export interface InputRowWriterOptions {
  /** Records per frame: the frame is sent when it holds this many. Default 256. */
  readonly maxRecords?: number;
  /**
   * Bytes per frame: the frame is sent once it reaches this size (so a frame may exceed it by
   * one record and that record's new strings). Default 65536, and at most a quarter of a ring
   * sink's largest frame (so that several frames are in flight); a ring sink must take
   * `maxBytes` plus one record.
   */
  readonly maxBytes?: number;
  /**
   * Dictionary entries before a reset (more than the record's string field count; the empty
   * string is one). Default 65536.
   */
  readonly maxStrings?: number;
  /** Dictionary UTF-8 bytes before a reset. Default 4 MiB. */
  readonly maxStringBytes?: number;
}

/** Counters of an {@linkcode InputRowWriter} (cumulative). */
export interface InputRowWriterStats {
  /** Frames handed to the sink. */
  readonly frames: number;
  /** Records in those frames. */
  readonly records: number;
  /** Strings defined (sent with their bytes). */
  readonly strings: number;
  /** Dictionary resets (full, or after a discarded frame). */
  readonly resets: number;
  /** Records dropped with a discarded frame. */
  readonly discarded: number;
}

/**
 * Encodes records into frames for one ring (one writer per ring: the dictionary is the ring's).
 * {@linkcode add} appends to the current frame, which is sent by itself when it reaches
 * `maxRecords` or `maxBytes`, or by {@linkcode flush}. Sending never drops: when the ring is
 * full the frame stays pending, and `add` refuses records until a `flush` succeeds (the caller
 * waits for space, e.g. `RingWriter.waitForSpaceAsync(writer.pendingBytes, ms)`) or the caller
 * gives the frame up with {@linkcode discard} and counts the drop.
 */
export class InputRowWriter {
  readonly #sink: (frame: Uint8Array) => boolean;
  readonly #maxRecords: number;
  readonly #maxBytes: number;
  readonly #maxStrings: number;
  readonly #maxStringBytes: number;
  readonly #w: WriteState;
  #count = 0;
  readonly #ids = new Map<string, number>([["", 0]]);
  /** Dictionary strings by id, and their UTF-8 byte lengths (for a rollback). */
  readonly #list: string[] = [""];
  readonly #lens: number[] = [0];
  #dictBytes = 0;
  #needReset = false;
  #frames = 0;
  #records = 0;
  #strings = 0;
  #resets = 0;
  #discarded = 0;

  /** A writer sending its frames to `sink` (a ring, or a function returning false when full). */
  constructor(sink: FrameSink, options: InputRowWriterOptions = {}) {
    this.#sink = typeof sink === "function" ? sink : (f) => sink.write(f);
    const ringMax = typeof sink === "function" ? Infinity : sink.maxFrameBytes;
    this.#maxRecords = positive("maxRecords", options.maxRecords ?? 256);
    this.#maxBytes = positive(
      "maxBytes",
      options.maxBytes ?? Math.min(65_536, Math.floor(ringMax / 4)),
    );
    if (this.#maxBytes + MAX_RECORD_BYTES > ringMax) {
      throw new RangeError(
        `input_rows: maxBytes ${this.#maxBytes} and a record do not fit in a frame of the ring ` +
          `(at most ${ringMax} bytes)`,
      );
    }
    this.#maxStrings = positive("maxStrings", options.maxStrings ?? 65_536);
    this.#maxStringBytes = positive("maxStringBytes", options.maxStringBytes ?? 4 << 20);
    if (this.#maxStrings <= STRING_FIELDS) {
      throw new RangeError(
        `input_rows: maxStrings ${this.#maxStrings}: a record may need ${STRING_FIELDS} and ` +
          `the empty string`,
      );
    }
    const b = new Uint8Array(this.#maxBytes + 2 * MAX_RECORD_BYTES + FRAME_HEADER);
    const ref = (s: unknown, k: number, name: string): number => this.#ref(s, k, name);
    this.#w = {
      b,
      v: new DataView(b.buffer),
      at: FRAME_HEADER,
      last: new Array(STRING_FIELDS).fill(undefined),
      lastId: new Array(STRING_FIELDS).fill(0),
      ref,
    };
  }

  /** Records in the pending (unsent) frame. */
  get pendingRecords(): number {
    return this.#count;
  }

  /** Bytes of the pending frame (0 when it holds no record). */
  get pendingBytes(): number {
    return this.#count === 0 ? 0 : this.#w.at;
  }

  /** Cumulative counters. */
  get stats(): InputRowWriterStats {
    return {
      frames: this.#frames,
      records: this.#records,
      strings: this.#strings,
      resets: this.#resets,
      discarded: this.#discarded,
    };
  }

  /** Makes room for `n` more bytes in the frame buffer. */
  #room(n: number): void {
    const w = this.#w;
    if (w.at + n <= w.b.length) return;
    const b = new Uint8Array(Math.max(w.b.length * 2, w.at + n));
    b.set(w.b.subarray(0, w.at));
    w.b = b;
    w.v = new DataView(b.buffer);
  }

  #ref(s: unknown, k: number, name: string): number {
    if (typeof s !== "string") bad(name, s, "a string");
    let id = this.#ids.get(s);
    if (id === undefined) {
      id = this.#list.length;
      const w = this.#w;
      // UTF-8 takes at most 3 bytes per UTF-16 code unit; the record item follows.
      this.#room(9 + 3 * s.length + MAX_RECORD_BYTES);
      const { written } = utf8Encoder.encodeInto(s, w.b.subarray(w.at + 9));
      w.b[w.at] = TAG_STRING;
      w.v.setUint32(w.at + 1, id, true);
      w.v.setUint32(w.at + 5, written, true);
      w.at += 9 + written;
      this.#ids.set(s, id);
      this.#list.push(s);
      this.#lens.push(written);
      this.#dictBytes += written;
      this.#strings++;
    }
    this.#w.last[k] = s;
    this.#w.lastId[k] = id;
    return id;
  }

  #reset(): void {
    this.#room(1);
    this.#w.b[this.#w.at++] = TAG_RESET;
    this.#ids.clear();
    this.#ids.set("", 0);
    this.#list.length = 1;
    this.#lens.length = 1;
    this.#dictBytes = 0;
    this.#w.last.fill(undefined);
    this.#needReset = false;
    this.#resets++;
  }

  /**
   * Appends `record` to the pending frame, and sends the frame when it is full. False when the
   * record was not taken: the pending frame is full and the sink refused it (ring full).
   * Throws (taking nothing) on a value that does not fit its field's type.
   */
  add(record: FlowInput): boolean {
    if (this.#count >= this.#maxRecords || this.#w.at >= this.#maxBytes) {
      if (!this.flush()) return false;
    }
    const w = this.#w;
    if (
      this.#needReset ||
      (this.#list.length > 1 &&
        (this.#list.length + STRING_FIELDS > this.#maxStrings ||
          this.#dictBytes > this.#maxStringBytes))
    ) {
      this.#reset();
    }
    this.#room(MAX_RECORD_BYTES);
    const at = w.at;
    const strings = this.#list.length;
    try {
      writeRecord(record as unknown as Record<string, unknown>, w);
    } catch (e) {
      // Take nothing: the frame and the dictionary as they were before this record.
      w.at = at;
      while (this.#list.length > strings) {
        this.#ids.delete(this.#list.pop()!);
        this.#dictBytes -= this.#lens.pop()!;
        this.#strings--;
      }
      w.last.fill(undefined);
      throw e;
    }
    this.#count++;
    if (this.#count >= this.#maxRecords || w.at >= this.#maxBytes) this.flush();
    return true;
  }

  /** Sends the pending frame. True when sent (or nothing was pending), false when the sink is full. */
  flush(): boolean {
    if (this.#count === 0) return true;
    const w = this.#w;
    w.v.setUint32(0, MAGIC, true);
    w.v.setUint32(4, this.#count, true);
    if (!this.#sink(w.b.subarray(0, w.at))) return false;
    this.#frames++;
    this.#records += this.#count;
    this.#count = 0;
    w.at = FRAME_HEADER;
    return true;
  }

  /**
   * Drops the pending frame (for a caller that will not wait for the ring) and returns its
   * record count. The reader will not see the strings that frame defined, so the next frame
   * starts with a dictionary reset.
   */
  discard(): number {
    const n = this.#count;
    if (n === 0) return 0;
    this.#discarded += n;
    this.#count = 0;
    this.#w.at = FRAME_HEADER;
    this.#needReset = true;
    return n;
  }
}

function positive(name: string, n: number): number {
  if (!Number.isInteger(n) || n <= 0) {
    throw new RangeError(`input_rows: ${name} ${n}: not a positive integer`);
  }
  return n;
}

// ---- Reader -----------------------------------------------------------------------------------

/**
 * Decodes the frames of one ring, in order (it holds the ring's string dictionary). Records are
 * in wire-number form (see the module doc); strings are the same objects for the same id.
 */
export class InputRowReader {
  readonly #strings: string[] = [""];
  readonly #cursor: Cursor = { at: 0 };

  /** Entries in the string dictionary (the predefined empty string included). */
  get dictionarySize(): number {
    return this.#strings.length;
  }

  /**
   * Calls `onRecord` for each record of `frame` in order and returns their count. The frame may
   * be a view into a ring (read synchronously, so it may be released afterwards). Throws on a
   * malformed frame or a string id never defined (a frame lost or reordered).
   */
  read(frame: Uint8Array, onRecord: (r: FlowInput) => void): number {
    const v = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
    const end = frame.byteLength;
    if (end < FRAME_HEADER || v.getUint32(0, true) !== MAGIC) {
      throw new Error("input_rows: not an input rows frame");
    }
    const count = v.getUint32(4, true);
    const S = this.#strings;
    const c = this.#cursor;
    let at = FRAME_HEADER;
    let n = 0;
    while (at < end) {
      const tag = frame[at];
      if (tag === TAG_RECORD) {
        c.at = at;
        const r = readerFor(frame, at)(v, frame, S, c);
        at = c.at;
        if (at > end) throw new Error("input_rows: record past the end of the frame");
        n++;
        onRecord(r);
      } else if (tag === TAG_STRING) {
        const id = v.getUint32(at + 1, true);
        const len = v.getUint32(at + 5, true);
        if (id !== S.length) {
          throw new Error(
            `input_rows: string id ${id} out of order (expected ${S.length}): a frame was lost or reordered`,
          );
        }
        if (at + 9 + len > end) throw new Error("input_rows: string past the end of the frame");
        S.push(utf8Decoder.decode(frame.subarray(at + 9, at + 9 + len)));
        at += 9 + len;
      } else if (tag === TAG_RESET) {
        S.length = 1;
        at++;
      } else {
        throw new Error(`input_rows: unknown item tag ${tag} at byte ${at}`);
      }
    }
    if (n !== count) throw new Error(`input_rows: frame says ${count} records, holds ${n}`);
    return n;
  }
}
