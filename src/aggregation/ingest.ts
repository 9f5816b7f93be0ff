/**
 * Ingestion (spec aggregation.md §1-3): validates one decoded Agent record, builds its key,
 * creates the flow or updates it, and correlates the two halves of an InterNode flow (§1.5).
 * Records are processed one by one and a bad one is rejected and counted alone (L15); nothing
 * here throws for bad input.
 */

import type { FlowInput } from "./record.ts";
import { correlationRequired, FlowType, isFromDestination, isFromSource } from "./correlation.ts";
import { FIELD_CODE } from "./field_code.ts";
import { maxStringBytes, NO_TEXT } from "./intern.ts";
import { canonicalAddress, readFlowKey } from "./flow_key.ts";
import { KEY_WORDS } from "./flow_table.ts";
import {
  FL_CORR_FILLED,
  FL_FIRST_D,
  FL_FIRST_S,
  FL_IPV4,
  FL_MERGED,
  FL_READY,
  FL_UPDATED,
  FLOW_FIXED_BYTES,
  SIDE_D,
  SIDE_S,
} from "./layout.ts";
import { U32, u32Base, u64Base } from "./slot_store.ts";
import { type CoreState, log } from "./state.ts";
import { aggregate, counterWords, initStats } from "./flow_stats.ts";
import { scheduleNew, touch } from "./expiry.ts";
import { isUint, okCounter } from "./values.ts";
import { STATS_FIELDS } from "../record/schema.ts";

/**
 * Ingests one record synchronously (spec §2.2). Returns false, counting and logging the
 * reason, when the record is rejected; never throws for bad input.
 */
export function addRecord(s: CoreState, r: FlowInput): boolean {
  s.counters.recordsIn++;
  try {
    return ingest(s, r);
  } catch (err) {
    // Last line of defence: field checks should make this unreachable; a record must never
    // take the collector down.
    return s.reject("invalidRecord", `record could not be aggregated: ${err}`);
  }
}

function ingest(s: CoreState, r: FlowInput): boolean {
  if (r === null || typeof r !== "object") {
    return s.reject("invalidRecord", "record is not an object");
  }
  const k = s.key;
  const problem = readFlowKey(k, r);
  if (problem !== undefined) {
    warnBothFamiliesOf(s, r);
    return s.reject(problem[0], problem[1]);
  }
  const h = s.table.hash(k);
  const slot = s.table.find(k, h);
  return ingestKeyed(s, r, slot, h, undefined);
}

/**
 * The rest of {@linkcode ingest} once the key of `r` is in the probe scratch (hash `h`) and
 * looked up (`slot`, -1 when new): creates the flow or updates it. `words`: the record's 8
 * counters as `COUNTER_WORDS` read from its bytes (then `r`'s own counters are not read), or
 * undefined to take them from `r`.
 */
function ingestKeyed(
  s: CoreState,
  r: FlowInput,
  slot: number,
  h: number,
  words: Uint32Array | undefined,
): boolean {
  warnBothFamiliesOf(s, r);
  let flowType = r.flowType;
  if (typeof flowType !== "number") {
    flowType = FlowType.Unknown;
    s.counters.missingFlowType++;
    const n = s.rl.allow("flowType");
    if (n >= 0) log.warn("record without flowType, treated as 0", { suppressed: n });
  }
  const corr = correlationRequired(r, flowType);
  if (slot < 0) return create(s, r, h, s.key[11] === 4, flowType, corr);
  return update(s, slot, r, corr, words);
}

/**
 * The fields {@linkcode addRecordView} needs in a record's view: every field the path of an
 * update without correlation reads (the key, the flow type and rule actions, the Pod names that
 * tell the Node, the times, end reason, TCP state and the 8 counters). A test runs that path
 * with views that throw on any other field.
 */
export const UPDATE_VIEW_FIELDS: readonly string[] = [
  "sourceIPv4Address",
  "destinationIPv4Address",
  "sourceIPv6Address",
  "destinationIPv6Address",
  "sourceTransportPort",
  "destinationTransportPort",
  "protocolIdentifier",
  "flowType",
  "egressNetworkPolicyRuleAction",
  "ingressNetworkPolicyRuleAction",
  "sourcePodName",
  "destinationPodName",
  "flowStartSeconds",
  "flowEndSeconds",
  "flowEndReason",
  "tcpState",
  ...STATS_FIELDS,
];

/**
 * The string fields of {@linkcode UPDATE_VIEW_FIELDS} that a view may carry as presence only
 * (`""` or a marker, see the codec's `CompileOptions.presence`): the Pod names, which the view's
 * path reads only to tell the Node that sent the record (empty or not). Never stored: a record
 * whose names are kept (a new flow, a correlation) is decoded whole.
 */
export const UPDATE_VIEW_PRESENCE: readonly string[] = ["sourcePodName", "destinationPodName"];

/**
 * Ingests a record given as its view (only {@linkcode UPDATE_VIEW_FIELDS} decoded, the
 * {@linkcode UPDATE_VIEW_PRESENCE} ones as presence only; the object may be reused for the next
 * record, so nothing of it is kept) and its full decoding on demand. With `key` (its flow key
 * words, read from the record's bytes at the template's fixed offsets: see `skim.ts`), the
 * view's key fields are not read (they may be presence only too); with `words` (its 8 counters
 * as `COUNTER_WORDS`, flow_stats.ts, read from its bytes), neither are the view's counters. Then: a record of a known
 * flow that brings no correlation (the flow is merged, or the record comes from the Node of
 * its first record) is an update that reads
 * nothing else, so the view is enough; any other record (a new flow, the other Node's first
 * record, a bad key) is decoded by `full` and ingested exactly as {@linkcode addRecord} would.
 * Most records of a steady stream are such updates: the shards skip decoding their other
 * fields (strings mostly).
 */
export function addRecordView(
  s: CoreState,
  view: FlowInput,
  full: () => FlowInput,
  key?: Uint32Array,
  words?: Uint32Array,
): boolean {
  s.counters.recordsIn++;
  try {
    const k = s.key;
    if (key !== undefined) {
      // Read from the record's bytes by the caller: the words readFlowKey would give.
      for (let j = 0; j < KEY_WORDS; j++) k[j] = key[j];
    } else if (readFlowKey(k, view) !== undefined) {
      // A bad key: the whole record is rejected (and warned about) as addRecord would.
      return ingest(s, full());
    }
    // The whole record has the view's key (the same bytes): its look-up holds for both.
    const h = s.table.hash(k);
    const slot = s.table.find(k, h);
    let viewOnly = false;
    if (slot >= 0) {
      const flags = s.store.u32(slot)[u32Base(slot) + U32.FLAGS];
      viewOnly = (flags & FL_MERGED) !== 0 || sameNode(view, flags);
    }
    return viewOnly
      ? ingestKeyed(s, view, slot, h, words)
      : ingestKeyed(s, full(), slot, h, undefined);
  } catch (err) {
    return s.reject("invalidRecord", `record could not be aggregated: ${err}`);
  }
}

/** Warns (rate-limited) for each side of `r` that carries both address families. */
function warnBothFamiliesOf(s: CoreState, r: FlowInput): void {
  // The IPv4 IE wins when a record carries both families (a warning, not a rejection).
  if (r.sourceIPv4Address !== undefined && r.sourceIPv6Address !== undefined) {
    warnBothFamilies(s, "source");
  }
  if (r.destinationIPv4Address !== undefined && r.destinationIPv6Address !== undefined) {
    warnBothFamilies(s, "destination");
  }
}

function warnBothFamilies(s: CoreState, side: string): void {
  const n = s.rl.allow("bothFamilies");
  if (n >= 0) {
    log.warn("record carries IPv4 and IPv6 address IEs, IPv4 used", { side, suppressed: n });
  }
}

/**
 * §3.1/§3.2: creates a flow for the key in the probe scratch (hash `h`). Positional arguments:
 * it runs for every new flow, and an options object would be one more allocation.
 */
function create(
  s: CoreState,
  r: FlowInput,
  h: number,
  isIPv4: boolean,
  flowType: number,
  corr: boolean,
): boolean {
  const start = r.flowStartSeconds;
  const end = r.flowEndSeconds;
  // §3.1: creation needs these four; the other counters default to 0.
  if (
    start === undefined || end === undefined || r.octetTotalCount === undefined ||
    r.reverseOctetTotalCount === undefined
  ) {
    return s.reject("missingField", "new flow without start/end time or octet totals");
  }
  if (!isUint(start, 0xffffffff) || !isUint(end, 0xffffffff)) {
    return s.reject("badFieldType", "record with an invalid flowStart/EndSeconds");
  }
  if (!countersValid(r, false)) {
    return s.reject("badFieldType", "record with an invalid counter");
  }
  if (!s.takeFlow()) {
    return s.reject("maxFlows", "maxFlows reached, record for a new flow dropped");
  }
  if (s.overBytes(FLOW_FIXED_BYTES + FIELD_CODE.createBytes(r) + CLUSTER_IPS_BYTES)) {
    s.flowsGone(1);
    return s.reject("maxFlowBytes", "maxFlowBytes reached, record for a new flow dropped");
  }
  const fromS = isFromSource(r.sourcePodName, r.destinationPodName);
  const sides = corr ? (fromS ? SIDE_S : SIDE_D) : SIDE_S | SIDE_D;
  let flags = FL_UPDATED;
  if (isIPv4) flags |= FL_IPV4;
  if (fromS) flags |= FL_FIRST_S;
  else if (isFromDestination(r.sourcePodName, r.destinationPodName)) flags |= FL_FIRST_D;
  if (!corr) flags |= FL_READY;
  // Only an InterNode flow waits for the other Node's half, even when created ready (deny).
  if (flowType !== FlowType.InterNode) flags |= FL_CORR_FILLED | FL_MERGED;
  const store = s.store;
  const I = s.intern;
  const slot = store.alloc();
  const u32 = store.u32(slot);
  const ub = u32Base(slot);
  FIELD_CODE.create(r, I, s.groups, u32, ub);
  u32[ub + U32.FLAGS] = flags;
  if (r.destinationClusterIPv4 !== undefined) {
    u32[ub + U32.CLUSTER_V4] = I.ref(canonicalAddress(r.destinationClusterIPv4, true) ?? "0.0.0.0");
  }
  if (r.destinationClusterIPv6 !== undefined) {
    u32[ub + U32.CLUSTER_V6] = I.ref(canonicalAddress(r.destinationClusterIPv6, false) ?? "::");
  }
  u32[ub + U32.START] = start;
  u32[ub + U32.END] = end;
  u32[ub + U32.TYPE] = flowType;
  if (sides & SIDE_S) u32[ub + U32.END_S] = end;
  if (sides & SIDE_D) u32[ub + U32.END_D] = end;
  initStats(store.u64(slot), store.u64Words(slot), u64Base(slot), r, sides);
  scheduleNew(s, slot);
  s.table.insert(slot, s.key, h);
  s.counters.flowsCreated++;
  s.counters.recordsAccepted++;
  return true;
}

function countersValid(r: FlowInput, required: boolean): boolean {
  return okCounter(r.octetDeltaCount, required) && okCounter(r.octetTotalCount, required) &&
    okCounter(r.packetDeltaCount, required) && okCounter(r.packetTotalCount, required) &&
    okCounter(r.reverseOctetDeltaCount, required) &&
    okCounter(r.reverseOctetTotalCount, required) &&
    okCounter(r.reversePacketDeltaCount, required) &&
    okCounter(r.reversePacketTotalCount, required);
}

/**
 * §3.3: a record for a known flow; correlates a waiting InterNode half first (§1.5). Its
 * counters are `words` when given (read from its bytes: present and valid by construction),
 * else `r`'s own.
 */
function update(
  s: CoreState,
  slot: number,
  r: FlowInput,
  corr: boolean,
  words: Uint32Array | undefined,
): boolean {
  // §3.3: an update needs the NonStats IEs and all 8 Stats IEs (upstream fails otherwise).
  if (
    r.flowEndSeconds === undefined || r.flowEndReason === undefined || r.tcpState === undefined
  ) {
    return s.reject("missingField", "flow update without flowEndSeconds/Reason/tcpState");
  }
  if (!isUint(r.flowEndSeconds, 0xffffffff)) {
    return s.reject("badFieldType", "record with an invalid flowEndSeconds");
  }
  if (words === undefined) {
    if (!countersValid(r, true)) {
      return s.reject("missingField", "flow update without all 8 counters");
    }
    words = s.words;
    counterWords(r, words);
  }
  const sides = corr
    ? (isFromSource(r.sourcePodName, r.destinationPodName) ? SIDE_S : SIDE_D)
    : SIDE_S | SIDE_D;
  const u32 = s.store.u32(slot);
  const ub = u32Base(slot);
  const flags = u32[ub + U32.FLAGS];
  const merge = (flags & FL_MERGED) === 0 && !sameNode(r, flags);
  // Strings this record may add: checked before anything changes, so a rejected record has
  // no effect. A tcpState usually is the held one (no cost, no look-up).
  let added = merge ? FIELD_CODE.correlateBytes(r) + CLUSTER_IPS_BYTES : 0;
  if (r.tcpState !== s.intern.text(u32[ub + U32.TCP_STATE])) {
    added += s.intern.addedBytes(r.tcpState);
  }
  if (added > 0 && s.overBytes(added)) {
    return s.reject("maxFlowBytes", "maxFlowBytes reached, record adding strings dropped");
  }
  if (merge) {
    // Refined E2 (L4): the other Node's first record correlates, whether or not it needs
    // correlation itself and whether or not a same-Node deny record already made the flow ready.
    correlate(s, u32, ub, r);
    u32[ub + U32.FLAGS] = flags | FL_READY | FL_CORR_FILLED | FL_MERGED;
    s.counters.correlated++;
  } else if (!corr && (flags & FL_READY) === 0) {
    // E2 fix (L4): without it the flow would never be exported; metadata stays to be filled.
    u32[ub + U32.FLAGS] = flags | FL_READY;
    s.counters.readyWithoutCorrelation++;
  }
  aggregate(s, slot, r, sides, words);
  touch(s, slot);
  s.counters.recordsAccepted++;
  return true;
}

/**
 * True when `r` comes from the Node that sent the flow's first record (§1.4 `sameNode`). The
 * first record's Node is kept in the flags: the stored Pod names may since have been filled
 * from the Pod store at an export.
 */
function sameNode(r: FlowInput, flags: number): boolean {
  return ((flags & FL_FIRST_S) !== 0 && isFromSource(r.sourcePodName, r.destinationPodName)) ||
    ((flags & FL_FIRST_D) !== 0 && isFromDestination(r.sourcePodName, r.destinationPodName));
}

/** §1.5: copies every set correlate field of `r` into the stored flow (words at `ub`). */
function correlate(s: CoreState, u32: Uint32Array, ub: number, r: FlowInput): void {
  const I = s.intern;
  FIELD_CODE.correlate(r, I, s.groups, u32, ub);
  // A stored record without the IE is skipped (upstream dereferences nil: L14).
  const c4 = u32[ub + U32.CLUSTER_V4];
  if (c4 !== NO_TEXT && r.destinationClusterIPv4 !== undefined) {
    const v = canonicalAddress(r.destinationClusterIPv4, true);
    if (v !== undefined && v !== "0.0.0.0") u32[ub + U32.CLUSTER_V4] = I.replace(c4, v);
  }
  const c6 = u32[ub + U32.CLUSTER_V6];
  if (c6 !== NO_TEXT && r.destinationClusterIPv6 !== undefined) {
    const v = canonicalAddress(r.destinationClusterIPv6, false);
    if (v !== undefined && v !== "::") u32[ub + U32.CLUSTER_V6] = I.replace(c6, v);
  }
}

/** Upper bound of what the two cluster IP texts of a record can add (canonical, <= 39 chars). */
const CLUSTER_IPS_BYTES = 2 * maxStringBytes("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff");
