/**
 * End to end, the upstream e2e shape (exporters.md §7): the real process correlates a
 * long-lived inter-node flow reported by two Agents (three updates per side, the last one
 * ending the connection) and re-exports it over IPFIX/TCP to an external collector, with a
 * fractional active timeout. The aggregated records are checked at the collector: correlated
 * metadata, per-side counters, the common delta of the side that reported last, 64-bit counters
 * above 2^53 exact end to end, reset deltas on the next export, IPv6 on template 257.
 */

import assert from "node:assert/strict";
import { type CapturedRecord, CaptureServer } from "../../src/flowgen/mod.ts";
import { SimAgent } from "./helpers/agent.ts";
import { FaProcess } from "../_helpers/process.ts";
import { waitFor } from "../_helpers/wait.ts";
import { NODES } from "./helpers/scenarios.ts";
import { agentRecord } from "../_helpers/agent_record.ts";
import { intraNodeRecord } from "./helpers/scenarios.ts";
import { SilentCollector, unreadBytes } from "../_helpers/silent_collector.ts";

const BIG = 1n << 60n; // far above 2^53: a float anywhere on the path would round it

function conf(capturePort: number): string {
  return `activeFlowRecordTimeout: 1.5s
inactiveFlowRecordTimeout: 3s
aggregatorTransportProtocol: TCP
flowCollector:
  enable: true
  address: 127.0.0.1:${capturePort}:tcp
  observationDomainID: 4242
  recordFormat: IPFIX
`;
}

Deno.test("e2e ipfix: a correlated long-lived inter-node flow is re-exported exactly over IPFIX", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-ipfix-" });
  const capture = CaptureServer.listen({ kind: "tcp" });
  const fa = await FaProcess.startWithConfig(dir, conf(capture.port));
  const agents: SimAgent[] = [];
  try {
    const port = await fa.collectorPort();
    for (const n of NODES) agents.push(await SimAgent.connect(n, port, "tcp"));
    for (const a of agents) await a.sendTemplates();

    const t0 = 1_700_000_000;
    const v4 = {
      sourceIPv4Address: "10.10.0.7",
      destinationIPv4Address: "10.10.1.8",
      sourceTransportPort: 51_001,
      destinationTransportPort: 5201,
      flowStartSeconds: t0,
      flowType: 2,
    };
    for (let i = 1n; i <= 3n; i++) {
      const last = i === 3n;
      const common = {
        flowEndSeconds: t0 + Number(i),
        flowEndReason: last ? 3 : 2,
        tcpState: last ? "TIME_WAIT" : "ESTABLISHED",
      };
      await agents[0].sendRecord(agentRecord({
        ...v4,
        ...common,
        sourcePodName: "perftest-a",
        sourcePodNamespace: "antrea-test",
        sourceNodeName: NODES[0],
        egressNetworkPolicyName: "allow-out",
        egressNetworkPolicyNamespace: "antrea-test",
        egressNetworkPolicyType: 2,
        egressNetworkPolicyRuleName: "r1",
        egressNetworkPolicyRuleAction: 1,
        octetTotalCount: BIG + 1000n * i,
        octetDeltaCount: 1000n,
        packetTotalCount: 10n * i,
        packetDeltaCount: 10n,
        reverseOctetTotalCount: 500n * i,
        reverseOctetDeltaCount: 500n,
        reversePacketTotalCount: 5n * i,
        reversePacketDeltaCount: 5n,
      }));
      await agents[1].sendRecord(agentRecord({
        ...v4,
        ...common,
        // The destination Node's last report ends one second later, so it is the latest record
        // whichever of the two connections the collector reads first (the common delta is the
        // latest side's, aggregation.md §3.3): the expectations below do not depend on timing.
        flowEndSeconds: t0 + Number(i) + (last ? 1 : 0),
        destinationPodName: "perftest-b",
        destinationPodNamespace: "antrea-test",
        destinationNodeName: NODES[1],
        ingressNetworkPolicyName: "allow-in",
        ingressNetworkPolicyNamespace: "antrea-test",
        ingressNetworkPolicyType: 1,
        ingressNetworkPolicyRuleAction: 1,
        octetTotalCount: BIG + 1010n * i,
        octetDeltaCount: 1010n,
        packetTotalCount: 11n * i,
        packetDeltaCount: 11n,
        reverseOctetTotalCount: 505n * i,
        reverseOctetDeltaCount: 505n,
        reversePacketTotalCount: 6n * i,
        reversePacketDeltaCount: 6n,
      }));
    }
    // An IPv6 intra-node flow rides template 257 through the whole chain.
    await agents[0].sendRecord(agentRecord({
      sourceIPv6Address: "fd00:10:1::a",
      destinationIPv6Address: "fd00:10:1::b",
      sourceTransportPort: 51_002,
      destinationTransportPort: 443,
      sourcePodName: "v6-a",
      sourcePodNamespace: "ns6",
      sourceNodeName: NODES[0],
      destinationPodName: "v6-b",
      destinationPodNamespace: "ns6",
      destinationNodeName: NODES[0],
      flowType: 1,
    }));

    const of = (p: number): CapturedRecord[] =>
      capture.records.filter((r) => r.record.sourceTransportPort === p);
    // Exported on the 1.5 s active timeout, then on the 3 s inactive timeout (and deleted).
    await waitFor(() => of(51_001).length >= 2, {
      timeoutMs: 15_000,
      what: "two exports of the inter-node flow",
    });
    await waitFor(() => of(51_002).length >= 1, { timeoutMs: 15_000, what: "the IPv6 flow" });

    const [first, second] = of(51_001);
    assert.equal(first.observationDomainId, 4242);
    assert.equal(first.templateId, 256);
    const r = first.record;
    assert.equal(r.sourcePodName, "perftest-a");
    assert.equal(r.sourceNodeName, NODES[0]);
    assert.equal(r.destinationPodName, "perftest-b");
    assert.equal(r.destinationNodeName, NODES[1]);
    assert.equal(r.egressNetworkPolicyName, "allow-out");
    assert.equal(r.egressNetworkPolicyRuleName, "r1");
    assert.equal(r.ingressNetworkPolicyName, "allow-in");
    assert.equal(r.ingressNetworkPolicyType, 1);
    assert.equal(r.flowType, 2);
    assert.equal(r.flowStartSeconds, t0);
    assert.equal(r.flowEndSeconds, t0 + 4);
    assert.equal(r.flowEndReason, 3);
    assert.equal(r.tcpState, "TIME_WAIT");
    // Totals: per side as last reported, the common one raised to the maximum, all exact.
    assert.equal(r.octetTotalCountFromSourceNode, BIG + 3000n);
    assert.equal(r.octetTotalCountFromDestinationNode, BIG + 3030n);
    assert.equal(r.octetTotalCount, BIG + 3030n);
    assert.equal(r.packetTotalCountFromSourceNode, 30n);
    assert.equal(r.packetTotalCountFromDestinationNode, 33n);
    // Deltas: accumulated per side since the flow started; the common one is the side that
    // reported last (the destination Node here), not a sum.
    assert.equal(r.octetDeltaCountFromSourceNode, 3000n);
    assert.equal(r.octetDeltaCountFromDestinationNode, 3030n);
    assert.equal(r.octetDeltaCount, 3030n);
    assert.equal(r.reversePacketDeltaCountFromSourceNode, 15n);
    assert.equal(r.reversePacketDeltaCountFromDestinationNode, 18n);
    assert.equal(r.flowEndSecondsFromSourceNode, t0 + 3);
    assert.equal(r.flowEndSecondsFromDestinationNode, t0 + 4);

    // The next export carries no new data: deltas reset, totals kept.
    const s = second.record;
    assert.equal(s.octetDeltaCount, 0n);
    assert.equal(s.octetDeltaCountFromSourceNode, 0n);
    assert.equal(s.octetDeltaCountFromDestinationNode, 0n);
    assert.equal(s.throughput, 0n);
    assert.equal(s.octetTotalCount, BIG + 3030n);
    assert.equal(s.destinationPodName, "perftest-b");

    const v6 = of(51_002)[0];
    assert.equal(v6.templateId, 257);
    assert.equal(v6.record.sourceIPv6Address, "fd00:10:1::a");
    assert.equal(v6.record.destinationPodName, "v6-b");
    assert.equal(capture.decodeErrors, 0);
    assert.equal(capture.templateMisses, 0);

    const status = await fa.stop("SIGTERM");
    assert.equal(status.code, 0, fa.stderr);
    // SIGTERM ends the IPFIX stream cleanly and the collector closes after reading to the end:
    // the proof that turns every record written into exported (README "What is delivered
    // when"), and exactly the records the collector decoded.
    const [stopped] = fa.find({ msg: "exporter stopped", section: "flowCollector" });
    assert.ok(stopped, "the IPFIX sink's final ledger");
    assert.equal(Number(stopped.fields.exported), capture.records.length);
    assert.equal(Number(stopped.fields.unacknowledged), 0);
    assert.equal(Number(stopped.fields.dropped), 0);
    assert.equal(Number(stopped.fields.received), capture.records.length);
  } finally {
    for (const a of agents) a.close();
    await fa.dispose();
    await capture.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("e2e ipfix: a collector killed with records unread: none counted exported, all accounted", async () => {
  // Issue 10: records written into a collector that then dies used to be counted exported.
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-ipfix-" });
  const silent = new SilentCollector();
  const fa = await FaProcess.startWithConfig(dir, conf(silent.port));
  let agent: SimAgent | undefined;
  try {
    agent = await SimAgent.connect(NODES[0], await fa.collectorPort(), "tcp");
    await agent.sendTemplates();
    for (let p = 40_000; p < 40_100; p++) await agent.sendRecord(intraNodeRecord(p));
    // The 100 flows' first export (1.5 s active timeout) sits unread in the collector's
    // socket: two 480-byte template messages and 100 records of about 630 bytes.
    await waitFor(async () => (await unreadBytes(silent.port)) >= 960 + 100 * 600, {
      timeoutMs: 15_000,
      what: "the first export written into the collector's socket",
    });
    await silent.kill();
    const status = await fa.stop("SIGTERM");
    assert.equal(status.code, 0, fa.stderr);
    const [stopped] = fa.find({ msg: "exporter stopped", section: "flowCollector" });
    assert.ok(stopped, "the IPFIX sink's final ledger");
    const f = (k: string): number => Number(stopped.fields[k]);
    assert.equal(f("exported"), 0, "no collector read anything");
    assert.ok(f("unacknowledged") >= 100, `${f("unacknowledged")} unacknowledged`);
    // The worker's own counters of the sink ride along as one JSON field.
    assert.equal(JSON.parse(stopped.fields.sink).possiblyLost, f("unacknowledged"));
    // Exports after the kill found no collector: dropped at the stop timeout, counted.
    assert.equal(f("received"), f("exported") + f("dropped") + f("unacknowledged"));
    assert.equal(f("buffered"), 0);
  } finally {
    agent?.close();
    await fa.dispose();
    await silent.kill();
    await Deno.remove(dir, { recursive: true });
  }
});
