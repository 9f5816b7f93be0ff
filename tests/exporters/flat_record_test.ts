import assert from "node:assert/strict";
import type { AggregatedRecord } from "../../src/aggregation/record.ts";
import { FLAT_RECORD_FIELDS, toFlatRecord } from "../../src/exporters/flat_record.ts";
import { fixtureFlow } from "./fixtures.ts";

/** The values of F in struct order (exporters.md §8.2 C2 without clusterUUID). */
const EXPECTED_V4 = [
  1637706961,
  1637706973,
  1637706974,
  1637706975,
  3,
  "10.10.0.79",
  "10.10.0.80",
  44752,
  5201,
  6,
  823188n,
  30472817041n,
  241333n,
  8982624938n,
  471111n,
  24500996n,
  136211n,
  7083284n,
  "perftest-a",
  "antrea-test",
  "k8s-node-control-plane",
  "perftest-b",
  "antrea-test-b",
  "k8s-node-control-plane-b",
  "10.10.1.10",
  5202,
  "perftest",
  "test-flow-aggregator-networkpolicy-ingress-allow",
  "antrea-test-ns",
  "test-flow-aggregator-networkpolicy-rule",
  2,
  1,
  "test-flow-aggregator-networkpolicy-egress-allow",
  "antrea-test-ns-e",
  "test-flow-aggregator-networkpolicy-rule-e",
  5,
  4,
  "TIME_WAIT",
  11,
  '{"antrea-e2e":"perftest-a","app":"iperf"}',
  '{"antrea-e2e":"perftest-b","app":"iperf"}',
  15902813472n,
  12381344n,
  15902813473n,
  15902813474n,
  12381345n,
  12381346n,
  "test-egress",
  "172.18.0.1",
];

Deno.test("flat record of the IPv4 fixture has exactly the §8.0 values in struct order", () => {
  const flat = toFlatRecord(fixtureFlow(), "uuid-1");
  assert.equal(FLAT_RECORD_FIELDS.length, 49);
  assert.deepEqual(FLAT_RECORD_FIELDS.map((f) => flat[f]), EXPECTED_V4);
  assert.equal(flat.clusterUUID, "uuid-1");
  assert.equal(Object.keys(flat).length, 50);
});

Deno.test("flat record of the IPv6 fixture carries the IPv6 strings", () => {
  const flat = toFlatRecord(fixtureFlow(true));
  assert.equal(flat.sourceIP, "2001:0:3238:dfe1:63::fefb");
  assert.equal(flat.destinationIP, "2001:0:3238:dfe1:63::fefc");
  assert.equal(flat.destinationClusterIP, "2001:0:3238:dfe1:64::a");
  assert.equal(flat.clusterUUID, "");
});

Deno.test("flat record uses zero values for absent IEs and keeps u64 exact", () => {
  const flow = fixtureFlow(false, {
    sourcePodLabels: undefined,
    destinationPodLabels: "null",
    octetTotalCount: 2n ** 64n - 1n,
  });
  const r = flow.record as unknown as Record<string, unknown>;
  delete r.tcpState;
  delete r.destinationClusterIPv4;
  delete r.flowEndSecondsFromDestinationNode;
  const flat = toFlatRecord(flow);
  assert.equal(flat.tcpState, "");
  assert.equal(flat.destinationClusterIP, "");
  assert.equal(flat.flowEndSecondsFromDestinationNode, 0);
  assert.equal(flat.sourcePodLabels, "");
  assert.equal(flat.destinationPodLabels, "{}");
  assert.equal(flat.octetTotalCount, 18446744073709551615n);
});

Deno.test("flat record is a copy: later mutation of the flow does not change it", () => {
  const flow = fixtureFlow();
  const flat = toFlatRecord(flow);
  (flow.record as AggregatedRecord).octetDeltaCount = 0n;
  assert.equal(flat.octetDeltaCount, 8982624938n);
});

Deno.test("flat record writes addresses as canonical text (RFC 5952, mapped IPv4 as a quad)", () => {
  const sourceIP = (ipv6: boolean, text: string): string =>
    toFlatRecord(
      fixtureFlow(ipv6, ipv6 ? { sourceIPv6Address: text } : { sourceIPv4Address: text }),
    ).sourceIP;
  assert.equal(
    sourceIP(true, "2001:0000:3238:DFE1:0063:0000:0000:FEFB"),
    "2001:0:3238:dfe1:63::fefb",
  );
  assert.equal(sourceIP(true, "0:0:0:0:0:0:0:0"), "::");
  assert.equal(sourceIP(true, "0:0:0:0:0:0:0:1"), "::1");
  assert.equal(sourceIP(true, "2001:db8:0:0:1:0:0:1"), "2001:db8::1:0:0:1");
  assert.equal(sourceIP(true, "2001:db8:0:1:1:1:1:1"), "2001:db8:0:1:1:1:1:1");
  // Go prints an IPv4-mapped IPv6 address as its dotted quad (aggregation.md §1.1).
  assert.equal(sourceIP(true, "::ffff:10.0.0.1"), "10.0.0.1");
  assert.equal(sourceIP(true, "fe80::1:2:3.4.5.6"), "fe80::1:2:304:506");
  assert.equal(sourceIP(false, "10.0.0.1"), "10.0.0.1");
  assert.equal(sourceIP(true, "not:an:ip"), "not:an:ip");
});

Deno.test("flat record has exactly the schema's flat fields, clusterUUID last", () => {
  const flat = toFlatRecord(fixtureFlow(), "u");
  assert.deepEqual(Object.keys(flat), [...FLAT_RECORD_FIELDS, "clusterUUID"]);
});
