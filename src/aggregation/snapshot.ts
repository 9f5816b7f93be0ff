/**
 * Snapshots (spec aggregation.md §4.3, §6.5, §6.6): an own copy of a live flow as exporters and
 * the query API see it, the flow key as text, and the hand-over of one flow to the export loop's
 * `emit`, after its Pod metadata and labels were filled through the {@linkcode ExportHooks}.
 */

import type { AggregatedRecord, ExportedFlow, FlowKey } from "./record.ts";
import { encodePodLabels } from "./correlation.ts";
import { FIELD_CODE } from "./field_code.ts";
import { formatIPv4Word, formatIPv6Words } from "./flow_key.ts";
import {
  FL_CORR_FILLED,
  FL_EXT_FILLED,
  FL_IPV4,
  FL_UPDATED,
  G_DST_POD,
  G_SRC_POD,
  GROUPS,
  POD_NAME,
  POD_NODE,
  POD_NS,
} from "./layout.ts";
import type { TupleTable } from "./tuples.ts";
import { FAMILY_SHIFT, SPORT_SHIFT, U32, u32Base, u64Base } from "./slot_store.ts";
import { type CoreState, log } from "./state.ts";

/** Pod metadata returned by the export loop's Pod store. */
export interface PodInfo {
  /** Pod name. */
  name: string;
  /** Pod namespace. */
  namespace: string;
  /** Node the Pod runs on. */
  nodeName: string;
  /** Pod labels; undefined or empty for a Pod without labels. */
  labels?: Record<string, string>;
}

/** Hooks the export loop passes to a sweep to enrich flows before their snapshot. */
export interface ExportHooks {
  /**
   * Finds the Pod that owned `ip` at `startTimeSec` (the flow's flowStartSeconds). Called only
   * for flows whose metadata is not filled (§6.5) and, with labels enabled, once per flow for
   * each named Pod (§6.6). Without this hook nothing is filled and the flags stay unset.
   */
  lookupPod?(ip: string, startTimeSec: number): PodInfo | undefined;
  /**
   * False when no consumer of the exported flows reads address text (every sink reads the
   * core's `addressWords`, see {@linkcode ExportedFlow}): the snapshot then skips formatting
   * it, and the key's and the record's address fields are `""`. Default true.
   */
  addressText?: boolean;
  /**
   * Where the sweep writes each exported flow instead of snapshotting it for `emit`: a binary
   * batch written from the slot itself (the shards', `shard/slot_rows.ts`), which skips the
   * record object and its BigInt counters.
   */
  rows?: SlotRows;
}

/** Takes exported flows straight from their slots (see {@linkcode ExportHooks.rows}). */
export interface SlotRows {
  /** Writes flow `slot` of core state `s`; `uncorrelated` as {@linkcode ExportedFlow}'s. */
  add(s: CoreState, slot: number, uncorrelated: boolean): void;
}

type Lookup = (ip: string, t: number) => PodInfo | undefined;

/** Canonical text of the address stored at `at` (U32.SRC or U32.DST) of a slot. */
export function addressText(s: CoreState, slot: number, at: number): string {
  const u = s.store.u32(slot);
  const b = u32Base(slot);
  if (u[b + U32.PROTO] >>> FAMILY_SHIFT === 4) return formatIPv4Word(u[b + at]);
  return formatIPv6Words(u[b + at], u[b + at + 1], u[b + at + 2], u[b + at + 3]);
}

/**
 * The flow key of a slot, with canonical address text; a caller that already formatted the
 * addresses (a snapshot) passes them instead of formatting them again.
 */
export function flowKeyOf(
  s: CoreState,
  slot: number,
  src: string = addressText(s, slot, U32.SRC),
  dst: string = addressText(s, slot, U32.DST),
): FlowKey {
  const u = s.store.u32(slot);
  const b = u32Base(slot);
  return {
    sourceAddress: src,
    destinationAddress: dst,
    protocol: u[b + U32.PROTO] & 0xff,
    sourcePort: u[b + U32.PORTS] >>> SPORT_SHIFT,
    destinationPort: u[b + U32.PORTS] & 0xffff,
  };
}

// Scratch argument of the generated snapshot (synchronous, never re-entered).
const addrs = { v4: true, src: "", dst: "" };

/**
 * Builds an own copy of the flow as exporters and the query API see it; without `text`, its
 * key address fields are `""` (see {@linkcode ExportHooks.addressText}).
 */
export function snapshot(s: CoreState, slot: number, text = true): AggregatedRecord {
  const u32 = s.store.u32(slot);
  const ub = u32Base(slot);
  addrs.v4 = (u32[ub + U32.FLAGS] & FL_IPV4) !== 0;
  addrs.src = text ? addressText(s, slot, U32.SRC) : "";
  addrs.dst = text ? addressText(s, slot, U32.DST) : "";
  return FIELD_CODE.snapshot(
    s.intern,
    s.groups,
    u32,
    ub,
    s.store.u64(slot),
    u64Base(slot),
    addrs,
  );
}

/** How {@linkcode emitOne} hands a flow over. */
export interface EmitOptions {
  /** Enrichment hooks of the sweep. */
  hooks: ExportHooks | undefined;
  /** The flow is an InterNode half exported without its partner. */
  uncorrelated: boolean;
}

/**
 * Fills the flow's metadata, snapshots it and calls `emit`. An `emit` error is logged and
 * counted (L1) and returns false; the caller resets or deletes the flow either way.
 */
export function emitOne(
  s: CoreState,
  slot: number,
  emit: (f: ExportedFlow) => void,
  opts: EmitOptions,
): boolean {
  fill(s, slot, opts.hooks);
  const u32 = s.store.u32(slot);
  const ub = u32Base(slot);
  const flags = u32[ub + U32.FLAGS];
  const updated = (flags & FL_UPDATED) !== 0;
  try {
    const rows = opts.hooks?.rows;
    if (rows !== undefined) rows.add(s, slot, opts.uncorrelated);
    else emit(exportedFlow(s, slot, opts));
  } catch (err) {
    // L1: one failing sink must not orphan the flow or stop the sweep.
    s.counters.emitErrors++;
    const n = s.rl.allow("emit");
    if (n >= 0) log.error("export callback failed", { error: err, suppressed: n });
    return false;
  } finally {
    u32[ub + U32.FLAGS] &= ~FL_UPDATED;
  }
  s.counters.exported++;
  if (opts.uncorrelated) s.counters.uncorrelatedExported++;
  if (!updated) s.counters.exportedWithoutNewData++;
  return true;
}

/** The flow of `slot` as {@linkcode emitOne} hands it to `emit`. */
function exportedFlow(s: CoreState, slot: number, opts: EmitOptions): ExportedFlow {
  const record = snapshot(s, slot, opts.hooks?.addressText !== false);
  const u32 = s.store.u32(slot);
  const ub = u32Base(slot);
  // The key's addresses are the text the snapshot just formatted (not formatted twice).
  const v4 = (u32[ub + U32.FLAGS] & FL_IPV4) !== 0;
  const key = flowKeyOf(
    s,
    slot,
    (v4 ? record.sourceIPv4Address : record.sourceIPv6Address) as string,
    (v4 ? record.destinationIPv4Address : record.destinationIPv6Address) as string,
  );
  return {
    key,
    record,
    isIPv6: !v4,
    uncorrelated: opts.uncorrelated,
    addressWords: u32,
    addressAt: ub + U32.SRC,
  };
}

/** §6.5/§6.6: fills Pod metadata and labels once per flow, through the hooks. */
function fill(s: CoreState, slot: number, hooks: ExportHooks | undefined): void {
  const lookup = hooks?.lookupPod;
  if (lookup === undefined) return;
  const u = s.store.u32(slot);
  const b = u32Base(slot);
  const start = u[b + U32.START];
  const I = s.intern;
  const srcPod = s.groups[G_SRC_POD];
  const dstPod = s.groups[G_DST_POD];
  /** Word `i` of the source (`src`) or destination Pod group of the flow is `""`. */
  const empty = (src: boolean, i: number): boolean => {
    const g = src ? srcPod : dstPod;
    return I.text(g.word(u[b + GROUPS[src ? G_SRC_POD : G_DST_POD].at], i)) === "";
  };
  if ((u[b + U32.FLAGS] & FL_CORR_FILLED) === 0) {
    // Strings from the Pod store are charged like the others (held bytes) but never refused:
    // they come from the cluster, not the wire, and one Pod's are shared by its flows.
    const src = empty(true, POD_NAME) ? podAt(s, lookup, slot, U32.SRC) : undefined;
    if (src !== undefined) setPod(s, srcPod, u, b + GROUPS[G_SRC_POD].at, src);
    const dst = empty(false, POD_NAME) ? podAt(s, lookup, slot, U32.DST) : undefined;
    if (dst !== undefined) setPod(s, dstPod, u, b + GROUPS[G_DST_POD].at, dst);
    // Set even after a miss, as v1.13 does (L16 kept): the flag means "tried".
    u[b + U32.FLAGS] |= FL_CORR_FILLED;
  }
  if (s.includePodLabels && (u[b + U32.FLAGS] & FL_EXT_FILLED) === 0) {
    u[b + U32.SRC_LABELS] = I.replace(
      u[b + U32.SRC_LABELS],
      !empty(true, POD_NAME) && !empty(true, POD_NS)
        ? labels(s, lookup, addressText(s, slot, U32.SRC), start)
        : "",
    );
    u[b + U32.DST_LABELS] = I.replace(
      u[b + U32.DST_LABELS],
      !empty(false, POD_NAME) && !empty(false, POD_NS)
        ? labels(s, lookup, addressText(s, slot, U32.DST), start)
        : "",
    );
    u[b + U32.FLAGS] |= FL_EXT_FILLED;
  }
}

/** Sets the Pod group whose tuple id is in `u[at]` to Pod `p`'s name, namespace and Node. */
function setPod(s: CoreState, g: TupleTable, u: Uint32Array, at: number, p: PodInfo): void {
  const I = s.intern;
  const old = u[at];
  g.load(old);
  const w = g.w;
  w[POD_NAME] = I.replace(w[POD_NAME], p.name);
  w[POD_NS] = I.replace(w[POD_NS], p.namespace);
  w[POD_NODE] = I.replace(w[POD_NODE], p.nodeName);
  u[at] = g.make();
  g.unref(old);
}

/** The Pod of the address at `at` (U32.SRC or U32.DST) of a slot; undefined on a miss. */
function podAt(s: CoreState, lookup: Lookup, slot: number, at: number): PodInfo | undefined {
  const start = s.store.u32(slot)[u32Base(slot) + U32.START];
  return lookupPod(s, lookup, addressText(s, slot, at), start);
}

function lookupPod(s: CoreState, lookup: Lookup, ip: string, start: number): PodInfo | undefined {
  let p: PodInfo | undefined;
  try {
    p = lookup(ip, start);
  } catch (err) {
    log.error("Pod look-up failed", { ip, error: err });
  }
  if (p === undefined) {
    s.counters.podLookupMisses++;
    const n = s.rl.allow("podMiss");
    if (n >= 0) log.error("cannot find Pod information", { ip, startTime: start, suppressed: n });
  }
  return p;
}

function labels(s: CoreState, lookup: Lookup, ip: string, start: number): string {
  const p = lookupPod(s, lookup, ip, start);
  return p === undefined ? "" : encodePodLabels(p.labels);
}
