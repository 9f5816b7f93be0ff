/**
 * Slot layout of a live flow and the field table of the aggregated record. A flow is its
 * {@linkcode SlotStore} slot (u64 counters and throughputs, u32 times/ports/enums/flags, f64
 * expiry times); its strings are interned and the slot keeps their ids (u32 words, see
 * intern.ts), and fields that vary together (a Pod's name, namespace and Node; a policy's five
 * fields) are one interned tuple whose id the slot keeps ({@linkcode GROUPS}, tuples.ts).
 * {@linkcode FIELDS} says,
 * once, where each field of the {@linkcode AggregatedRecord} is kept and how ingestion sets it;
 * `field_code.ts` compiles create/correlate/snapshot code from it, so adding a plain field is
 * one row here. Fields with rules of their own (addresses, cluster IPs, labels, times and the
 * §3 statistics) are read from the table but written by the code that owns the rule.
 *
 * The `ie` column is typed by the record types `src/record/schema.ts` derives, and a test checks
 * that the table covers exactly the schema's exported fields; the storage columns stay here.
 */

import type { AggregatedRecord, FlowInput } from "./record.ts";
import { SLOT_BYTES, SPORT_SHIFT, U32 } from "./slot_store.ts";

// u64 layout of a slot. The 8 common Stats counters in the spec's list order, then the same 8
// FromSourceNode, the same 8 FromDestinationNode, then the 6 throughputs.
/** u64: octetDeltaCount. */
export const OCT_D = 0;
/** u64: octetTotalCount. */
export const OCT_T = 1;
/** u64: packetDeltaCount. */
export const PKT_D = 2;
/** u64: packetTotalCount. */
export const PKT_T = 3;
/** u64: reverseOctetDeltaCount. */
export const ROCT_D = 4;
/** u64: reverseOctetTotalCount. */
export const ROCT_T = 5;
/** u64: reversePacketDeltaCount. */
export const RPKT_D = 6;
/** u64: reversePacketTotalCount. */
export const RPKT_T = 7;
/** u64: offset of the FromSourceNode copies of the 8 counters. */
export const S_OFF = 8;
/** u64: offset of the FromDestinationNode copies of the 8 counters. */
export const D_OFF = 16;
/** u64: throughput. */
export const THR = 24;
/** u64: reverseThroughput. */
export const RTHR = 25;
/** u64: throughputFromSourceNode. */
export const THR_S = 26;
/** u64: reverseThroughputFromSourceNode. */
export const RTHR_S = 27;
/** u64: throughputFromDestinationNode. */
export const THR_D = 28;
/** u64: reverseThroughputFromDestinationNode. */
export const RTHR_D = 29;

/** f64: active expiry time (monotonic ms). */
export const T_ACTIVE = 0;
/** f64: inactive expiry time (monotonic ms). */
export const T_INACTIVE = 1;

/** Statistics side bit: from the source Node. */
export const SIDE_S = 1;
/** Statistics side bit: from the destination Node. */
export const SIDE_D = 2;

/** Flow flag: may be exported. */
export const FL_READY = 1;
/** Flow flag: Pod metadata filled (or tried, L16). */
export const FL_CORR_FILLED = 2;
/** Flow flag: labels filled. */
export const FL_EXT_FILLED = 4;
/** Flow flag: the key came from IPv4 IEs. */
export const FL_IPV4 = 8;
/** Flow flag: a record was aggregated since the last export (to count exports without new data, L9). */
export const FL_UPDATED = 16;
/**
 * Flow flag: the other Node's half was correlated in (§1.5), or the flow needs none (not
 * InterNode). Kept apart from {@linkcode FL_CORR_FILLED}, which an export's Pod-store fill also
 * sets: a fill before the other half arrives must not stop the merge (refined E2, SC-26).
 */
export const FL_MERGED = 32;
/** Flow flag: the flow's first record came from the source Node (§1.4 `fromSource`). */
export const FL_FIRST_S = 64;
/** Flow flag: the flow's first record came from the destination Node (§1.4 `fromDestination`). */
export const FL_FIRST_D = 128;

/**
 * Shift of the not-ready expiry count in the flags word ({@linkcode U32}.FLAGS): the `FL_*`
 * bits use 0-7.
 */
export const RETRY_SHIFT = 8;
/**
 * Most not-ready expiries counted; the count then stays there. A `maxRetries` at or above it
 * never gives up (2^24 expiries of the active timeout: years).
 */
export const MAX_RETRIES: number = 2 ** (32 - RETRY_SHIFT) - 1;

/** flowEndReason value of an ended flow (kept once seen). */
export const END_OF_FLOW = 3;

type InBoth = keyof AggregatedRecord & keyof FlowInput;

/**
 * One field of the aggregated record and where it is kept:
 * - `str`: u32 slot word `at` holds the intern id of the text (intern.ts); set from the record
 *   at creation, and by correlation (§1.5) when `correlate` and the record's value is not empty.
 * - `num`: u32 slot word `at`, set from the record at creation (absent reads 0), and by
 *   correlation when `correlate` and the record's value is not 0.
 * - `str` and `num` rows with a `group` (an index of {@linkcode GROUPS}) are word `at` of that
 *   group's tuple instead, whose id is in the group's slot word; same rules.
 * - `u32` / `u64`: slot word `at`, written by ingestion or the statistics; only read here. A
 *   `u32` row with `bits` reads that many bits from bit `shift` of a word it shares.
 */
export type FieldRow =
  | {
    readonly ie: InBoth;
    readonly kind: "str" | "num";
    readonly at: number;
    readonly correlate: boolean;
    readonly group?: number;
  }
  | {
    readonly ie: keyof AggregatedRecord;
    readonly kind: "u32";
    readonly at: number;
    readonly shift?: number;
    readonly bits?: number;
  }
  | { readonly ie: keyof AggregatedRecord; readonly kind: "u64"; readonly at: number };

/** A group of fields kept as one interned tuple (tuples.ts): the slot word of its id. */
export interface FieldGroup {
  /** For messages and debugging. */
  readonly name: string;
  /** u32 slot word holding the tuple id. */
  readonly at: number;
}

/** Index in {@linkcode GROUPS}: the source Pod's name, namespace and Node. */
export const G_SRC_POD = 0;
/** Index in {@linkcode GROUPS}: the destination Pod's name, namespace and Node. */
export const G_DST_POD = 1;
/** Index in {@linkcode GROUPS}: the ingress network policy. */
export const G_INGRESS = 2;
/** Index in {@linkcode GROUPS}: the egress network policy. */
export const G_EGRESS = 3;
/** Index in {@linkcode GROUPS}: the destination Service's port and port name. */
export const G_SERVICE = 4;
/** Index in {@linkcode GROUPS}: the Egress (SNAT) name and IP. */
export const G_SNAT = 5;

/**
 * The field groups, by index ({@linkcode FieldRow} `group`). Why: a flow has two Pods, two
 * policies, a Service and an Egress whose fields travel together and are shared by many flows;
 * one id per group instead of one word per field saves 14 words (56 bytes) a flow.
 */
export const GROUPS: readonly FieldGroup[] = [
  { name: "sourcePod", at: U32.SRC_POD },
  { name: "destinationPod", at: U32.DST_POD },
  { name: "ingressNetworkPolicy", at: U32.ING },
  { name: "egressNetworkPolicy", at: U32.EG },
  { name: "service", at: U32.SVC },
  { name: "egress", at: U32.EGRESS },
];

/** Position of the Pod name in a Pod group's tuple. */
export const POD_NAME = 0;
/** Position of the Pod namespace in a Pod group's tuple. */
export const POD_NS = 1;
/** Position of the Node name in a Pod group's tuple. */
export const POD_NODE = 2;

/** The 8 Stats counters (§3.2), in the export template's order. */
const COUNTER_ROWS = [
  { ie: "packetTotalCount", kind: "u64", at: PKT_T },
  { ie: "octetTotalCount", kind: "u64", at: OCT_T },
  { ie: "packetDeltaCount", kind: "u64", at: PKT_D },
  { ie: "octetDeltaCount", kind: "u64", at: OCT_D },
  { ie: "reversePacketTotalCount", kind: "u64", at: RPKT_T },
  { ie: "reverseOctetTotalCount", kind: "u64", at: ROCT_T },
  { ie: "reversePacketDeltaCount", kind: "u64", at: RPKT_D },
  { ie: "reverseOctetDeltaCount", kind: "u64", at: ROCT_D },
] as const;

type Counter = (typeof COUNTER_ROWS)[number]["ie"];

/**
 * Pod name, namespace and Node of one end of the flow (correlate fields, §1.5): positions
 * {@linkcode POD_NAME}, {@linkcode POD_NS}, {@linkcode POD_NODE} of group `group`.
 */
function podRows<E extends "source" | "destination">(end: E, group: number) {
  return (["PodName", "PodNamespace", "NodeName"] as const).map((f, i) => ({
    ie: `${end}${f}` as const,
    kind: "str" as const,
    at: [POD_NAME, POD_NS, POD_NODE][i],
    correlate: true,
    group,
  }));
}

/** The 5 fields of the ingress or egress network policy (correlate fields, §1.5): group `group`. */
function policyRows<D extends "ingress" | "egress">(dir: D, group: number) {
  const p = `${dir}NetworkPolicy` as const;
  return [
    { ie: `${p}Name`, kind: "str", at: 0, correlate: true, group },
    { ie: `${p}Namespace`, kind: "str", at: 1, correlate: true, group },
    { ie: `${p}Type`, kind: "num", at: 2, correlate: true, group },
    { ie: `${p}RuleName`, kind: "str", at: 3, correlate: true, group },
    { ie: `${p}RuleAction`, kind: "num", at: 4, correlate: true, group },
  ] as const;
}

/** Rows of the FromSourceNode/FromDestinationNode copies of each counter (§3.2), in IE order. */
function perSideCounterRows(): {
  ie: `${Counter}From${"Source" | "Destination"}Node`;
  kind: "u64";
  at: number;
}[] {
  // The template lists the per-side copies in slot order (octetDelta, octetTotal, ...).
  return [...COUNTER_ROWS].sort((x, y) => x.at - y.at).flatMap(({ ie, at }) => [
    { ie: `${ie}FromSourceNode` as const, kind: "u64" as const, at: S_OFF + at },
    { ie: `${ie}FromDestinationNode` as const, kind: "u64" as const, at: D_OFF + at },
  ]);
}

/** Rows of the 6 throughputs: common, FromSourceNode, FromDestinationNode of each direction. */
function throughputRows(): {
  ie: `${"throughput" | "reverseThroughput"}${"" | "FromSourceNode" | "FromDestinationNode"}`;
  kind: "u64";
  at: number;
}[] {
  return (["throughput", "reverseThroughput"] as const).flatMap((t, r) =>
    (["", "FromSourceNode", "FromDestinationNode"] as const).map((side, i) => ({
      ie: `${t}${side}` as const,
      kind: "u64" as const,
      at: THR + 2 * i + r,
    }))
  );
}

/**
 * The field table, in snapshot order. Not listed (their rules are not per-field copies): the
 * address IEs (key words, family-dependent names), the cluster IPs (canonicalised, optional)
 * and the Pod labels (optional, filled at export).
 */
export const FIELDS = [
  { ie: "flowStartSeconds", kind: "u32", at: U32.START },
  { ie: "flowEndSeconds", kind: "u32", at: U32.END },
  { ie: "flowEndReason", kind: "num", at: U32.REASON, correlate: false },
  { ie: "sourceTransportPort", kind: "u32", at: U32.PORTS, shift: SPORT_SHIFT, bits: 16 },
  { ie: "destinationTransportPort", kind: "u32", at: U32.PORTS, shift: 0, bits: 16 },
  { ie: "protocolIdentifier", kind: "u32", at: U32.PROTO, shift: 0, bits: 8 },
  ...COUNTER_ROWS,
  ...podRows("source", G_SRC_POD),
  ...podRows("destination", G_DST_POD),
  { ie: "destinationServicePort", kind: "num", at: 0, correlate: true, group: G_SERVICE },
  { ie: "destinationServicePortName", kind: "str", at: 1, correlate: true, group: G_SERVICE },
  ...policyRows("ingress", G_INGRESS),
  ...policyRows("egress", G_EGRESS),
  { ie: "tcpState", kind: "str", at: U32.TCP_STATE, correlate: false },
  { ie: "flowType", kind: "u32", at: U32.TYPE },
  { ie: "egressName", kind: "str", at: 0, correlate: false, group: G_SNAT },
  { ie: "egressIP", kind: "str", at: 1, correlate: false, group: G_SNAT },
  ...perSideCounterRows(),
  { ie: "flowEndSecondsFromSourceNode", kind: "u32", at: U32.END_S },
  { ie: "flowEndSecondsFromDestinationNode", kind: "u32", at: U32.END_D },
  ...throughputRows(),
] as const satisfies readonly FieldRow[];

/**
 * Bytes charged for each held flow apart from its strings (`limits.maxFlowBytes`): its slot's
 * typed-array words and its share of the index structures (flow table at a load of 1/4 or
 * more, expiry heap item, priority and position, chunk slack, the intern table's fixed arrays
 * spread: 56 bytes). Derived from the layout, so adding a field updates it. Checked against
 * `scripts/bench/memory.ts`: 424 charged, 423 measured (heap + external after GC, 100k
 * correlated flows).
 */
export const FLOW_FIXED_BYTES: number = SLOT_BYTES + 56;
