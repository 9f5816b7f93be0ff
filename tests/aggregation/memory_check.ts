/**
 * Heap bytes per live flow (target <= 1,000 at 1M flows). Not a test: run
 * `node_modules/.bin/deno run --v8-flags=--expose-gc tests/aggregation/memory_check.ts [flows]`.
 * Creates `flows` distinct InterNode flows (S and D halves correlated, realistic strings) and
 * prints JS heap growth and typed-array (external) growth per flow after a full GC.
 */

import { ManualClock } from "../../src/clock.ts";
import { AggregationCore, type FlowInput } from "../../src/aggregation/mod.ts";

const gc = (globalThis as unknown as { gc?: () => void }).gc;
if (gc === undefined) throw new Error("run with --v8-flags=--expose-gc");

const flows = Number(Deno.args[0] ?? 100_000);

function half(i: number, side: "S" | "D"): FlowInput {
  return {
    sourceIPv4Address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
    destinationIPv4Address: `10.200.${(i >> 8) & 255}.${i & 255}`,
    sourceTransportPort: 30_000 + (i % 30_000),
    destinationTransportPort: 443,
    protocolIdentifier: 6,
    flowStartSeconds: 1_700_000_000,
    flowEndSeconds: 1_700_000_005,
    flowEndReason: 2,
    tcpState: "ESTABLISHED",
    flowType: 2,
    sourcePodName: side === "S" ? `frontend-7d9f8b-${i % 500}` : "",
    sourcePodNamespace: side === "S" ? "shop" : "",
    sourceNodeName: side === "S" ? `node-${i % 20}` : "",
    destinationPodName: side === "D" ? `backend-5c6d-${i % 300}` : "",
    destinationPodNamespace: side === "D" ? "shop" : "",
    destinationNodeName: side === "D" ? `node-${(i + 1) % 20}` : "",
    destinationClusterIPv4: side === "S" ? "10.96.0.20" : "0.0.0.0",
    destinationServicePort: side === "S" ? 443 : 0,
    destinationServicePortName: side === "S" ? "shop/backend:https" : "",
    ingressNetworkPolicyName: side === "D" ? "allow-frontend" : "",
    ingressNetworkPolicyNamespace: side === "D" ? "shop" : "",
    ingressNetworkPolicyRuleAction: side === "D" ? 1 : 0,
    ingressNetworkPolicyType: side === "D" ? 1 : 0,
    ingressNetworkPolicyRuleName: side === "D" ? "rule-0" : "",
    egressNetworkPolicyName: "",
    egressNetworkPolicyNamespace: "",
    egressNetworkPolicyRuleAction: 0,
    egressNetworkPolicyType: 0,
    egressNetworkPolicyRuleName: "",
    egressName: "",
    egressIP: "",
    octetTotalCount: 123_456n,
    octetDeltaCount: 123_456n,
    packetTotalCount: 321n,
    packetDeltaCount: 321n,
    reverseOctetTotalCount: 654_321n,
    reverseOctetDeltaCount: 654_321n,
    reversePacketTotalCount: 123n,
    reversePacketDeltaCount: 123n,
  };
}

const core = new AggregationCore({
  activeTimeoutMs: 60_000,
  inactiveTimeoutMs: 90_000,
  clock: new ManualClock(),
  maxFlows: flows,
});
gc();
gc();
const before = Deno.memoryUsage();
const t0 = performance.now();
for (let i = 0; i < flows; i++) {
  core.addRecord(half(i, "S"));
  core.addRecord(half(i, "D"));
}
const t1 = performance.now();
gc();
gc();
const after = Deno.memoryUsage();
if (core.flowCount !== flows) throw new Error(`flows ${core.flowCount}`);
const heap = (after.heapUsed - before.heapUsed) / flows;
const ext = (after.external - before.external) / flows;
console.log(
  `flows=${flows} heapBytesPerFlow=${heap.toFixed(0)} externalBytesPerFlow=${ext.toFixed(0)} ` +
    `totalBytesPerFlow=${(heap + ext).toFixed(0)} ingest(incl. record building)=${
      ((2 * flows) / ((t1 - t0) / 1000)).toFixed(0)
    } records/s`,
);
