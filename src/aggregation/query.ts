/**
 * Queries of live flows (spec aggregation.md §8): snapshots by complete key (a table look-up)
 * or by wildcard filter (a scan), and the internal state of one entry for tests and debugging.
 * Filter addresses are canonicalised first (L24).
 */

import type { AggregatedRecord, FlowKey } from "./record.ts";
import { canonicalAnyAddress, parseIPv4Word, parseIPv6Words } from "./flow_key.ts";
import { KEY_WORDS } from "./flow_table.ts";
import {
  FL_CORR_FILLED,
  FL_EXT_FILLED,
  FL_IPV4,
  FL_READY,
  RETRY_SHIFT,
  T_ACTIVE,
  T_INACTIVE,
} from "./layout.ts";
import { f64Base, SPORT_SHIFT, U32, u32Base } from "./slot_store.ts";
import { addressText, snapshot } from "./snapshot.ts";
import type { CoreState } from "./state.ts";
import { isUint } from "./values.ts";

/** Internal state of one entry, for tests and debugging. */
export interface FlowEntryState {
  /** May be exported. */
  readyToSend: boolean;
  /** Not-ready expiries so far. */
  retries: number;
  /** False: the Pod metadata is filled from the Pod store at the next export. */
  correlatedFieldsFilled: boolean;
  /** False: labels are added at the next export when enabled. */
  externalFieldsFilled: boolean;
  /** Both addresses came from IPv4 IEs. */
  isIPv4: boolean;
  /** Active expiry time (monotonic ms). */
  activeExpireMs: number;
  /** Inactive expiry time (monotonic ms). */
  inactiveExpireMs: number;
}

/** See {@linkcode AggregationCore.query}. */
export function query(
  s: CoreState,
  filter: Partial<FlowKey> | null | undefined,
  limit: number,
): AggregatedRecord[] {
  return queryPage(s, filter, limit, 0).records;
}

/** One page of a query: see {@linkcode AggregationCore.queryPage}. */
export interface QueryPage {
  /** The matches, at most the page's limit, in slot order. */
  records: AggregatedRecord[];
  /** Where the next page starts (`from`) when this one is full; -1 when the scan is done. */
  next: number;
}

/** See {@linkcode AggregationCore.queryPage}. */
export function queryPage(
  s: CoreState,
  filter: Partial<FlowKey> | null | undefined,
  limit: number,
  from: number,
): QueryPage {
  const out: AggregatedRecord[] = [];
  const done: QueryPage = { records: out, next: -1 };
  /** The page of the live slots of `slots` (ascending) that `match`. */
  const page = (slots: readonly number[] | null, match: (slot: number) => boolean): QueryPage => {
    if (limit <= 0) return done;
    const n = slots === null ? s.store.end : slots.length;
    for (let i = slots === null ? from : 0; i < n; i++) {
      const slot = slots === null ? i : slots[i];
      if (slot < from || !s.live(slot) || !match(slot)) continue;
      out.push(snapshot(s, slot));
      if (out.length >= limit) return { records: out, next: slot + 1 };
    }
    return done;
  };
  if (filter === undefined || filter === null) return page(null, () => true);
  const canon = (a: string | undefined): string | undefined =>
    a === undefined || a === "" ? "" : canonicalAnyAddress(a);
  const src = canon(filter.sourceAddress);
  const dst = canon(filter.destinationAddress);
  // An unparsable address matches nothing (it can never equal a stored canonical address).
  if (src === undefined || dst === undefined) return done;
  const proto = filter.protocol ?? 0;
  const sport = filter.sourcePort ?? 0;
  const dport = filter.destinationPort ?? 0;
  if (src !== "" && dst !== "" && proto !== 0 && sport !== 0 && dport !== 0) {
    const found = findByKey(s, { src, dst, proto, sport, dport }).sort((a, b) => a - b);
    return page(found, () => true);
  }
  return page(null, (slot) => {
    const u32 = s.store.u32(slot);
    const ub = u32Base(slot);
    if (proto !== 0 && (u32[ub + U32.PROTO] & 0xff) !== proto) return false;
    if (sport !== 0 && u32[ub + U32.PORTS] >>> SPORT_SHIFT !== sport) return false;
    if (dport !== 0 && (u32[ub + U32.PORTS] & 0xffff) !== dport) return false;
    if (src !== "" && addressText(s, slot, U32.SRC) !== src) return false;
    if (dst !== "" && addressText(s, slot, U32.DST) !== dst) return false;
    return true;
  });
}

/** See {@linkcode AggregationCore.entryState}. */
export function entryState(s: CoreState, key: FlowKey): FlowEntryState | undefined {
  const src = canonicalAnyAddress(key.sourceAddress);
  const dst = canonicalAnyAddress(key.destinationAddress);
  if (src === undefined || dst === undefined) return undefined;
  const f = findByKey(s, {
    src,
    dst,
    proto: key.protocol,
    sport: key.sourcePort,
    dport: key.destinationPort,
  })[0];
  if (f === undefined) return undefined;
  const f64 = s.store.f64(f);
  const fb = f64Base(f);
  const u32 = s.store.u32(f);
  const flags = u32[u32Base(f) + U32.FLAGS];
  return {
    readyToSend: (flags & FL_READY) !== 0,
    retries: flags >>> RETRY_SHIFT,
    correlatedFieldsFilled: (flags & FL_CORR_FILLED) !== 0,
    externalFieldsFilled: (flags & FL_EXT_FILLED) !== 0,
    isIPv4: (flags & FL_IPV4) !== 0,
    activeExpireMs: f64[fb + T_ACTIVE],
    inactiveExpireMs: f64[fb + T_INACTIVE],
  };
}

/** A complete key with canonical address text. */
interface TextKey {
  src: string;
  dst: string;
  proto: number;
  sport: number;
  dport: number;
}

/**
 * Slots of the flows whose key prints as the given canonical text. Usually 0 or 1; an IPv4 key
 * and an IPv4-mapped IPv6 key print the same (Go quirk) but are distinct flows here.
 */
function findByKey(s: CoreState, key: TextKey): number[] {
  const { src, dst, proto, sport, dport } = key;
  const found: number[] = [];
  if (!isUint(proto, 0xff) || !isUint(sport, 0xffff) || !isUint(dport, 0xffff)) return found;
  const k = new Uint32Array(KEY_WORDS);
  k[8] = proto;
  k[9] = sport;
  k[10] = dport;
  const probe = (): void => {
    const slot = s.table.find(k, s.table.hash(k));
    if (slot >= 0) found.push(slot);
  };
  const a4 = src.includes(":") ? -1 : parseIPv4Word(src);
  const b4 = dst.includes(":") ? -1 : parseIPv4Word(dst);
  if (a4 >= 0 && b4 >= 0) {
    k[0] = a4;
    k[4] = b4;
    k[11] = 4;
    probe();
  }
  // IPv6 family: IPv4 text stands for the IPv4-mapped address ::ffff:a.b.c.d.
  const a6 = a4 >= 0 ? new Uint32Array([0, 0, 0xffff, a4]) : parseIPv6Words(src);
  const b6 = b4 >= 0 ? new Uint32Array([0, 0, 0xffff, b4]) : parseIPv6Words(dst);
  if (a6 !== undefined && b6 !== undefined) {
    k.set(a6, 0);
    k.set(b6, 4);
    k[11] = 6;
    probe();
  }
  return found;
}
