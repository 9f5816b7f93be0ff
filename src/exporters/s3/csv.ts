/**
 * The S3 object line (exporters.md §4.2): the 51 columns of the record schema's S3 projection,
 * joined with `,`, newline-terminated, no header and no quoting, except that the Pod label
 * columns are wrapped in single quotes. Text columns go through `clean` (`../text.ts`, as in the
 * flow log) and the label JSON through `quotedJson`: upstream wrote them raw, so a crafted Pod
 * name from the wire (a `\n` then a whole line) forged flow rows, and a `,` shifted columns
 * (found by review). Valid Kubernetes names are written unchanged. Integers in decimal (u64 exact, from bigint), timestamps
 * in unix seconds, and `timeInserted` the wall-clock second at which the sink took the record.
 *
 * Two renderings of the same line, both generated once from the schema (straight-line code, as
 * the flat record is), so a column added to the schema's S3 projection appears in both without
 * another list:
 * - {@linkcode CsvWriter} (the sink's hot path) writes the line's UTF-8 bytes straight from the
 *   exported record into the object's buffer: no flat record, no strings built per column,
 *   digits written in place two at a time, texts copied from a bounded cache of their bytes;
 * - {@linkcode formatCsvLine} builds the line as a string through the flat record (the
 *   reference the tests compare the writer with, byte for byte).
 *
 * @module
 */

import type { ExportedFlow } from "../../aggregation/record.ts";
import { type FlatRecord, ipText, labels, toFlatRecord } from "../flat_record.ts";
import { ieName, RECORD_SCHEMA, S3_COLUMNS, type SchemaRow } from "../../record/schema.ts";
import { clean, quotedJson } from "../text.ts";

/** Columns the flat record does not carry: the sink fills them at add time. */
const ADD_TIME_COLUMNS: ReadonlySet<string> = new Set(
  RECORD_SCHEMA.filter((r) => r[1] === "dateTimeSeconds" && r[2] === "sink").map((r) => r[0]),
);
/** Columns written between single quotes (the Pod label JSON). */
const QUOTED_COLUMNS: ReadonlySet<string> = new Set(
  RECORD_SCHEMA.filter((r) => r[2] === "label").map((r) => r[0]),
);

/** The schema row of S3 column `name`. */
function rowOf(name: string): SchemaRow | undefined {
  return RECORD_SCHEMA.find((r) => r[0] === name);
}

function columnSource(name: string): string {
  if (ADD_TIME_COLUMNS.has(name)) return "t";
  const v = `r[${JSON.stringify(name)}]`;
  if (QUOTED_COLUMNS.has(name)) return `"'" + H.quotedJson(${v}) + "'"`;
  return rowOf(name)?.[1] === "string" ? `H.clean(${v})` : v;
}

const formatFlat = new Function(
  "H",
  `return (r, t) => ${S3_COLUMNS.map(columnSource).join(' + "," + ')} + "\\n";`,
)({ clean, quotedJson }) as (r: FlatRecord, timeInsertedSeconds: number) => string;

/** The CSV line (with its `\n`) of a flat record added at `timeInsertedSeconds`. */
export function formatCsvFlat(flat: FlatRecord, timeInsertedSeconds: number): string {
  return formatFlat(flat, timeInsertedSeconds);
}

/** The CSV line (with its `\n`) of an exported flow, for cluster `clusterUuid`. */
export function formatCsvLine(
  flow: ExportedFlow,
  options: { clusterUuid: string; timeInsertedSeconds: number },
): string {
  return formatFlat(toFlatRecord(flow, options.clusterUuid), options.timeInsertedSeconds);
}

// ---------------------------------------------------------------------------------------------
// Bytes straight from the record. Every `put` writes at `p` and returns the end; a typed array
// ignores writes past its end, so a line that does not fit returns an end beyond the buffer
// (the caller retries in a larger one) instead of checking the room before every byte.

const utf8 = new TextEncoder();
const COMMA = 44;
const QUOTE = 39;
const NEWLINE = 10;

/** "00" … "99" as ASCII digit pairs: numbers are written two digits per division. */
const PAIRS = new Uint8Array(200);
for (let i = 0; i < 100; i++) {
  PAIRS[2 * i] = 48 + Math.floor(i / 10);
  PAIRS[2 * i + 1] = 48 + (i % 10);
}

/** Digits of `v`, an integer in [0, 2^31): 32-bit arithmetic only. */
function putInt31(out: Uint8Array, p: number, v: number): number {
  const len = v < 10
    ? 1
    : v < 100
    ? 2
    : v < 1000
    ? 3
    : v < 10000
    ? 4
    : v < 100000
    ? 5
    : v < 1000000
    ? 6
    : v < 10000000
    ? 7
    : v < 100000000
    ? 8
    : v < 1000000000
    ? 9
    : 10;
  let i = p + len;
  while (v >= 100) {
    const q = (v / 100) | 0;
    const r = (v - q * 100) << 1;
    out[--i] = PAIRS[r + 1];
    out[--i] = PAIRS[r];
    v = q;
  }
  if (v >= 10) {
    out[--i] = PAIRS[(v << 1) + 1];
    out[--i] = PAIRS[v << 1];
  } else out[--i] = 48 + v;
  return p + len;
}

/** Exactly 8 digits of `v` in [0, 10^8), zero-padded. */
function put8Digits(out: Uint8Array, p: number, v: number): number {
  for (let i = p + 6; i >= p; i -= 2) {
    const q = (v / 100) | 0;
    const r = (v - q * 100) << 1;
    out[i] = PAIRS[r];
    out[i + 1] = PAIRS[r + 1];
    v = q;
  }
  return p + 8;
}

/** The decimal digits of a non-negative safe integer; anything else as `String(v)`. */
function putNum(out: Uint8Array, p: number, v: number): number {
  if ((v | 0) === v && v >= 0) return putInt31(out, p, v);
  if (!(v >= 0 && v <= Number.MAX_SAFE_INTEGER) || v !== Math.floor(v)) {
    return putStr(out, p, String(v));
  }
  // Below 2^53: the high part is below 2^31 and the low eight digits fit 32-bit arithmetic.
  const hi = Math.floor(v / 100000000);
  return put8Digits(out, putInt31(out, p, hi), v - hi * 100000000);
}

/** A u64 counter (bigint, exact beyond 2^53); a number is written as one. */
function putU64(out: Uint8Array, p: number, v: bigint | number): number {
  if (typeof v !== "bigint") return putNum(out, p, v);
  // Number() rounds values beyond 2^53 up to at least 2^53: those take the exact text path.
  const n = Number(v);
  return n >= 0 && n <= Number.MAX_SAFE_INTEGER ? putNum(out, p, n) : putStr(out, p, v.toString());
}

/**
 * The UTF-8 bytes of texts seen recently (Pod, namespace, node and policy names, labels,
 * addresses repeat across flows): copying cached bytes costs less than encoding each time.
 * Bounded: cleared when full. Long texts are not cached.
 */
const encoded = new Map<string, Uint8Array>();
const ENCODED_MAX = 16384;
const ENCODED_MAX_CHARS = 256;

/** Text as UTF-8. */
function putStr(out: Uint8Array, p: number, s: string): number {
  const n = s.length;
  if (n > ENCODED_MAX_CHARS) return putUtf8(out, p, s);
  let b = encoded.get(s);
  if (b === undefined) {
    b = utf8.encode(s);
    if (encoded.size >= ENCODED_MAX) encoded.clear();
    encoded.set(s, b);
  }
  const len = b.length;
  if (p + len > out.length) return p + len;
  for (let i = 0; i < len; i++) out[p + i] = b[i];
  return p + len;
}

function putUtf8(out: Uint8Array, p: number, s: string): number {
  // UTF-8 takes at most 3 bytes per UTF-16 code unit; without that room, report no fit.
  if (p + s.length * 3 > out.length) return out.length + s.length * 3;
  return p + utf8.encodeInto(s, out.subarray(p)).written;
}

/** Bytes (the cluster UUID, encoded once). */
function putBytes(out: Uint8Array, p: number, b: Uint8Array): number {
  if (p + b.length > out.length) return p + b.length;
  out.set(b, p);
  return p + b.length;
}

/** The put call of one S3 column over the exported record `r`. */
function putSource(name: string): string {
  if (ADD_TIME_COLUMNS.has(name)) return "p = H.putNum(out, p, t);";
  if (name === "clusterUUID") return "p = H.putBytes(out, p, u);";
  const row: SchemaRow = rowOf(name)!;
  const ie = JSON.stringify(ieName(row, false));
  if (row[1] === "ipAddress") {
    return `p = H.putStr(out, p, H.ipText(r[${ie}] ?? r[${JSON.stringify(ieName(row, true))}]));`;
  }
  if (row[2] === "label") {
    return `out[p++] = ${QUOTE}; p = H.putStr(out, p, H.quotedJson(H.labels(r[${ie}]))); out[p++] = ${QUOTE};`;
  }
  if (row[1] === "unsigned64") return `p = H.putU64(out, p, r[${ie}] ?? 0n);`;
  if (row[1] === "string") return `p = H.putStr(out, p, H.clean(r[${ie}] ?? ""));`;
  return `p = H.putNum(out, p, r[${ie}] ?? 0);`;
}

const writeLine = new Function(
  "H",
  `return (r, t, u, out, p) => {\n${
    S3_COLUMNS.map(putSource).join(`\n  out[p++] = ${COMMA};\n`)
  }\n  out[p++] = ${NEWLINE};\n  return p;\n};`,
)({ putNum, putU64, putStr, putBytes, ipText, labels, clean, quotedJson }) as (
  r: ExportedFlow["record"],
  t: number,
  u: Uint8Array,
  out: Uint8Array,
  p: number,
) => number;

/** Writes CSV lines as UTF-8 bytes straight into a buffer, for one cluster UUID. */
export class CsvWriter {
  readonly #uuid: Uint8Array;

  /** A writer of lines carrying `clusterUuid`. */
  constructor(clusterUuid: string) {
    this.#uuid = utf8.encode(clusterUuid);
  }

  /**
   * Writes the line of `flow` (with its `\n`), taken at `timeInsertedSeconds`, into `out` at
   * `pos` and returns where it ends. A result beyond `out.length` means the line did not fit:
   * the bytes after `pos` are then meaningless, and the caller writes it again into more room.
   */
  write(flow: ExportedFlow, timeInsertedSeconds: number, out: Uint8Array, pos: number): number {
    return writeLine(flow.record, timeInsertedSeconds, this.#uuid, out, pos);
  }
}
