/**
 * The canonical flat flow record shared by the ClickHouse, S3 and log exporters
 * (exporters.md §1.4): one typed row built from an exported flow, in upstream struct order,
 * absent IEs as zero values, IPs as canonical text. Exporters build it synchronously inside
 * `addRecord`, so later mutation of the live flow can never leak into an exported row.
 */

import type { ExportedFlow } from "../aggregation/record.ts";
import { canonicalIP as codecCanonicalIP } from "../ipfix/ip.ts";

/** One flow as a flat row. u64 counters are `bigint` (exact above 2^53). */
export interface FlatRecord {
  flowStartSeconds: number;
  flowEndSeconds: number;
  flowEndSecondsFromSourceNode: number;
  flowEndSecondsFromDestinationNode: number;
  flowEndReason: number;
  sourceIP: string;
  destinationIP: string;
  sourceTransportPort: number;
  destinationTransportPort: number;
  protocolIdentifier: number;
  packetTotalCount: bigint;
  octetTotalCount: bigint;
  packetDeltaCount: bigint;
  octetDeltaCount: bigint;
  reversePacketTotalCount: bigint;
  reverseOctetTotalCount: bigint;
  reversePacketDeltaCount: bigint;
  reverseOctetDeltaCount: bigint;
  sourcePodName: string;
  sourcePodNamespace: string;
  sourceNodeName: string;
  destinationPodName: string;
  destinationPodNamespace: string;
  destinationNodeName: string;
  destinationClusterIP: string;
  destinationServicePort: number;
  destinationServicePortName: string;
  ingressNetworkPolicyName: string;
  ingressNetworkPolicyNamespace: string;
  ingressNetworkPolicyRuleName: string;
  ingressNetworkPolicyRuleAction: number;
  ingressNetworkPolicyType: number;
  egressNetworkPolicyName: string;
  egressNetworkPolicyNamespace: string;
  egressNetworkPolicyRuleName: string;
  egressNetworkPolicyRuleAction: number;
  egressNetworkPolicyType: number;
  tcpState: string;
  flowType: number;
  sourcePodLabels: string;
  destinationPodLabels: string;
  throughput: bigint;
  reverseThroughput: bigint;
  throughputFromSourceNode: bigint;
  throughputFromDestinationNode: bigint;
  reverseThroughputFromSourceNode: bigint;
  reverseThroughputFromDestinationNode: bigint;
  egressName: string;
  egressIP: string;
  /** Not one of the 49 upstream fields: the cluster UUID given to {@linkcode toFlatRecord}, or "". */
  clusterUUID: string;
}

/** The 49 upstream fields in struct order (exporters.md §1.4); `clusterUUID` is not included. */
export const FLAT_RECORD_FIELDS: readonly (Exclude<keyof FlatRecord, "clusterUUID">)[] = [
  "flowStartSeconds",
  "flowEndSeconds",
  "flowEndSecondsFromSourceNode",
  "flowEndSecondsFromDestinationNode",
  "flowEndReason",
  "sourceIP",
  "destinationIP",
  "sourceTransportPort",
  "destinationTransportPort",
  "protocolIdentifier",
  "packetTotalCount",
  "octetTotalCount",
  "packetDeltaCount",
  "octetDeltaCount",
  "reversePacketTotalCount",
  "reverseOctetTotalCount",
  "reversePacketDeltaCount",
  "reverseOctetDeltaCount",
  "sourcePodName",
  "sourcePodNamespace",
  "sourceNodeName",
  "destinationPodName",
  "destinationPodNamespace",
  "destinationNodeName",
  "destinationClusterIP",
  "destinationServicePort",
  "destinationServicePortName",
  "ingressNetworkPolicyName",
  "ingressNetworkPolicyNamespace",
  "ingressNetworkPolicyRuleName",
  "ingressNetworkPolicyRuleAction",
  "ingressNetworkPolicyType",
  "egressNetworkPolicyName",
  "egressNetworkPolicyNamespace",
  "egressNetworkPolicyRuleName",
  "egressNetworkPolicyRuleAction",
  "egressNetworkPolicyType",
  "tcpState",
  "flowType",
  "sourcePodLabels",
  "destinationPodLabels",
  "throughput",
  "reverseThroughput",
  "throughputFromSourceNode",
  "throughputFromDestinationNode",
  "reverseThroughputFromSourceNode",
  "reverseThroughputFromDestinationNode",
  "egressName",
  "egressIP",
];

/**
 * Canonical text of an IP address, as Go prints it (dotted quad for IPv4, RFC 5952 for IPv6,
 * an IPv4-mapped IPv6 address as its dotted quad): the codec's formatting, so every sink
 * agrees with the flow key. Unparsable text is returned unchanged (the codec already produces
 * canonical text; this guards other producers).
 */
export function canonicalIP(s: string): string {
  if (s === "" || !s.includes(":")) return s;
  return codecCanonicalIP(s) ?? s;
}

function labels(v: string | undefined): string {
  // Upstream serialised a nil label map as `null`; latest Antrea writes `{}` (exporters.md §1.4).
  if (v === undefined) return "";
  return v === "null" ? "{}" : v;
}

/** Builds the flat record of an exported flow. Absent IEs become 0 / 0n / "". */
export function toFlatRecord(flow: ExportedFlow, clusterUUID = ""): FlatRecord {
  const r = flow.record;
  const n = (v: number | undefined): number => v ?? 0;
  const b = (v: bigint | undefined): bigint => v ?? 0n;
  const s = (v: string | undefined): string => v ?? "";
  return {
    flowStartSeconds: n(r.flowStartSeconds),
    flowEndSeconds: n(r.flowEndSeconds),
    flowEndSecondsFromSourceNode: n(r.flowEndSecondsFromSourceNode),
    flowEndSecondsFromDestinationNode: n(r.flowEndSecondsFromDestinationNode),
    flowEndReason: n(r.flowEndReason),
    sourceIP: canonicalIP(r.sourceIPv4Address ?? r.sourceIPv6Address ?? ""),
    destinationIP: canonicalIP(r.destinationIPv4Address ?? r.destinationIPv6Address ?? ""),
    sourceTransportPort: n(r.sourceTransportPort),
    destinationTransportPort: n(r.destinationTransportPort),
    protocolIdentifier: n(r.protocolIdentifier),
    packetTotalCount: b(r.packetTotalCount),
    octetTotalCount: b(r.octetTotalCount),
    packetDeltaCount: b(r.packetDeltaCount),
    octetDeltaCount: b(r.octetDeltaCount),
    reversePacketTotalCount: b(r.reversePacketTotalCount),
    reverseOctetTotalCount: b(r.reverseOctetTotalCount),
    reversePacketDeltaCount: b(r.reversePacketDeltaCount),
    reverseOctetDeltaCount: b(r.reverseOctetDeltaCount),
    sourcePodName: s(r.sourcePodName),
    sourcePodNamespace: s(r.sourcePodNamespace),
    sourceNodeName: s(r.sourceNodeName),
    destinationPodName: s(r.destinationPodName),
    destinationPodNamespace: s(r.destinationPodNamespace),
    destinationNodeName: s(r.destinationNodeName),
    destinationClusterIP: canonicalIP(r.destinationClusterIPv4 ?? r.destinationClusterIPv6 ?? ""),
    destinationServicePort: n(r.destinationServicePort),
    destinationServicePortName: s(r.destinationServicePortName),
    ingressNetworkPolicyName: s(r.ingressNetworkPolicyName),
    ingressNetworkPolicyNamespace: s(r.ingressNetworkPolicyNamespace),
    ingressNetworkPolicyRuleName: s(r.ingressNetworkPolicyRuleName),
    ingressNetworkPolicyRuleAction: n(r.ingressNetworkPolicyRuleAction),
    ingressNetworkPolicyType: n(r.ingressNetworkPolicyType),
    egressNetworkPolicyName: s(r.egressNetworkPolicyName),
    egressNetworkPolicyNamespace: s(r.egressNetworkPolicyNamespace),
    egressNetworkPolicyRuleName: s(r.egressNetworkPolicyRuleName),
    egressNetworkPolicyRuleAction: n(r.egressNetworkPolicyRuleAction),
    egressNetworkPolicyType: n(r.egressNetworkPolicyType),
    tcpState: s(r.tcpState),
    flowType: n(r.flowType),
    sourcePodLabels: labels(r.sourcePodLabels),
    destinationPodLabels: labels(r.destinationPodLabels),
    throughput: b(r.throughput),
    reverseThroughput: b(r.reverseThroughput),
    throughputFromSourceNode: b(r.throughputFromSourceNode),
    throughputFromDestinationNode: b(r.throughputFromDestinationNode),
    reverseThroughputFromSourceNode: b(r.reverseThroughputFromSourceNode),
    reverseThroughputFromDestinationNode: b(r.reverseThroughputFromDestinationNode),
    egressName: s(r.egressName),
    egressIP: s(r.egressIP),
    clusterUUID,
  };
}
