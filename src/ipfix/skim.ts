/**
 * Record boundaries of a data set without decoding its values: for a consumer that hands the
 * raw records to another thread to decode (the aggregation shards, `src/shard/`). The walk
 * checks a record's structure exactly as the decoders of `compile.ts` do (a record needs the
 * template's smallest length, a variable-length prefix must fit, and so must the rest of the
 * record after it), so a message is accepted, counted and cut the same way in both modes.
 *
 * The walk also finds the flow key's offsets when the key fields sit at fixed offsets (before
 * any variable-length field) with their natural lengths, as in the Antrea Agent's templates: the
 * router then reads the key straight from the bytes.
 *
 * @module
 */

import { IpfixDecodeError } from "./errors.ts";
import { fieldName } from "./registry.ts";
import { minFieldLength } from "./compile.ts";
import { type TemplateRecord, VARIABLE_LENGTH } from "./types.ts";

/** Byte offsets of the flow key in every record of a template (see the module doc). */
export interface KeyOffsets {
  /** 4 (IPv4) or 6 (IPv6). */
  readonly family: 4 | 6;
  readonly source: number;
  readonly destination: number;
  readonly protocol: number;
  readonly sourcePort: number;
  readonly destinationPort: number;
}

/** What the walk needs of a template, built once per template definition. */
export interface Skim {
  /**
   * One step per variable-length field, 3 words each: the bytes of the fixed-length fields
   * before it (since the previous variable-length field), the smallest length of the fields
   * after it, and its index in the template (for errors). The walk jumps over runs of fixed
   * fields in one addition instead of visiting each field.
   */
  readonly steps: Int32Array;
  /** Bytes of the fixed-length fields after the last variable-length one (or all of them). */
  readonly tail: number;
  /** Smallest length of a record. */
  readonly minLength: number;
  /** The flow key's fixed offsets, or undefined when they are not fixed. */
  readonly key: KeyOffsets | undefined;
}

const skims = new WeakMap<TemplateRecord, Skim>();

/** The skim of a template (cached per template object). */
export function skimOf(t: TemplateRecord): Skim {
  let s = skims.get(t);
  if (s === undefined) {
    s = buildSkim(t);
    skims.set(t, s);
  }
  return s;
}

function buildSkim(t: TemplateRecord): Skim {
  const n = t.fields.length;
  const restMin = new Int32Array(n + 1);
  for (let i = n - 1; i >= 0; i--) restMin[i] = restMin[i + 1] + minFieldLength(t.fields[i].length);
  const steps: number[] = [];
  let fixed = 0;
  t.fields.forEach((f, i) => {
    if (f.length !== VARIABLE_LENGTH) {
      fixed += f.length;
      return;
    }
    steps.push(fixed, restMin[i + 1], i);
    fixed = 0;
  });
  return { steps: Int32Array.from(steps), tail: fixed, minLength: restMin[0], key: keyOffsets(t) };
}

/**
 * The offset and length of each IE at a fixed position in every record of `t` (before its first
 * variable-length field; the first occurrence of a repeated IE, as the decoders keep it).
 */
function fixedFields(t: TemplateRecord): Map<string, { off: number; len: number }> {
  const at = new Map<string, { off: number; len: number }>();
  let off = 0;
  for (const f of t.fields) {
    if (f.length === VARIABLE_LENGTH) break;
    const name = fieldName(f.enterprise, f.id);
    if (!at.has(name)) at.set(name, { off, len: f.length });
    off += f.length;
  }
  return at;
}

/**
 * The offsets of the IEs `names` in every record of `t`, in that order, when each sits at a fixed
 * offset with `length` bytes (see {@linkcode fixedFields}); undefined when one does not.
 */
export function fixedOffsets(
  t: TemplateRecord,
  names: readonly string[],
  length: number,
): Int32Array | undefined {
  const at = fixedFields(t);
  const out = new Int32Array(names.length);
  for (let i = 0; i < names.length; i++) {
    const a = at.get(names[i]);
    if (a === undefined || a.len !== length) return undefined;
    out[i] = a.off;
  }
  return out;
}

/** Offsets of the named fields at fixed positions with the given length (before any variable). */
function keyOffsets(t: TemplateRecord): KeyOffsets | undefined {
  const at = fixedFields(t);
  const fixed = (name: string, len: number): number => {
    const a = at.get(name);
    return a !== undefined && a.len === len ? a.off : -1;
  };
  const names = new Set(t.fields.map((f) => fieldName(f.enterprise, f.id)));
  const v4 = names.has("sourceIPv4Address") || names.has("destinationIPv4Address");
  const v6 = names.has("sourceIPv6Address") || names.has("destinationIPv6Address");
  // Both families in one template: the key reader's rules (IPv4 wins per side) need the values.
  if (v4 === v6) return undefined;
  const family = v4 ? 4 : 6;
  const len = v4 ? 4 : 16;
  const key = {
    family,
    source: fixed(`sourceIPv${family}Address`, len),
    destination: fixed(`destinationIPv${family}Address`, len),
    protocol: fixed("protocolIdentifier", 1),
    sourcePort: fixed("sourceTransportPort", 2),
    destinationPort: fixed("destinationTransportPort", 2),
  } as const;
  return Object.values(key).some((v) => v < 0) ? undefined : key;
}

/**
 * Walks the records of a data set from `off` to `end`: pushes each record's start and end
 * offsets to `spans` and returns where the walk stopped (the end of the last whole record;
 * trailing bytes shorter than the smallest record are padding). Throws IpfixDecodeError for a
 * record whose structure is bad, with `spans` holding the records before it, as the decoders do.
 */
export function walkRecords(
  s: Skim,
  bytes: Uint8Array,
  off: number,
  end: number,
  spans: number[],
): number {
  const steps = s.steps;
  const n = steps.length;
  const minLen = s.minLength;
  while (end - off >= minLen) {
    const start = off;
    // Each variable-length field's prefix is in the set: the smallest length of the rest of
    // the record (checked before the record, then after each such field) counts its byte.
    for (let j = 0; j < n; j += 3) {
      off += steps[j];
      let p = off + 1;
      let L = bytes[off];
      if (L === 255) {
        if (end - p < 2) {
          throw new IpfixDecodeError(
            "badVarLength",
            `field ${steps[j + 2]}: 3-byte length prefix cut`,
          );
        }
        L = (bytes[p] << 8) | bytes[p + 1];
        p += 2;
      }
      if (end - p < L) {
        throw new IpfixDecodeError(
          "badVarLength",
          `field ${steps[j + 2]}: length ${L} exceeds set`,
        );
      }
      off = p + L;
      if (end - off < steps[j + 1]) {
        throw new IpfixDecodeError("badRecord", `record overruns set after field ${steps[j + 2]}`);
      }
    }
    off += s.tail;
    spans.push(start, off);
  }
  return off;
}
