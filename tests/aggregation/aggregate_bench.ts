/**
 * Aggregation speed (target >= 500,000 records/s). Run:
 * `node_modules/.bin/deno bench --allow-all tests/aggregation/aggregate_bench.ts`.
 * Records are pre-built so that only the core is measured; each iteration ingests a batch of
 * 10,000 records (1,000 flows x 10 updates, intra-node, and InterNode S/D pairs).
 */

import { ManualClock } from "../../src/clock.ts";
import { AggregationCore, type FlowInput } from "../../src/aggregation/mod.ts";

const BATCH = 10_000;

function record(i: number, step: number, side: "S" | "D" | "intra"): FlowInput {
  const end = 1_700_000_000 + step * 5 + 1;
  const oct = BigInt(1000 * (step + 1));
  return {
    sourceIPv4Address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
    destinationIPv4Address: "10.96.0.10",
    sourceTransportPort: 10_000 + (i % 50_000),
    destinationTransportPort: 8080,
    protocolIdentifier: 6,
    flowStartSeconds: 1_700_000_000,
    flowEndSeconds: end,
    flowEndReason: 2,
    tcpState: "ESTABLISHED",
    flowType: side === "intra" ? 1 : 2,
    sourcePodName: side === "D" ? "" : `client-${i % 100}`,
    sourcePodNamespace: side === "D" ? "" : "default",
    sourceNodeName: side === "D" ? "" : "node-a",
    destinationPodName: side === "S" ? "" : "server-0",
    destinationPodNamespace: side === "S" ? "" : "default",
    destinationNodeName: side === "S" ? "" : "node-b",
    destinationClusterIPv4: "0.0.0.0",
    destinationServicePort: 0,
    destinationServicePortName: "",
    ingressNetworkPolicyName: "",
    ingressNetworkPolicyNamespace: "",
    ingressNetworkPolicyRuleAction: 0,
    ingressNetworkPolicyType: 0,
    ingressNetworkPolicyRuleName: "",
    egressNetworkPolicyName: "",
    egressNetworkPolicyNamespace: "",
    egressNetworkPolicyRuleAction: 0,
    egressNetworkPolicyType: 0,
    egressNetworkPolicyRuleName: "",
    egressName: "",
    egressIP: "",
    octetTotalCount: oct,
    octetDeltaCount: 1000n,
    packetTotalCount: oct / 100n,
    packetDeltaCount: 10n,
    reverseOctetTotalCount: oct * 2n,
    reverseOctetDeltaCount: 2000n,
    reversePacketTotalCount: oct / 50n,
    reversePacketDeltaCount: 20n,
  };
}

/** 1,000 flows x 10 updates each, interleaved like agents' periodic exports. */
function batch(kind: "intra" | "inter"): FlowInput[] {
  const out: FlowInput[] = [];
  for (let step = 0; step < 10; step++) {
    for (let i = 0; i < 1000; i++) {
      if (kind === "intra") out.push(record(i, step, "intra"));
      else out.push(record(i, step >> 1, step % 2 === 0 ? "S" : "D"));
    }
  }
  return out;
}

const intra = batch("intra");
const inter = batch("inter");

Deno.bench(`aggregate ${BATCH} intra-node records (1k flows)`, { n: 200 }, () => {
  const core = new AggregationCore({
    activeTimeoutMs: 60_000,
    inactiveTimeoutMs: 90_000,
    clock: new ManualClock(),
  });
  for (const r of intra) core.addRecord(r);
});

Deno.bench(`aggregate ${BATCH} inter-node S/D records (1k flows)`, { n: 200 }, () => {
  const core = new AggregationCore({
    activeTimeoutMs: 60_000,
    inactiveTimeoutMs: 90_000,
    clock: new ManualClock(),
  });
  for (const r of inter) core.addRecord(r);
});

const big = new AggregationCore({
  activeTimeoutMs: 60_000,
  inactiveTimeoutMs: 90_000,
  clock: new ManualClock(),
});
for (let i = 0; i < 100_000; i++) big.addRecord(record(i, 0, "intra"));
// Pre-built updates (10 batches) so that only ingestion is timed, not record building.
const updates: FlowInput[][] = [];
for (let j = 0; j < 10; j++) {
  const u: FlowInput[] = [];
  for (let i = 0; i < BATCH; i++) u.push(record(j * BATCH + i, 1, "intra"));
  updates.push(u);
}
let bigStep = 0;
Deno.bench(`update ${BATCH} records into a core holding 100k flows`, { n: 100 }, () => {
  const u = updates[bigStep++ % 10];
  // Later rounds re-send the same end time and are ignored by §3.3 step 3 after key look-up
  // and validation: still a full look-up per record.
  for (let i = 0; i < BATCH; i++) big.addRecord(u[i]);
});

Deno.bench("sweep export+reset 1k ready flows", { n: 200 }, () => {
  const clock = new ManualClock();
  const core = new AggregationCore({ activeTimeoutMs: 60_000, inactiveTimeoutMs: 90_000, clock });
  for (let i = 0; i < 1000; i++) core.addRecord(intra[i]);
  clock.advance(60_100);
  let n = 0;
  core.expire(() => n++);
  if (n !== 1000) throw new Error(`exported ${n}`);
});
