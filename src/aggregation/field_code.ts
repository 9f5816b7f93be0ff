/**
 * Code compiled from the field table ({@linkcode FIELDS}): creating a flow, copying the correlate
 * fields of the other half (§1.5), taking a snapshot and releasing a flow's strings. Why
 * generated (`new Function`, once at load, as the IPFIX decoder compiler does): a loop over the
 * table would read the record's properties by computed name, which V8 cannot optimise
 * (megamorphic keyed access) on the per-record path; the generated functions are straight-line
 * code with every property name and slot index a constant.
 *
 * A flow has no object of its own: its strings are intern ids in u32 words of its slot
 * (`str` rows), and grouped fields are words of an interned tuple (tuples.ts) whose id is a
 * slot word, so the generated code reads and writes slot and tuple words only.
 */

import type { AggregatedRecord, FlowInput } from "./record.ts";
import { type FieldGroup, type FieldRow, FIELDS, GROUPS } from "./layout.ts";
import { type Interner, maxStringBytes } from "./intern.ts";
import { tupleBytes, TupleTable } from "./tuples.ts";
import { U32 } from "./slot_store.ts";
import { num } from "./values.ts";

/**
 * Fills the words of a new slot from `r`: the `str` fields' intern ids (references taken), the
 * `num` fields, at `u32[ub + at]`, and each group's tuple id (a reference taken; `groups` are
 * the tables of {@linkcode FieldCode.newGroupTables}). Positional arguments: this runs once per
 * new flow.
 */
export type CreateFlow = (
  r: FlowInput,
  intern: Interner,
  groups: readonly TupleTable[],
  u32: Uint32Array,
  ub: number,
) => void;

/**
 * §1.5: copies every correlate field of `r` that is set (non-empty, non-zero) into the slot
 * (same arguments as {@linkcode CreateFlow}).
 */
export type CorrelateFlow = CreateFlow;

/** Gives back the slot's references to its strings and tuples (flow deleted). */
export type ReleaseFlow = (
  intern: Interner,
  groups: readonly TupleTable[],
  u32: Uint32Array,
  ub: number,
) => void;

/**
 * An upper bound of the bytes the fields of `r` can add to the intern and tuple tables (see
 * `maxStringBytes`, `tupleBytes`): over every field (a new flow) or the correlate ones (§1.5).
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
  groups: readonly TupleTable[],
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
  /** One empty tuple table per group, over `intern` (a core's, see {@linkcode CreateFlow}). */
  readonly newGroupTables: (intern: Interner) => TupleTable[];
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

/** The group index of a row, or undefined. */
function groupOf(f: FieldRow): number | undefined {
  return f.kind === "str" || f.kind === "num" ? f.group : undefined;
}

/**
 * The expression of field `f`'s value in code generated over a slot: it reads `I` (the
 * interner), `u32` and `ub` (the slot's u32 words), `u` and `b` (its u64 words, a BigInt) and,
 * for a grouped field, `G<g>` and `t<g>` (the group's table and the slot's tuple id, bound by
 * {@linkcode groupPrelude}). Absent text is `undefined`.
 */
export function fieldValueSource(f: FieldRow): string {
  const g = groupOf(f);
  if (g !== undefined) {
    const w = `G${g}.word(t${g}, ${f.at})`;
    return f.kind === "str" ? `I.text(${w})` : w;
  }
  switch (f.kind) {
    case "str":
      return `I.text(u32[ub + ${f.at}])`;
    case "num":
      return `u32[ub + ${f.at}]`;
    case "u32":
      return f.bits === undefined || f.bits === 32
        ? `u32[ub + ${f.at}]`
        : `((u32[ub + ${f.at}] >>> ${f.shift ?? 0}) & ${2 ** f.bits - 1})`;
    case "u64":
      return `u[b + ${f.at}]`;
  }
}

/**
 * The expressions (as {@linkcode fieldValueSource}'s) of the record fields the table does not
 * list that a slot holds as words: cluster IPs and Pod labels, as interned text.
 */
export const EXTRA_VALUE_SOURCE: Readonly<Record<string, string>> = {
  destinationClusterIPv4: `I.text(u32[ub + ${U32.CLUSTER_V4}])`,
  destinationClusterIPv6: `I.text(u32[ub + ${U32.CLUSTER_V6}])`,
  sourcePodLabels: `I.text(u32[ub + ${U32.SRC_LABELS}])`,
  destinationPodLabels: `I.text(u32[ub + ${U32.DST_LABELS}])`,
};

/**
 * Code binding what {@linkcode fieldValueSource}'s grouped expressions read: `G<g>` from the
 * tables `G`, and `t<g>`, the slot's tuple id of each group.
 */
export function groupPrelude(groups: readonly FieldGroup[]): string {
  return groups.map((g, gi) => `const G${gi} = G[${gi}]; const t${gi} = u32[ub + ${g.at}];`)
    .join(" ");
}

/**
 * Compiles the create/correlate/snapshot functions of `fields` over the field groups `groups`.
 * Throws when a name is not a plain identifier, a slot word, bit range, group or group position
 * is not valid, or two rows (or a row and a group's id word) share slot bits.
 */
export function compileFieldCode(
  fields: readonly FieldRow[],
  groups: readonly FieldGroup[] = [],
): FieldCode {
  const seen = new Set<string>();
  const used = new Map<string, number>();
  const claim = (ie: string, where: string, bits: number): void => {
    const had = used.get(where) ?? 0;
    if ((had & bits) !== 0) throw new Error(`aggregation: field ${ie}: ${where} already used`);
    used.set(where, (had | bits) >>> 0);
  };
  for (const g of groups) {
    if (!Number.isInteger(g.at) || g.at < 0) {
      throw new Error(`aggregation: group ${g.name}: bad slot word ${g.at}`);
    }
    claim(`group ${g.name}`, `u32[${g.at}]`, 0xffffffff);
  }
  const width = groups.map(() => 0);
  const strs: number[][] = groups.map(() => []);
  for (const f of fields) {
    if (!IDENT.test(f.ie)) throw new Error(`aggregation: field name ${f.ie}: not an identifier`);
    if (seen.has(f.ie)) throw new Error(`aggregation: field ${f.ie} listed twice`);
    seen.add(f.ie);
    const bits = rowBits(f);
    if (!Number.isInteger(f.at) || f.at < 0 || bits === 0) {
      throw new Error(`aggregation: field ${f.ie}: bad slot word ${f.at}`);
    }
    const g = groupOf(f);
    if (g !== undefined) {
      if (!Number.isInteger(g) || g < 0 || g >= groups.length) {
        throw new Error(`aggregation: field ${f.ie}: no group ${g}`);
      }
      claim(f.ie, `${groups[g].name}[${f.at}]`, 0xffffffff);
      width[g] = Math.max(width[g], f.at + 1);
      if (f.kind === "str") strs[g].push(f.at);
      continue;
    }
    claim(f.ie, `${f.kind === "u64" ? "u64" : "u32"}[${f.at}]`, bits);
  }
  const create: string[] = [];
  const correlate: string[] = [];
  const snap: string[] = [];
  const release: string[] = [];
  const createBytes: string[] = [];
  const correlateBytes: string[] = [];
  for (const f of fields) {
    if (groupOf(f) !== undefined) continue;
    const from = `r.${f.ie}`;
    switch (f.kind) {
      case "str":
        create.push(`u32[ub + ${f.at}] = I.ref(${from});`);
        if (f.correlate) {
          correlate.push(`if (${from}) u32[ub + ${f.at}] = I.replace(u32[ub + ${f.at}], ${from});`);
          correlateBytes.push(`B(${from})`);
        }
        release.push(`I.unref(u32[ub + ${f.at}]);`);
        createBytes.push(`B(${from})`);
        break;
      case "num":
        create.push(`u32[ub + ${f.at}] = num(${from});`);
        if (f.correlate) correlate.push(`v = num(${from}); if (v !== 0) u32[ub + ${f.at}] = v;`);
        break;
    }
  }
  for (const f of fields) snap.push(`${f.ie}: ${fieldValueSource(f)},`);
  // Each group: its rows fill the group's scratch tuple, whose interned id goes to the slot.
  groups.forEach((g, gi) => {
    const rows = fields.filter((f) => groupOf(f) === gi) as Extract<
      FieldRow,
      { correlate: boolean }
    >[];
    if (rows.length === 0) return;
    const T = `G${gi}`;
    const id = `u32[ub + ${g.at}]`;
    create.push(`W = ${T}.w;`);
    for (const f of rows) {
      create.push(`W[${f.at}] = ${f.kind === "str" ? "I.ref" : "num"}(r.${f.ie});`);
      if (f.kind === "str") createBytes.push(`B(r.${f.ie})`);
    }
    create.push(`${id} = ${T}.make();`);
    const any = rows.map((f) => f.kind === "str" ? `r.${f.ie}` : `num(r.${f.ie}) !== 0`);
    const TB = tupleBytes(width[gi]);
    createBytes.push(`(${any.join(" || ")} ? ${TB} : 0)`);
    const corr = rows.filter((f) => f.correlate);
    if (corr.length > 0) {
      const anyCorr = corr.map((f) => f.kind === "str" ? `r.${f.ie}` : `num(r.${f.ie}) !== 0`);
      correlate.push(`if (${anyCorr.join(" || ")}) {`);
      correlate.push(`o = ${id}; ${T}.load(o); W = ${T}.w;`);
      for (const f of corr) {
        if (f.kind === "str") correlateBytes.push(`B(r.${f.ie})`);
        correlate.push(
          f.kind === "str"
            ? `if (r.${f.ie}) W[${f.at}] = I.replace(W[${f.at}], r.${f.ie});`
            : `v = num(r.${f.ie}); if (v !== 0) W[${f.at}] = v;`,
        );
      }
      correlate.push(`${id} = ${T}.make(); ${T}.unref(o);`);
      correlate.push(`}`);
      correlateBytes.push(`(${anyCorr.join(" || ")} ? ${TB} : 0)`);
    }
    release.push(`${T}.unref(${id});`);
  });
  // Groups are bound once per call: `G0 = G[0]` and so on.
  const bind = groups.map((_, gi) => `const G${gi} = G[${gi}];`).join(" ");
  const source = [
    `"use strict";`,
    `function create(r, I, G, u32, ub) {`,
    bind,
    `let W = undefined;`,
    ...create,
    `}`,
    `function correlate(r, I, G, u32, ub) {`,
    bind,
    `let v = 0; let o = 0; let W = undefined;`,
    ...correlate,
    `}`,
    `function snapshot(I, G, u32, ub, u, b, a) {`,
    groupPrelude(groups),
    `const v4 = a.v4;`,
    `return {`,
    ...snap,
    `sourceIPv4Address: v4 ? a.src : undefined,`,
    `destinationIPv4Address: v4 ? a.dst : undefined,`,
    `sourceIPv6Address: v4 ? undefined : a.src,`,
    `destinationIPv6Address: v4 ? undefined : a.dst,`,
    ...Object.entries(EXTRA_VALUE_SOURCE).map(([ie, x]) => `${ie}: ${x},`),
    `};`,
    `}`,
    `function release(I, G, u32, ub) {`,
    bind,
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
  const made = new Function("num", "B", source)(num, maxStringBytes) as Omit<
    FieldCode,
    "source" | "newGroupTables"
  >;
  const newGroupTables = (intern: Interner): TupleTable[] =>
    groups.map((_, gi) => new TupleTable(intern, width[gi], strs[gi]));
  return { ...made, newGroupTables, source };
}

/** The code of {@linkcode FIELDS}, compiled once. */
export const FIELD_CODE: FieldCode = compileFieldCode(FIELDS, GROUPS);
