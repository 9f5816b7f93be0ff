/**
 * The field lists of the spec, each copied once from the spec text (/work/shared/spec) so the
 * tests compare the code against the spec and never against itself: nothing here is derived
 * from `src/record/schema.ts`, the table these lists test. Where a list is built from another
 * one, the spec itself states the relation (quoted in its comment).
 */

/**
 * ipfix.md §5.3 positions 1–39 (the Agent template, IPv4 variant; the same rows 1–39 of the
 * exporters.md §2.4 table).
 */
export const SPEC_AGENT_IPV4 = [
  "flowStartSeconds",
  "flowEndSeconds",
  "flowEndReason",
  "sourceTransportPort",
  "destinationTransportPort",
  "protocolIdentifier",
  "packetTotalCount",
  "octetTotalCount",
  "packetDeltaCount",
  "octetDeltaCount",
  "sourceIPv4Address",
  "destinationIPv4Address",
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
  "destinationServicePort",
  "destinationServicePortName",
  "ingressNetworkPolicyName",
  "ingressNetworkPolicyNamespace",
  "ingressNetworkPolicyType",
  "ingressNetworkPolicyRuleName",
  "ingressNetworkPolicyRuleAction",
  "egressNetworkPolicyName",
  "egressNetworkPolicyNamespace",
  "egressNetworkPolicyType",
  "egressNetworkPolicyRuleName",
  "egressNetworkPolicyRuleAction",
  "tcpState",
  "flowType",
  "egressName",
  "egressIP",
  "destinationClusterIPv4",
] as const;

/**
 * ipfix.md §5.3 positions 1–39, IPv6 variant: "positions 11, 12, 39 become sourceIPv6Address,
 * destinationIPv6Address, destinationClusterIPv6", so it is the IPv4 list with those three
 * address IEs replaced.
 */
export const SPEC_AGENT_IPV6: readonly string[] = (SPEC_AGENT_IPV4 as readonly string[])
  .with(10, "sourceIPv6Address")
  .with(11, "destinationIPv6Address")
  .with(38, "destinationClusterIPv6");

/** ipfix.md §5.3 positions 40–63 (appended by the FA after the Agent's 39). */
export const SPEC_FA_APPENDED = [
  "octetDeltaCountFromSourceNode",
  "octetDeltaCountFromDestinationNode",
  "octetTotalCountFromSourceNode",
  "octetTotalCountFromDestinationNode",
  "packetDeltaCountFromSourceNode",
  "packetDeltaCountFromDestinationNode",
  "packetTotalCountFromSourceNode",
  "packetTotalCountFromDestinationNode",
  "reverseOctetDeltaCountFromSourceNode",
  "reverseOctetDeltaCountFromDestinationNode",
  "reverseOctetTotalCountFromSourceNode",
  "reverseOctetTotalCountFromDestinationNode",
  "reversePacketDeltaCountFromSourceNode",
  "reversePacketDeltaCountFromDestinationNode",
  "reversePacketTotalCountFromSourceNode",
  "reversePacketTotalCountFromDestinationNode",
  "flowEndSecondsFromSourceNode",
  "flowEndSecondsFromDestinationNode",
  "throughput",
  "throughputFromSourceNode",
  "throughputFromDestinationNode",
  "reverseThroughput",
  "reverseThroughputFromSourceNode",
  "reverseThroughputFromDestinationNode",
] as const;

/** ipfix.md §5.3 positions 64–65, only when `recordContents.podLabels` is on. */
export const SPEC_POD_LABELS = ["sourcePodLabels", "destinationPodLabels"] as const;

/** ipfix.md §5.2 StatsElementList: the 8 counters the aggregation keeps per Node, in order. */
export const SPEC_STATS = [
  "octetDeltaCount",
  "octetTotalCount",
  "packetDeltaCount",
  "packetTotalCount",
  "reverseOctetDeltaCount",
  "reverseOctetTotalCount",
  "reversePacketDeltaCount",
  "reversePacketTotalCount",
] as const;

/** exporters.md §1.4, the flat record's fields 1–49 in upstream struct order. */
export const SPEC_FLAT = [
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
] as const;

/** exporters.md §5.2, the 28 fields of a flow log line in order. */
export const SPEC_LOG_LINE = [
  "flowStartSeconds",
  "flowEndSeconds",
  "sourceIP",
  "destinationIP",
  "sourceTransportPort",
  "destinationTransportPort",
  "protocolIdentifier",
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
  "egressName",
  "egressIP",
] as const;

/**
 * exporters.md §3.3 `flows` table, all 52 columns (the FA writes all but 1 and 50). Its
 * columns 2–48 are the §1.4 fields 1–47, name for name and in the same order (compared row by
 * row with the table; §3.4 maps them one to one), so they are taken from
 * {@linkcode SPEC_FLAT} rather than written out a second time.
 */
export const SPEC_CLICKHOUSE_TABLE = [
  "timeInserted",
  ...SPEC_FLAT.slice(0, 47),
  "clusterUUID",
  "trusted",
  "egressName",
  "egressIP",
] as const;

/**
 * exporters.md §4.2, the 51 S3 CSV columns (the two-column table read down each half): "ClickHouse
 * table order minus `trusted`, with `timeInserted` moved to after `clusterUUID`".
 */
export const SPEC_S3 = [
  ...SPEC_FLAT.slice(0, 47),
  "clusterUUID",
  "timeInserted",
  "egressName",
  "egressIP",
] as const;
