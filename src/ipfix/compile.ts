/**
 * Template compiler: turns a template record into a record decoder generated once per distinct
 * field list (`new Function`, after the template's first data set has been decoded by a cheap
 * interpreting tier), so decoding a record is straight-line code that reads each field
 * from the byte array at a known offset and builds one object literal of fixed shape: no per-field
 * closures, lookups or intermediate objects. Field lengths come from the template, never from the
 * registry (reduced-size encoding, RFC 7011 §6.2); lengths illegal for the type are rejected here
 * so the generated code never has to check them.
 *
 * Bounded against hostile peers: templates with the same field list share one decoder through
 * {@linkcode TemplateLayouts} (whose distinct lists are bounded in fields), generated code exists
 * only for templates of at most {@linkcode GENERATED_MAX_FIELDS} fields and for at most
 * {@linkcode MAX_GENERATED_LAYOUTS} layouts at once (the rest keep the interpreting tier, linear
 * in the input), and strings can be cut to a byte bound.
 */

import type { DataRecord, DataType, FieldSpecifier, FieldValue, TemplateRecord } from "./types.ts";
import { VARIABLE_LENGTH } from "./types.ts";
import { lookupElement, registryGeneration } from "./registry.ts";
import { formatIPv6, ipv4Text } from "./ip.ts";
import { type DecodeErrorReason, IpfixDecodeError } from "./errors.ts";

/**
 * Decodes records back to back from `bytes[off..end)` and appends them to `out`, stopping when
 * fewer than the minimum record length remain (the rest is padding) or after `max` records.
 * Returns the offset after the last decoded record. Throws IpfixDecodeError (badRecord,
 * badVarLength) when a record does not fit; records appended before the throw stay in `out`.
 */
export type RecordsDecoder = (
  bytes: Uint8Array,
  off: number,
  end: number,
  out: DataRecord[],
  max?: number,
) => number;

/**
 * Decodes the one record at `bytes[off..end)` into `target`, assigning each of the decoder's
 * `only` names (see {@linkcode CompileOptions.only}; `undefined` for an IE the template lacks),
 * and returns the offset after it. Throws like a {@linkcode RecordsDecoder}; `target` may then
 * hold some fields of the bad record. Allocates nothing but the record's new string values.
 */
export type RecordFiller = (
  bytes: Uint8Array,
  off: number,
  end: number,
  target: DataRecord,
) => number;

/**
 * The value an IE of {@linkcode CompileOptions.presence} decodes to when it is not empty
 * (it is `""` when empty): a marker, never the IE's text.
 */
export const PRESENT = "(present)";

/** A template with its decoder, built once when the template is registered. */
export interface CompiledTemplate {
  /** The template as received. */
  readonly template: TemplateRecord;
  /** True for an options template (scopeFieldCount > 0). */
  readonly options: boolean;
  /** Smallest possible record: fixed lengths + 1 byte per variable-length field. */
  readonly minRecordLength: number;
  /**
   * Length of every record when the template has no variable-length field (the next record
   * boundary is known, so a bad record can be skipped); 0 otherwise.
   */
  readonly fixedRecordLength: number;
  /** Record key of each field in template order (registry name or `"<pen>/<id>"`). */
  readonly names: readonly string[];
  /**
   * Fields whose record key repeats an earlier field's (RFC 7011 allows an element twice): a
   * record is keyed by name, so only the first one's value is kept (upstream's first match).
   */
  readonly duplicateFields: number;
  /** The generated decoder (see {@linkcode RecordsDecoder}). */
  readonly decodeRecords: RecordsDecoder;
  /** With {@linkcode CompileOptions.only}: the one-record decoder into a given object. */
  readonly fillRecord?: RecordFiller;
}

const utf8 = new TextDecoder("utf-8", { fatal: false });

// Strings are decoded without a shared intern table. A table of every distinct value (65,536
// slots) made each lookup of a Pod name, one of tens of thousands, two dependent cache misses
// (slot, then the string to compare with): a third of the realistic decode's time. Instead each
// string field of a decoder remembers its last value (below), which is the value of most
// records for most fields (tcpState, namespaces, Node and policy names), and any other value is
// built afresh: short ASCII from a reused code-unit array, several times cheaper than
// TextDecoder, the rest by TextDecoder.
const ASCII_MAX_LEN = 64;
const codeUnits: number[][] = Array.from(
  { length: ASCII_MAX_LEN + 1 },
  (_, n) => new Array<number>(n).fill(0),
);

/** The `n` bytes at `o` decoded as UTF-8 (invalid sequences as U+FFFD). */
function str(bytes: Uint8Array, o: number, n: number): string {
  if (n === 0) return "";
  if (n > ASCII_MAX_LEN) return utf8.decode(bytes.subarray(o, o + n));
  const a = codeUnits[n];
  for (let i = 0; i < n; i++) {
    const c = bytes[o + i];
    if (c > 0x7f) return utf8.decode(bytes.subarray(o, o + n)); // non-ASCII: real UTF-8 decode
    a[i] = c;
  }
  return String.fromCharCode.apply(null, a);
}

// Each string field of a decoder remembers the bytes and the string of its last values, one per
// way (4, picked by the length and the first and last bytes, so a field's few alternating
// values, such as the namespaces or Nodes of flows from several Agents sharing one layout, each
// keep theirs): a value whose bytes equal its way's is that string again (the same object),
// after comparing the length and bytes that are in cache, bytes against bytes (twice as fast per
// character as against the string's code units, and exact for any bytes, invalid UTF-8
// included). Only values of at most LAST_MAX_LEN bytes are remembered, and only by generated
// decoders (the generic tier builds every value), so whatever peers send this holds at most
// MAX_GENERATED_LAYOUTS layouts x GENERATED_MAX_FIELDS string fields x 4 ways x (LAST_MAX_LEN
// bytes + one string of as many characters), about 5 MB per set of layouts (an Agent's layout:
// 15 string fields, under 10 KB), about what the shared intern table it replaces could hold (65,536
// strings of up to 32 characters).
const LAST_MAX_LEN = 64;
/** Values remembered per string field: 1 << LAST_WAYS_LOG2. */
const LAST_WAYS_LOG2 = 2;
const LAST_WAY_MASK = (1 << LAST_WAYS_LOG2) - 1;

/**
 * The last values of the string fields of one decoder (see LAST_MAX_LEN), slot
 * `j = (field << LAST_WAYS_LOG2) | way`.
 */
interface LastStrings {
  /** Slot j's bytes at `j * LAST_MAX_LEN`. */
  readonly bytes: Uint8Array;
  /** Slot j's length; 0 while it has none (an empty value never gets here). */
  readonly lens: Uint8Array;
  /** Slot j's string. */
  readonly strs: string[];
}

function lastStrings(fields: number): LastStrings {
  const slots = fields << LAST_WAYS_LOG2;
  return {
    bytes: new Uint8Array(slots * LAST_MAX_LEN),
    lens: new Uint8Array(slots),
    strs: new Array<string>(slots).fill(""),
  };
}

/** Whether `a[ao..ao+n)` and `b[bo..bo+n)` hold the same bytes. */
function eq(a: Uint8Array, ao: number, b: Uint8Array, bo: number, n: number): boolean {
  for (let i = 0; i < n; i++) if (a[ao + i] !== b[bo + i]) return false;
  return true;
}

/**
 * The `n` (>= 1) bytes at `o` as a string when they are not slot `j`'s (lastExpr compared them):
 * {@linkcode str}'s, remembered in slot `j` when short enough.
 */
function strMiss(bytes: Uint8Array, o: number, n: number, last: LastStrings, j: number): string {
  const s = str(bytes, o, n);
  if (n <= LAST_MAX_LEN) {
    const at = j * LAST_MAX_LEN;
    const kept = last.bytes;
    for (let i = 0; i < n; i++) kept[at + i] = bytes[o + i]; // no subarray: an allocation
    last.lens[j] = n;
    last.strs[j] = s;
  }
  return s;
}

/**
 * Strings kept longer than a limit so far (see {@linkcode CompileOptions.maxStringBytes}); the
 * decoder reads it before and after a data set. One module-level count instead of a counter
 * argument: decoding is synchronous, so the difference is exactly that data set's.
 */
let truncatedStrings = 0;

/** Strings truncated by every decoder of this module since start (monotonic). */
export function stringsTruncatedTotal(): number {
  return truncatedStrings;
}

/**
 * The first `max` bytes (fewer, ending on a UTF-8 character boundary) of a string
 * longer than `max`, counted in {@linkcode stringsTruncatedTotal}.
 */
function strCut(bytes: Uint8Array, o: number, max: number): string {
  truncatedStrings++;
  let k = max;
  // Back off continuation bytes (10xxxxxx) so a multi-byte character is never split.
  while (k > 0 && k > max - 3 && (bytes[o + k] & 0xc0) === 0x80) k--;
  if ((bytes[o + k] & 0xc0) === 0x80) k = max; // not UTF-8 after all: cut where asked
  return str(bytes, o, k);
}

/**
 * The length of the fixed-length string field of `n` bytes at `o` without its trailing NUL
 * bytes: an exporter pads a shorter value with them (this codec's encoder does), and they are
 * no part of the value (as tshark reads them).
 */
function strEnd(bytes: Uint8Array, o: number, n: number): number {
  while (n > 0 && bytes[o + n - 1] === 0) n--;
  return n;
}

/** A fixed-length string field's value: without its NUL padding, cut to `max` bytes. */
function strFixed(bytes: Uint8Array, o: number, n: number, max: number): string {
  const k = strEnd(bytes, o, n);
  return k > max ? strCut(bytes, o, max) : str(bytes, o, k);
}

/** The big-endian u32 at `bytes[o..o + 4)` (plain byte reads: no DataView per message). */
export function u32(bytes: Uint8Array, o: number): number {
  return bytes[o] * 16777216 + ((bytes[o + 1] << 16) | (bytes[o + 2] << 8) | bytes[o + 3]);
}

function ip4(bytes: Uint8Array, o: number): string {
  return ipv4Text(u32(bytes, o));
}

// IPv6 flows repeat their addresses as well: the same direct-mapped cache by value, so a hit
// returns the same string (no formatting, no allocation, and downstream Maps keyed by the text
// find its hash already computed).
const IP6_SLOTS_LOG2 = 12;
const ip6Words = new Int32Array(4 << IP6_SLOTS_LOG2);
const ip6Text: (string | undefined)[] = new Array<string | undefined>(1 << IP6_SLOTS_LOG2).fill(
  undefined,
);

function ip6(bytes: Uint8Array, o: number): string {
  const a = (bytes[o] << 24) | (bytes[o + 1] << 16) | (bytes[o + 2] << 8) | bytes[o + 3];
  const b = (bytes[o + 4] << 24) | (bytes[o + 5] << 16) | (bytes[o + 6] << 8) | bytes[o + 7];
  const c = (bytes[o + 8] << 24) | (bytes[o + 9] << 16) | (bytes[o + 10] << 8) | bytes[o + 11];
  const d = (bytes[o + 12] << 24) | (bytes[o + 13] << 16) | (bytes[o + 14] << 8) |
    bytes[o + 15];
  const h = Math.imul(
    a ^ Math.imul(b, 0x85ebca6b) ^ Math.imul(c, 0xc2b2ae35) ^ Math.imul(d, 0x27d4eb2f),
    0x9e3779b1,
  ) >>> (32 - IP6_SLOTS_LOG2);
  const k = h << 2;
  const hit = ip6Text[h];
  if (
    hit !== undefined && ip6Words[k] === a && ip6Words[k + 1] === b && ip6Words[k + 2] === c &&
    ip6Words[k + 3] === d
  ) return hit;
  const s = formatIPv6(bytes, o);
  ip6Words[k] = a;
  ip6Words[k + 1] = b;
  ip6Words[k + 2] = c;
  ip6Words[k + 3] = d;
  ip6Text[h] = s;
  return s;
}

function uNum(bytes: Uint8Array, o: number, n: number): number {
  let v = 0;
  for (let i = 0; i < n; i++) v = v * 256 + bytes[o + i];
  return v;
}

// BigInts are immutable, so small values can be shared: packet counters (and short flows'
// octet counters) are mostly below 16384, and each record carries eight u64 counters. Made on
// first use (the collector's wire-number mode never needs them).
const SMALL_BIGINTS: (bigint | undefined)[] = new Array<bigint | undefined>(16384).fill(undefined);

function smallBigInt(v: number): bigint {
  let b = SMALL_BIGINTS[v];
  if (b === undefined) {
    b = BigInt(v);
    SMALL_BIGINTS[v] = b;
  }
  return b;
}

// Counters mostly fit in 32 bits: one BigInt allocation instead of DataView.getBigUint64 (and no
// DataView per message at all).
function u64(bytes: Uint8Array, o: number): bigint {
  const hi = u32(bytes, o);
  const lo = u32(bytes, o + 4);
  if (hi === 0) return lo < 16384 ? smallBigInt(lo) : BigInt(lo);
  if (hi < 0x200000) return BigInt(hi * 4294967296 + lo); // < 2^53: exact as a double
  return (BigInt(hi) << 32n) | BigInt(lo);
}

/**
 * An unsigned64 value in wire-number mode ({@linkcode CompileOptions.wireNumbers}): a number
 * below 2^53 (exact, no allocation under 2^31), a bigint at or above it.
 */
function u64n(bytes: Uint8Array, o: number, n: number): number | bigint {
  if (n <= 6) return uNum(bytes, o, n);
  const hi = uNum(bytes, o, n - 4);
  const lo = u32(bytes, o + n - 4);
  if (hi < 0x200000) return hi * 4294967296 + lo;
  return (BigInt(hi) << 32n) | BigInt(lo);
}

function uBig(bytes: Uint8Array, o: number, n: number): bigint {
  if (n <= 6) return BigInt(uNum(bytes, o, n));
  return (BigInt(uNum(bytes, o, n - 4)) << 32n) | BigInt(u32(bytes, o + n - 4));
}

function sInt(bytes: Uint8Array, o: number, n: number): number {
  const u = uNum(bytes, o, n);
  const half = 2 ** (8 * n - 1);
  return u >= half ? u - 2 * half : u;
}

function sBig(bytes: Uint8Array, o: number, n: number): bigint {
  return BigInt.asIntN(8 * n, uBig(bytes, o, n));
}

// Floats are rare in IPFIX flow records; read them through a scratch big-endian view.
const scratch = new DataView(new ArrayBuffer(8));

function f32(bytes: Uint8Array, o: number): number {
  for (let i = 0; i < 4; i++) scratch.setUint8(i, bytes[o + i]);
  return scratch.getFloat32(0);
}

function f64(bytes: Uint8Array, o: number): number {
  for (let i = 0; i < 8; i++) scratch.setUint8(i, bytes[o + i]);
  return scratch.getFloat64(0);
}

function fail(reason: DecodeErrorReason, message: string): IpfixDecodeError {
  return new IpfixDecodeError(reason, message);
}

const HELPERS = {
  str,
  strEnd,
  strFixed,
  strMiss,
  eq,
  strCut,
  u32,
  u64,
  u64n,
  uBig,
  sInt,
  sBig,
  f32,
  f64,
  ip4,
  ip6,
  fail,
};

/** Allowed fixed lengths per type (RFC 7011 §6.2 reduced size for integers and float64). */
function lengthAllowed(type: DataType, len: number): boolean {
  switch (type) {
    case "unsigned8":
    case "signed8":
    case "boolean":
      return len === 1;
    case "unsigned16":
    case "signed16":
      return len >= 1 && len <= 2;
    case "unsigned32":
    case "signed32":
      return len >= 1 && len <= 4;
    case "unsigned64":
    case "signed64":
      return len >= 1 && len <= 8;
    case "float32":
    case "dateTimeSeconds":
    case "ipv4Address":
      return len === 4;
    case "float64":
      return len === 4 || len === 8;
    case "dateTimeMilliseconds":
    case "dateTimeMicroseconds":
    case "dateTimeNanoseconds":
      return len === 8;
    case "macAddress":
      return len === 6;
    case "ipv6Address":
      return len === 16;
    case "string":
    case "octetArray":
    case "basicList":
    case "subTemplateList":
    case "subTemplateMultiList":
      return len >= 1;
  }
}

function isVariableType(type: DataType | undefined): boolean {
  return type === undefined || type === "string" || type === "octetArray" ||
    type === "basicList" || type === "subTemplateList" || type === "subTemplateMultiList";
}

/**
 * JS expression reading a fixed-length value of `type` at expression `o` of `bytes`; a string
 * longer than `maxStr` is cut.
 */
function fixedExpr(
  type: DataType | undefined,
  n: number,
  o: string,
  mode: DecodeMode,
): string {
  const maxStr = mode.maxStr;
  const b = (k: number): string => k === 0 ? `bytes[${o}]` : `bytes[${o} + ${k}]`;
  // A big-endian u32 at byte k, written out: the helpers are calls the optimizer often leaves
  // uninlined in a wide template's generated code.
  const w32 = (k: number): string =>
    `(${b(k)} * 16777216 + ((${b(k + 1)} << 16) | (${b(k + 2)} << 8) | ${b(k + 3)}))`;
  switch (type) {
    case "unsigned8":
      return b(0);
    case "unsigned16":
    case "unsigned32":
    case "dateTimeSeconds":
      if (n === 1) return b(0);
      if (n === 2) return `((${b(0)} << 8) | ${b(1)})`;
      if (n === 3) return `((${b(0)} << 16) | (${b(1)} << 8) | ${b(2)})`;
      return w32(0);
    case "unsigned64":
      // Wire-number mode's usual 8-byte counter below 2^53, inline (`h`: a scratch of the
      // generated function); u64n for the rest (a bigint at or above 2^53).
      if (mode.wire && n === 8) {
        return `((h = ${w32(0)}) < 0x200000 ? h * 4294967296 + ${w32(4)} : u64n(bytes, ${o}, 8))`;
      }
      if (mode.wire) return `u64n(bytes, ${o}, ${n})`;
      return n === 8 ? `u64(bytes, ${o})` : `uBig(bytes, ${o}, ${n})`;
    case "dateTimeMilliseconds":
    case "dateTimeMicroseconds":
    case "dateTimeNanoseconds":
      return n === 8 ? `u64(bytes, ${o})` : `uBig(bytes, ${o}, ${n})`;
    case "signed8":
    case "signed16":
    case "signed32":
      if (n === 1) return `((${b(0)} << 24) >> 24)`;
      if (n === 2) return `((((${b(0)} << 8) | ${b(1)}) << 16) >> 16)`;
      if (n === 4) return `((${b(0)} << 24) | (${b(1)} << 16) | (${b(2)} << 8) | ${b(3)})`;
      return `sInt(bytes, ${o}, ${n})`;
    case "signed64":
      return `sBig(bytes, ${o}, ${n})`;
    case "float32":
      return `f32(bytes, ${o})`;
    case "float64":
      return n === 8 ? `f64(bytes, ${o})` : `f32(bytes, ${o})`;
    case "boolean":
      // RFC 7012: 1 = true, 2 = false. Any other byte is invalid; it reads as false (as
      // upstream does) rather than failing the record.
      return `(${b(0)} === 1)`;
    case "ipv4Address":
      return mode.wire ? w32(0) : `ip4(bytes, ${o})`;
    case "ipv6Address":
      return `ip6(bytes, ${o})`;
    case "string":
      return `strFixed(bytes, ${o}, ${n}, ${maxStr})`;
    default: // macAddress, octetArray, lists (kept raw), unknown elements
      return `bytes.slice(${o}, ${o} + ${n})`;
  }
}

interface Codec {
  readonly minRecordLength: number;
  readonly fixedRecordLength: number;
  readonly names: readonly string[];
  readonly duplicateFields: number;
  readonly decodeRecords: RecordsDecoder;
  readonly fillRecord: RecordFiller | undefined;
  /** Fields of the template. */
  readonly width: number;
  /** Called when no template holds the codec: it drops its generated code, never tiers up. */
  readonly retire: () => void;
  /** Whether records are decoded by generated code now. */
  readonly generated: () => boolean;
  /** The field list (shared by the templates of this layout). */
  readonly fields: readonly FieldSpecifier[];
  /** Field list and string bound as text: the layout's identity. */
  readonly signature: string;
  /** Stored templates using the codec (see {@linkcode TemplateLayouts}). */
  holders: number;
}

/** A validated template layout, shared by both decoder tiers. */
interface Plan extends DecodeMode {
  readonly id: number;
  readonly names: readonly string[];
  readonly types: readonly (DataType | undefined)[];
  readonly lengths: readonly number[];
  readonly variable: readonly boolean[];
  /** Minimum bytes still needed from field i on (fixed lengths + 1 per variable field). */
  readonly restMin: readonly number[];
  /**
   * Whether field i is decoded: the first occurrence of its key (duplicates: first one wins)
   * and one of `only`.
   */
  readonly keep: readonly boolean[];
  /** Index of field i among the string fields (its last value's), -1 for other types. */
  readonly stringSlot: readonly number[];
  /** String fields of the template. */
  readonly strings: number;
  /** Fields whose key repeats an earlier field's (never decoded). */
  readonly duplicates: number;
}

function badTemplate(t: TemplateRecord, i: number, f: FieldSpecifier, why: string): never {
  throw new IpfixDecodeError(
    "badTemplate",
    `template ${t.id} field ${i} (${f.enterprise}/${f.id} length ${f.length}): ${why}`,
  );
}

/**
 * The fewest bytes a field of template length `length` takes in a record: the length, or 1 for
 * a variable-length field (an empty value's length prefix). A record's smallest length is the
 * sum over its fields.
 */
export function minFieldLength(length: number): number {
  return length === VARIABLE_LENGTH ? 1 : length;
}

/** The smallest record of a field list (see {@linkcode minFieldLength}). */
export function minRecordLength(fields: readonly FieldSpecifier[]): number {
  let n = 0;
  for (const f of fields) n += minFieldLength(f.length);
  return n;
}

function makePlan(t: TemplateRecord, mode: DecodeMode): Plan {
  const n = t.fields.length;
  const names: string[] = [];
  const types: (DataType | undefined)[] = [];
  const lengths: number[] = [];
  const variable: boolean[] = [];
  const keep: boolean[] = [];
  const seen = new Set<string>();
  let duplicates = 0;
  for (let i = 0; i < n; i++) {
    const f = t.fields[i];
    const ie = lookupElement(f.enterprise, f.id);
    const type = ie?.type;
    const name = ie?.name ?? `${f.enterprise}/${f.id}`;
    names.push(name);
    types.push(type);
    lengths.push(f.length);
    const repeated = seen.has(name);
    if (repeated) duplicates++;
    keep.push(!repeated && (mode.only === undefined || mode.only.has(name)));
    seen.add(name);
    if (f.length === VARIABLE_LENGTH) {
      if (!isVariableType(type)) badTemplate(t, i, f, `${type} cannot be variable-length`);
      variable.push(true);
    } else {
      // A zero-length field is useless and, in an all-zero template, would let a record consume
      // no bytes at all; reject it rather than risk a non-advancing decode loop.
      if (f.length <= 0 || !Number.isInteger(f.length)) badTemplate(t, i, f, "illegal length");
      if (type !== undefined && !lengthAllowed(type, f.length)) {
        badTemplate(t, i, f, `length not allowed for ${type}`);
      }
      variable.push(false);
    }
  }
  const restMin: number[] = new Array(n + 1).fill(0);
  for (let i = n - 1; i >= 0; i--) restMin[i] = restMin[i + 1] + minFieldLength(lengths[i]);
  let strings = 0;
  const stringSlot = types.map((type) => type === "string" ? strings++ : -1);
  return {
    id: t.id,
    names,
    types,
    lengths,
    variable,
    restMin,
    keep,
    stringSlot,
    strings,
    duplicates,
    ...mode,
  };
}

/** Reads a fixed-length value (generic tier; same semantics as {@linkcode fixedExpr}). */
function readFixed(plan: Plan, i: number, b: Uint8Array, o: number): FieldValue {
  const type = plan.types[i];
  const n = plan.lengths[i];
  switch (type) {
    case "unsigned8":
    case "unsigned16":
    case "unsigned32":
    case "dateTimeSeconds":
      return uNum(b, o, n);
    case "unsigned64":
      return plan.wire ? u64n(b, o, n) : uBig(b, o, n);
    case "dateTimeMilliseconds":
    case "dateTimeMicroseconds":
    case "dateTimeNanoseconds":
      return uBig(b, o, n);
    case "signed8":
    case "signed16":
    case "signed32":
      return sInt(b, o, n);
    case "signed64":
      return sBig(b, o, n);
    case "float32":
      return f32(b, o);
    case "float64":
      return n === 8 ? f64(b, o) : f32(b, o);
    case "boolean":
      return b[o] === 1;
    case "ipv4Address":
      return plan.wire ? u32(b, o) : ip4(b, o);
    case "ipv6Address":
      return ip6(b, o);
    case "string":
      return strFixed(b, o, n, plan.maxStr);
    default:
      return b.slice(o, o + n);
  }
}

/**
 * Interpreting decoder: no code generation, so registering a template is cheap. Used for a
 * template's first data sets (TIER_UP_AFTER), for templates wider than GENERATED_MAX_FIELDS and
 * for layouts beyond the generated-code slots; templates that never carry much data (or a peer announcing
 * endless distinct templates) then never pay for `new Function`. Its cost is linear in the
 * template's width and the record's bytes.
 */
function genericDecoder(plan: Plan): RecordsDecoder {
  const n = plan.names.length;
  const blank = plan.only === undefined ? undefined : viewFactory([...plan.only]);
  const minLen = plan.restMin[0];
  return (bytes, off, end, out, max = Infinity) => {
    let count = 0;
    while (count < max && end - off >= minLen) {
      // A view starts with every `only` name, in that order: the generated tier's shape.
      const rec: DataRecord = blank === undefined ? {} : blank();
      for (let i = 0; i < n; i++) {
        let v: FieldValue | undefined;
        if (!plan.variable[i]) {
          if (plan.keep[i]) {
            v = !plan.presence?.has(plan.names[i])
              ? readFixed(plan, i, bytes, off)
              : plan.types[i] === "string" && strEnd(bytes, off, plan.lengths[i]) === 0
              ? ""
              : PRESENT;
          }
          off += plan.lengths[i];
        } else {
          let p = off + 1;
          let L = bytes[off];
          if (L === 255) {
            if (end - p < 2) throw fail("badVarLength", `field ${i}: 3-byte length prefix cut`);
            L = (bytes[p] << 8) | bytes[p + 1];
            p += 2;
          }
          if (end - p < L) throw fail("badVarLength", `field ${i}: length ${L} exceeds set`);
          v = !plan.keep[i]
            ? undefined
            : presenceOnly(plan, i)
            ? (L === 0 ? "" : PRESENT)
            : plan.types[i] !== "string"
            ? bytes.slice(p, p + L)
            : L > plan.maxStr
            ? strCut(bytes, p, plan.maxStr)
            : str(bytes, p, L);
          off = p + L;
          if (end - off < plan.restMin[i + 1]) {
            throw fail("badRecord", `record overruns set after field ${i}`);
          }
        }
        if (plan.keep[i]) rec[plan.names[i]] = v!;
      }
      out.push(rec);
      count++;
    }
    return off;
  };
}

/**
 * Expression for string field `f`'s value of `len` (>= 1) bytes at `o`: the last value of its
 * way (from the length and the first and last bytes) when the bytes are the same, else built
 * and remembered there by strMiss. Written out so that a repeated value costs no call but eq's.
 */
function lastExpr(f: number, o: string, len: string): string {
  const way = `(${len} + bytes[${o}] + 3 * bytes[${o} + ${len} - 1]) & ${LAST_WAY_MASK}`;
  return `(j = ${f << LAST_WAYS_LOG2} | (${way}), ${len} === lastLens[j] && ` +
    `eq(bytes, ${o}, lastBytes, j * ${LAST_MAX_LEN}, ${len})) ? lastStrs[j] : ` +
    `strMiss(bytes, ${o}, ${len}, last, j)`;
}

/**
 * A maker of objects with the given properties, in that order, all undefined: an object literal
 * (properties set one by one from a list would leave the object in slow dictionary mode past a
 * dozen), so every object it makes, and every record view of these names, shares one shape.
 */
export function viewFactory(names: readonly string[]): () => DataRecord {
  const props = names.map((k) => `${JSON.stringify(k)}: undefined`).join(", ");
  return new Function(`return () => ({ ${props} });`)() as () => DataRecord;
}

/** Whether variable-length field `i` of a plan decodes to {@linkcode PRESENT} or `""` only. */
function presenceOnly(plan: Plan, i: number): boolean {
  return plan.variable[i] && plan.presence?.has(plan.names[i]) === true;
}

/**
 * The straight-line code of one record: `body` reads it from `off` (advancing `off` past it)
 * into `v<i>` constants; `values` are the record's properties as [name, expression] pairs (a
 * view's: every `only` name, in that order).
 */
function recordCode(plan: Plan): { body: string; values: [string, string][] } {
  const n = plan.names.length;
  const values: [string, string][] = [];
  let body = "";
  let rel = 0; // bytes of fixed fields read since `off` was last advanced
  for (let i = 0; i < n; i++) {
    const keep = plan.keep[i];
    if (keep && plan.only === undefined) values.push([plan.names[i], `v${i}`]);
    const o = rel === 0 ? "off" : `off + ${rel}`;
    const len = plan.lengths[i];
    if (!plan.variable[i]) {
      if (keep && plan.presence?.has(plan.names[i])) {
        // A string of NUL padding only is empty; any other fixed-length value is there.
        const present = plan.types[i] === "string"
          ? `strEnd(bytes, ${o}, ${len}) === 0 ? "" : ${JSON.stringify(PRESENT)}`
          : JSON.stringify(PRESENT);
        body += `    const v${i} = ${present};\n`;
      } else if (keep && plan.types[i] === "string") {
        // Its length without the NUL padding (`z`), then as a variable-length string's.
        body += `    z = ${len};\n    while (z > 0 && bytes[${o} + z - 1] === 0) z--;\n`;
        const cut = len > plan.maxStr
          ? `z > ${plan.maxStr} ? strCut(bytes, ${o}, ${plan.maxStr}) : `
          : "";
        body += `    const v${i} = z === 0 ? "" : ${cut}${lastExpr(plan.stringSlot[i], o, "z")};\n`;
      } else if (keep) {
        body += `    const v${i} = ${fixedExpr(plan.types[i], len, o, plan)};\n`;
      }
      rel += plan.lengths[i];
      continue;
    }
    body += `    p = ${o} + 1;\n    L = bytes[${o}];\n` +
      `    if (L === 255) {\n` +
      `      if (end - p < 2) throw fail("badVarLength", "field ${i}: 3-byte length prefix cut");\n` +
      `      L = (bytes[p] << 8) | bytes[p + 1];\n      p += 2;\n    }\n` +
      `    if (end - p < L) throw fail("badVarLength", "field ${i}: length " + L + " exceeds set");\n`;
    if (keep && presenceOnly(plan, i)) {
      body += `    const v${i} = L === 0 ? "" : ${JSON.stringify(PRESENT)};\n`;
    } else if (keep) {
      // Most Antrea strings are empty: skip the call for them.
      const expr = plan.types[i] === "string"
        ? (Number.isFinite(plan.maxStr)
          ? `L === 0 ? "" : L > ${plan.maxStr} ? strCut(bytes, p, ${plan.maxStr}) : `
          : `L === 0 ? "" : `) + lastExpr(plan.stringSlot[i], "p", "L")
        : "bytes.slice(p, p + L)";
      body += `    const v${i} = ${expr};\n`;
    }
    body += `    off = p + L;\n`;
    rel = 0;
    if (plan.restMin[i + 1] > 0) {
      body += `    if (end - off < ${plan.restMin[i + 1]}) ` +
        `throw fail("badRecord", "record overruns set after field ${i}");\n`;
    }
  }
  if (rel > 0) body += `    off += ${rel};\n`;
  // A view: every `only` name, in that order, whatever the template (one object shape).
  for (const name of plan.only ?? []) {
    const i = plan.names.findIndex((x, k) => x === name && plan.keep[k]);
    values.push([name, i < 0 ? "undefined" : `v${i}`]);
  }
  return { body, values };
}

/** The helpers and last-value table of generated code (see {@linkcode generatedDecoder}). */
const GENERATED_PRELUDE = `"use strict";
const { str, strEnd, strFixed, strMiss, eq, strCut, u32, u64, u64n, uBig, sInt, sBig, f32, f64, ip4, ip6, fail } = H;
const lastBytes = last.bytes, lastLens = last.lens, lastStrs = last.strs;
`;

/** Generates the straight-line one-record filler of a view plan (see {@linkcode RecordFiller}). */
function generatedFiller(plan: Plan): RecordFiller {
  const { body, values } = recordCode(plan);
  const src = `${GENERATED_PRELUDE}return function fillRecord(bytes, off, end, target) {
  let p = 0, L = 0, j = 0, h = 0, z = 0;
  if (end - off < ${plan.restMin[0]}) throw fail("badRecord", "record overruns set");
${body}${values.map(([k, v]) => `    target[${JSON.stringify(k)}] = ${v};\n`).join("")}  return off;
};`;
  return new Function("H", "last", src)(HELPERS, lastStrings(plan.strings)) as RecordFiller;
}

/** Generates the straight-line decoder of a plan. */
function generatedDecoder(plan: Plan): RecordsDecoder {
  const { body, values } = recordCode(plan);
  const props = values.map(([k, v]) => `${JSON.stringify(k)}: ${v}`);
  const src = `${GENERATED_PRELUDE}return function decodeRecords(bytes, off, end, out, max) {
  let p = 0, L = 0, j = 0, h = 0, z = 0, count = 0;
  const limit = max === undefined ? Infinity : max;
  while (count < limit && end - off >= ${plan.restMin[0]}) {
${body}    out.push({ ${props.join(", ")} });
    count++;
  }
  return off;
};`;
  // The last values live with the generated code (dropped with it when the layout retires):
  // at most MAX_GENERATED_LAYOUTS layouts of GENERATED_MAX_FIELDS fields have them at once.
  return new Function("H", "last", src)(HELPERS, lastStrings(plan.strings)) as RecordsDecoder;
}

/**
 * Data sets decoded by the generic tier before a template gets generated code: enough that
 * short-lived or never-used templates (and floods of distinct ones) skip `new Function`, small
 * enough that a busy exporter reaches the fast path within its first messages.
 */
const TIER_UP_AFTER = 8;

/**
 * Widest template that gets generated code (an Antrea Agent's has 60 fields). The generated
 * source, and what the optimizing JIT spends on it, grow with the field count: above this width
 * a template keeps the generic decoder, whose cost stays linear in the input whatever its shape.
 */
export const GENERATED_MAX_FIELDS = 128;

/** Slots for generated decoders; a codec without one stays on the generic decoder. */
interface GeneratedSlots {
  /** Takes a slot; false when none is free. */
  take(): boolean;
  /** Gives a slot back. */
  give(): void;
}

const UNLIMITED_SLOTS: GeneratedSlots = { take: () => true, give: () => {} };

function buildCodec(
  t: TemplateRecord,
  mode: DecodeMode,
  slots: GeneratedSlots,
): Codec {
  const plan = makePlan(t, mode);
  const generic = genericDecoder(plan);
  const width = t.fields.length;
  let fast: RecordsDecoder | undefined;
  let uses = 0;
  // Too wide, or retired: generic for ever.
  let tiered = width <= GENERATED_MAX_FIELDS;
  const decodeRecords: RecordsDecoder = (bytes, off, end, out, max) => {
    if (fast === undefined) {
      if (!tiered || uses++ < TIER_UP_AFTER || !slots.take()) {
        return generic(bytes, off, end, out, max);
      }
      fast = generatedDecoder(plan);
    }
    return fast(bytes, off, end, out, max);
  };
  // A view's one-record filler: generated code of its own (a slot of its own), tiered up after
  // TIER_UP_AFTER records; the generic tier decodes into a scratch array and copies.
  let fill: RecordFiller | undefined;
  let fillUses = 0;
  const scratch: DataRecord[] = [];
  const fillRecord: RecordFiller | undefined = plan.only === undefined
    ? undefined
    : (bytes, off, end, target) => {
      if (fill === undefined) {
        if (!tiered || fillUses++ < TIER_UP_AFTER || !slots.take()) {
          scratch.length = 0;
          if (end - off < plan.restMin[0]) throw fail("badRecord", "record overruns set");
          const next = generic(bytes, off, end, scratch, 1);
          const r = scratch[0];
          for (const name of plan.only!) target[name] = r[name];
          scratch.length = 0;
          return next;
        }
        fill = generatedFiller(plan);
      }
      return fill(bytes, off, end, target);
    };
  const retire = (): void => {
    if (fast !== undefined) slots.give();
    if (fill !== undefined) slots.give();
    fast = undefined;
    fill = undefined;
    tiered = false;
  };
  const fixed = plan.variable.includes(true) ? 0 : plan.restMin[0];
  const codec: Codec = {
    generated: () => fast !== undefined,
    minRecordLength: plan.restMin[0],
    fixedRecordLength: fixed,
    names: Object.freeze(plan.names),
    duplicateFields: plan.duplicates,
    decodeRecords,
    fillRecord,
    width,
    retire,
    fields: t.fields,
    signature: signature(t, mode),
    holders: 0,
  };
  codecOf.set(decodeRecords, codec);
  return codec;
}

/**
 * Both decoder tiers of a template, for differential tests (they must agree on every input).
 * Throws like {@linkcode compileTemplate} on an invalid template.
 */
export function decoderTiers(
  t: TemplateRecord,
  options: CompileOptions = {},
): { generic: RecordsDecoder; generated: RecordsDecoder } {
  const mode = decodeMode(options);
  const plan = makePlan(t, mode);
  return { generic: genericDecoder(plan), generated: generatedDecoder(plan) };
}

/**
 * The generated one-record filler of a view (`options.only` required), for differential tests
 * against the decoders of {@linkcode decoderTiers}.
 */
export function generatedFillerOf(t: TemplateRecord, options: CompileOptions): RecordFiller {
  const plan = makePlan(t, decodeMode(options));
  if (plan.only === undefined) throw new Error("a filler needs options.only");
  return generatedFiller(plan);
}

/** Options of {@linkcode compileTemplate}. */
export interface CompileOptions {
  /**
   * Bytes kept of one string value (the `limits.maxStringBytes` bound); a longer value is cut
   * on a UTF-8 character boundary and counted in {@linkcode stringsTruncatedTotal}. Default:
   * unbounded.
   */
  readonly maxStringBytes?: number;
  /**
   * Wire-number mode, for records that go straight into the aggregation core: `unsigned64`
   * values below 2^53 decode as numbers (bigint at or above it) and `ipv4Address` values as
   * their u32 (no text), so the core neither allocates a BigInt per counter nor formats and
   * parses addresses back. Default false: bigint counters and dotted-quad text.
   */
  readonly wireNumbers?: boolean;
  /**
   * Names of the IEs a record object gets (a view of the record): the other fields are walked
   * over (their lengths checked as always) but not decoded. Every view object has all these
   * names as its properties, in this order, `undefined` for an IE its template lacks: the views
   * of every template share one object shape, so the code reading them stays monomorphic.
   * Default: every field (an object with the template's IEs, in its order).
   */
  readonly only?: readonly string[];
  /**
   * Names of IEs whose value is only told apart from empty, never read: a variable-length IE is
   * `""` when empty and {@linkcode PRESENT} otherwise, a fixed-length one {@linkcode PRESENT}
   * (but `""` for a string of NUL bytes only, which decodes as empty). For a reader that needs nothing else of them (a record view's Pod
   * names, which only tell the Node that sent it; addresses whose words it took from the bytes).
   */
  readonly presence?: readonly string[];
}

/** What a decoder depends on besides its fields and the registry. */
interface DecodeMode {
  /** Bytes kept of a string value; longer ones are cut on a UTF-8 boundary. */
  readonly maxStr: number;
  /** Wire-number mode ({@linkcode CompileOptions.wireNumbers}). */
  readonly wire: boolean;
  /** The IEs decoded ({@linkcode CompileOptions.only}); undefined: all. */
  readonly only: ReadonlySet<string> | undefined;
  /** The IEs decoded as presence only ({@linkcode CompileOptions.presence}). */
  readonly presence: ReadonlySet<string> | undefined;
}

function decodeMode(options: CompileOptions): DecodeMode {
  return {
    maxStr: options.maxStringBytes ?? Infinity,
    wire: options.wireNumbers === true,
    only: options.only === undefined ? undefined : new Set(options.only),
    presence: options.presence === undefined ? undefined : new Set(options.presence),
  };
}

const codecOf = new WeakMap<RecordsDecoder, Codec>();

/**
 * Which decoder tier a compiled template runs now: `generic` (its first data sets, templates
 * wider than {@linkcode GENERATED_MAX_FIELDS}, layouts beyond the generated-code slots) or
 * `generated`.
 */
export function decoderTier(ct: CompiledTemplate): "generic" | "generated" {
  return codecOf.get(ct.decodeRecords)?.generated() ? "generated" : "generic";
}

/**
 * One field specifier's part of a layout key (the decoder builds the key of a template's field
 * list from the wire with it, reusing one scratch specifier, before deciding to build the list;
 * see {@linkcode TemplateLayouts.shared}).
 */
export function fieldKey(f: FieldSpecifier): string {
  return `,${f.enterprise}/${f.id}/${f.length}`;
}

function signature(t: TemplateRecord, mode: DecodeMode): string {
  let key = "";
  for (const f of t.fields) key += fieldKey(f);
  return keyPrefix(mode) + key;
}

/**
 * What a layout's decoder depends on besides its fields: the registry, the string bound and
 * the number mode.
 */
function keyPrefix(mode: DecodeMode): string {
  const only = mode.only === undefined ? "" : [...mode.only].sort().join(",");
  const presence = mode.presence === undefined ? "" : [...mode.presence].sort().join(",");
  return `${registryGeneration()}|${mode.maxStr}|${mode.wire ? "w" : ""}|${only}|${presence}`;
}

function checkTemplate(t: TemplateRecord): void {
  if (!Number.isInteger(t.id) || t.id < 256 || t.id > 65535) {
    throw new IpfixDecodeError("badTemplate", `template id ${t.id} outside 256..65535`);
  }
  if (t.fields.length === 0) {
    throw new IpfixDecodeError("badTemplate", `template ${t.id} has no fields`);
  }
  if (t.scopeFieldCount < 0 || t.scopeFieldCount > t.fields.length) {
    throw new IpfixDecodeError(
      "badTemplate",
      `template ${t.id}: scope field count ${t.scopeFieldCount} of ${t.fields.length} fields`,
    );
  }
}

function compiled(t: TemplateRecord, codec: Codec): CompiledTemplate {
  return {
    template: t,
    options: t.scopeFieldCount > 0,
    minRecordLength: codec.minRecordLength,
    fixedRecordLength: codec.fixedRecordLength,
    names: codec.names,
    duplicateFields: codec.duplicateFields,
    decodeRecords: codec.decodeRecords,
    ...(codec.fillRecord === undefined ? {} : { fillRecord: codec.fillRecord }),
  };
}

/**
 * Compiles a template (id >= 256, at least one field) on its own, sharing nothing (see
 * {@linkcode TemplateLayouts} for the shared, bounded form). Throws
 * IpfixDecodeError("badTemplate") for an invalid id, an empty field list, a bad scope count or
 * an illegal field length.
 */
export function compileTemplate(
  t: TemplateRecord,
  options: CompileOptions = {},
): CompiledTemplate {
  checkTemplate(t);
  return compiled(t, buildCodec(t, decodeMode(options), UNLIMITED_SLOTS));
}

/**
 * Room promised to the templates of one template set while it is parsed, before any is stored
 * (the set is applied whole once parsed): new templates and the weight of new layouts. Bounds
 * are checked against what is held plus this, so a set of thousands of templates builds
 * decoders only for those that can be stored.
 */
export interface PendingTemplates {
  /** New templates of the set so far. */
  templates: number;
  /** Weight of the new layouts built for the set so far. */
  layoutFields: number;
}

/** Options of {@linkcode TemplateLayouts}. */
export interface TemplateLayoutsOptions extends CompileOptions {
  /** Fields of the distinct layouts held at once (default: unbounded). */
  readonly maxFields?: number;
  /** Layouts that may have generated code at once (default {@linkcode MAX_GENERATED_LAYOUTS}). */
  readonly maxGenerated?: number;
}

/**
 * What a layout's decoder costs beyond its fields (plan, closures, names), in fields: a layout
 * counts its fields plus this in {@linkcode TemplateLayouts.maxFields}, so a flood of narrow
 * distinct layouts is bounded in memory as a few wide ones are (measured: about 2 KB per
 * layout, 120 bytes per field).
 */
export const LAYOUT_OVERHEAD_FIELDS = 16;

function layoutWeight(width: number): number {
  return width + LAYOUT_OVERHEAD_FIELDS;
}

/**
 * Layouts with generated code at once, per {@linkcode TemplateLayouts}: an Agent uses 2 (IPv4
 * and IPv6), so this leaves room for other exporters while a flood of distinct layouts keeps
 * the generic decoder instead of growing compiled code.
 */
export const MAX_GENERATED_LAYOUTS = 64;

/**
 * The distinct template layouts (field lists) held by a set of template stores: templates with
 * the same field list share one decoder, one field list and its generated code (every Agent
 * announces the same one), and a layout is held while at least one stored template uses it. The
 * fields of the distinct layouts held are bounded, so template memory stays bounded whatever
 * their width; generated code is limited to {@linkcode MAX_GENERATED_LAYOUTS} layouts.
 */
export class TemplateLayouts {
  /**
   * Fields of the distinct layouts that may be held at once, each layout counting its fields
   * plus {@linkcode LAYOUT_OVERHEAD_FIELDS}.
   */
  readonly maxFields: number;
  readonly #mode: DecodeMode;
  readonly #live = new Map<string, Codec>();
  readonly #slots: GeneratedSlots;
  #fields = 0;

  /** An empty set of layouts. */
  constructor(options: TemplateLayoutsOptions = {}) {
    this.maxFields = options.maxFields ?? Infinity;
    this.#mode = decodeMode(options);
    const maxGenerated = options.maxGenerated ?? MAX_GENERATED_LAYOUTS;
    let generated = 0;
    this.#slots = {
      take: () => generated < maxGenerated && ++generated > 0,
      give: () => void generated--,
    };
  }

  /** Fields of the distinct layouts held now (with each one's overhead). */
  get fields(): number {
    return this.#fields;
  }

  /** Distinct layouts held now. */
  get size(): number {
    return this.#live.size;
  }

  /**
   * Compiles a template, reusing a held layout's decoder and field list when the field list is
   * the same. Nothing is held until {@linkcode hold}. Undefined when the layout is new and would
   * not fit in {@linkcode maxFields} with the `pending` fields of templates compiled but not yet
   * held (checked before building its decoder, so a flood of distinct layouts costs no decoder
   * each; a new layout adds its weight to `pending`). Throws like {@linkcode compileTemplate}.
   */
  compile(t: TemplateRecord, pending?: PendingTemplates): CompiledTemplate | undefined {
    checkTemplate(t);
    const codec = this.#live.get(signature(t, this.#mode));
    if (codec !== undefined) {
      return compiled(
        { id: t.id, fields: codec.fields, scopeFieldCount: t.scopeFieldCount },
        codec,
      );
    }
    if (!this.fits(t.fields.length, pending)) return undefined;
    // Built first: an invalid template throws with nothing promised.
    const ct = compiled(t, buildCodec(t, this.#mode, this.#slots));
    if (pending !== undefined) pending.layoutFields += layoutWeight(t.fields.length);
    return ct;
  }

  /**
   * The template `t` compiled on the held layout whose field list has the key `fields` (the
   * {@linkcode fieldKey} parts of its specifiers, in order), sharing its decoder and field list;
   * undefined when no such layout is held. Builds nothing per field.
   */
  shared(
    t: { id: number; scopeFieldCount: number },
    fields: string,
  ): CompiledTemplate | undefined {
    const codec = this.#live.get(keyPrefix(this.#mode) + fields);
    if (codec === undefined) return undefined;
    return compiled({ id: t.id, fields: codec.fields, scopeFieldCount: t.scopeFieldCount }, codec);
  }

  /** Whether a new layout of `width` fields fits, with the `pending` ones of the current set. */
  fits(width: number, pending?: PendingTemplates): boolean {
    return this.#fields + (pending?.layoutFields ?? 0) + layoutWeight(width) <= this.maxFields;
  }

  /**
   * Holds the layout of a compiled template (one more template uses it) and returns the
   * compiled template to store: `ct`, or the same template on the identical layout held
   * since `ct` was compiled. Undefined, holding nothing, when it is a new layout whose fields
   * would exceed {@linkcode maxFields}. A compiled template whose decoder is not one of this
   * module's (a caller's own) is returned as is, outside the bound.
   */
  hold(ct: CompiledTemplate): CompiledTemplate | undefined {
    const codec = codecOf.get(ct.decodeRecords);
    if (codec === undefined) return ct;
    if (codec.holders > 0) {
      codec.holders++;
      return ct;
    }
    const live = this.#live.get(codec.signature);
    if (live !== undefined) {
      live.holders++;
      const t = ct.template;
      return compiled({ id: t.id, fields: live.fields, scopeFieldCount: t.scopeFieldCount }, live);
    }
    if (this.#fields + layoutWeight(codec.width) > this.maxFields) return undefined;
    this.#live.set(codec.signature, codec);
    this.#fields += layoutWeight(codec.width);
    codec.holders++;
    return ct;
  }

  /** Releases a layout held by {@linkcode hold}; the last release drops its generated code. */
  release(ct: CompiledTemplate): void {
    const codec = codecOf.get(ct.decodeRecords);
    if (codec === undefined || codec.holders === 0) return;
    if (--codec.holders > 0) return;
    this.#live.delete(codec.signature);
    this.#fields -= layoutWeight(codec.width);
    codec.retire();
  }
}

/** True when two templates have the same id, scope count and field list. */
export function sameTemplate(a: TemplateRecord, b: TemplateRecord): boolean {
  if (a.id !== b.id || a.scopeFieldCount !== b.scopeFieldCount) return false;
  if (a.fields.length !== b.fields.length) return false;
  for (let i = 0; i < a.fields.length; i++) {
    const x = a.fields[i];
    const y = b.fields[i];
    if (x.id !== y.id || x.enterprise !== y.enterprise || x.length !== y.length) return false;
  }
  return true;
}
