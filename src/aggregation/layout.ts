/**
 * Slot layout of a live flow and the field table of the aggregated record. A flow's numbers live
 * in its {@linkcode SlotStore} slot (u64 counters and throughputs, u32 times/ports/enums, f64
 * expiry times); its strings live on a small {@linkcode Flow} object. {@linkcode FIELDS} says,
 * once, where each field of the {@linkcode AggregatedRecord} is kept and how ingestion sets it;
 * `field_code.ts` compiles create/correlate/snapshot code from it, so adding a plain field is
 * one row here. Fields with rules of their own (addresses, cluster IPs, labels, times and the
 * §3 statistics) are read from the table but written by the code that owns the rule.
 *
 * The `ie` column is typed by the record types `src/record/schema.ts` derives, and a test checks
 * that the table covers exactly the schema's exported fields; the storage columns stay here.
 */

import type { HeapItem } from "./expiry_heap.ts";
import type { AggregatedRecord, FlowInput } from "./record.ts";
import { SLOT_BYTES, U32 } from "./slot_store.ts";

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

/** flowEndReason value of an ended flow (kept once seen). */
export const END_OF_FLOW = 3;

type InBoth = keyof AggregatedRecord & keyof FlowInput;

/**
 * One field of the aggregated record and where it is kept:
 * - `str`: a property of the {@linkcode Flow} named like the IE, interned; set from the record
 *   at creation, and by correlation (§1.5) when `correlate` and the record's value is not empty.
 * - `num`: u32 slot word `at`, set from the record at creation (absent reads 0), and by
 *   correlation when `correlate` and the record's value is not 0.
 * - `u32` / `u64`: slot word `at`, written by ingestion or the statistics; only read here.
 */
export type FieldRow =
  | { readonly ie: InBoth; readonly kind: "str"; readonly correlate: boolean }
  | { readonly ie: InBoth; readonly kind: "num"; readonly at: number; readonly correlate: boolean }
  | { readonly ie: keyof AggregatedRecord; readonly kind: "u32" | "u64"; readonly at: number };

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

/** Pod name, namespace and Node of one end of the flow (correlate fields, §1.5). */
function podRows<E extends "source" | "destination">(end: E) {
  return (["PodName", "PodNamespace", "NodeName"] as const).map((f) => ({
    ie: `${end}${f}` as const,
    kind: "str" as const,
    correlate: true,
  }));
}

/** The 5 fields of the ingress or egress network policy (correlate fields, §1.5). */
function policyRows<D extends "ingress" | "egress">(dir: D, typeAt: number, actionAt: number) {
  const p = `${dir}NetworkPolicy` as const;
  return [
    { ie: `${p}Name`, kind: "str", correlate: true },
    { ie: `${p}Namespace`, kind: "str", correlate: true },
    { ie: `${p}Type`, kind: "num", at: typeAt, correlate: true },
    { ie: `${p}RuleName`, kind: "str", correlate: true },
    { ie: `${p}RuleAction`, kind: "num", at: actionAt, correlate: true },
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
  { ie: "sourceTransportPort", kind: "u32", at: U32.SPORT },
  { ie: "destinationTransportPort", kind: "u32", at: U32.DPORT },
  { ie: "protocolIdentifier", kind: "u32", at: U32.PROTO },
  ...COUNTER_ROWS,
  ...podRows("source"),
  ...podRows("destination"),
  { ie: "destinationServicePort", kind: "num", at: U32.SVC_PORT, correlate: true },
  { ie: "destinationServicePortName", kind: "str", correlate: true },
  ...policyRows("ingress", U32.ING_TYPE, U32.ING_ACT),
  ...policyRows("egress", U32.EG_TYPE, U32.EG_ACT),
  { ie: "tcpState", kind: "str", correlate: false },
  { ie: "flowType", kind: "u32", at: U32.TYPE },
  { ie: "egressName", kind: "str", correlate: false },
  { ie: "egressIP", kind: "str", correlate: false },
  ...perSideCounterRows(),
  { ie: "flowEndSecondsFromSourceNode", kind: "u32", at: U32.END_S },
  { ie: "flowEndSecondsFromDestinationNode", kind: "u32", at: U32.END_D },
  ...throughputRows(),
] as const satisfies readonly FieldRow[];

/** Properties of a {@linkcode Flow} besides its `str` fields (bookkeeping, cluster IPs, labels). */
const OTHER_FLOW_PROPERTIES = 8;

/**
 * Bytes charged for each held flow apart from its strings (`limits.maxFlowBytes`): its slot's
 * typed-array words, its {@linkcode Flow} object (a 3-word header and one 8-byte word per
 * property) and its share of the index structures (flow table at a load of 1/4 or more, heap
 * item and priority, `bySlot` entry, chunk slack: 64 bytes). Derived from the layout, so adding
 * a field updates it. Checked against `scripts/bench/memory.ts`: 632 charged, 627 measured
 * (heap + external after GC, 100k correlated flows).
 */
export const FLOW_FIXED_BYTES: number = SLOT_BYTES +
  8 * (3 + OTHER_FLOW_PROPERTIES + FIELDS.filter((f) => f.kind === "str").length) + 64;

/** IE names of the string fields, which are properties of {@linkcode Flow}. */
export type StringField = Extract<(typeof FIELDS)[number], { kind: "str" }>["ie"];

/** The string fields of a flow, one property per `str` row of {@linkcode FIELDS}. */
export type FlowStrings = { -readonly [K in StringField]: string };

/** One live flow: strings and small integers only; its numbers are in its slot. */
export interface Flow extends HeapItem, FlowStrings {
  /** `FL_*` bits. */
  flags: number;
  /** Not-ready expiries so far. */
  retries: number;
  /** Its slot in the store. */
  readonly slot: number;
  /** destinationClusterIPv4, canonical; undefined when the Agent did not send the IE. */
  clusterV4: string | undefined;
  /** destinationClusterIPv6, canonical; undefined when the Agent did not send the IE. */
  clusterV6: string | undefined;
  /** sourcePodLabels JSON once filled (labels enabled). */
  srcLabels: string | undefined;
  /** destinationPodLabels JSON once filled (labels enabled). */
  dstLabels: string | undefined;
}
