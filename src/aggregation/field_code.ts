/**
 * Code compiled from the field table ({@linkcode FIELDS}): creating a flow, copying the correlate
 * fields of the other half (§1.5), taking a snapshot and releasing a flow's strings. Why
 * generated (`new Function`, once at load, as the IPFIX decoder compiler does): a loop over the
 * table would read the record's properties by computed name, which V8 cannot optimise
 * (megamorphic keyed access) on the per-record path; the generated functions are straight-line
 * code with every property name and slot index a constant.
 *
 * A flow has no object of its own: its strings are intern ids in u32 words of its slot
 * (`str` rows), so the generated code reads and writes slot words only.
 */

import type { AggregatedRecord, FlowInput } from "./record.ts";
import { type FieldRow, FIELDS } from "./layout.ts";
import { type Interner, maxStringBytes } from "./intern.ts";
import { U32 } from "./slot_store.ts";
import { num } from "./values.ts";

/**
 * Fills the words of a new slot from `r`: the `str` fields' intern ids (references taken) and
 * the `num` fields, at `u32[ub + at]`. Positional arguments: this runs once per new flow.
 */
export type CreateFlow = (r: FlowInput, intern: Interner, u32: Uint32Array, ub: number) => void;

/** §1.5: copies every correlate field of `r` that is set (non-empty, non-zero) into the slot. */
export type CorrelateFlow = (
  r: FlowInput,
  intern: Interner,
  u32: Uint32Array,
  ub: number,
) => void;

/** Gives back the slot's references to its `str` fields' interned strings (flow deleted). */
export type ReleaseFlow = (intern: Interner, u32: Uint32Array, ub: number) => void;

/**
 * An upper bound of the bytes the `str` fields of `r` can add to the intern table (see
 * `maxStringBytes`): over every `str` field (a new flow) or the correlate ones (§1.5).
 */
export type StringBound = (r: FlowInput) => number;

/**
 * A flow as a new record: the table's fields, then the flow's addresses (`src`/`dst` under the
 * IPv4 or IPv6 names as `v4` says), cluster IPs and labels. Every record has every key, in the
 * same order (undefined when unset), so all records share one hidden class and the sinks'
 * generated per-field reads stay monomorphic (a record whose keys depended on the family and
 * the optional fields made them megamorphic: several microseconds per flow).
 */
export type SnapshotFlow = (
  intern: Interner,
  u32: Uint32Array,
  ub: number,
  u64: BigUint64Array,
  b: number,
  addrs: { v4: boolean; src: string; dst: string },
) => AggregatedRecord;

/** The functions compiled from a field table. */
export interface FieldCode {
  /** See {@linkcode CreateFlow}. */
  readonly create: CreateFlow;
  /** See {@linkcode CorrelateFlow}. */
  readonly correlate: CorrelateFlow;
  /** See {@linkcode SnapshotFlow}. */
  readonly snapshot: SnapshotFlow;
  /** See {@linkcode ReleaseFlow}. */
  readonly release: ReleaseFlow;
  /** {@linkcode StringBound} over every `str` field: what creating a flow from `r` can add. */
  readonly createBytes: StringBound;
  /** {@linkcode StringBound} over the correlate `str` fields: what correlating `r` can add. */
  readonly correlateBytes: StringBound;
  /** The generated source, for debugging. */
  readonly source: string;
}

const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** The bits of its word a row uses: all 32 unless a `u32` row names `shift` and `bits`. */
function rowBits(f: FieldRow): number {
  if (f.kind !== "u32" || f.bits === undefined) return 0xffffffff;
  const shift = f.shift ?? 0;
  if (!Number.isInteger(shift) || !Number.isInteger(f.bits) || shift < 0 || f.bits < 1) return 0;
  if (shift + f.bits > 32) return 0;
  return (f.bits === 32 ? 0xffffffff : ((1 << f.bits) - 1) << shift) >>> 0;
}

/**
 * Compiles the create/correlate/snapshot functions of `fields`. Throws when a name is not a
 * plain identifier, a slot word or bit range is not valid or two rows share slot bits.
 */
export function compileFieldCode(fields: readonly FieldRow[]): FieldCode {
  const seen = new Set<string>();
  const used = new Map<string, number>();
  for (const f of fields) {
    if (!IDENT.test(f.ie)) throw new Error(`aggregation: field name ${f.ie}: not an identifier`);
    if (seen.has(f.ie)) throw new Error(`aggregation: field ${f.ie} listed twice`);
    seen.add(f.ie);
    const bits = rowBits(f);
    if (!Number.isInteger(f.at) || f.at < 0 || bits === 0) {
      throw new Error(`aggregation: field ${f.ie}: bad slot word ${f.at}`);
    }
    const where = `${f.kind === "u64" ? "u64" : "u32"}[${f.at}]`;
    const had = used.get(where) ?? 0;
    if ((had & bits) !== 0) {
      throw new Error(`aggregation: field ${f.ie}: ${where} already used`);
    }
    used.set(where, (had | bits) >>> 0);
  }
  const create: string[] = [];
  const correlate: string[] = [];
  const snap: string[] = [];
  const release: string[] = [];
  const createBytes: string[] = [];
  const correlateBytes: string[] = [];
  for (const f of fields) {
    const from = `r.${f.ie}`;
    switch (f.kind) {
      case "str":
        create.push(`u32[ub + ${f.at}] = I.ref(${from});`);
        if (f.correlate) {
          correlate.push(`if (${from}) u32[ub + ${f.at}] = I.replace(u32[ub + ${f.at}], ${from});`);
          correlateBytes.push(`B(${from})`);
        }
        snap.push(`${f.ie}: I.text(u32[ub + ${f.at}]),`);
        release.push(`I.unref(u32[ub + ${f.at}]);`);
        createBytes.push(`B(${from})`);
        break;
      case "num":
        create.push(`u32[ub + ${f.at}] = num(${from});`);
        if (f.correlate) correlate.push(`v = num(${from}); if (v !== 0) u32[ub + ${f.at}] = v;`);
        snap.push(`${f.ie}: u32[ub + ${f.at}],`);
        break;
      case "u32":
        snap.push(
          f.bits === undefined || f.bits === 32
            ? `${f.ie}: u32[ub + ${f.at}],`
            : `${f.ie}: (u32[ub + ${f.at}] >>> ${f.shift ?? 0}) & ${2 ** f.bits - 1},`,
        );
        break;
      case "u64":
        snap.push(`${f.ie}: u[b + ${f.at}],`);
        break;
    }
  }
  const source = [
    `"use strict";`,
    `function create(r, I, u32, ub) {`,
    ...create,
    `}`,
    `function correlate(r, I, u32, ub) {`,
    `let v = 0;`,
    ...correlate,
    `}`,
    `function snapshot(I, u32, ub, u, b, a) {`,
    `const v4 = a.v4;`,
    `return {`,
    ...snap,
    `sourceIPv4Address: v4 ? a.src : undefined,`,
    `destinationIPv4Address: v4 ? a.dst : undefined,`,
    `sourceIPv6Address: v4 ? undefined : a.src,`,
    `destinationIPv6Address: v4 ? undefined : a.dst,`,
    `destinationClusterIPv4: I.text(u32[ub + ${U32.CLUSTER_V4}]),`,
    `destinationClusterIPv6: I.text(u32[ub + ${U32.CLUSTER_V6}]),`,
    `sourcePodLabels: I.text(u32[ub + ${U32.SRC_LABELS}]),`,
    `destinationPodLabels: I.text(u32[ub + ${U32.DST_LABELS}]),`,
    `};`,
    `}`,
    `function release(I, u32, ub) {`,
    ...release,
    `}`,
    `function createBytes(r) {`,
    `return ${createBytes.join(" + ") || "0"};`,
    `}`,
    `function correlateBytes(r) {`,
    `return ${correlateBytes.join(" + ") || "0"};`,
    `}`,
    `return { create, correlate, snapshot, release, createBytes, correlateBytes };`,
  ].join("\n");
  const made = new Function("num", "B", source)(num, maxStringBytes) as Omit<FieldCode, "source">;
  return { ...made, source };
}

/** The code of {@linkcode FIELDS}, compiled once. */
export const FIELD_CODE: FieldCode = compileFieldCode(FIELDS);
