/**
 * The 25 scenarios of spec aggregation.md §9, driven by a ManualClock. Names say `upstream`
 * when the expected values are v1.13's and `improved` when they follow a §10 fix. Scenarios
 * whose main subject lives outside the core (Pod store, HTTP, config reload) test the part the
 * core owns and say so in their name.
 */

import assert from "node:assert/strict";
import {
  AggregationCore,
  type CoreApi,
  encodePodLabels,
  type ExportHooks,
  type FlowInput,
  type FlowKey,
  type PodInfo,
} from "../../src/aggregation/mod.ts";
import type { ManualClock } from "../../src/clock.ts";
import {
  at,
  baseRecord,
  collector,
  counters,
  csd,
  d1,
  d2,
  intraNode,
  K4,
  newCore,
  one,
  s1,
  s2,
  withShards,
} from "./fixtures.ts";

/** Shard counts every scenario runs with: one core, and cores sharded by flow key. */
const SHARDS = [1, 3];

/** Registers a scenario once per shard count: sharding must not change any result. */
function scenario(name: string, fn: () => void | Promise<void>): void {
  for (const n of SHARDS) {
    Deno.test(n === 1 ? name : `${name} [${n} shards]`, () => withShards(n, fn));
  }
}

const V6_KEY: FlowKey = {
  sourceAddress: "2001:0:3238:dfe1:63::fefb",
  destinationAddress: "2001:0:3238:dfe1:63::fefc",
  protocol: 6,
  sourcePort: 1234,
  destinationPort: 5678,
};

function v6(r: FlowInput, clusterV6: string): FlowInput {
  const o: FlowInput = { ...r };
  delete o.sourceIPv4Address;
  delete o.destinationIPv4Address;
  delete o.destinationClusterIPv4;
  o.sourceIPv6Address = "2001:0:3238:DFE1:63::FEFB";
  o.destinationIPv6Address = "2001:0:3238:DFE1:63::FEFC";
  o.destinationClusterIPv6 = clusterV6;
  return o;
}

/** [name, namespace, Node] of the source and of the destination Pod of a record. */
function podsOf(r: FlowInput): unknown[][] {
  return [
    [r.sourcePodName, r.sourcePodNamespace, r.sourceNodeName],
    [r.destinationPodName, r.destinationPodNamespace, r.destinationNodeName],
  ];
}

/** The 5 fields of a record's ingress or egress policy: name, namespace, type, rule, action. */
function policyOf(r: FlowInput, dir: "ingress" | "egress"): unknown[] {
  const o = r as Record<string, unknown>;
  const p = `${dir}NetworkPolicy`;
  return ["Name", "Namespace", "Type", "RuleName", "RuleAction"].map((f) => o[p + f]);
}

/** A Pod-store stand-in recording calls. */
function podStore(pods: Record<string, PodInfo>): ExportHooks & { calls: [string, number][] } {
  const calls: [string, number][] = [];
  return {
    calls,
    lookupPod(ip: string, t: number): PodInfo | undefined {
      calls.push([ip, t]);
      return pods[ip];
    },
  };
}

scenario("SC-01 inter-node IPv4, source record first: correlated and ready", () => {
  const { core, clock } = newCore();
  assert.equal(core.addRecord(s1()), true);
  at(clock, 1000);
  assert.equal(core.addRecord(d1()), true);
  assert.equal(core.flowCount, 1);
  const st = core.entryState(K4)!;
  assert.equal(st.readyToSend, true);
  assert.equal(st.correlatedFieldsFilled, true);
  assert.equal(st.activeExpireMs, 60_000);
  assert.equal(st.inactiveExpireMs, 91_000);
  const r = one(core);
  assert.equal(r.sourceIPv4Address, "10.0.0.1");
  assert.equal(r.destinationIPv4Address, "10.0.0.2");
  assert.equal(r.sourcePodName, "pod1");
  assert.equal(r.destinationPodName, "pod2");
  assert.equal(r.destinationClusterIPv4, "192.168.0.1");
  assert.equal(r.destinationServicePort, 4739);
  assert.equal(r.flowType, 2);
  assert.equal(r.flowStartSeconds, 0);
  assert.deepEqual(csd(r, "flowEndSeconds"), [1, 1, 1]);
  assert.deepEqual(csd(r, "packetTotalCount"), [502n, 500n, 502n]);
  assert.deepEqual(csd(r, "octetTotalCount"), [1020n, 1000n, 1020n]);
  for (const n of ["octetDeltaCount", "packetDeltaCount", "reverseOctetDeltaCount"]) {
    assert.deepEqual(csd(r, n), [0n, 0n, 0n]);
  }
  assert.deepEqual(csd(r, "throughput"), [8160n, 8000n, 8160n]);
  assert.deepEqual(csd(r, "reverseThroughput"), [8160n, 8000n, 8160n]);
  assert.equal(r.flowEndReason, 2);
  assert.equal(r.tcpState, "ESTABLISHED");
  assert.equal(core.stats().correlated, 1);
});

scenario("SC-02 destination record first: same fields, common throughput from S1 (8000)", () => {
  const { core } = newCore();
  core.addRecord(d1());
  core.addRecord(s1());
  const st = core.entryState(K4)!;
  assert.equal(st.readyToSend, true);
  const r = one(core);
  assert.equal(r.sourcePodName, "pod1");
  assert.equal(r.destinationPodName, "pod2");
  assert.equal(r.destinationClusterIPv4, "192.168.0.1");
  assert.equal(r.destinationServicePort, 4739);
  assert.deepEqual(csd(r, "packetTotalCount"), [502n, 500n, 502n]);
  assert.deepEqual(csd(r, "octetTotalCount"), [1020n, 1000n, 1020n]);
  assert.deepEqual(csd(r, "throughput"), [8000n, 8000n, 8160n]);
  assert.deepEqual(csd(r, "reverseThroughput"), [8000n, 8000n, 8160n]);
});

scenario("SC-03 inter-node IPv6, both orders: canonical key and cluster IP, isIPv6 export", () => {
  for (const order of ["SD", "DS"]) {
    const { core, clock } = newCore();
    const S6 = v6(s1(), "2001:0:3238:BBBB:63::AAAA");
    const D6 = v6(d1(), "::");
    for (const r of order === "SD" ? [S6, D6] : [D6, S6]) assert.equal(core.addRecord(r), true);
    const all = core.query();
    assert.equal(all.length, 1, order);
    const r = one(core, V6_KEY);
    assert.equal(r.sourceIPv6Address, "2001:0:3238:dfe1:63::fefb");
    assert.equal(r.destinationIPv6Address, "2001:0:3238:dfe1:63::fefc");
    assert.equal(r.sourceIPv4Address, undefined);
    assert.equal(r.destinationClusterIPv6, "2001:0:3238:bbbb:63::aaaa", order);
    assert.equal(core.entryState(V6_KEY)!.isIPv4, false);
    at(clock, 60_100);
    const c = collector();
    assert.equal(core.expire(c.emit), 1);
    assert.equal(c.out[0].isIPv6, true);
    assert.deepEqual(c.out[0].key, V6_KEY);
  }
});

function sc04(): { core: CoreApi; clock: ManualClock } {
  const { core, clock } = newCore();
  core.addRecord(s1());
  at(clock, 1000);
  core.addRecord(d1());
  at(clock, 5000);
  core.addRecord(s2());
  at(clock, 6000);
  core.addRecord(d2());
  return { core, clock };
}

scenario("SC-04 stats over four records equal the §3.7 table's last row", () => {
  const { core } = sc04();
  const r = one(core);
  assert.deepEqual(csd(r, "flowEndSeconds"), [10, 10, 10]);
  assert.equal(r.flowEndReason, 3);
  assert.equal(r.tcpState, "TIME_WAIT");
  assert.deepEqual(csd(r, "octetTotalCount"), [2050n, 2000n, 2050n]);
  assert.deepEqual(csd(r, "octetDeltaCount"), [1030n, 1000n, 1030n]);
  assert.deepEqual(csd(r, "packetTotalCount"), [1005n, 1000n, 1005n]);
  assert.deepEqual(csd(r, "packetDeltaCount"), [503n, 500n, 503n]);
  assert.deepEqual(csd(r, "reverseOctetTotalCount"), [2050n, 2000n, 2050n]);
  assert.deepEqual(csd(r, "reverseOctetDeltaCount"), [1030n, 1000n, 1030n]);
  assert.deepEqual(csd(r, "reversePacketTotalCount"), [1005n, 1000n, 1005n]);
  assert.deepEqual(csd(r, "reversePacketDeltaCount"), [503n, 500n, 503n]);
  assert.deepEqual(csd(r, "throughput"), [915n, 888n, 915n]);
  assert.deepEqual(csd(r, "reverseThroughput"), [915n, 888n, 915n]);
  const st = core.entryState(K4)!;
  assert.equal(st.activeExpireMs, 60_000);
  assert.equal(st.inactiveExpireMs, 96_000);
});

scenario("SC-05 export then reset; inactive export with zero deltas deletes the flow", () => {
  const { core, clock } = sc04();
  assert.equal(core.nextExpiryDelayMs(), 100 + 60_000 - 6000);
  at(clock, 60_100);
  const c = collector();
  assert.equal(core.expire(c.emit), 1);
  assert.equal(core.stats().exported, 1);
  const ex = c.out[0].record;
  assert.deepEqual(csd(ex, "octetDeltaCount"), [1030n, 1000n, 1030n]);
  assert.deepEqual(csd(ex, "throughput"), [915n, 888n, 915n]);
  assert.equal(c.out[0].uncorrelated, false);
  const r = one(core);
  for (
    const n of [
      "octetDeltaCount",
      "packetDeltaCount",
      "reverseOctetDeltaCount",
      "reversePacketDeltaCount",
      "throughput",
      "reverseThroughput",
    ]
  ) assert.deepEqual(csd(r, n), [0n, 0n, 0n], n);
  assert.deepEqual(csd(r, "octetTotalCount"), [2050n, 2000n, 2050n]);
  assert.deepEqual(csd(r, "flowEndSeconds"), [10, 10, 10]);
  // The exported snapshot is an own copy: the reset did not touch it.
  assert.equal(ex.octetDeltaCount, 1030n);
  assert.equal(core.entryState(K4)!.activeExpireMs, 120_100);
  assert.equal(core.nextExpiryDelayMs(), 100 + 96_000 - 60_100);
  at(clock, 96_100);
  assert.equal(core.expire(c.emit), 1);
  assert.equal(c.out[1].record.octetDeltaCount, 0n);
  assert.equal(c.out[1].record.throughput, 0n);
  assert.equal(c.out[1].record.octetTotalCount, 2050n);
  assert.equal(core.stats().exported, 2);
  assert.equal(core.flowCount, 0);
  assert.equal(core.queueLength, 0);
});

scenario("SC-06 intra-node single record: ready, both sides filled, throughput 8000", () => {
  const { core, clock } = newCore();
  at(clock, 5000);
  core.addRecord(intraNode({}));
  const st = core.entryState(K4)!;
  assert.equal(st.readyToSend, true);
  assert.equal(st.correlatedFieldsFilled, true);
  assert.equal(st.activeExpireMs, 65_000);
  assert.equal(st.inactiveExpireMs, 95_000);
  const r = one(core);
  assert.deepEqual(csd(r, "octetTotalCount"), [1000n, 1000n, 1000n]);
  assert.deepEqual(csd(r, "packetDeltaCount"), [500n, 500n, 500n]);
  assert.deepEqual(csd(r, "flowEndSeconds"), [1, 1, 1]);
  assert.deepEqual(csd(r, "throughput"), [8000n, 8000n, 8000n]);
});

function rIntra(
  end: number,
  oct: [bigint, bigint, bigint, bigint],
  rev: [bigint, bigint, bigint, bigint],
  reason: number,
  tcp: string,
): FlowInput {
  return intraNode({
    flowStartSeconds: 100,
    flowEndSeconds: end,
    octetTotalCount: oct[0],
    octetDeltaCount: oct[1],
    packetTotalCount: oct[2],
    packetDeltaCount: oct[3],
    reverseOctetTotalCount: rev[0],
    reverseOctetDeltaCount: rev[1],
    reversePacketTotalCount: rev[2],
    reversePacketDeltaCount: rev[3],
    flowEndReason: reason,
    tcpState: tcp,
  });
}
const R1 = rIntra(105, [5000n, 5000n, 50n, 50n], [2500n, 2500n, 25n, 25n], 2, "ESTABLISHED");
const R2 = rIntra(110, [8000n, 3000n, 80n, 30n], [4000n, 1500n, 40n, 15n], 2, "ESTABLISHED");
const R3 = rIntra(115, [9000n, 1000n, 90n, 10n], [4500n, 500n, 45n, 5n], 3, "TIME_WAIT");

function sc07(): { core: CoreApi; clock: ManualClock } {
  const { core, clock } = newCore();
  core.addRecord(R1);
  let r = one(core);
  assert.deepEqual(csd(r, "throughput"), [8000n, 8000n, 8000n]);
  assert.deepEqual(csd(r, "reverseThroughput"), [4000n, 4000n, 4000n]);
  at(clock, 10_000);
  core.addRecord(R2);
  r = one(core);
  assert.deepEqual(csd(r, "octetDeltaCount"), [8000n, 8000n, 8000n]);
  assert.deepEqual(csd(r, "packetDeltaCount"), [80n, 80n, 80n]);
  assert.deepEqual(csd(r, "reverseOctetDeltaCount"), [4000n, 4000n, 4000n]);
  assert.deepEqual(csd(r, "reversePacketDeltaCount"), [40n, 40n, 40n]);
  assert.equal(r.octetTotalCount, 8000n);
  assert.equal(r.packetTotalCount, 80n);
  assert.equal(r.reverseOctetTotalCount, 4000n);
  assert.equal(r.reversePacketTotalCount, 40n);
  assert.deepEqual(csd(r, "throughput"), [4800n, 4800n, 4800n]);
  assert.deepEqual(csd(r, "reverseThroughput"), [2400n, 2400n, 2400n]);
  assert.deepEqual(csd(r, "flowEndSeconds"), [110, 110, 110]);
  at(clock, 60_100);
  assert.equal(core.expire(() => {}), 1);
  at(clock, 61_000);
  core.addRecord(R3);
  return { core, clock };
}

scenario("SC-07 intra-node updates, export and reset (4800/2400 then 1600/800)", () => {
  const { core } = sc07();
  const r = one(core);
  assert.deepEqual(csd(r, "octetDeltaCount"), [1000n, 1000n, 1000n]);
  assert.deepEqual(csd(r, "packetDeltaCount"), [10n, 10n, 10n]);
  assert.deepEqual(csd(r, "reverseOctetDeltaCount"), [500n, 500n, 500n]);
  assert.deepEqual(csd(r, "reversePacketDeltaCount"), [5n, 5n, 5n]);
  assert.deepEqual(csd(r, "throughput"), [1600n, 1600n, 1600n]);
  assert.deepEqual(csd(r, "reverseThroughput"), [800n, 800n, 800n]);
  assert.equal(r.flowEndReason, 3);
  assert.equal(r.tcpState, "TIME_WAIT");
});

scenario("SC-08 upstream: same-second record ignored except the inactive refresh (L6)", () => {
  const { core, clock } = sc07();
  at(clock, 70_000);
  const R4 = rIntra(115, [9100n, 100n, 91n, 1n], [4500n, 0n, 45n, 0n], 2, "ESTABLISHED");
  assert.equal(core.addRecord(R4), true);
  const r = one(core);
  assert.deepEqual(csd(r, "flowEndSeconds"), [115, 115, 115]);
  assert.deepEqual(csd(r, "octetDeltaCount"), [1000n, 1000n, 1000n]);
  assert.equal(r.octetTotalCount, 9000n);
  assert.equal(r.flowEndReason, 3);
  assert.equal(r.tcpState, "TIME_WAIT");
  assert.equal(core.entryState(K4)!.inactiveExpireMs, 160_000);
  assert.equal(core.stats().recordsStale, 1);
});

scenario("SC-09 upstream: older record rewinds the per-side end; next dt = 8 (L7)", () => {
  const { core } = sc07();
  const R2b = rIntra(112, [8500n, 500n, 85n, 5n], [4250n, 250n, 42n, 2n], 2, "ESTABLISHED");
  core.addRecord(R2b);
  let r = one(core);
  assert.equal(r.flowEndSeconds, 115);
  assert.deepEqual(csd(r, "flowEndSeconds"), [115, 112, 112]);
  assert.deepEqual(csd(r, "octetDeltaCount"), [1000n, 1000n, 1000n]);
  assert.deepEqual(csd(r, "throughput"), [1600n, 1600n, 1600n]);
  const R5 = rIntra(120, [9600n, 600n, 96n, 6n], [4800n, 300n, 48n, 3n], 2, "ESTABLISHED");
  core.addRecord(R5);
  r = one(core);
  assert.deepEqual(csd(r, "throughput"), [600n, 600n, 600n]);
  assert.deepEqual(csd(r, "reverseThroughput"), [300n, 300n, 300n]);
  assert.deepEqual(csd(r, "octetDeltaCount"), [1600n, 1600n, 1600n]);
  assert.deepEqual(csd(r, "flowEndSeconds"), [120, 120, 120]);
});

scenario("SC-10 upstream: lagging D3 sets reason and common throughput, not tcpState (L5)", () => {
  const { core } = newCore();
  core.addRecord(s1());
  core.addRecord(d1());
  core.addRecord(s2({ flowEndReason: 2, tcpState: "ESTABLISHED" }));
  core.addRecord(d1({
    flowEndSeconds: 8,
    flowEndReason: 1,
    tcpState: "FIN_WAIT",
    ...counters(800n, 298n, 1600n, 580n),
  }));
  const r = one(core);
  assert.equal(r.flowEndSeconds, 10);
  assert.equal(r.flowEndSecondsFromDestinationNode, 8);
  assert.equal(r.flowEndReason, 1);
  assert.equal(r.tcpState, "ESTABLISHED");
  assert.equal(r.octetTotalCountFromDestinationNode, 1600n);
  assert.equal(r.octetDeltaCountFromDestinationNode, 580n);
  assert.equal(r.packetTotalCountFromDestinationNode, 800n);
  assert.equal(r.packetDeltaCountFromDestinationNode, 298n);
  assert.equal(r.octetTotalCount, 2000n);
  assert.equal(r.packetTotalCount, 1000n);
  assert.equal(r.octetDeltaCount, 1000n);
  assert.equal(r.packetDeltaCount, 500n);
  assert.equal(r.throughputFromDestinationNode, 662n);
  assert.equal(r.throughput, 662n);
  assert.equal(r.throughputFromSourceNode, 888n);
});

scenario("SC-11 to-external flow: ready, D copies of S, no Pod-store look-up", () => {
  const { core, clock } = newCore();
  core.addRecord({
    ...baseRecord(),
    destinationIPv4Address: "8.8.8.8",
    destinationTransportPort: 53,
    protocolIdentifier: 17,
    flowType: 3,
    sourcePodName: "pod1",
    flowStartSeconds: 0,
    flowEndSeconds: 2,
    flowEndReason: 2,
    tcpState: "",
    octetTotalCount: 1000n,
    reverseOctetTotalCount: 3000n,
  });
  const key = { ...K4, destinationAddress: "8.8.8.8", destinationPort: 53, protocol: 17 };
  const st = core.entryState(key)!;
  assert.equal(st.readyToSend, true);
  assert.equal(st.correlatedFieldsFilled, true);
  const r = one(core, key);
  assert.deepEqual(csd(r, "throughput"), [4000n, 4000n, 4000n]);
  assert.deepEqual(csd(r, "reverseThroughput"), [12000n, 12000n, 12000n]);
  const store = podStore({ "8.8.8.8": { name: "x", namespace: "y", nodeName: "z" } });
  at(clock, 60_100);
  const c = collector();
  assert.equal(core.expire(c.emit, store), 1);
  assert.equal(store.calls.length, 0);
  assert.equal(c.out[0].record.destinationPodName, "");
});

scenario("SC-12 inter-node egress deny: ready, metadata filled once from the Pod store", () => {
  for (const found of [true, false]) {
    const { core, clock } = newCore();
    core.addRecord(s1({ egressNetworkPolicyRuleAction: 2, flowStartSeconds: 1700000000 }));
    const st = core.entryState(K4)!;
    assert.equal(st.readyToSend, true);
    assert.equal(st.correlatedFieldsFilled, false);
    const r = one(core);
    assert.deepEqual(csd(r, "octetTotalCount"), [1000n, 1000n, 1000n]);
    assert.deepEqual(csd(r, "flowEndSeconds"), [1, 1, 1]);
    for (const n of ["throughput", "reverseThroughput"]) assert.deepEqual(csd(r, n), [0n, 0n, 0n]);
    const store = podStore(
      found ? { "10.0.0.2": { name: "pod2", namespace: "default", nodeName: "node-b" } } : {},
    );
    at(clock, 60_100);
    const c = collector();
    core.expire(c.emit, store);
    assert.deepEqual(store.calls, [["10.0.0.2", 1700000000]]);
    const ex = c.out[0].record;
    assert.equal(ex.destinationPodName, found ? "pod2" : "");
    assert.equal(ex.destinationPodNamespace, found ? "default" : "");
    assert.equal(ex.destinationNodeName, found ? "node-b" : "");
    assert.equal(core.entryState(K4)!.correlatedFieldsFilled, true);
    assert.equal(core.stats().podLookupMisses, found ? 0 : 1);
    // Not retried at the next export (v1.13 L16).
    at(clock, 91_000);
    core.expire(c.emit, store);
    assert.equal(c.out.length, 2);
    assert.equal(store.calls.length, 1);
  }
});

scenario("SC-13a ingress reject, D alone: ready, source Pod filled at export", () => {
  const { core, clock } = newCore();
  core.addRecord(d1({ ingressNetworkPolicyRuleAction: 3 }));
  assert.equal(core.entryState(K4)!.readyToSend, true);
  assert.equal(core.entryState(K4)!.correlatedFieldsFilled, false);
  const store = podStore({ "10.0.0.1": { name: "pod1", namespace: "ns1", nodeName: "node-a" } });
  at(clock, 60_100);
  const c = collector();
  core.expire(c.emit, store);
  assert.deepEqual(store.calls, [["10.0.0.1", 0]]);
  assert.equal(c.out[0].record.sourcePodName, "pod1");
  assert.equal(c.out[0].record.sourcePodNamespace, "ns1");
  assert.equal(c.out[0].record.sourceNodeName, "node-a");
  assert.equal(c.out[0].record.destinationPodName, "pod2");
});

scenario("SC-13b improved: S1 then D1(reject) correlates, becomes ready and exports (L4)", () => {
  const { core, clock } = newCore();
  core.addRecord(s1());
  at(clock, 1000);
  core.addRecord(d1({ ingressNetworkPolicyRuleAction: 3 }));
  const st = core.entryState(K4)!;
  assert.equal(st.readyToSend, true); // upstream: stays false forever
  assert.equal(st.correlatedFieldsFilled, true); // refined E2: D1 is the other Node's first
  const r = one(core);
  assert.deepEqual(csd(r, "octetTotalCount"), [1020n, 1020n, 1020n]);
  assert.deepEqual(csd(r, "packetTotalCount"), [502n, 502n, 502n]);
  for (const n of ["throughput", "reverseThroughput"]) {
    assert.deepEqual(csd(r, n), [8160n, 8160n, 8160n]);
  }
  assert.equal(core.stats().correlated, 1);
  assert.equal(core.stats().readyWithoutCorrelation, 0);
  const store = podStore({ "10.0.0.2": { name: "pod9", namespace: "ns2", nodeName: "node-b" } });
  at(clock, 60_100);
  const c = collector();
  assert.equal(core.expire(c.emit, store), 1);
  assert.equal(c.out[0].uncorrelated, false);
  assert.deepEqual(store.calls, []); // correlated: nothing left to fill from the Pod store
  assert.equal(c.out[0].record.sourcePodName, "pod1");
  assert.equal(c.out[0].record.destinationPodName, "pod2");
  assert.equal(c.out[0].record.ingressNetworkPolicyRuleAction, 3);
});

scenario("SC-13c improved: D1(reject) then S1 correlates S1's fields; S1's stats stale", () => {
  const { core } = newCore();
  core.addRecord(d1({ ingressNetworkPolicyRuleAction: 3 }));
  assert.equal(core.entryState(K4)!.correlatedFieldsFilled, false);
  core.addRecord(s1());
  const st = core.entryState(K4)!;
  assert.equal(st.readyToSend, true);
  assert.equal(st.correlatedFieldsFilled, true); // upstream: false, S1 not correlated
  const r = one(core);
  // S1's stats are ignored by §3.3 step 3 (D1 set the S per-side end to 1, S1 ends at 1).
  assert.equal(r.octetTotalCountFromSourceNode, 1020n);
  assert.equal(r.packetTotalCountFromSourceNode, 502n);
  assert.equal(r.throughputFromSourceNode, 8160n);
  // Its correlate fields are not: S1 is the first record from the other Node.
  assert.equal(r.destinationClusterIPv4, "192.168.0.1");
  assert.equal(r.destinationServicePort, 4739);
  assert.equal(r.sourcePodName, "pod1");
  assert.equal(r.destinationPodName, "pod2");
  assert.equal(r.ingressNetworkPolicyRuleAction, 3);
  assert.equal(core.stats().correlated, 1);
  assert.equal(core.stats().recordsStale, 1);
});

scenario("SC-13d improved: S1 then D1(reject with Pod and rule) exports both sides' fields", () => {
  const { core, clock } = newCore();
  core.addRecord(s1({ sourcePodNamespace: "default", sourceNodeName: "node-a" }));
  at(clock, 1000);
  core.addRecord(d1({
    ingressNetworkPolicyRuleAction: 3,
    destinationPodNamespace: "default",
    destinationNodeName: "node-b",
    ingressNetworkPolicyName: "deny-all",
    ingressNetworkPolicyNamespace: "default",
    ingressNetworkPolicyType: 1,
    ingressNetworkPolicyRuleName: "rule-1",
  }));
  const st = core.entryState(K4)!;
  assert.equal(st.readyToSend, true);
  assert.equal(st.correlatedFieldsFilled, true);
  // Stats as in (b): D1 needs no correlation and is aggregated into both sides.
  const r = one(core);
  assert.deepEqual(csd(r, "octetTotalCount"), [1020n, 1020n, 1020n]);
  assert.deepEqual(csd(r, "packetTotalCount"), [502n, 502n, 502n]);
  assert.deepEqual(csd(r, "flowEndSeconds"), [1, 1, 1]);
  for (const n of ["throughput", "reverseThroughput"]) {
    assert.deepEqual(csd(r, n), [8160n, 8160n, 8160n]);
  }
  at(clock, 60_100);
  const c = collector();
  assert.equal(core.expire(c.emit, podStore({})), 1);
  assert.equal(c.out[0].uncorrelated, false);
  const ex = c.out[0].record;
  assert.deepEqual(podsOf(ex), [["pod1", "default", "node-a"], ["pod2", "default", "node-b"]]);
  assert.deepEqual(policyOf(ex, "ingress"), ["deny-all", "default", 1, "rule-1", 3]);
  // S1's own correlate fields are kept (D1's are unset).
  assert.equal(ex.destinationClusterIPv4, "192.168.0.1");
  assert.equal(ex.destinationServicePort, 4739);
  assert.equal(ex.egressNetworkPolicyRuleAction, 0);
});

scenario("SC-14 ingress drop still correlates", () => {
  const { core } = newCore();
  core.addRecord(s1());
  core.addRecord(d1({ ingressNetworkPolicyRuleAction: 2 }));
  const st = core.entryState(K4)!;
  assert.equal(st.readyToSend, true);
  assert.equal(st.correlatedFieldsFilled, true);
  assert.equal(one(core).ingressNetworkPolicyRuleAction, 2);
});

scenario("SC-15 repeated half (E1): not ready, only S side aggregated", () => {
  const { core } = newCore();
  core.addRecord(s1());
  core.addRecord(s2());
  assert.equal(core.flowCount, 1);
  assert.equal(core.entryState(K4)!.readyToSend, false);
  assert.equal(core.stats().correlated, 0);
  const r = one(core);
  assert.equal(r.octetTotalCountFromSourceNode, 2000n);
  assert.equal(r.octetDeltaCountFromSourceNode, 1000n);
  assert.equal(r.flowEndSecondsFromSourceNode, 10);
  for (const n of ["octetTotalCount", "octetDeltaCount", "packetTotalCount", "packetDeltaCount"]) {
    assert.equal(csd(r, n)[2], 0n, n);
  }
  assert.equal(r.throughput, 888n);
  assert.equal(r.flowEndSecondsFromDestinationNode, 0);
});

scenario("SC-16 improved: un-correlated half exported as uncorrelated after retries (L3)", () => {
  const { core, clock } = newCore();
  core.addRecord(s1());
  const c = collector();
  at(clock, 60_100);
  assert.equal(core.expire(c.emit), 0);
  let st = core.entryState(K4)!;
  assert.deepEqual([st.retries, st.activeExpireMs, st.inactiveExpireMs], [1, 120_100, 150_100]);
  at(clock, 120_200);
  assert.equal(core.expire(c.emit), 0);
  st = core.entryState(K4)!;
  assert.deepEqual([st.retries, st.activeExpireMs, st.inactiveExpireMs], [2, 180_200, 210_200]);
  at(clock, 180_300);
  assert.equal(core.expire(c.emit), 1);
  assert.equal(c.out.length, 1);
  assert.equal(c.out[0].uncorrelated, true);
  assert.equal(c.out[0].record.sourcePodName, "pod1");
  assert.equal(c.out[0].record.octetTotalCount, 1000n);
  assert.equal(core.flowCount, 0);
  assert.equal(core.stats().uncorrelatedExported, 1);
});

scenario("SC-16 upstream variant (dropUncorrelated, MaxRetries 1, A=100ms, I=150ms)", () => {
  const { core, clock } = newCore({
    activeTimeoutMs: 100,
    inactiveTimeoutMs: 150,
    maxRetries: 1,
    dropUncorrelated: true,
  });
  core.addRecord(s1());
  const c = collector();
  at(clock, 100);
  core.expire(c.emit);
  assert.equal(core.flowCount, 1);
  at(clock, 200);
  core.expire(c.emit);
  assert.equal(core.flowCount, 0);
  assert.equal(core.queueLength, 0);
  assert.equal(c.out.length, 0);
  assert.equal(core.stats().uncorrelatedDropped, 1);
});

scenario("SC-17 active/inactive timeline: exports at 60.1, 120.2, 130.1 then delete", () => {
  for (const reason of [2, 3]) {
    const { core, clock } = newCore();
    core.addRecord(intraNode({ flowEndSeconds: 1 }));
    at(clock, 40_000);
    core.addRecord(intraNode({ flowEndSeconds: 41, flowEndReason: reason }));
    const times: number[] = [];
    const deltas: bigint[] = [];
    for (let i = 0; i < 5 && core.flowCount > 0; i++) {
      clock.advance(core.nextExpiryDelayMs());
      core.expire((f) => {
        times.push(clock.nowMs());
        deltas.push(f.record.octetDeltaCount);
      });
    }
    assert.deepEqual(times, [60_100, 120_200, 130_100], `reason ${reason}`);
    assert.deepEqual(deltas, [2000n, 0n, 0n]);
    assert.equal(core.flowCount, 0);
  }
});

scenario("SC-18 selective expiry and re-push (A=100ms, I=150ms)", () => {
  const { core, clock } = newCore({ activeTimeoutMs: 100, inactiveTimeoutMs: 150 });
  const F6 = v6(intraNode({}), "::");
  const k6 = { ...V6_KEY };
  core.addRecord(intraNode({})); // F4: active 100, inactive 150
  at(clock, 100);
  core.addRecord(F6); // F6: active 200, inactive 250
  at(clock, 101);
  const c = collector();
  assert.equal(core.expire(c.emit), 1);
  assert.equal(c.out[0].isIPv6, false);
  let st = core.entryState(K4)!;
  assert.deepEqual([st.activeExpireMs, st.inactiveExpireMs], [201, 150]);
  assert.equal(core.queueLength, 2);
  at(clock, 150);
  core.addRecord({ ...F6, flowEndSeconds: 2 }); // F6 inactive 300
  st = core.entryState(k6)!;
  assert.deepEqual([st.activeExpireMs, st.inactiveExpireMs], [200, 300]);
  at(clock, 250);
  assert.equal(core.expire(c.emit), 2);
  assert.equal(core.entryState(K4), undefined);
  assert.equal(core.entryState(k6)!.activeExpireMs, 350);
  assert.equal(core.queueLength, 1);
});

scenario("SC-18 improved: expiry at exact equality re-pushes (L2, no orphan)", () => {
  const { core, clock } = newCore({ activeTimeoutMs: 100, inactiveTimeoutMs: 150 });
  core.addRecord(intraNode({}));
  at(clock, 50);
  core.addRecord(v6(intraNode({}), "::"));
  at(clock, 100);
  const c = collector();
  assert.equal(core.expire(c.emit), 1);
  assert.equal(core.entryState(K4)!.activeExpireMs, 200);
  assert.equal(core.queueLength, 2);
  assert.equal(core.flowCount, 2);
});

scenario("SC-18 nextExpiryDelayMs (GetExpiry) values", () => {
  let { core, clock } = newCore();
  assert.equal(core.nextExpiryDelayMs(), 60_000);
  ({ core, clock } = newCore({ activeTimeoutMs: 90_000, inactiveTimeoutMs: 60_000 }));
  assert.equal(core.nextExpiryDelayMs(), 60_000);
  ({ core, clock } = newCore({ activeTimeoutMs: 10_000, inactiveTimeoutMs: 90_000 }));
  core.addRecord(intraNode({}));
  assert.equal(core.nextExpiryDelayMs(), 10_100);
  at(clock, 10_050);
  assert.equal(core.nextExpiryDelayMs(), 50);
  at(clock, 10_100);
  assert.equal(core.nextExpiryDelayMs(), 0);
  at(clock, 13_000);
  assert.equal(core.nextExpiryDelayMs(), 100);
});

scenario("SC-19 improved: emit error is counted; flow re-queued, sweep continues (L1)", () => {
  const { core, clock } = newCore();
  const keyOf = (port: number): FlowKey => ({ ...K4, sourcePort: port });
  for (const [i, port] of [1, 2, 3].entries()) {
    at(clock, i * 1000);
    core.addRecord(intraNode({ sourceTransportPort: port }));
  }
  at(clock, 2000);
  for (const port of [1, 2, 3]) {
    core.addRecord(intraNode({ sourceTransportPort: port, flowEndSeconds: 2 }));
  }
  const c = collector((f) => f.key.sourcePort === 1);
  const times: [number, number][] = [];
  for (let i = 0; i < 6 && core.flowCount > 0; i++) {
    clock.advance(core.nextExpiryDelayMs());
    const before = c.out.length;
    core.expire(c.emit);
    for (const f of c.out.slice(before)) times.push([clock.nowMs(), f.key.sourcePort]);
    if (clock.nowMs() === 60_100) {
      assert.equal(core.stats().emitErrors, 1);
      assert.equal(core.entryState(keyOf(1))!.activeExpireMs, 120_100);
      assert.equal(core.queueLength, 3);
    }
  }
  // Flows due at the same time come out in no set order across shards (routing is keyed at
  // random): compared by time, then port.
  times.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  assert.deepEqual(times, [[61_100, 2], [62_100, 3], [92_100, 2], [92_100, 3]]);
  assert.equal(core.stats().emitErrors, 2); // F1 fails again at 92.1, still deleted (no orphan)
  assert.equal(core.flowCount, 0);
  assert.equal(core.queueLength, 0);
});

scenario("SC-20 message-level: bad record skipped alone, empty set ok, missing flowType", () => {
  const { core } = newCore();
  // (a)/(c): no data records: nothing stored, nothing thrown.
  assert.equal(core.addRecords([]), 0);
  assert.equal(core.flowCount, 0);
  // (b) improved (L15): record 2 lacks protocolIdentifier; records 1 and 3 are ingested.
  const bad = intraNode({ sourceTransportPort: 2 });
  delete bad.protocolIdentifier;
  const n = core.addRecords([
    intraNode({ sourceTransportPort: 1 }),
    bad,
    intraNode({ sourceTransportPort: 3 }),
  ]);
  assert.equal(n, 2);
  assert.equal(core.flowCount, 2);
  assert.equal(core.stats().recordsRejected.missingKeyField, 1);
  // (d) InterNode-looking record without flowType: treated as 0, ready, filled.
  const noType = s1({ sourceTransportPort: 9 });
  delete noType.flowType;
  assert.equal(core.addRecord(noType), true);
  const st = core.entryState({ ...K4, sourcePort: 9 })!;
  assert.equal(st.readyToSend, true);
  assert.equal(st.correlatedFieldsFilled, true);
  assert.equal(core.stats().missingFlowType, 1);
});

scenario("SC-21 export order: 2 look-ups, flags, empty labels; labels off adds none", () => {
  for (const labels of [true, false]) {
    const { core, clock } = newCore({ includePodLabels: labels });
    // Ready IPv6 InterNode deny flow, both Pod names empty: correlatedFieldsFilled = false.
    core.addRecord(v6({ ...s1(), sourcePodName: "", egressNetworkPolicyRuleAction: 2 }, "::"));
    const store = podStore({});
    at(clock, 60_100);
    const c = collector();
    assert.equal(core.expire(c.emit, store), 1);
    assert.deepEqual(store.calls, [
      ["2001:0:3238:dfe1:63::fefb", 0],
      ["2001:0:3238:dfe1:63::fefc", 0],
    ]);
    const st = core.entryState(V6_KEY)!;
    assert.equal(st.correlatedFieldsFilled, true);
    assert.equal(st.externalFieldsFilled, labels);
    assert.equal(c.out[0].isIPv6, true);
    assert.equal(c.out[0].record.sourcePodLabels, labels ? "" : undefined);
    assert.equal(c.out[0].record.destinationPodLabels, labels ? "" : undefined);
    assert.equal(core.stats().exported, 1);
  }
});

scenario(
  "SC-21 fetchPodLabels: sorted JSON, unknown IP '', unlabelled Pod {} (improved L17)",
  () => {
    assert.equal(encodePodLabels({ test: "ut" }), '{"test":"ut"}');
    assert.equal(encodePodLabels({ b: "2", a: "1" }), '{"a":"1","b":"2"}');
    assert.equal(encodePodLabels(undefined), "{}");
    const { core, clock } = newCore({ includePodLabels: true });
    core.addRecord(intraNode({ sourcePodNamespace: "ns", destinationPodNamespace: "ns" }));
    at(clock, 60_100);
    const c = collector();
    core.expire(c.emit, podStore({ "10.0.0.1": { name: "pod1", namespace: "ns", nodeName: "n" } }));
    assert.equal(c.out[0].record.sourcePodLabels, "{}");
    assert.equal(c.out[0].record.destinationPodLabels, ""); // 10.0.0.2 unknown
  },
);

scenario("SC-22 (core side) look-up gets canonical IP and flowStartSeconds; throwing store", () => {
  const { core, clock } = newCore();
  core.addRecord(
    v6({
      ...d1({ flowStartSeconds: 1234, flowEndSeconds: 1240 }),
      ingressNetworkPolicyRuleAction: 3,
    }, "::"),
  );
  at(clock, 60_100);
  const c = collector();
  const calls: [string, number][] = [];
  core.expire(c.emit, {
    lookupPod(ip, t) {
      calls.push([ip, t]);
      throw new Error("store broken");
    },
  });
  assert.deepEqual(calls, [["2001:0:3238:dfe1:63::fefb", 1234]]);
  assert.equal(c.out.length, 1);
  assert.equal(c.out[0].record.sourcePodName, "");
  assert.equal(core.stats().podLookupMisses, 1);
});

scenario("SC-23 (core side) labels are computed once per flow, at its first export", () => {
  const { core, clock } = newCore({ includePodLabels: true });
  core.addRecord(intraNode({ sourcePodNamespace: "ns", destinationPodNamespace: "ns" }));
  const pods: Record<string, PodInfo> = {
    "10.0.0.1": { name: "pod1", namespace: "ns", nodeName: "n", labels: { app: "a" } },
    "10.0.0.2": { name: "pod2", namespace: "ns", nodeName: "n", labels: { tier: "db", app: "b" } },
  };
  const store = podStore(pods);
  at(clock, 60_100);
  const c = collector();
  core.expire(c.emit, store);
  assert.equal(c.out[0].record.sourcePodLabels, '{"app":"a"}');
  assert.equal(c.out[0].record.destinationPodLabels, '{"app":"b","tier":"db"}');
  pods["10.0.0.1"] = { ...pods["10.0.0.1"], labels: { app: "changed" } };
  at(clock, 90_100);
  core.expire(c.emit, store);
  assert.equal(c.out[1].record.sourcePodLabels, '{"app":"a"}');
  assert.equal(store.calls.length, 2);
});

scenario("SC-24 (core side) querier: null, complete key, partial key, no match", () => {
  const { core } = newCore();
  core.addRecord(intraNode({}));
  core.addRecord(v6(intraNode({}), "::"));
  assert.equal(core.query().length, 2);
  assert.equal(core.query(null).length, 2);
  assert.equal(core.query(K4).length, 1);
  const v6only = core.query({ sourceAddress: "2001:0:3238:dfe1:63::fefb" });
  assert.equal(v6only.length, 1);
  assert.equal(v6only[0].sourceIPv6Address, "2001:0:3238:dfe1:63::fefb");
  assert.equal(core.query({ sourceAddress: "10.0.0.10" }).length, 0);
  // improved (§8 SHOULD): filter addresses are canonicalised before matching.
  assert.equal(core.query({ sourceAddress: "2001:0:3238:DFE1:0063:0::FEFB" }).length, 1);
  assert.equal(core.query({ protocol: 6, destinationPort: 5678 }).length, 2);
  assert.equal(core.query({ protocol: 17 }).length, 0);
  assert.equal(core.query(undefined, 1).length, 1);
});

scenario("SC-25 (core side) updateTimeouts changes only schedules computed afterwards", () => {
  const { core, clock } = newCore();
  core.addRecord(intraNode({}));
  core.updateTimeouts(30_000, 45_000);
  const st = core.entryState(K4)!;
  assert.deepEqual([st.activeExpireMs, st.inactiveExpireMs], [60_000, 90_000]);
  at(clock, 1000);
  core.addRecord(intraNode({ flowEndSeconds: 2 }));
  assert.equal(core.entryState(K4)!.inactiveExpireMs, 46_000);
  assert.throws(() => core.updateTimeouts(0, 1000), RangeError);
  assert.throws(() => new AggregationCore({ activeTimeoutMs: NaN, inactiveTimeoutMs: 1, clock }));
});

/** SC-26's records: S1 (Allow), S2 (egress Drop), D1 (the other Node's first), D2. */
const SC26 = {
  s1: s1({
    sourcePodNamespace: "default",
    sourceNodeName: "node-a",
    egressNetworkPolicyName: "allow-web",
    egressNetworkPolicyNamespace: "default",
    egressNetworkPolicyType: 1,
    egressNetworkPolicyRuleName: "allow-rule",
    egressNetworkPolicyRuleAction: 1,
  }),
  s2: s1({
    sourcePodNamespace: "default",
    sourceNodeName: "node-a",
    egressNetworkPolicyName: "lockdown",
    egressNetworkPolicyNamespace: "default",
    egressNetworkPolicyType: 2,
    egressNetworkPolicyRuleName: "drop-rule",
    egressNetworkPolicyRuleAction: 2,
    flowEndSeconds: 2,
    ...counters(600n, 100n, 1200n, 200n),
  }),
  d1: d1({
    destinationPodNamespace: "default",
    destinationNodeName: "node-b",
    ingressNetworkPolicyName: "allow-in",
    ingressNetworkPolicyNamespace: "default",
    ingressNetworkPolicyType: 1,
    ingressNetworkPolicyRuleName: "in-rule",
    ingressNetworkPolicyRuleAction: 1,
    flowEndSeconds: 3,
    ...counters(610n, 10n, 1220n, 20n),
  }),
  d2: d1({
    destinationPodNamespace: "other",
    destinationNodeName: "node-x",
    ingressNetworkPolicyName: "changed",
    ingressNetworkPolicyRuleName: "changed-rule",
    ingressNetworkPolicyRuleAction: 2,
    flowEndSeconds: 5,
    ...counters(620n, 10n, 1240n, 20n),
  }),
};

/** Asserts the fields SC-26 expects of every export after D1. */
function assertSc26Export(ex: FlowInput): void {
  assert.deepEqual(podsOf(ex), [["pod1", "default", "node-a"], ["pod2", "default", "node-b"]]);
  // Egress: S1's values (S2 needs no correlation, D1 sends none).
  assert.deepEqual(policyOf(ex, "egress"), ["allow-web", "default", 1, "allow-rule", 1]);
  // Ingress: D1's values, not D2's (correlation happens once).
  assert.deepEqual(policyOf(ex, "ingress"), ["allow-in", "default", 1, "in-rule", 1]);
}

scenario("SC-26 improved: a same-Node deny makes the entry ready; D1 still correlates", () => {
  const { core, clock } = newCore();
  core.addRecord(SC26.s1);
  assert.equal(core.entryState(K4)!.readyToSend, false);
  at(clock, 1000);
  core.addRecord(SC26.s2);
  let st = core.entryState(K4)!;
  assert.deepEqual([st.readyToSend, st.correlatedFieldsFilled], [true, false]);
  assert.equal(core.stats().readyWithoutCorrelation, 1);
  // S2 was aggregated into both sides.
  assert.deepEqual(csd(one(core), "octetTotalCount"), [1200n, 1200n, 1200n]);
  at(clock, 3000);
  core.addRecord(SC26.d1);
  st = core.entryState(K4)!;
  assert.deepEqual([st.readyToSend, st.correlatedFieldsFilled], [true, true]);
  assert.equal(core.stats().correlated, 1);
  assert.equal(one(core).flowEndSecondsFromDestinationNode, 3); // D1 aggregated as D
  assert.equal(one(core).octetTotalCountFromSourceNode, 1200n);
  at(clock, 4000);
  core.addRecord(SC26.d2);
  assert.equal(core.stats().correlated, 1); // D2 does not correlate again
  const c = collector();
  at(clock, 60_100);
  assert.equal(core.expire(c.emit, podStore({})), 1);
  at(clock, 120_200);
  assert.equal(core.expire(c.emit, podStore({})), 1);
  for (const f of c.out) {
    assert.equal(f.uncorrelated, false);
    assertSc26Export(f.record);
  }
});

scenario("SC-26 improved: an export before D1 (Pod-store fill) does not stop the merge", () => {
  for (const found of [true, false]) {
    // A = 2 s, so the entry made ready by S2 is exported before D1 arrives.
    const { core, clock } = newCore({ activeTimeoutMs: 2000 });
    const store = podStore(
      found ? { "10.0.0.2": { name: "pod2", namespace: "default", nodeName: "node-b" } } : {},
    );
    const c = collector();
    core.addRecord(SC26.s1);
    at(clock, 1000);
    core.addRecord(SC26.s2);
    at(clock, 2100);
    assert.equal(core.expire(c.emit, store), 1);
    const early = c.out[0].record;
    assert.equal(early.sourcePodName, "pod1");
    assert.equal(early.destinationPodName, found ? "pod2" : ""); // Pod store, not D1
    assert.equal(early.ingressNetworkPolicyName, "");
    assert.equal(core.entryState(K4)!.correlatedFieldsFilled, true); // "tried" (L16)
    // A later record from the source Node is still the same Node, though both names are now
    // set on the stored flow after a hit.
    at(clock, 2500);
    core.addRecord(s1({ ...SC26.s1, flowEndSeconds: 2 }));
    assert.equal(core.stats().correlated, 0);
    at(clock, 3000);
    core.addRecord(SC26.d1);
    assert.equal(core.stats().correlated, 1);
    at(clock, 4300);
    assert.equal(core.expire(c.emit, store), 1);
    assert.equal(c.out.length, 2);
    assertSc26Export(c.out[1].record);
  }
});
