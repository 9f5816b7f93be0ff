import assert from "node:assert/strict";
import type { ExportedFlow } from "../../../src/aggregation/record.ts";
import { CsvWriter, formatCsvLine } from "../../../src/exporters/s3/csv.ts";
import { ObjectWriter } from "../../../src/exporters/s3/object.ts";
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

/** The line `CsvWriter` writes for `flow`, through a buffer of `room` bytes. */
function written(flow: ExportedFlow, room = 1 << 16): string {
  const out = new Uint8Array(room);
  const end = new CsvWriter(U).write(flow, T, out, 0);
  assert.ok(end <= out.length, "the line fits");
  return new TextDecoder().decode(out.subarray(0, end));
}

Deno.test("the byte writer writes the same line as the string formatter, byte for byte", () => {
  const cases: ExportedFlow[] = [
    fixtureFlow(),
    fixtureFlow(true),
    fixtureFlow(false, {
      octetTotalCount: 2n ** 64n - 1n,
      packetTotalCount: 2n ** 53n,
      reverseOctetTotalCount: 2n ** 53n - 1n,
      packetDeltaCount: 0n,
      flowStartSeconds: 0,
      sourceTransportPort: 9,
      destinationTransportPort: 10,
      sourcePodName: "pöd-ünïcode-名前",
      sourcePodLabels: '{"app":"ω"}',
      destinationPodLabels: "null",
    }),
    // Address text a producer did not make canonical (upper case, zeros, v4-mapped).
    fixtureFlow(true, {
      sourceIPv6Address: "2001:0DB8:0000:0000:0000:0000:0000:0001",
      destinationIPv6Address: "::ffff:10.1.2.3",
    }),
  ];
  const absent = fixtureFlow(false);
  for (const k of ["sourcePodLabels", "egressName", "tcpState", "throughput", "flowType"]) {
    delete (absent.record as Record<string, unknown>)[k];
  }
  cases.push(absent);
  for (const flow of cases) {
    assert.equal(written(flow), formatCsvLine(flow, { clusterUuid: U, timeInsertedSeconds: T }));
  }
});

Deno.test("a line that does not fit reports an end beyond the buffer; the object writer retries it", async () => {
  const line = formatCsvLine(fixtureFlow(), { clusterUuid: U, timeInsertedSeconds: T });
  for (const room of [0, 10, line.length - 1]) {
    const out = new Uint8Array(room);
    assert.ok(new CsvWriter(U).write(fixtureFlow(), T, out, 0) > room, `room ${room}`);
  }
  const wide = fixtureFlow(false, { sourcePodLabels: `{"k":"${"é".repeat(600_000)}"}` });
  const w = new ObjectWriter({ compress: false, gzipLevel: 6 });
  const csv = new CsvWriter(U);
  for (let i = 0; i < 3000; i++) w.addFlow(csv, i === 1500 ? wide : fixtureFlow(), T);
  const o = await w.finish();
  const lines = new TextDecoder().decode(o.body).split("\n");
  assert.equal(lines.pop(), "");
  assert.equal(lines.length, 3000);
  assert.equal(o.records, 3000);
  assert.equal(lines[0] + "\n", line);
  assert.equal(lines[2999] + "\n", line);
  assert.equal(lines[1500] + "\n", formatCsvLine(wide, { clusterUuid: U, timeInsertedSeconds: T }));
});

Deno.test("hostile strings from the wire cannot forge rows or shift columns; the label JSON cannot close its quotes", () => {
  const forged = S1_LINE.replace("perftest-a", "evil");
  const flow = fixtureFlow(false, {
    sourcePodName: `pod-a\n${forged}\nx`,
    sourcePodNamespace: "ns,with,commas",
    tcpState: "EST\r\nABLISHED",
    destinationPodName: "d'\"\\\t\x1b[2J\x00z\u2028\u202e",
    sourcePodLabels: '{"app":"it\'s"}',
    // One label each, so that counting the commas counts the columns.
    destinationPodLabels: '{"app":"b"}',
  });
  const lines = [
    formatCsvLine(flow, { clusterUuid: U, timeInsertedSeconds: T }),
    written(flow),
  ];
  for (const line of lines) {
    assert.equal(line.split("\n").length, 2, "one line");
    const cols = line.trimEnd().split(",");
    assert.equal(cols.length, 51);
    const col = (name: (typeof S3_COLUMNS)[number]) => cols[S3_COLUMNS.indexOf(name)];
    assert.equal(col("sourcePodName"), `pod-a\\x0a${forged.replaceAll(",", " ")}\\x0ax`);
    assert.equal(col("sourcePodNamespace"), "ns with commas");
    assert.equal(col("tcpState"), "EST\\x0d\\x0aABLISHED");
    assert.equal(col("destinationPodName"), "d'\"\\\\\\x09\\x1b[2J\\x00z\\u2028\\u202e");
    // The same JSON, its quote escaped: it still parses to the label value.
    assert.equal(col("sourcePodLabels"), '\'{"app":"it\\u0027s"}\'');
    assert.deepEqual(JSON.parse(col("sourcePodLabels").slice(1, -1)), { app: "it's" });
  }
  assert.equal(lines[1], lines[0], "the byte writer agrees with the reference");
  // Valid names are written unchanged (S1's line, byte for byte, above).
});
