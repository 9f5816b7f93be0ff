/**
 * Binary batches of exported flows, the form in which records cross from the export loop to a
 * sink's worker: one `ArrayBuffer` per batch, transferred (not cloned), holding fixed-size
 * rows plus a table of the batch's distinct strings (namespaces, Node and Pod names repeat a
 * lot, so each is encoded once per batch). The row layout is derived from the record schema's
 * FA export template fields and their IE types, so a field added there crosses too.
 *
 * Row: flags (u8: IPv6, uncorrelated), the flow key (two string refs, protocol, ports), a
 * presence bitmap, then one slot per field: f64 for numbers, u64 for bigints, u32 string ref.
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
    const rec = flow.record as unknown as Record<string, unknown>;
    const bitmap = base + KEY_BYTES;
    this.#rows.fill(0, bitmap, bitmap + BITMAP_BYTES);
    for (let i = 0; i < FIELDS.length; i++) {
      const f = FIELDS[i];
      const value = rec[f.name];
      if (value === undefined) continue;
      this.#rows[bitmap + (i >> 3)] |= 1 << (i & 7);
      const at = base + f.offset;
      if (f.slot === Slot.String) {
        v.setUint32(at, this.#ref(String(value)), true);
      } else if (f.slot === Slot.BigInt) {
        v.setBigUint64(at, typeof value === "bigint" ? value : BigInt(value as number), true);
      } else {
        v.setFloat64(at, Number(value), true);
      }
    }
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
    const rec: Record<string, unknown> = {};
    const bitmap = base + KEY_BYTES;
    for (let i = 0; i < FIELDS.length; i++) {
      if ((bytes[bitmap + (i >> 3)] & (1 << (i & 7))) === 0) continue;
      const f = FIELDS[i];
      const p = base + f.offset;
      rec[f.name] = f.slot === Slot.String
        ? strings[v.getUint32(p, true)]
        : f.slot === Slot.BigInt
        ? v.getBigUint64(p, true)
        : v.getFloat64(p, true);
    }
    out[r] = {
      key,
      record: rec as unknown as AggregatedRecord,
      isIPv6: (flags & 1) !== 0,
      uncorrelated: (flags & 2) !== 0,
    };
  }
  return out;
}
