import assert from "node:assert/strict";
import { elementByName } from "../../src/ipfix/registry.ts";
import {
  AGENT_IPV4_FIELDS,
  AGENT_IPV6_ADDRESS_FIELDS,
  AGENT_IPV6_FIELDS,
  AGENT_UPDATE_FIELDS,
  AGGREGATED_IPV4_FIELDS,
  AGGREGATED_IPV6_FIELDS,
  type AggregatedRecord,
  CLICKHOUSE_COLUMNS,
  DESTINATION_STATS_FIELDS,
  FLAT_RECORD_FIELDS,
  type FlatRecord,
  type FlowInput,
  ieName,
  LOG_LINE_FIELDS,
  POD_LABEL_FIELDS,
  projectSchema,
  RECORD_SCHEMA,
  S3_COLUMNS,
  type SchemaRow,
  SOURCE_STATS_FIELDS,
  STATS_FIELDS,
} from "../../src/record/schema.ts";
import {
  SPEC_AGENT_IPV4,
  SPEC_AGENT_IPV6,
  SPEC_CLICKHOUSE_TABLE,
  SPEC_FA_APPENDED,
  SPEC_FLAT,
  SPEC_LOG_LINE,
  SPEC_POD_LABELS,
  SPEC_S3,
  SPEC_STATS,
} from "../_helpers/spec_fields.ts";

// The expected orders come from the spec text (tests/_helpers/spec_fields.ts), not from the table.

Deno.test("Agent templates: 39 IEs in ipfix.md §5.3 order, address IEs per family", () => {
  assert.deepEqual(AGENT_IPV4_FIELDS, SPEC_AGENT_IPV4);
  assert.deepEqual(AGENT_IPV6_FIELDS, SPEC_AGENT_IPV6);
  assert.equal(AGENT_IPV6_FIELDS.length, 39);
});

Deno.test("FA templates: 63 IEs (65 with labels) in exporters.md §2.4 order", () => {
  assert.deepEqual(AGGREGATED_IPV4_FIELDS, [...SPEC_AGENT_IPV4, ...SPEC_FA_APPENDED]);
  assert.equal(AGGREGATED_IPV6_FIELDS.length, 63);
  assert.deepEqual(AGGREGATED_IPV6_FIELDS.slice(0, 39), AGENT_IPV6_FIELDS);
  assert.deepEqual(AGGREGATED_IPV6_FIELDS.slice(39), SPEC_FA_APPENDED);
  assert.deepEqual(POD_LABEL_FIELDS, SPEC_POD_LABELS);
  assert.equal([...AGGREGATED_IPV4_FIELDS, ...POD_LABEL_FIELDS].length, 65);
});

Deno.test("aggregation lists follow ipfix.md §5.2 and pair by index", () => {
  assert.deepEqual(STATS_FIELDS, SPEC_STATS);
  assert.equal(SOURCE_STATS_FIELDS[0], "octetDeltaCountFromSourceNode");
  assert.equal(DESTINATION_STATS_FIELDS[7], "reversePacketTotalCountFromDestinationNode");
  // The FA appends them interleaved source/destination (positions 40–55).
  assert.deepEqual(
    STATS_FIELDS.flatMap((_, i) => [SOURCE_STATS_FIELDS[i], DESTINATION_STATS_FIELDS[i]]),
    SPEC_FA_APPENDED.slice(0, 16),
  );
});

Deno.test("flat record: the 49 upstream fields in exporters.md §1.4 struct order", () => {
  assert.deepEqual(FLAT_RECORD_FIELDS, SPEC_FLAT);
});

Deno.test("flow log line: the 28 fields of exporters.md §5.2 in order", () => {
  assert.deepEqual(LOG_LINE_FIELDS, SPEC_LOG_LINE);
});

Deno.test("ClickHouse insert: the 50 columns of exporters.md §3.4 (table minus defaults)", () => {
  assert.deepEqual(
    CLICKHOUSE_COLUMNS,
    SPEC_CLICKHOUSE_TABLE.filter((c) => c !== "timeInserted" && c !== "trusted"),
  );
  assert.equal(CLICKHOUSE_COLUMNS.length, 50);
  assert.deepEqual(CLICKHOUSE_COLUMNS, [
    ...SPEC_FLAT.slice(0, 47),
    "clusterUUID",
    "egressName",
    "egressIP",
  ]);
});

Deno.test("S3 CSV: the 51 columns of exporters.md §4.2 in order", () => {
  assert.equal(S3_COLUMNS.length, 51);
  assert.deepEqual(S3_COLUMNS, SPEC_S3);
  assert.equal(S3_COLUMNS[47], "clusterUUID");
  assert.equal(S3_COLUMNS[48], "timeInserted");
});

Deno.test("flowgen patches flowEnd, flowEndReason and the 8 counters in Agent order", () => {
  // The 8 counters are ipfix.md §5.2's StatsElementList, taken in the Agent template's order.
  const patched = new Set<string>(["flowEndSeconds", "flowEndReason", ...SPEC_STATS]);
  assert.deepEqual(AGENT_UPDATE_FIELDS, SPEC_AGENT_IPV4.filter((f) => patched.has(f)));
  assert.equal(AGENT_UPDATE_FIELDS.length, 10);
  assert.deepEqual(AGENT_IPV6_ADDRESS_FIELDS, [
    "sourceIPv6Address",
    "destinationIPv6Address",
    "destinationClusterIPv6",
  ]);
});

Deno.test("every IE of the schema is in the registry with the declared type", () => {
  let ies = 0;
  for (const row of RECORD_SCHEMA as readonly SchemaRow[]) {
    if (row[2] === "sink") {
      assert.equal(row[3], 0, `${row[0]}: a sink column has no template position`);
      continue;
    }
    const variants: [string, string][] = row[1] === "ipAddress"
      ? [[ieName(row, false), "ipv4Address"], [ieName(row, true), "ipv6Address"]]
      : [[row[0], row[1]]];
    for (const [name, type] of variants) {
      const ie = elementByName(name);
      assert.ok(ie !== undefined, `${name} is not in the IE registry`);
      assert.equal(ie.type, type, `${name}: declared ${type}, registry ${ie.type}`);
      ies++;
    }
  }
  // 63 FA IEs + 2 labels + the 3 address IEs of the other family.
  assert.equal(ies, 68);
});

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
type V6Names = "sourceIPv6Address" | "destinationIPv6Address" | "destinationClusterIPv6";

Deno.test("derived types: keys and value types of FlowInput, AggregatedRecord, FlatRecord", () => {
  // Compile-time checks: each `true` only type-checks when the two key sets are equal.
  const flowInput: Same<keyof FlowInput, (typeof SPEC_AGENT_IPV4)[number] | V6Names> = true;
  const aggregated: Same<
    keyof AggregatedRecord,
    | (typeof SPEC_AGENT_IPV4)[number]
    | V6Names
    | (typeof SPEC_FA_APPENDED)[number]
    | "sourcePodLabels"
    | "destinationPodLabels"
  > = true;
  const flat: Same<keyof FlatRecord, (typeof SPEC_FLAT)[number] | "clusterUUID"> = true;
  const counter: Same<AggregatedRecord["octetDeltaCountFromSourceNode"], bigint> = true;
  const optionalInput: Same<FlowInput["flowEndSeconds"], number | undefined> = true;
  const optionalAddress: Same<AggregatedRecord["sourceIPv4Address"], string | undefined> = true;
  const requiredPort: Same<AggregatedRecord["destinationServicePort"], number> = true;
  const flatIP: Same<FlatRecord["destinationClusterIP"], string> = true;
  assert.ok(flowInput && aggregated && flat && counter && optionalInput && optionalAddress);
  assert.ok(requiredPort && flatIP);
});

/** The schema with `row` inserted after `after` and the label positions moved up by `shift`. */
function withRow(row: SchemaRow, after: string, shift = 0): SchemaRow[] {
  const rows: SchemaRow[] = [];
  for (const r of RECORD_SCHEMA as readonly SchemaRow[]) {
    rows.push(r[2] === "label" ? [r[0], r[1], r[2], r[3] + shift, r[4], r[5]] : r);
    if (r[0] === after) rows.push(row);
  }
  return rows;
}

Deno.test("an added FA row shows up in the FA templates and in each sink it is marked for", () => {
  const p = projectSchema(
    withRow(["newCounter", "unsigned64", "fa", 64, ["flat", "log", "ch", "s3"]], "egressIP", 1),
  );
  assert.equal(p.aggregatedIPv4.length, 64);
  assert.equal(p.aggregatedIPv4[63], "newCounter");
  assert.equal(p.aggregatedIPv6[63], "newCounter");
  assert.deepEqual(p.podLabels, POD_LABEL_FIELDS);
  assert.deepEqual(p.agentIPv4, AGENT_IPV4_FIELDS);
  assert.deepEqual(p.flat, [...SPEC_FLAT, "newCounter"]);
  assert.deepEqual(p.log, [...SPEC_LOG_LINE, "newCounter"]);
  assert.deepEqual(p.clickHouse, [...CLICKHOUSE_COLUMNS, "newCounter"]);
  assert.deepEqual(p.s3, [...SPEC_S3, "newCounter"]);
});

Deno.test("an added row is left out of the sinks it is not marked for", () => {
  const p = projectSchema(withRow(["newGauge", "unsigned32", "fa", 64, ["ch"]], "tcpState", 1));
  assert.equal(p.aggregatedIPv4[63], "newGauge");
  assert.deepEqual(p.flat, SPEC_FLAT);
  assert.deepEqual(p.log, SPEC_LOG_LINE);
  assert.deepEqual(p.s3, SPEC_S3);
  // Sinks follow the table order: inserted after tcpState, before flowType.
  assert.equal(p.clickHouse[37], "tcpState");
  assert.equal(p.clickHouse[38], "newGauge");
  assert.equal(p.clickHouse.length, 51);
});

Deno.test("an added label row is appended to the labels list only", () => {
  const p = projectSchema(withRow(["newLabels", "string", "label", 66, []], "egressIP"));
  assert.deepEqual(p.podLabels, [...POD_LABEL_FIELDS, "newLabels"]);
  assert.equal(p.aggregatedIPv4.length, 63);
});

Deno.test("an added sink column has no IE and appears only in its sinks", () => {
  const p = projectSchema(withRow(["exporterHost", "string", "sink", 0, ["s3"]], "timeInserted"));
  assert.deepEqual(p.s3, [...SPEC_S3.slice(0, 49), "exporterHost", "egressName", "egressIP"]);
  assert.deepEqual(p.flat, SPEC_FLAT);
  assert.equal(p.aggregatedIPv4.length, 63);
});

Deno.test("template positions must run 1..n without gaps, repeats or role disorder", () => {
  assert.throws(
    () => projectSchema(withRow(["gap", "unsigned8", "fa", 67, []], "egressIP")),
    /gap: FA position 67, want 66/,
  );
  assert.throws(
    () => projectSchema(withRow(["twice", "unsigned8", "fa", 63, []], "egressIP", 1)),
    /FA position/,
  );
  assert.throws(
    () => projectSchema(withRow(["late", "unsigned8", "agent", 66, []], "egressIP")),
    /late: agent field after a label field/,
  );
  assert.throws(
    () => projectSchema(withRow(["nowhere", "unsigned8", "fa", 0, ["flat"]], "egressIP")),
    /nowhere: no FA position/,
  );
});
