/**
 * The Antrea Agent data record of the tests: the 39 IEs of the Agent's IPv4/IPv6 template
 * (ipfix.md §1.5) with every Kubernetes-metadata IE unset, as an Agent sends it for a flow it
 * knows nothing about. Fixtures build on it and override only what their test is about, so
 * the full field list is written once.
 */

import type { DataRecord } from "../../src/ipfix/mod.ts";

/** The Kubernetes metadata IEs of an Agent record: Pods, Service, network policies, Egress. */
export interface AgentMetadata {
  /** Source Pod name. */
  sourcePodName: string;
  /** Source Pod namespace. */
  sourcePodNamespace: string;
  /** Node of the source Pod. */
  sourceNodeName: string;
  /** Destination Pod name. */
  destinationPodName: string;
  /** Destination Pod namespace. */
  destinationPodNamespace: string;
  /** Node of the destination Pod. */
  destinationNodeName: string;
  /** Service port of the destination ClusterIP. */
  destinationServicePort: number;
  /** Service port name (`namespace/name:port`). */
  destinationServicePortName: string;
  /** Ingress policy name. */
  ingressNetworkPolicyName: string;
  /** Ingress policy namespace. */
  ingressNetworkPolicyNamespace: string;
  /** Ingress policy type (1 K8s, 2 ACNP, 3 ANNP, ...). */
  ingressNetworkPolicyType: number;
  /** Ingress policy rule name. */
  ingressNetworkPolicyRuleName: string;
  /** Ingress rule action (1 allow, 2 drop, 3 reject). */
  ingressNetworkPolicyRuleAction: number;
  /** Egress policy name. */
  egressNetworkPolicyName: string;
  /** Egress policy namespace. */
  egressNetworkPolicyNamespace: string;
  /** Egress policy type. */
  egressNetworkPolicyType: number;
  /** Egress policy rule name. */
  egressNetworkPolicyRuleName: string;
  /** Egress rule action. */
  egressNetworkPolicyRuleAction: number;
  /** Name of the Egress resource. */
  egressName: string;
  /** SNAT IP of the Egress. */
  egressIP: string;
}

/** Every {@linkcode AgentMetadata} IE unset: `""` for strings, 0 for numbers. */
export function unsetMetadata(): AgentMetadata {
  return {
    sourcePodName: "",
    sourcePodNamespace: "",
    sourceNodeName: "",
    destinationPodName: "",
    destinationPodNamespace: "",
    destinationNodeName: "",
    destinationServicePort: 0,
    destinationServicePortName: "",
    ingressNetworkPolicyName: "",
    ingressNetworkPolicyNamespace: "",
    ingressNetworkPolicyType: 0,
    ingressNetworkPolicyRuleName: "",
    ingressNetworkPolicyRuleAction: 0,
    egressNetworkPolicyName: "",
    egressNetworkPolicyNamespace: "",
    egressNetworkPolicyType: 0,
    egressNetworkPolicyRuleName: "",
    egressNetworkPolicyRuleAction: 0,
    egressName: "",
    egressIP: "",
  };
}

/**
 * A complete Agent record (all 39 IEs of the family's template): a 5 s TCP flow of 10 packets
 * and 1000 octets each way (8 and 800 back) ending active, with addresses `0.0.0.0`, ports 0
 * and every metadata IE unset; then `over` applied. IPv6 (`::` ClusterIP) when `over` has a
 * source IPv6 address.
 */
export function agentRecord(over: Readonly<DataRecord> = {}): DataRecord {
  const addresses: DataRecord = over.sourceIPv6Address !== undefined
    ? { destinationClusterIPv6: "::" }
    : {
      sourceIPv4Address: "0.0.0.0",
      destinationIPv4Address: "0.0.0.0",
      destinationClusterIPv4: "0.0.0.0",
    };
  return {
    flowStartSeconds: 1_700_000_000,
    flowEndSeconds: 1_700_000_005,
    flowEndReason: 2,
    sourceTransportPort: 0,
    destinationTransportPort: 0,
    protocolIdentifier: 6,
    packetTotalCount: 10n,
    octetTotalCount: 1000n,
    packetDeltaCount: 10n,
    octetDeltaCount: 1000n,
    reversePacketTotalCount: 8n,
    reverseOctetTotalCount: 800n,
    reversePacketDeltaCount: 8n,
    reverseOctetDeltaCount: 800n,
    ...unsetMetadata(),
    tcpState: "ESTABLISHED",
    flowType: 1,
    ...addresses,
    ...over,
  };
}
