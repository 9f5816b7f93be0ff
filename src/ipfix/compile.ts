/**
 * Template compiler: turns a template record into a record decoder generated once per distinct
 * field list (`new Function`), so decoding a record is straight-line code that reads each field
 * from a DataView at a known offset and builds one object literal of fixed shape: no per-field
 * closures, lookups or intermediate objects. Field lengths come from the template, never from the
 * registry (reduced-size encoding, RFC 7011 §6.2); lengths illegal for the type are rejected here
 * so the generated code never has to check them.
 */

import type { DataRecord, DataType, FieldSpecifier, TemplateRecord } from "./types.ts";
import { VARIABLE_LENGTH } from "./types.ts";
import { lookupElement, registryGeneration } from "./registry.ts";
import { formatIPv4Bytes, formatIPv6 } from "./ip.ts";
import { type DecodeErrorReason, IpfixDecodeError } from "./errors.ts";

/**
 * Decodes records back to back from `bytes[off..end)` and appends them to `out`, stopping when
 * fewer than the minimum record length remain (the rest is padding) or after `max` records.
 * Returns the offset after the last decoded record. Throws IpfixDecodeError (badRecord,
 * badVarLength) when a record does not fit; records appended before the throw stay in `out`.
 * `view` and `bytes` must cover the same memory with the same offsets.
 */
export type RecordsDecoder = (
  view: DataView,
  bytes: Uint8Array,
  off: number,
  end: number,
  out: DataRecord[],
  max?: number,
) => number;

/** A template with its decoder, built once when the template is registered. */
export interface CompiledTemplate {
  /** The template as received. */
  readonly template: TemplateRecord;
  /** True for an options template (scopeFieldCount > 0). */
  readonly options: boolean;
  /** Smallest possible record: fixed lengths + 1 byte per variable-length field. */
  readonly minRecordLength: number;
  /** Record key of each field in template order (registry name or `"<pen>/<id>"`). */
  readonly names: readonly string[];
  /** The generated decoder (see {@linkcode RecordsDecoder}). */
  readonly decodeRecords: RecordsDecoder;
}

const utf8 = new TextDecoder("utf-8", { fatal: false });

// Strings in Antrea records are short ASCII names; building them char by char avoids
// TextDecoder's call overhead, which dominates for a few bytes.
function str(bytes: Uint8Array, o: number, n: number): string {
  if (n === 0) return "";
  if (n <= 24) {
    let s = "";
    const e = o + n;
    for (let i = o; i < e; i++) {
      const c = bytes[i];
      if (c > 0x7f) return utf8.decode(bytes.subarray(o, e));
      s += String.fromCharCode(c);
    }
    return s;
  }
  return utf8.decode(bytes.subarray(o, o + n));
}

function uNum(bytes: Uint8Array, o: number, n: number): number {
  let v = 0;
  for (let i = 0; i < n; i++) v = v * 256 + bytes[o + i];
  return v;
}

function uBig(bytes: Uint8Array, o: number, n: number): bigint {
  if (n <= 6) return BigInt(uNum(bytes, o, n));
  return (BigInt(uNum(bytes, o, n - 4)) << 32n) | BigInt(uNum(bytes, o + n - 4, 4));
}

function sInt(bytes: Uint8Array, o: number, n: number): number {
  const u = uNum(bytes, o, n);
  const half = 2 ** (8 * n - 1);
  return u >= half ? u - 2 * half : u;
}

function sBig(bytes: Uint8Array, o: number, n: number): bigint {
  return BigInt.asIntN(8 * n, uBig(bytes, o, n));
}

function fail(reason: DecodeErrorReason, message: string): IpfixDecodeError {
  return new IpfixDecodeError(reason, message);
}

const HELPERS = { str, uBig, sInt, sBig, ip4: formatIPv4Bytes, ip6: formatIPv6, fail };

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

/** JS expression reading a fixed-length value of `type` at expression `o`. */
function fixedExpr(type: DataType | undefined, n: number, o: string): string {
  switch (type) {
    case "unsigned8":
      return `bytes[${o}]`;
    case "unsigned16":
    case "unsigned32":
      if (n === 1) return `bytes[${o}]`;
      if (n === 2) return `view.getUint16(${o})`;
      if (n === 3) return `(view.getUint16(${o}) * 256 + bytes[${o} + 2])`;
      return `view.getUint32(${o})`;
    case "unsigned64":
      return n === 8 ? `view.getBigUint64(${o})` : `uBig(bytes, ${o}, ${n})`;
    case "signed8":
      return `view.getInt8(${o})`;
    case "signed16":
    case "signed32":
      if (n === 1) return `view.getInt8(${o})`;
      if (n === 2) return `view.getInt16(${o})`;
      if (n === 4) return `view.getInt32(${o})`;
      return `sInt(bytes, ${o}, ${n})`;
    case "signed64":
      return n === 8 ? `view.getBigInt64(${o})` : `sBig(bytes, ${o}, ${n})`;
    case "float32":
      return `view.getFloat32(${o})`;
    case "float64":
      return n === 8 ? `view.getFloat64(${o})` : `view.getFloat32(${o})`;
    case "boolean":
      // RFC 7012: 1 = true, 2 = false. Any other byte is invalid; it reads as false (as
      // upstream does) rather than failing the record.
      return `(bytes[${o}] === 1)`;
    case "dateTimeSeconds":
      return `view.getUint32(${o})`;
    case "dateTimeMilliseconds":
    case "dateTimeMicroseconds":
    case "dateTimeNanoseconds":
      return `view.getBigUint64(${o})`;
    case "ipv4Address":
      return `ip4(bytes, ${o})`;
    case "ipv6Address":
      return `ip6(bytes, ${o})`;
    case "string":
      return `str(bytes, ${o}, ${n})`;
    default: // macAddress, octetArray, lists (kept raw), unknown elements
      return `bytes.slice(${o}, ${o} + ${n})`;
  }
}

interface Codec {
  readonly minRecordLength: number;
  readonly names: readonly string[];
  readonly decodeRecords: RecordsDecoder;
}

function badTemplate(t: TemplateRecord, i: number, f: FieldSpecifier, why: string): never {
  throw new IpfixDecodeError(
    "badTemplate",
    `template ${t.id} field ${i} (${f.enterprise}/${f.id} length ${f.length}): ${why}`,
  );
}

function buildCodec(t: TemplateRecord): Codec {
  const n = t.fields.length;
  const names: string[] = [];
  const types: (DataType | undefined)[] = [];
  const variable: boolean[] = [];
  let minLen = 0;
  for (let i = 0; i < n; i++) {
    const f = t.fields[i];
    const ie = lookupElement(f.enterprise, f.id);
    const type = ie?.type;
    names.push(ie?.name ?? `${f.enterprise}/${f.id}`);
    types.push(type);
    if (f.length === VARIABLE_LENGTH) {
      if (!isVariableType(type)) badTemplate(t, i, f, `${type} cannot be variable-length`);
      variable.push(true);
      minLen += 1;
    } else {
      // A zero-length field is useless and, in an all-zero template, would let a record consume
      // no bytes at all; reject it rather than risk a non-advancing decode loop.
      if (f.length <= 0 || !Number.isInteger(f.length)) badTemplate(t, i, f, "illegal length");
      if (type !== undefined && !lengthAllowed(type, f.length)) {
        badTemplate(t, i, f, `length not allowed for ${type}`);
      }
      variable.push(false);
      minLen += f.length;
    }
  }
  // Minimum bytes still needed from field i on (fixed lengths + 1 per variable field).
  const restMin: number[] = new Array(n + 1).fill(0);
  for (let i = n - 1; i >= 0; i--) {
    restMin[i] = restMin[i + 1] + (variable[i] ? 1 : t.fields[i].length);
  }
  const seen = new Set<string>();
  const props: string[] = [];
  let body = "";
  let rel = 0; // bytes of fixed fields read since `off` was last advanced
  for (let i = 0; i < n; i++) {
    const f = t.fields[i];
    const keep = !seen.has(names[i]); // duplicate IEs: first occurrence wins, like upstream
    seen.add(names[i]);
    if (keep) props.push(`${JSON.stringify(names[i])}: v${i}`);
    const o = rel === 0 ? "off" : `off + ${rel}`;
    if (!variable[i]) {
      if (keep) body += `    const v${i} = ${fixedExpr(types[i], f.length, o)};\n`;
      rel += f.length;
      continue;
    }
    body += `    p = ${o} + 1;\n    L = bytes[${o}];\n` +
      `    if (L === 255) {\n` +
      `      if (end - p < 2) throw fail("badVarLength", "field ${i}: 3-byte length prefix cut");\n` +
      `      L = view.getUint16(p);\n      p += 2;\n    }\n` +
      `    if (end - p < L) throw fail("badVarLength", "field ${i}: length " + L + " exceeds set");\n`;
    if (keep) {
      const expr = types[i] === "string" ? "str(bytes, p, L)" : "bytes.slice(p, p + L)";
      body += `    const v${i} = ${expr};\n`;
    }
    body += `    off = p + L;\n`;
    rel = 0;
    if (restMin[i + 1] > 0) {
      body += `    if (end - off < ${restMin[i + 1]}) ` +
        `throw fail("badRecord", "record overruns set after field ${i}");\n`;
    }
  }
  if (rel > 0) body += `    off += ${rel};\n`;
  const src = `"use strict";
const { str, uBig, sInt, sBig, ip4, ip6, fail } = H;
return function decodeRecords(view, bytes, off, end, out, max) {
  let p = 0, L = 0, count = 0;
  const limit = max === undefined ? Infinity : max;
  while (count < limit && end - off >= ${minLen}) {
${body}    out.push({ ${props.join(", ")} });
    count++;
  }
  return off;
};`;
  const decodeRecords = new Function("H", src)(HELPERS) as RecordsDecoder;
  return { minRecordLength: minLen, names: Object.freeze(names), decodeRecords };
}

// Many sessions announce identical templates (every Agent sends the same 39 fields), so the
// generated code is shared by field list. Bounded: a hostile peer announcing endless distinct
// templates only causes recompilation.
const CACHE_MAX = 1024;
const cache = new Map<string, Codec>();

function signature(t: TemplateRecord): string {
  let s = String(registryGeneration());
  for (const f of t.fields) s += `,${f.enterprise}/${f.id}/${f.length}`;
  return s;
}

/**
 * Compiles a template (id >= 256, at least one field). Throws IpfixDecodeError("badTemplate")
 * for an invalid id, an empty field list, a bad scope count or an illegal field length.
 */
export function compileTemplate(t: TemplateRecord): CompiledTemplate {
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
  const sig = signature(t);
  let codec = cache.get(sig);
  if (codec === undefined) {
    codec = buildCodec(t);
    if (cache.size >= CACHE_MAX) cache.clear();
    cache.set(sig, codec);
  }
  return {
    template: t,
    options: t.scopeFieldCount > 0,
    minRecordLength: codec.minRecordLength,
    names: codec.names,
    decodeRecords: codec.decodeRecords,
  };
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
