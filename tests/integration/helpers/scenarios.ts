/**
 * Hand-written Agent records for the traffic scenarios of ipfix.md §6.4 (intra-node,
 * inter-node, inter-node via a Service, to-external with Egress, egress-denied, IPv6), each with
 * the flow log line (exporters.md §5.2, pretty-printed) the Flow Aggregator must write for it
 * after correlation (aggregation.md §1.5). The expected lines are spelled out literally rather
 * than derived from the records, so a wrong merge rule cannot hide behind shared code.
 */

import type { DataRecord } from "../../../src/ipfix/mod.ts";
import { agentRecord } from "../../_helpers/agent_record.ts";
import type { FlowLogLine } from "./flow_log.ts";
import { FLOW_LOG_FIELDS, lineKey } from "./flow_log.ts";

/** Node names of the two simulated Agents. */
export const NODES = ["k8s-node-1", "k8s-node-2"] as const;

/** Index of the sending Agent in {@linkcode NODES}. */
export type NodeIndex = 0 | 1;

/** A flow log line with every field empty except the given ones. */
export function logLine(over: Partial<FlowLogLine>): FlowLogLine {
  const l = Object.fromEntries(FLOW_LOG_FIELDS.map((f) => [f, ""])) as FlowLogLine;
  return { ...l, flowStartSeconds: "1700000000", flowEndSeconds: "1700000005", ...over };
}

/** One scenario flow: the records each Agent sends and the line the flow log must show. */
export interface ScenarioFlow {
  /** Scenario name (ipfix.md §6.4). */
  readonly name: string;
  /** Records in sending order, each with the Agent that sends it. */
  readonly sends: readonly { node: NodeIndex; record: DataRecord }[];
  /** The exact line expected for every export of the flow. */
  readonly expected: FlowLogLine;
  /** {@linkcode lineKey} of the expected line. */
  readonly key: string;
}

function flow(
  name: string,
  sends: { node: NodeIndex; record: DataRecord }[],
  expected: FlowLogLine,
): ScenarioFlow {
  return { name, sends, expected, key: lineKey(expected) };
}

/** Where an {@linkcode unmatchedSourceHalf} goes, and its source Pod. */
export interface HalfFlow {
  /** Source Pod IP. */
  sourceIP: string;
  /** Destination IP (a Pod on the other Node). */
  destinationIP: string;
  /** Source port. */
  sourcePort: number;
  /** Destination port. */
  destinationPort: number;
  /** Source Pod name. */
  pod: string;
  /** Source Pod namespace. */
  namespace: string;
}

/**
 * An inter-node TCP flow whose source half (from node 1) is the only report: its destination
 * half never arrives, so the line shows only what the source Node knew.
 */
export function unmatchedSourceHalf(name: string, f: HalfFlow): ScenarioFlow {
  return flow(
    name,
    [{
      node: 0,
      record: agentRecord({
        sourceIPv4Address: f.sourceIP,
        destinationIPv4Address: f.destinationIP,
        sourceTransportPort: f.sourcePort,
        destinationTransportPort: f.destinationPort,
        sourcePodName: f.pod,
        sourcePodNamespace: f.namespace,
        sourceNodeName: NODES[0],
        flowType: 2,
      }),
    }],
    logLine({
      sourceIP: f.sourceIP,
      destinationIP: f.destinationIP,
      sourceTransportPort: String(f.sourcePort),
      destinationTransportPort: String(f.destinationPort),
      protocolIdentifier: "TCP",
      sourcePodName: f.pod,
      sourcePodNamespace: f.namespace,
      sourceNodeName: NODES[0],
      destinationClusterIP: "0.0.0.0",
      destinationServicePort: "0",
    }),
  );
}

/**
 * The six scenarios. `portBase` makes the source ports (and so the keys) unique per run.
 */
export function scenarioFlows(portBase: number): ScenarioFlow[] {
  const p = (i: number): number => portBase + i;
  const flows: ScenarioFlow[] = [];

  // Intra-node: one record from node 1 with both Pods, ingress K8s policy allows.
  flows.push(flow(
    "intraNode",
    [{
      node: 0,
      record: agentRecord({
        sourceIPv4Address: "10.10.0.11",
        destinationIPv4Address: "10.10.0.12",
        sourceTransportPort: p(1),
        destinationTransportPort: 80,
        sourcePodName: "client-a",
        sourcePodNamespace: "ns-a",
        sourceNodeName: NODES[0],
        destinationPodName: "web-a",
        destinationPodNamespace: "ns-a",
        destinationNodeName: NODES[0],
        ingressNetworkPolicyName: "allow-web",
        ingressNetworkPolicyNamespace: "ns-a",
        ingressNetworkPolicyType: 1,
        ingressNetworkPolicyRuleAction: 1,
        flowType: 1,
      }),
    }],
    logLine({
      sourceIP: "10.10.0.11",
      destinationIP: "10.10.0.12",
      sourceTransportPort: String(p(1)),
      destinationTransportPort: "80",
      protocolIdentifier: "TCP",
      sourcePodName: "client-a",
      sourcePodNamespace: "ns-a",
      sourceNodeName: NODES[0],
      destinationPodName: "web-a",
      destinationPodNamespace: "ns-a",
      destinationNodeName: NODES[0],
      destinationClusterIP: "0.0.0.0",
      destinationServicePort: "0",
      ingressNetworkPolicyName: "allow-web",
      ingressNetworkPolicyNamespace: "ns-a",
      ingressNetworkPolicyRuleAction: "Allow",
      ingressNetworkPolicyType: "K8sNetworkPolicy",
    }),
  ));

  // Inter-node: the source half (egress policy) from node 1, the destination half (ingress
  // policy) from node 2.
  const interSrc = {
    sourceIPv4Address: "10.10.0.21",
    destinationIPv4Address: "10.10.1.22",
    sourceTransportPort: p(2),
    destinationTransportPort: 5201,
    flowType: 2,
  };
  flows.push(flow(
    "interNode",
    [
      {
        node: 0,
        record: agentRecord({
          ...interSrc,
          sourcePodName: "client-b",
          sourcePodNamespace: "ns-b",
          sourceNodeName: NODES[0],
          egressNetworkPolicyName: "egress-allow",
          egressNetworkPolicyNamespace: "ns-b",
          egressNetworkPolicyType: 2,
          egressNetworkPolicyRuleName: "rule-e1",
          egressNetworkPolicyRuleAction: 1,
        }),
      },
      {
        node: 1,
        record: agentRecord({
          ...interSrc,
          packetTotalCount: 11n,
          octetTotalCount: 1100n,
          destinationPodName: "server-b",
          destinationPodNamespace: "ns-c",
          destinationNodeName: NODES[1],
          ingressNetworkPolicyName: "ingress-allow",
          ingressNetworkPolicyNamespace: "ns-c",
          ingressNetworkPolicyType: 2,
          ingressNetworkPolicyRuleName: "rule-i1",
          ingressNetworkPolicyRuleAction: 1,
        }),
      },
    ],
    logLine({
      sourceIP: "10.10.0.21",
      destinationIP: "10.10.1.22",
      sourceTransportPort: String(p(2)),
      destinationTransportPort: "5201",
      protocolIdentifier: "TCP",
      sourcePodName: "client-b",
      sourcePodNamespace: "ns-b",
      sourceNodeName: NODES[0],
      destinationPodName: "server-b",
      destinationPodNamespace: "ns-c",
      destinationNodeName: NODES[1],
      destinationClusterIP: "0.0.0.0",
      destinationServicePort: "0",
      ingressNetworkPolicyName: "ingress-allow",
      ingressNetworkPolicyNamespace: "ns-c",
      ingressNetworkPolicyRuleName: "rule-i1",
      ingressNetworkPolicyRuleAction: "Allow",
      ingressNetworkPolicyType: "AntreaNetworkPolicy",
      egressNetworkPolicyName: "egress-allow",
      egressNetworkPolicyNamespace: "ns-b",
      egressNetworkPolicyRuleName: "rule-e1",
      egressNetworkPolicyRuleAction: "Allow",
      egressNetworkPolicyType: "AntreaNetworkPolicy",
    }),
  ));

  // Inter-node via a Service: only the source Node knows the ClusterIP and the port name; the
  // destination half arrives first here, so the merge must still keep the Service fields.
  const svc = {
    sourceIPv4Address: "10.10.0.31",
    destinationIPv4Address: "10.10.1.32",
    sourceTransportPort: p(3),
    destinationTransportPort: 8080,
    flowType: 2,
  };
  flows.push(flow(
    "interNodeService",
    [
      {
        node: 1,
        record: agentRecord({
          ...svc,
          destinationPodName: "api-0",
          destinationPodNamespace: "shop",
          destinationNodeName: NODES[1],
        }),
      },
      {
        node: 0,
        record: agentRecord({
          ...svc,
          sourcePodName: "frontend-7",
          sourcePodNamespace: "shop",
          sourceNodeName: NODES[0],
          destinationClusterIPv4: "10.96.0.10",
          destinationServicePort: 80,
          destinationServicePortName: "shop/api:http",
        }),
      },
    ],
    logLine({
      sourceIP: "10.10.0.31",
      destinationIP: "10.10.1.32",
      sourceTransportPort: String(p(3)),
      destinationTransportPort: "8080",
      protocolIdentifier: "TCP",
      sourcePodName: "frontend-7",
      sourcePodNamespace: "shop",
      sourceNodeName: NODES[0],
      destinationPodName: "api-0",
      destinationPodNamespace: "shop",
      destinationNodeName: NODES[1],
      destinationClusterIP: "10.96.0.10",
      destinationServicePort: "80",
      destinationServicePortName: "shop/api:http",
    }),
  ));

  // Pod to external through an Egress: source Node only, flowType 3.
  flows.push(flow(
    "toExternal",
    [{
      node: 1,
      record: agentRecord({
        sourceIPv4Address: "10.10.1.41",
        destinationIPv4Address: "93.184.216.34",
        sourceTransportPort: p(4),
        destinationTransportPort: 443,
        sourcePodName: "crawler",
        sourcePodNamespace: "ns-x",
        sourceNodeName: NODES[1],
        flowType: 3,
        egressName: "egress-prod",
        egressIP: "172.18.0.3",
      }),
    }],
    logLine({
      sourceIP: "10.10.1.41",
      destinationIP: "93.184.216.34",
      sourceTransportPort: String(p(4)),
      destinationTransportPort: "443",
      protocolIdentifier: "TCP",
      sourcePodName: "crawler",
      sourcePodNamespace: "ns-x",
      sourceNodeName: NODES[1],
      destinationClusterIP: "0.0.0.0",
      destinationServicePort: "0",
      egressName: "egress-prod",
      egressIP: "172.18.0.3",
    }),
  ));

  // Egress-denied inter-node UDP flow: only the source Node reports it (action Drop), and it is
  // forwarded without waiting for a destination half that never comes.
  flows.push(flow(
    "egressDenied",
    [{
      node: 0,
      record: agentRecord({
        sourceIPv4Address: "10.10.0.51",
        destinationIPv4Address: "10.10.1.52",
        sourceTransportPort: p(5),
        destinationTransportPort: 53,
        protocolIdentifier: 17,
        tcpState: "",
        sourcePodName: "batch-1",
        sourcePodNamespace: "jobs",
        sourceNodeName: NODES[0],
        egressNetworkPolicyName: "deny-dns",
        egressNetworkPolicyNamespace: "",
        egressNetworkPolicyType: 3,
        egressNetworkPolicyRuleName: "drop-all",
        egressNetworkPolicyRuleAction: 2,
        reversePacketTotalCount: 0n,
        reverseOctetTotalCount: 0n,
        reversePacketDeltaCount: 0n,
        reverseOctetDeltaCount: 0n,
        flowType: 2,
      }),
    }],
    logLine({
      sourceIP: "10.10.0.51",
      destinationIP: "10.10.1.52",
      sourceTransportPort: String(p(5)),
      destinationTransportPort: "53",
      protocolIdentifier: "UDP",
      sourcePodName: "batch-1",
      sourcePodNamespace: "jobs",
      sourceNodeName: NODES[0],
      destinationClusterIP: "0.0.0.0",
      destinationServicePort: "0",
      egressNetworkPolicyName: "deny-dns",
      egressNetworkPolicyRuleName: "drop-all",
      egressNetworkPolicyRuleAction: "Drop",
      egressNetworkPolicyType: "AntreaClusterNetworkPolicy",
    }),
  ));

  // IPv6 inter-node (template 257): halves from both Nodes, addresses in RFC 5952 form.
  const v6 = {
    sourceIPv6Address: "fd00:10:1::61",
    destinationIPv6Address: "fd00:10:2::62",
    sourceTransportPort: p(6),
    destinationTransportPort: 5201,
    flowType: 2,
  };
  flows.push(flow(
    "ipv6InterNode",
    [
      {
        node: 0,
        record: agentRecord({
          ...v6,
          sourcePodName: "v6-client",
          sourcePodNamespace: "ns6",
          sourceNodeName: NODES[0],
        }),
      },
      {
        node: 1,
        record: agentRecord({
          ...v6,
          destinationPodName: "v6-server",
          destinationPodNamespace: "ns6",
          destinationNodeName: NODES[1],
          ingressNetworkPolicyName: "allow-v6",
          ingressNetworkPolicyNamespace: "ns6",
          ingressNetworkPolicyType: 1,
          ingressNetworkPolicyRuleAction: 1,
        }),
      },
    ],
    logLine({
      sourceIP: "fd00:10:1::61",
      destinationIP: "fd00:10:2::62",
      sourceTransportPort: String(p(6)),
      destinationTransportPort: "5201",
      protocolIdentifier: "TCP",
      sourcePodName: "v6-client",
      sourcePodNamespace: "ns6",
      sourceNodeName: NODES[0],
      destinationPodName: "v6-server",
      destinationPodNamespace: "ns6",
      destinationNodeName: NODES[1],
      destinationClusterIP: "::",
      destinationServicePort: "0",
      ingressNetworkPolicyName: "allow-v6",
      ingressNetworkPolicyNamespace: "ns6",
      ingressNetworkPolicyRuleAction: "Allow",
      ingressNetworkPolicyType: "K8sNetworkPolicy",
    }),
  ));

  return flows;
}

/** A simple intra-node flow from `node` with source port `port` (bulk traffic in tests). */
export function intraNodeRecord(port: number, node: NodeIndex = 0): DataRecord {
  return agentRecord({
    sourceIPv4Address: `10.10.${node}.100`,
    destinationIPv4Address: `10.10.${node}.101`,
    sourceTransportPort: port,
    destinationTransportPort: 6379,
    sourcePodName: "worker",
    sourcePodNamespace: "bulk",
    sourceNodeName: NODES[node],
    destinationPodName: "redis",
    destinationPodNamespace: "bulk",
    destinationNodeName: NODES[node],
    flowType: 1,
  });
}

/** {@linkcode lineKey} of {@linkcode intraNodeRecord}. */
export function intraNodeKey(port: number, node: NodeIndex = 0): string {
  return `10.10.${node}.100:${port}->10.10.${node}.101:6379/TCP`;
}
