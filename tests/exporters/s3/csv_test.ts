import assert from "node:assert/strict";
import { formatCsvLine } from "../../../src/exporters/s3/csv.ts";
import { S3_COLUMNS } from "../../../src/record/schema.ts";
import { fixtureFlow } from "../fixtures.ts";
import { s1Line } from "../../_helpers/s3.ts";

const U = "11111111-2222-3333-4444-555555555555";
const T = 1700000000;
const S1_LINE = s1Line(U, T);

Deno.test("S1: the fixture record's CSV line is byte-exact, 51 columns, newline-terminated", () => {
  const line = formatCsvLine(fixtureFlow(), { clusterUuid: U, timeInsertedSeconds: T });
  assert.equal(line, S1_LINE + "\n");
  assert.equal(S3_COLUMNS.length, 51);
  assert.equal(S3_COLUMNS[48], "timeInserted", "the 49th column is the add time");
});

Deno.test("S1 IPv6: addresses in RFC 5952 text, the rest as IPv4", () => {
  const line = formatCsvLine(fixtureFlow(true), { clusterUuid: U, timeInsertedSeconds: T });
  const want = S1_LINE.replace(
    "10.10.0.79,10.10.0.80",
    "2001:0:3238:dfe1:63::fefb,2001:0:3238:dfe1:63::fefc",
  )
    .replace("10.10.1.10", "2001:0:3238:dfe1:64::a");
  assert.equal(line, want + "\n");
});

Deno.test("absent labels are written as two single quotes, u64 above 2^53 exactly", () => {
  const flow = fixtureFlow(false, { octetTotalCount: 2n ** 64n - 1n });
  delete flow.record.sourcePodLabels;
  delete flow.record.destinationPodLabels;
  const cols = formatCsvLine(flow, { clusterUuid: U, timeInsertedSeconds: T }).trimEnd()
    .split(",");
  assert.equal(cols.length, 51);
  assert.equal(cols[S3_COLUMNS.indexOf("sourcePodLabels")], "''");
  assert.equal(cols[S3_COLUMNS.indexOf("destinationPodLabels")], "''");
  assert.equal(cols[S3_COLUMNS.indexOf("octetTotalCount")], "18446744073709551615");
});
