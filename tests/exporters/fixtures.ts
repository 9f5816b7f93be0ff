/**
 * Shared fixtures of the exporter tests, in a module of its own so importing them does not
 * register another test file's tests again.
 */

import type { AggregatedRecord, ExportedFlow } from "../../src/aggregation/record.ts";

/** Fixture record F of exporters.md §8.0 (IPv4 unless `ipv6`). */
export function fixtureFlow(ipv6 = false, overrides: Partial<AggregatedRecord> = {}): ExportedFlow {
  const record: AggregatedRecord = {
    flowStartSeconds: 1637706961,
    flowEndSeconds: 1637706973,
    flowEndSecondsFromSourceNode: 1637706974,
    flowEndSecondsFromDestinationNode: 1637706975,
    flowEndReason: 3,
    sourceTransportPort: 44752,
    destinationTransportPort: 5201,
    protocolIdentifier: 6,
    packetTotalCount: 823188n,
    octetTotalCount: 30472817041n,
    packetDeltaCount: 241333n,
    octetDeltaCount: 8982624938n,
    reversePacketTotalCount: 471111n,
    reverseOctetTotalCount: 24500996n,
    reversePacketDeltaCount: 136211n,
    reverseOctetDeltaCount: 7083284n,
    sourcePodName: "perftest-a",
    sourcePodNamespace: "antrea-test",
    sourceNodeName: "k8s-node-control-plane",
    destinationPodName: "perftest-b",
    destinationPodNamespace: "antrea-test-b",
    destinationNodeName: "k8s-node-control-plane-b",
    destinationServicePort: 5202,
    destinationServicePortName: "perftest",
    ingressNetworkPolicyName: "test-flow-aggregator-networkpolicy-ingress-allow",
    ingressNetworkPolicyNamespace: "antrea-test-ns",
    ingressNetworkPolicyType: 1,
    ingressNetworkPolicyRuleName: "test-flow-aggregator-networkpolicy-rule",
    ingressNetworkPolicyRuleAction: 2,
    egressNetworkPolicyName: "test-flow-aggregator-networkpolicy-egress-allow",
    egressNetworkPolicyNamespace: "antrea-test-ns-e",
    egressNetworkPolicyType: 4,
    egressNetworkPolicyRuleName: "test-flow-aggregator-networkpolicy-rule-e",
    egressNetworkPolicyRuleAction: 5,
    tcpState: "TIME_WAIT",
    flowType: 11,
    egressName: "test-egress",
    egressIP: "172.18.0.1",
    octetDeltaCountFromSourceNode: 0n,
    octetDeltaCountFromDestinationNode: 0n,
    octetTotalCountFromSourceNode: 0n,
    octetTotalCountFromDestinationNode: 0n,
    packetDeltaCountFromSourceNode: 0n,
    packetDeltaCountFromDestinationNode: 0n,
    packetTotalCountFromSourceNode: 0n,
    packetTotalCountFromDestinationNode: 0n,
    reverseOctetDeltaCountFromSourceNode: 0n,
    reverseOctetDeltaCountFromDestinationNode: 0n,
    reverseOctetTotalCountFromSourceNode: 0n,
    reverseOctetTotalCountFromDestinationNode: 0n,
    reversePacketDeltaCountFromSourceNode: 0n,
    reversePacketDeltaCountFromDestinationNode: 0n,
    reversePacketTotalCountFromSourceNode: 0n,
    reversePacketTotalCountFromDestinationNode: 0n,
    throughput: 15902813472n,
    throughputFromSourceNode: 15902813473n,
    throughputFromDestinationNode: 15902813474n,
    reverseThroughput: 12381344n,
    reverseThroughputFromSourceNode: 12381345n,
    reverseThroughputFromDestinationNode: 12381346n,
    sourcePodLabels: '{"antrea-e2e":"perftest-a","app":"iperf"}',
    destinationPodLabels: '{"antrea-e2e":"perftest-b","app":"iperf"}',
    ...(ipv6
      ? {
        sourceIPv6Address: "2001:0:3238:dfe1:63::fefb",
        destinationIPv6Address: "2001:0:3238:dfe1:63::fefc",
        destinationClusterIPv6: "2001:0:3238:dfe1:64::a",
      }
      : {
        sourceIPv4Address: "10.10.0.79",
        destinationIPv4Address: "10.10.0.80",
        destinationClusterIPv4: "10.10.1.10",
      }),
    ...overrides,
  };
  return exportedFlow(record, ipv6);
}

/** `record` as the core hands it to exporters: correlated, keyed by its own 5-tuple. */
export function exportedFlow(record: AggregatedRecord, ipv6: boolean): ExportedFlow {
  return {
    key: {
      sourceAddress: record.sourceIPv4Address ?? record.sourceIPv6Address ?? "",
      destinationAddress: record.destinationIPv4Address ?? record.destinationIPv6Address ?? "",
      protocol: record.protocolIdentifier,
      sourcePort: record.sourceTransportPort,
      destinationPort: record.destinationTransportPort,
    },
    record,
    isIPv6: ipv6,
    uncorrelated: false,
  };
}
