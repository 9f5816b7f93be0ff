/**
 * Binary batches of exported flows, the form in which records cross from the export loop to a
 * sink's worker: one `ArrayBuffer` per batch, transferred (not cloned), holding fixed-size
 * rows plus a table of the batch's distinct strings (namespaces, Node and Pod names repeat a
 * lot, so each is encoded once per batch). The row layout is derived from the record schema's
 * FA export template fields and their IE types, so a field added there crosses too.
 *
 * Row: flags (u8: IPv6, uncorrelated), the flow key (two string refs, protocol, ports), a
 * presence bitmap, then one slot per field: f64 for numbers, u64 for bigints, u32 string ref.
 * A field absent on one side is `undefined` on the other (present as a key, as every sink reads
 * absent and undefined alike).
 *
 * @module
 */

import type { AggregatedRecord, ExportedFlow, FlowKey } from "../aggregation/record.ts";
import { elementByName } from "../ipfix/mod.ts";
import {
  AGGREGATED_IPV4_FIELDS,
  AGGREGATED_IPV6_FIELDS,
  POD_LABEL_FIELDS,
} from "../record/schema.ts";

/** How a field is stored in a row. */
const Slot = { Number: 0, BigInt: 1, String: 2 } as const;
type Slot = typeof Slot[keyof typeof Slot];

interface FieldSlot {
  readonly name: string;
  readonly slot: Slot;
  readonly offset: number;
}

const MAGIC = 0x46414231; // "FAB1"
const HEADER_BYTES = 16;
const KEY_BYTES = 1 + 4 + 4 + 1 + 2 + 2;

function slotOf(name: string): Slot {
  const ie = elementByName(name);
  if (ie === undefined) throw new Error(`batch: unknown information element ${name}`);
  switch (ie.type) {
    case "unsigned64":
    case "signed64":
      return Slot.BigInt;
    case "string":
    case "ipv4Address":
    case "ipv6Address":
      return Slot.String;
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
    offset += slot === Slot.String ? 4 : 8;
    return f;
  });
})();

/** Bytes of one row. */
export const ROW_BYTES: number = FIELDS.length === 0
  ? KEY_BYTES
  : FIELDS[FIELDS.length - 1].offset + (FIELDS[FIELDS.length - 1].slot === Slot.String ? 4 : 8);

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
) => void;
type RowReader = (
  v: DataView,
  bytes: Uint8Array,
  base: number,
  strings: readonly (string | undefined)[],
) => AggregatedRecord;

function compileWriter(): RowWriter {
  const lines: string[] = [];
  const masks = new Array(BITMAP_BYTES).fill(0).map((_, i) => `m${i}`);
  lines.push(`let x; let ${masks.map((m) => `${m} = 0`).join(", ")};`);
  FIELDS.forEach((f, i) => {
    const at = `base + ${f.offset}`;
    // Strings repeat from one flow to the next (namespaces, Nodes, policies): the previous
    // value of the field is checked by identity before the batch's table is consulted.
    const put = f.slot === Slot.String
      ? `if (x !== last[${i}]) { last[${i}] = x; lastRef[${i}] = ref(String(x)); } ` +
        `v.setUint32(${at}, lastRef[${i}], true);`
      : f.slot === Slot.BigInt
      ? `v.setBigUint64(${at}, typeof x === "bigint" ? x : BigInt(x), true);`
      : `v.setFloat64(${at}, +x, true);`;
    lines.push(
      `x = rec[${JSON.stringify(f.name)}]; if (x !== undefined) { m${i >> 3} |= ${
        1 << (i & 7)
      }; ${put} }`,
    );
  });
  masks.forEach((m, i) => lines.push(`rows[base + ${KEY_BYTES + i}] = ${m};`));
  return new Function(
    "v",
    "rows",
    "base",
    "rec",
    "ref",
    "last",
    "lastRef",
    lines.join("\n"),
  ) as RowWriter;
}

function compileReader(): RowReader {
  const lines: string[] = [];
  for (let i = 0; i < BITMAP_BYTES; i++) {
    lines.push(`const m${i} = bytes[base + ${KEY_BYTES + i}];`);
  }
  const props = FIELDS.map((f, i) => {
    const at = `base + ${f.offset}`;
    const get = f.slot === Slot.String
      ? `strings[v.getUint32(${at}, true)]`
      : f.slot === Slot.BigInt
      ? `v.getBigUint64(${at}, true)`
      : `v.getFloat64(${at}, true)`;
    return `${JSON.stringify(f.name)}: (m${i >> 3} & ${1 << (i & 7)}) !== 0 ? ${get} : undefined,`;
  });
  lines.push(`return {\n${props.join("\n")}\n};`);
  return new Function("v", "bytes", "base", "strings", lines.join("\n")) as RowReader;
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
  /** Per field: the last string written and its table index (reset with the table). */
  readonly #last: unknown[] = new Array(FIELDS.length).fill(undefined);
  readonly #lastRef: number[] = new Array(FIELDS.length).fill(0);

  /** A writer for at most `capacity` rows. */
  constructor(capacity: number) {
    this.#capacity = capacity;
    this.#rows = new Uint8Array(capacity * ROW_BYTES);
    this.#view = new DataView(this.#rows.buffer);
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

  /** Appends one flow (the caller checks {@linkcode full} first). */
  add(flow: ExportedFlow): void {
    const v = this.#view;
    const base = this.#count * ROW_BYTES;
    const key = flow.key;
    v.setUint8(base, (flow.isIPv6 ? 1 : 0) | (flow.uncorrelated ? 2 : 0));
    v.setUint32(base + 1, this.#ref(key.sourceAddress), true);
    v.setUint32(base + 5, this.#ref(key.destinationAddress), true);
    v.setUint8(base + 9, key.protocol);
    v.setUint16(base + 10, key.sourcePort, true);
    v.setUint16(base + 12, key.destinationPort, true);
    writeRow(
      v,
      this.#rows,
      base,
      flow.record as unknown as Record<string, unknown>,
      this.#refFn,
      this.#last,
      this.#lastRef,
    );
    this.#count++;
  }

  /** The batch as one transferable buffer; the writer is empty afterwards. */
  finish(): ArrayBuffer {
    const rowsBytes = this.#count * ROW_BYTES;
    // UTF-8 needs at most 3 bytes per UTF-16 code unit, plus a 4-byte length per string.
    const stringsCap = this.#stringChars * 3 + this.#stringList.length * 4;
    const out = new Uint8Array(HEADER_BYTES + rowsBytes + stringsCap);
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
    return out.buffer.slice(0, at);
  }
}

/** Number of flows in a batch buffer (header only). */
export function batchCount(buf: ArrayBuffer): number {
  return new DataView(buf).getUint32(4, true);
}

/** Decodes a batch into flows, in order. Throws on a buffer that is not a batch. */
export function readBatch(buf: ArrayBuffer): ExportedFlow[] {
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
    const len = v.getUint32(at, true);
    strings.push(decoder.decode(bytes.subarray(at + 4, at + 4 + len)));
    at += 4 + len;
  }
  const out: ExportedFlow[] = new Array(count);
  for (let r = 0; r < count; r++) {
    const base = HEADER_BYTES + r * ROW_BYTES;
    const flags = v.getUint8(base);
    const key: FlowKey = {
      sourceAddress: strings[v.getUint32(base + 1, true)] ?? "",
      destinationAddress: strings[v.getUint32(base + 5, true)] ?? "",
      protocol: v.getUint8(base + 9),
      sourcePort: v.getUint16(base + 10, true),
      destinationPort: v.getUint16(base + 12, true),
    };
    out[r] = {
      key,
      record: readRow(v, bytes, base, strings),
      isIPv6: (flags & 1) !== 0,
      uncorrelated: (flags & 2) !== 0,
    };
  }
  return out;
}
