/**
 * The typed records that flow through the aggregation core. An Antrea Agent data record decoded
 * by the codec is a `DataRecord` keyed by IE name, so after the collector has checked the
 * template it can be handed over as a {@linkcode FlowInput}. The core hands exporters an
 * {@linkcode AggregatedRecord}: a snapshot (own copy) of one aggregated flow, keyed by IE name,
 * which the IPFIX exporter encodes by looking up each template field's name and which the flat
 * record of ClickHouse/S3/log is built from.
 */

/** Fields of an Antrea Agent record (Agent template, 39 IEs). Absent IEs are `undefined`. */
export interface FlowInput {
  flowStartSeconds?: number;
  flowEndSeconds?: number;
  flowEndReason?: number;
  sourceTransportPort?: number;
  destinationTransportPort?: number;
  protocolIdentifier?: number;
  packetTotalCount?: bigint;
  octetTotalCount?: bigint;
  packetDeltaCount?: bigint;
  octetDeltaCount?: bigint;
  sourceIPv4Address?: string;
  destinationIPv4Address?: string;
  sourceIPv6Address?: string;
  destinationIPv6Address?: string;
  reversePacketTotalCount?: bigint;
  reverseOctetTotalCount?: bigint;
  reversePacketDeltaCount?: bigint;
  reverseOctetDeltaCount?: bigint;
  sourcePodName?: string;
  sourcePodNamespace?: string;
  sourceNodeName?: string;
  destinationPodName?: string;
  destinationPodNamespace?: string;
  destinationNodeName?: string;
  destinationServicePort?: number;
  destinationServicePortName?: string;
  ingressNetworkPolicyName?: string;
  ingressNetworkPolicyNamespace?: string;
  ingressNetworkPolicyType?: number;
  ingressNetworkPolicyRuleName?: string;
  ingressNetworkPolicyRuleAction?: number;
  egressNetworkPolicyName?: string;
  egressNetworkPolicyNamespace?: string;
  egressNetworkPolicyType?: number;
  egressNetworkPolicyRuleName?: string;
  egressNetworkPolicyRuleAction?: number;
  tcpState?: string;
  flowType?: number;
  egressName?: string;
  egressIP?: string;
  destinationClusterIPv4?: string;
  destinationClusterIPv6?: string;
}

/** The 5-tuple that identifies a flow (directional). Addresses are canonical text. */
export interface FlowKey {
  readonly sourceAddress: string;
  readonly destinationAddress: string;
  readonly protocol: number;
  readonly sourcePort: number;
  readonly destinationPort: number;
}

/**
 * One aggregated flow as exporters and the query API see it: the 63 IEs of the FA export
 * template (65 with Pod labels), keyed by IE name. IPv4 flows carry the `…IPv4…` address IEs,
 * IPv6 flows the `…IPv6…` ones. A snapshot: mutating the live flow never changes it.
 */
export interface AggregatedRecord {
  flowStartSeconds: number;
  flowEndSeconds: number;
  flowEndReason: number;
  sourceTransportPort: number;
  destinationTransportPort: number;
  protocolIdentifier: number;
  packetTotalCount: bigint;
  octetTotalCount: bigint;
  packetDeltaCount: bigint;
  octetDeltaCount: bigint;
  sourceIPv4Address?: string;
  destinationIPv4Address?: string;
  sourceIPv6Address?: string;
  destinationIPv6Address?: string;
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
  destinationServicePort: number;
  destinationServicePortName: string;
  ingressNetworkPolicyName: string;
  ingressNetworkPolicyNamespace: string;
  ingressNetworkPolicyType: number;
  ingressNetworkPolicyRuleName: string;
  ingressNetworkPolicyRuleAction: number;
  egressNetworkPolicyName: string;
  egressNetworkPolicyNamespace: string;
  egressNetworkPolicyType: number;
  egressNetworkPolicyRuleName: string;
  egressNetworkPolicyRuleAction: number;
  tcpState: string;
  flowType: number;
  egressName: string;
  egressIP: string;
  destinationClusterIPv4?: string;
  destinationClusterIPv6?: string;
  octetDeltaCountFromSourceNode: bigint;
  octetDeltaCountFromDestinationNode: bigint;
  octetTotalCountFromSourceNode: bigint;
  octetTotalCountFromDestinationNode: bigint;
  packetDeltaCountFromSourceNode: bigint;
  packetDeltaCountFromDestinationNode: bigint;
  packetTotalCountFromSourceNode: bigint;
  packetTotalCountFromDestinationNode: bigint;
  reverseOctetDeltaCountFromSourceNode: bigint;
  reverseOctetDeltaCountFromDestinationNode: bigint;
  reverseOctetTotalCountFromSourceNode: bigint;
  reverseOctetTotalCountFromDestinationNode: bigint;
  reversePacketDeltaCountFromSourceNode: bigint;
  reversePacketDeltaCountFromDestinationNode: bigint;
  reversePacketTotalCountFromSourceNode: bigint;
  reversePacketTotalCountFromDestinationNode: bigint;
  flowEndSecondsFromSourceNode: number;
  flowEndSecondsFromDestinationNode: number;
  throughput: bigint;
  throughputFromSourceNode: bigint;
  throughputFromDestinationNode: bigint;
  reverseThroughput: bigint;
  reverseThroughputFromSourceNode: bigint;
  reverseThroughputFromDestinationNode: bigint;
  /** Present only when `recordContents.podLabels` is enabled. */
  sourcePodLabels?: string;
  /** Present only when `recordContents.podLabels` is enabled. */
  destinationPodLabels?: string;
}

/** What the export loop hands to every exporter's `addRecord`. */
export interface ExportedFlow {
  /** The flow key. */
  readonly key: FlowKey;
  /** Own copy of the aggregated record; exporters may keep it. */
  readonly record: AggregatedRecord;
  /** Address family of the key (selects IPFIX template 257 vs 256). */
  readonly isIPv6: boolean;
  /** True when this is an InterNode half exported without its partner after the wait. */
  readonly uncorrelated: boolean;
}
