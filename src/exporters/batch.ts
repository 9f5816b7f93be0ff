/**
 * Binary batches of exported flows, the form in which records cross from an aggregation shard
 * to the export loop and from the export loop to a sink's worker: one `SharedArrayBuffer` per
 * batch, holding fixed-size rows plus a table of the batch's distinct strings (namespaces, Node
 * and Pod names repeat a lot, so each is encoded once per batch). The row layout is derived from
 * the record schema's FA export template fields and their IE types, so a field added there
 * crosses too.
 *
 * Row: flags (u8: IPv6, uncorrelated), protocol and ports of the flow key, a presence bitmap,
 * then one slot per field: f64 for numbers, u64 for bigints, u32 string ref for strings, and
 * addresses in binary (4 or 16 bytes, network order), so no address text is hashed into the
 * string table or encoded on the export loop's thread. The key's addresses are the record's own
 * address fields (the core exports them as the same text) and are not sent twice. Addresses
 * come back as canonical text (RFC 5952, as the core and the codec print them). A field absent
 * on one side is `undefined` on the other (present as a key, as every sink reads absent and
 * undefined alike).
 *
 * A finished batch is never written again, and posting it shares it: the shard, the export loop
 * and every sink's worker read the same memory, neither copied nor transferred. A transfer would
 * detach the sender's buffer, and V8 answers the first detach in a thread by dropping, for good,
 * its guarantee that no buffer is ever detached (the `ArrayBufferDetaching` protector): every
 * optimized function of that thread is thrown away and recompiled, and from then on each typed
 * array access checks its buffer; the shards and the ingest thread live on typed arrays
 * (`--v8-flags=--trace-protector-invalidation` shows a detach; tests/integration/e2e_flows_test.ts
 * checks that none happens there). Posting a copy instead held each batch twice more until
 * each thread's next GC: +25 to +45 MB of peak RSS at 100k flows (measured against sharing).
 *
 * @module
 */

import type { AggregatedRecord, ExportedFlow, FlowKey } from "../aggregation/record.ts";
// The two modules, not ipfix/mod.ts: a sink's worker imports this one, and has no use for the
// decoder's tables (the IPFIX sink's worker imports them with its encoder).
import { formatIPv4Bytes, formatIPv6, parseIPv4Word, parseIPv6Words } from "../ipfix/ip.ts";
import { elementByName } from "../ipfix/registry.ts";
import {
  AGGREGATED_IPV4_FIELDS,
  AGGREGATED_IPV6_FIELDS,
  POD_LABEL_FIELDS,
} from "../record/schema.ts";

/**
 * A batch's memory: shared as {@linkcode BatchWriter.finish} makes it; a plain buffer reads
 * the same (tests, the empty batch).
 */
export type BatchBuffer = ArrayBuffer | SharedArrayBuffer;

/** How a field is stored in a row. */
const Slot = { Number: 0, BigInt: 1, String: 2, IPv4: 3, IPv6: 4 } as const;
type Slot = typeof Slot[keyof typeof Slot];

interface FieldSlot {
  readonly name: string;
  readonly slot: Slot;
  readonly offset: number;
}

const MAGIC = 0x46414231; // "FAB1"
const HEADER_BYTES = 16;
const KEY_BYTES = 1 + 1 + 2 + 2;
const SLOT_BYTES: Readonly<Record<Slot, number>> = { 0: 8, 1: 8, 2: 4, 3: 4, 4: 16 };

function slotOf(name: string): Slot {
  const ie = elementByName(name);
  if (ie === undefined) throw new Error(`batch: unknown information element ${name}`);
  switch (ie.type) {
    case "unsigned64":
    case "signed64":
      return Slot.BigInt;
    case "string":
      return Slot.String;
    case "ipv4Address":
      return Slot.IPv4;
    case "ipv6Address":
      return Slot.IPv6;
    default:
      return Slot.Number;
  }
}

const FIELD_NAMES: readonly string[] = [
  ...new Set([...AGGREGATED_IPV4_FIELDS, ...AGGREGATED_IPV6_FIELDS, ...POD_LABEL_FIELDS]),
];
const BITMAP_BYTES = Math.ceil(FIELD_NAMES.length / 8);

const FIELDS: readonly FieldSlot[] = (() => {
  let offset = KEY_BYTES + BITMAP_BYTES;
  return FIELD_NAMES.map((name) => {
    const slot = slotOf(name);
    const f = { name, slot, offset };
    offset += SLOT_BYTES[slot];
    return f;
  });
})();

/** Bytes of one row. */
export const ROW_BYTES: number = FIELDS.length === 0
  ? KEY_BYTES
  : FIELDS[FIELDS.length - 1].offset + SLOT_BYTES[FIELDS[FIELDS.length - 1].slot];

// Row writer and reader are generated once from FIELDS as straight-line code with literal
// property names (as src/ipfix/compile.ts does for template decoders): a loop over the field
// list with dynamic property access cost several microseconds per flow on the export path.

type RowWriter = (
  v: DataView,
  rows: Uint8Array,
  base: number,
  rec: Record<string, unknown>,
  ref: (s: string) => number,
  last: unknown[],
  lastRef: number[],
  aw: Uint32Array | undefined,
  aa: number,
) => void;
type RowReader = (
  v: DataView,
  bytes: Uint8Array,
  base: number,
  strings: readonly (string | undefined)[],
) => AggregatedRecord;

const KIND_OF: Readonly<Record<Slot, BatchField["kind"]>> = {
  0: "number",
  1: "bigint",
  2: "string",
  3: "ipv4",
  4: "ipv6",
};

/** Scratch words of an IPv4-mapped address (IPv6 fields print those as dotted quads). */
const mapped = new Uint32Array([0, 0, 0xffff, 0]);

/** The 4 words of IPv6 address text (or of a dotted quad, as IPv4-mapped). */
function v6Words(text: string, name: string): Uint32Array {
  const w = text.includes(":") ? parseIPv6Words(text) : undefined;
  if (w !== undefined) return w;
  const w4 = parseIPv4Word(text);
  if (w4 < 0) throw new Error(`batch: ${name} ${JSON.stringify(text)} is not an IPv6 address`);
  mapped[3] = w4;
  return mapped;
}

/** The word of IPv4 address text. */
function v4Word(text: string, name: string): number {
  const w = parseIPv4Word(text);
  if (w < 0) throw new Error(`batch: ${name} ${JSON.stringify(text)} is not an IPv4 address`);
  return w;
}

const HELPERS = { v4Word, v6Words, formatIPv4Bytes, formatIPv6 };

/**
 * What generated row code reads and writes besides the row (see {@linkcode BatchWriter.target}):
 * the rows as a view and as bytes, the string table's `ref`, and the per-field last value and
 * its reference (or word) that spare a look-up when a field repeats.
 */
export interface RowTarget {
  readonly v: DataView;
  readonly rows: Uint8Array;
  readonly ref: (s: string) => number;
  readonly last: unknown[];
  readonly lastRef: number[];
}

/**
 * The key's address fields: their words come from the core's storage when it is given, at these
 * offsets from the source address's first word (`ExportedFlow.addressAt`).
 */
export const KEY_ADDRESS: Readonly<Record<string, number>> = {
  sourceIPv4Address: 0,
  destinationIPv4Address: 4,
  sourceIPv6Address: 0,
  destinationIPv6Address: 4,
};

/** Code storing the 4 words `w[p..p+3]` at `at` in network order (row code, `v` the view). */
export function putWords(at: string, w: string, p: string): string {
  return `v.setUint32(${at}, ${w}[${p}]); v.setUint32(${at} + 4, ${w}[${p} + 1]); ` +
    `v.setUint32(${at} + 8, ${w}[${p} + 2]); v.setUint32(${at} + 12, ${w}[${p} + 3]);`;
}

function putSource(f: FieldSlot, i: number): string {
  const at = `base + ${f.offset}`;
  const name = JSON.stringify(f.name);
  const words = KEY_ADDRESS[f.name];
  switch (f.slot) {
    case Slot.String:
      // Strings repeat from one flow to the next (namespaces, Nodes, policies): the previous
      // value of the field is checked by identity before the batch's table is consulted.
      return `if (x !== last[${i}]) { last[${i}] = x; lastRef[${i}] = ref(String(x)); } ` +
        `v.setUint32(${at}, lastRef[${i}], true);`;
    case Slot.BigInt:
      return `v.setBigUint64(${at}, typeof x === "bigint" ? x : BigInt(x), true);`;
    case Slot.IPv4:
      // Other address fields (the cluster IP) repeat per flow: parsed once per new value.
      return words === undefined
        ? `if (x !== last[${i}]) { lastRef[${i}] = H.v4Word(x, ${name}); last[${i}] = x; } ` +
          `v.setUint32(${at}, lastRef[${i}]);`
        : `v.setUint32(${at}, aw !== undefined ? aw[aa + ${words}] : H.v4Word(x, ${name}));`;
    case Slot.IPv6: {
      const parsed = `w = H.v6Words(x, ${name}); ${putWords(at, "w", "0")}`;
      return words === undefined
        ? parsed
        : `if (aw !== undefined) { ${putWords(at, "aw", `aa + ${words}`)} } else { ${parsed} }`;
    }
    default:
      return `v.setFloat64(${at}, +x, true);`;
  }
}

function getSource(f: FieldSlot): string {
  const at = `base + ${f.offset}`;
  switch (f.slot) {
    case Slot.String:
      return `strings[v.getUint32(${at}, true)]`;
    case Slot.BigInt:
      return `v.getBigUint64(${at}, true)`;
    case Slot.IPv4:
      return `H.formatIPv4Bytes(bytes, ${at})`;
    case Slot.IPv6:
      return `H.formatIPv6(bytes, ${at})`;
    default:
      return `v.getFloat64(${at}, true)`;
  }
}

/**
 * How generated code fills the fields of the row at `base` (every byte after the key): `valueOf`
 * gives, per field, either an expression of its value (absent when `undefined`), stored as
 * {@linkcode BatchWriter.add} stores a record's value, or `{ present, put }`: a condition and
 * code storing the value itself. The code declares `x`, `w` and the bitmap bytes and reads `v`,
 * `rows`, `base`, `ref`, `last`, `lastRef` and `H` ({@linkcode BATCH_HELPERS}) from its scope.
 * Row writers of other flow representations (the shards' slots) are generated through this,
 * so they write the same rows.
 */
export function rowFieldsSource(
  valueOf: (name: string, kind: BatchField["kind"], at: string) =>
    | string
    | { present: string; put: string },
): string {
  const lines: string[] = [];
  const masks = new Array(BITMAP_BYTES).fill(0).map((_, i) => `m${i}`);
  lines.push(`let x; let w; let ${masks.map((m) => `${m} = 0`).join(", ")};`);
  FIELDS.forEach((f, i) => {
    const bit = `m${i >> 3} |= ${1 << (i & 7)};`;
    const value = valueOf(f.name, KIND_OF[f.slot], `base + ${f.offset}`);
    lines.push(
      typeof value === "string"
        ? `x = ${value}; if (x !== undefined) { ${bit} ${putSource(f, i)} }`
        : `if (${value.present}) { ${bit} ${value.put} }`,
    );
  });
  masks.forEach((m, i) => lines.push(`rows[base + ${KEY_BYTES + i}] = ${m};`));
  return lines.join("\n");
}

/** The helpers `H` of {@linkcode rowFieldsSource}'s code. */
export const BATCH_HELPERS: typeof HELPERS = HELPERS;

function compileWriter(): RowWriter {
  const lines = [rowFieldsSource((name) => `rec[${JSON.stringify(name)}]`)];
  return new Function(
    "H",
    `return function writeRow(v, rows, base, rec, ref, last, lastRef, aw, aa) {\n${
      lines.join("\n")
    }\n};`,
  )(HELPERS) as RowWriter;
}

function compileReader(): RowReader {
  const lines: string[] = [];
  for (let i = 0; i < BITMAP_BYTES; i++) {
    lines.push(`const m${i} = bytes[base + ${KEY_BYTES + i}];`);
  }
  const props = FIELDS.map((f, i) =>
    `${JSON.stringify(f.name)}: (m${i >> 3} & ${1 << (i & 7)}) !== 0 ? ${getSource(f)} : undefined,`
  );
  lines.push(`return {\n${props.join("\n")}\n};`);
  return new Function(
    "H",
    `return function readRow(v, bytes, base, strings) {\n${lines.join("\n")}\n};`,
  )(HELPERS) as RowReader;
}

const writeRow = compileWriter();
const readRow = compileReader();

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Accumulates flows into one batch; {@linkcode BatchWriter.finish} hands out the buffer. */
export class BatchWriter {
  readonly #capacity: number;
  #rows: Uint8Array;
  #view: DataView;
  #count = 0;
  readonly #strings = new Map<string, number>();
  readonly #stringList: string[] = [];
  #stringChars = 0;
  readonly #refFn = (s: string): number => this.#ref(s);
  /**
   * Per field: the last string written and its table index, or the last IPv4 address text and
   * its word (reset with the table).
   */
  readonly #last: unknown[] = new Array(FIELDS.length).fill(undefined);
  readonly #lastRef: number[] = new Array(FIELDS.length).fill(0);
  /** See {@linkcode target}. */
  readonly #target: RowTarget;

  /** A writer for at most `capacity` rows. */
  constructor(capacity: number) {
    this.#capacity = capacity;
    this.#rows = new Uint8Array(capacity * ROW_BYTES);
    this.#view = new DataView(this.#rows.buffer);
    this.#target = {
      v: this.#view,
      rows: this.#rows,
      ref: this.#refFn,
      last: this.#last,
      lastRef: this.#lastRef,
    };
  }

  /** What code generated with {@linkcode rowFieldsSource} writes a row into. */
  get target(): RowTarget {
    return this.#target;
  }

  /** Rows written so far. */
  get count(): number {
    return this.#count;
  }

  /** True when no more rows fit. */
  get full(): boolean {
    return this.#count >= this.#capacity;
  }

  #ref(s: string): number {
    let i = this.#strings.get(s);
    if (i === undefined) {
      i = this.#stringList.length + 1;
      this.#strings.set(s, i);
      this.#stringList.push(s);
      this.#stringChars += s.length;
    }
    return i;
  }

  /**
   * Starts the next row with its key (the caller checks {@linkcode full} first) and returns its
   * offset in {@linkcode target}'s rows, where the caller writes its fields; the row counts once
   * {@linkcode commitRow} is called (a row whose writing threw is overwritten by the next).
   */
  startRow(
    isIPv6: boolean,
    uncorrelated: boolean,
    protocol: number,
    sourcePort: number,
    destinationPort: number,
  ): number {
    const v = this.#view;
    const base = this.#count * ROW_BYTES;
    v.setUint8(base, (isIPv6 ? 1 : 0) | (uncorrelated ? 2 : 0));
    v.setUint8(base + 1, protocol);
    v.setUint16(base + 2, sourcePort, true);
    v.setUint16(base + 4, destinationPort, true);
    return base;
  }

  /** Counts the row {@linkcode startRow} started. */
  commitRow(): void {
    this.#count++;
  }

  /** Appends one flow (the caller checks {@linkcode full} first). */
  add(flow: ExportedFlow): void {
    const key = flow.key;
    const v = this.#view;
    const base = this.startRow(
      flow.isIPv6,
      flow.uncorrelated,
      key.protocol,
      key.sourcePort,
      key.destinationPort,
    );
    writeRow(
      v,
      this.#rows,
      base,
      flow.record as unknown as Record<string, unknown>,
      this.#refFn,
      this.#last,
      this.#lastRef,
      flow.addressWords,
      flow.addressAt ?? 0,
    );
    this.#count++;
  }

  /** The batch as one shared buffer (see the module notes); the writer is empty afterwards. */
  finish(): SharedArrayBuffer {
    const rowsBytes = this.#count * ROW_BYTES;
    // UTF-8 needs at most 3 bytes per UTF-16 code unit, plus a 4-byte length per string.
    const stringsCap = this.#stringChars * 3 + this.#stringList.length * 4;
    const out = new Uint8Array(new SharedArrayBuffer(HEADER_BYTES + rowsBytes + stringsCap));
    const v = new DataView(out.buffer);
    v.setUint32(0, MAGIC, true);
    v.setUint32(4, this.#count, true);
    v.setUint32(8, this.#stringList.length, true);
    out.set(this.#rows.subarray(0, rowsBytes), HEADER_BYTES);
    let at = HEADER_BYTES + rowsBytes;
    for (const s of this.#stringList) {
      const { written } = encoder.encodeInto(s, out.subarray(at + 4));
      v.setUint32(at, written, true);
      at += 4 + written;
    }
    v.setUint32(12, at, true);
    this.#count = 0;
    this.#strings.clear();
    this.#stringList.length = 0;
    this.#last.fill(undefined);
    this.#stringChars = 0;
    // Sent as allocated (the header holds the end): no copy of the whole batch to trim it.
    return out.buffer;
  }
}

/** Number of flows in a batch buffer (header only). */
export function batchCount(buf: BatchBuffer): number {
  return new DataView(buf).getUint32(4, true);
}

/**
 * A received batch opened for reading in place: a sink that reads its fields straight from the
 * rows (the flow log, see {@linkcode batchField}) skips building a record object per flow.
 */
export interface FlowBatch {
  /** Rows in the batch. */
  readonly count: number;
  /** The whole batch buffer. */
  readonly view: DataView;
  /** The same buffer as bytes. */
  readonly bytes: Uint8Array;
  /** The batch's string table: a string slot holds an index into it (never 0). */
  readonly strings: readonly (string | undefined)[];
}

/** Where one field sits in a row, for code that reads rows in place (offsets from the row). */
export interface BatchField {
  /** How the value is stored: f64, u64, u32 string-table index, or a binary address. */
  readonly kind: "number" | "bigint" | "string" | "ipv4" | "ipv6";
  /** Byte offset of the value. */
  readonly offset: number;
  /** Byte offset of the presence bitmap byte holding the field's bit. */
  readonly presentByte: number;
  /** Mask of the field's bit in that byte (a clear bit: the field is absent). */
  readonly presentMask: number;
}

/** The row layout of IE `name`; undefined when batches do not carry it. */
export function batchField(name: string): BatchField | undefined {
  const i = FIELDS.findIndex((f) => f.name === name);
  if (i < 0) return undefined;
  const f = FIELDS[i];
  return {
    kind: KIND_OF[f.slot],
    offset: f.offset,
    presentByte: KEY_BYTES + (i >> 3),
    presentMask: 1 << (i & 7),
  };
}

/** Byte offset of row `r` in a batch buffer. */
export function batchRowBase(r: number): number {
  return HEADER_BYTES + r * ROW_BYTES;
}

/** Opens a batch for reading in place. Throws on a buffer that is not a batch. */
export function openBatch(buf: BatchBuffer): FlowBatch {
  const v = new DataView(buf);
  const bytes = new Uint8Array(buf);
  if (buf.byteLength < HEADER_BYTES || v.getUint32(0, true) !== MAGIC) {
    throw new Error("batch: not a flow batch");
  }
  const count = v.getUint32(4, true);
  const nStrings = v.getUint32(8, true);
  const strings: (string | undefined)[] = [undefined];
  let at = HEADER_BYTES + count * ROW_BYTES;
  for (let i = 0; i < nStrings; i++) {
    const start = at + 4;
    const end = start + v.getUint32(at, true);
    strings.push(decodeString(bytes, start, end));
    at = end;
  }
  return { count, view: v, bytes, strings };
}

/** Longest string {@linkcode decodeString} builds from its char codes (one argument a byte). */
const CHAR_CODES_MAX = 1024;

/**
 * The UTF-8 string in `bytes[start..end)`. An ASCII one (most names) is built from its bytes as
 * char codes, 5x faster here than a native decode call per string (most of opening a batch was
 * those calls), and a string of its own: not a slice of a larger one that would keep it alive.
 */
function decodeString(bytes: Uint8Array, start: number, end: number): string {
  if (end - start <= CHAR_CODES_MAX) {
    let ascii = true;
    for (let j = start; j < end; j++) {
      if (bytes[j] >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) {
      return String.fromCharCode.apply(null, bytes.subarray(start, end) as unknown as number[]);
    }
  }
  return decoder.decode(bytes.subarray(start, end));
}

/** Decodes a batch into flows, in order. Throws on a buffer that is not a batch. */
export function readBatch(buf: BatchBuffer): ExportedFlow[] {
  return readFlows(openBatch(buf));
}

/** The flows of an opened batch, in order. */
export function readFlows(batch: FlowBatch): ExportedFlow[] {
  const out: ExportedFlow[] = new Array(batch.count);
  for (let r = 0; r < batch.count; r++) out[r] = readFlowAt(batch, r);
  return out;
}

/** Row `r` of an opened batch decoded as a flow. */
export function readFlowAt(batch: FlowBatch, r: number): ExportedFlow {
  const { view: v, bytes, strings } = batch;
  const base = HEADER_BYTES + r * ROW_BYTES;
  const flags = v.getUint8(base);
  const record = readRow(v, bytes, base, strings);
  const v6 = (flags & 1) !== 0;
  const key: FlowKey = {
    sourceAddress: (v6 ? record.sourceIPv6Address : record.sourceIPv4Address) ?? "",
    destinationAddress: (v6 ? record.destinationIPv6Address : record.destinationIPv4Address) ??
      "",
    protocol: v.getUint8(base + 1),
    sourcePort: v.getUint16(base + 2, true),
    destinationPort: v.getUint16(base + 4, true),
  };
  return { key, record, isIPv6: v6, uncorrelated: (flags & 2) !== 0 };
}

/** Whether the row at `base` carries field `f`. */
export function batchHas(batch: FlowBatch, base: number, f: BatchField): boolean {
  return (batch.bytes[base + f.presentByte] & f.presentMask) !== 0;
}

/**
 * The value of numeric field `f` (a number or a 64-bit counter, the latter as the nearest
 * number) in the row at `base`; 0 when absent.
 */
export function batchNumber(batch: FlowBatch, base: number, f: BatchField): number {
  if (!batchHas(batch, base, f)) return 0;
  const at = base + f.offset;
  if (f.kind === "number") return batch.view.getFloat64(at, true);
  if (f.kind === "bigint") {
    return batch.view.getUint32(at, true) + batch.view.getUint32(at + 4, true) * 0x1_0000_0000;
  }
  throw new Error(`batch: a ${f.kind} field read as a number`);
}

/**
 * The index in `batch.strings` of string field `f` in the row at `base`: rows of one batch with
 * the same value share it, so a reader can count by index and resolve each distinct value once;
 * 0 (no string) when the field is absent or empty.
 */
export function batchStringIndex(batch: FlowBatch, base: number, f: BatchField): number {
  if (f.kind !== "string") throw new Error(`batch: a ${f.kind} field read as a string`);
  if (!batchHas(batch, base, f)) return 0;
  const i = batch.view.getUint32(base + f.offset, true);
  return batch.strings[i] ? i : 0;
}

/** The buffer of an opened batch: what another reader (a sink's worker) is sent, shared. */
export function batchBuffer(batch: FlowBatch): BatchBuffer {
  return batch.view.buffer;
}
