/**
 * The flow log line read straight from a batch row (the worker's path) against the line of the
 * flat record (the in-process path), over many varied flows: they must be byte-identical.
 */

import assert from "node:assert/strict";
import type { AggregatedRecord, ExportedFlow } from "../../../src/aggregation/record.ts";
import { BatchWriter, openBatch } from "../../../src/exporters/batch.ts";
import { toFlatRecord } from "../../../src/exporters/flat_record.ts";
import { LogExporter } from "../../../src/exporters/flow_log/exporter.ts";
import {
  BatchLines,
  flatLineFormat,
  formatLogLine,
} from "../../../src/exporters/flow_log/format.ts";
import { FLAT_RECORD_FIELDS, LOG_LINE_FIELDS, RECORD_SCHEMA } from "../../../src/record/schema.ts";
import { enabledFlowLogger } from "../../_helpers/flow_logger_config.ts";
import { prng } from "../../_helpers/prng.ts";
import { fixtureFlow } from "../fixtures.ts";

const STRINGS = [
  "",
  "perftest-a",
  "antrea-test",
  "a,b,,c",
  "back\\slash",
  "esc\x1b[2Jclear",
  "nul\x00byte",
  "new\nline\r\t",
  "c1\x85\x9fend",
  "del\x7f",
  "bad\ufffdutf8",
  "ünïcödé ✓ 名前",
  "null",
  '{"app":"a","ünï":"cödé"}',
];

const V6 = [
  "2001:db8::1",
  "::",
  "::1",
  "fe80::1:2:3:4",
  "2001:0:3238:dfe1:63::fefb",
  "1:2:3:4:5:6:7:8",
  "2001:db8:0:0:1::1",
  "::ffff:10.0.0.2", // IPv4-mapped: prints as a dotted quad
];

/** Every string field of the aggregated record (the sinks' own clusterUUID aside), from the schema. */
const STRING_FIELDS = RECORD_SCHEMA.filter((r) => r[1] === "string" && r[2] !== "sink").map((r) =>
  r[0]
);

const CODE_FIELDS = [
  "protocolIdentifier",
  "ingressNetworkPolicyRuleAction",
  "ingressNetworkPolicyType",
  "egressNetworkPolicyRuleAction",
  "egressNetworkPolicyType",
  "flowEndReason",
  "flowType",
] as const;

const COUNTERS = [
  "packetTotalCount",
  "octetTotalCount",
  "packetDeltaCount",
  "octetDeltaCount",
  "reverseOctetDeltaCount",
  "throughput",
  "reverseThroughputFromDestinationNode",
] as const;

/** A flow with random addresses, strings, codes and counters, some fields absent. */
function randomFlow(rand: () => number): ExportedFlow {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)];
  const int = (n: number): number => Math.floor(rand() * n);
  const v4 = (): string => `${int(256)}.${int(256)}.${int(256)}.${int(256)}`;
  const ipv6 = rand() < 0.4;
  const flow = fixtureFlow(ipv6);
  const r = flow.record as unknown as Record<string, unknown>;
  if (ipv6) {
    r.sourceIPv6Address = pick(V6);
    r.destinationIPv6Address = pick(V6);
    r.destinationClusterIPv6 = rand() < 0.3 ? undefined : pick(V6);
  } else {
    r.sourceIPv4Address = v4();
    r.destinationIPv4Address = v4();
    r.destinationClusterIPv4 = rand() < 0.3 ? undefined : pick(["0.0.0.0", v4()]);
  }
  for (const f of STRING_FIELDS) r[f] = rand() < 0.15 ? undefined : pick(STRINGS);
  for (const f of CODE_FIELDS) {
    r[f] = rand() < 0.1 ? undefined : pick([0, 1, 2, 3, 4, 6, 17, 58, 255]);
  }
  r.sourceTransportPort = int(65536);
  r.destinationTransportPort = rand() < 0.1 ? undefined : int(65536);
  r.destinationServicePort = int(65536);
  r.flowStartSeconds = int(2 ** 32);
  r.flowEndSeconds = rand() < 0.1 ? undefined : int(2 ** 32);
  for (const f of COUNTERS) {
    // Up to 2^64 - 1: above 2^53 the value must stay exact.
    r[f] = rand() < 0.1 ? undefined : (BigInt(int(2 ** 32)) << 32n) | BigInt(int(2 ** 32));
  }
  r.octetTotalCount = 2n ** 64n - 1n;
  return { ...flow, uncorrelated: rand() < 0.2 };
}

/** Checks every row of batches of `flows` (in batches of varied sizes) against the flat path. */
function assertSameLines(
  flows: readonly ExportedFlow[],
  prettyPrint: boolean,
  fields = LOG_LINE_FIELDS,
): number {
  const flat = fields === LOG_LINE_FIELDS
    ? (r: ReturnType<typeof toFlatRecord>) => formatLogLine(r, prettyPrint)
    : flatLineFormat(prettyPrint, fields);
  let checked = 0;
  for (let from = 0, size = 1; from < flows.length; from += size, size = size * 2 + 1) {
    const part = flows.slice(from, from + size);
    const w = new BatchWriter(part.length);
    for (const f of part) w.add(f);
    const lines = new BatchLines(openBatch(w.finish()), { prettyPrint, fields });
    assert.equal(lines.count, part.length);
    part.forEach((f, i) => {
      assert.equal(lines.line(i), flat(toFlatRecord(f)), `flow ${from + i}`);
      checked++;
    });
  }
  return checked;
}

const FLOWS = (() => {
  const rand = prng(20261203);
  return Array.from({ length: 3000 }, () => randomFlow(rand));
})();

Deno.test("row line: byte-identical to the flat record's line, plain and pretty", () => {
  assert.equal(assertSameLines(FLOWS, false), FLOWS.length);
  assert.equal(assertSameLines(FLOWS, true), FLOWS.length);
  // The fixtures of exporters.md §8.0 too.
  assertSameLines([fixtureFlow(false), fixtureFlow(true)], false);
});

Deno.test("row line: every flat field (counters, labels, codes) reads as the flat record's", () => {
  const fields = [...FLAT_RECORD_FIELDS];
  assert.ok(fields.includes("octetTotalCount") && fields.includes("sourcePodLabels"));
  assertSameLines(FLOWS.slice(0, 500), false, fields);
  assertSameLines(FLOWS.slice(0, 500), true, fields);
});

Deno.test("row line: an absent field prints as the flat record's zero value", () => {
  const f = fixtureFlow(false);
  const sparse: ExportedFlow = {
    ...f,
    record: {
      sourceIPv4Address: "10.0.0.1",
      destinationIPv4Address: "10.0.0.2",
    } as unknown as AggregatedRecord,
  };
  const w = new BatchWriter(1);
  w.add(sparse);
  const line = new BatchLines(openBatch(w.finish()), { prettyPrint: false }).line(0);
  assert.equal(line, formatLogLine(toFlatRecord(sparse), false));
  assert.equal(line, "0,0,10.0.0.1,10.0.0.2,0,0,0,,,,,,,,0,,,,,0,0,,,,0,0,,\n");
});

Deno.test("log exporter: addBatch writes, filters and counts as addRecord does", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const flows = FLOWS.slice(0, 400);
    const filters = [{
      ingressNetworkPolicyRuleActions: ["Allow", "Drop"],
      egressNetworkPolicyRuleActions: [],
    }];
    const byRecord = new LogExporter(enabledFlowLogger(`${dir}/a.log`, { filters }));
    const byBatch = new LogExporter(enabledFlowLogger(`${dir}/b.log`, { filters }));
    for (const f of flows) byRecord.addRecord(f);
    for (let i = 0; i < flows.length; i += 64) {
      const w = new BatchWriter(64);
      for (const f of flows.slice(i, i + 64)) w.add(f);
      byBatch.addBatch(openBatch(w.finish()));
    }
    await byRecord.stop();
    await byBatch.stop();
    const a = await Deno.readTextFile(`${dir}/a.log`);
    assert.equal(await Deno.readTextFile(`${dir}/b.log`), a);
    assert.deepEqual(byBatch.stats(), byRecord.stats());
    const s = byBatch.stats();
    assert.equal(s.received, flows.length);
    assert.ok(s.filtered > 0 && s.exported > 0, "the filter kept some rows and dropped others");
    assert.equal(s.exported + s.filtered, flows.length);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
