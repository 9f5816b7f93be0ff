import assert from "node:assert/strict";
import {
  FLOWS_TABLE_COLUMNS,
  flowsSchemaSql,
  INSERT_COLUMNS,
  rowBinary,
  RowBinaryWriter,
  rowJson,
  serverHasDedupToken,
  serverHasTtl,
} from "../../../src/exporters/clickhouse/mod.ts";
import { toFlatRecord } from "../../../src/exporters/flat_record.ts";
import { fixtureFlow } from "../fixtures.ts";

Deno.test("the flows table has the 52 columns of §3.3, inserts name the 50 of §3.4", () => {
  assert.equal(FLOWS_TABLE_COLUMNS.length, 52);
  assert.deepEqual(FLOWS_TABLE_COLUMNS[0], ["timeInserted", "DateTime DEFAULT now()"]);
  assert.deepEqual(FLOWS_TABLE_COLUMNS[48], ["clusterUUID", "String"]);
  assert.deepEqual(FLOWS_TABLE_COLUMNS[49], ["trusted", "UInt8 DEFAULT 0"]);
  assert.deepEqual(FLOWS_TABLE_COLUMNS.at(-1), ["egressIP", "String"]);
  assert.equal(INSERT_COLUMNS.length, 50);
  assert.deepEqual(INSERT_COLUMNS.slice(-3), ["clusterUUID", "egressName", "egressIP"]);
  assert.deepEqual(Object.fromEntries(FLOWS_TABLE_COLUMNS)["octetTotalCount"], "UInt64");
});

Deno.test("C2: a row carries the 50 values in order, 64-bit counters exact", () => {
  const big = 2n ** 63n + 5n;
  const line = rowJson(toFlatRecord(fixtureFlow(false, { octetTotalCount: big }), "U"));
  assert.ok(line.includes(`"octetTotalCount":${big}`), "bare digits, no rounding");
  const keys = [...line.matchAll(/"([A-Za-z]+)":/g)].map((m) => m[1])
    .filter((k) => INSERT_COLUMNS.includes(k));
  assert.deepEqual(keys, [...INSERT_COLUMNS]);
  const parsed = JSON.parse(line);
  assert.equal(parsed.sourceIP, "10.10.0.79");
  assert.equal(parsed.clusterUUID, "U");
  assert.equal(parsed.sourcePodLabels, '{"antrea-e2e":"perftest-a","app":"iperf"}');
});

/** Reads RowBinary rows of the 50 insert columns back into values (strings as text). */
function readRowBinary(bytes: Uint8Array): Record<string, unknown>[] {
  const d = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const types = Object.fromEntries(FLOWS_TABLE_COLUMNS);
  const rows: Record<string, unknown>[] = [];
  let p = 0;
  while (p < bytes.length) {
    const row: Record<string, unknown> = {};
    for (const c of INSERT_COLUMNS) {
      switch (types[c]) {
        case "UInt8":
          row[c] = d.getUint8(p++);
          break;
        case "UInt16":
          row[c] = d.getUint16(p, true);
          p += 2;
          break;
        case "DateTime":
          row[c] = d.getUint32(p, true);
          p += 4;
          break;
        case "UInt64":
          row[c] = d.getBigUint64(p, true);
          p += 8;
          break;
        default: {
          let len = 0;
          for (let shift = 0;; shift += 7) {
            const b = bytes[p++];
            len |= (b & 0x7f) << shift;
            if (b < 0x80) break;
          }
          row[c] = new TextDecoder().decode(bytes.subarray(p, p + len));
          p += len;
        }
      }
    }
    rows.push(row);
  }
  return rows;
}

Deno.test("RowBinary: every column type, u64 up to 2^64-1, UTF-8 and long strings, empty strings", () => {
  const labels = JSON.stringify({ app: "ünïcødé-✓-🚀", pad: "y".repeat(200) });
  const records = [
    toFlatRecord(fixtureFlow(false), "U"),
    toFlatRecord(
      fixtureFlow(true, {
        octetTotalCount: 2n ** 64n - 1n,
        throughput: 2n ** 53n + 1n,
        sourcePodLabels: labels,
        tcpState: "",
      }),
      "5f3b4a3e-2c9a-4b0c-9d57-8a4e3c0f1b2a",
    ),
  ];
  const rows = readRowBinary(rowBinary(records));
  assert.equal(rows.length, 2);
  rows.forEach((row, i) => {
    for (const c of INSERT_COLUMNS) {
      assert.equal(row[c], records[i][c as keyof (typeof records)[0]], `${i} ${c}`);
    }
  });
  assert.equal(rows[0].flowStartSeconds, 1637706961);
  assert.equal(rows[1].octetTotalCount, 2n ** 64n - 1n);
  assert.equal(rows[1].sourcePodLabels, labels);
  assert.equal(rows[1].sourceIP, "2001:0:3238:dfe1:63::fefb");
});

Deno.test("RowBinaryWriter: grows past its first buffer, take() starts a new batch", () => {
  const w = new RowBinaryWriter(16);
  const rec = toFlatRecord(fixtureFlow(false), "U");
  for (let i = 0; i < 100; i++) w.add(rec);
  assert.equal(w.rows, 100);
  const first = w.take();
  assert.equal(w.rows, 0);
  w.add(rec);
  const second = w.take();
  assert.equal(first.length, second.length * 100);
  assert.deepEqual(readRowBinary(first).at(-1), readRowBinary(second)[0]);
});

Deno.test("the DDL has TTL only when asked, and the three views", () => {
  const withTtl = flowsSchemaSql();
  const without = flowsSchemaSql({ ttl: false });
  assert.equal(withTtl.length, 4);
  assert.ok(withTtl.every((s) => s.includes("TTL timeInserted + INTERVAL 1 HOUR")));
  assert.ok(without.every((s) => !s.includes("TTL")));
  assert.match(without[0], /^CREATE TABLE IF NOT EXISTS flows \(/);
  assert.match(without[3], /flows_policy_view/);
});

Deno.test("server capabilities follow the version", () => {
  assert.equal(serverHasTtl("18.16.1"), false);
  assert.equal(serverHasTtl("19.6.1"), true);
  assert.equal(serverHasTtl("23.4.2.11"), true);
  assert.equal(serverHasDedupToken("22.1.3"), false);
  assert.equal(serverHasDedupToken("22.2.1"), true);
  assert.equal(serverHasDedupToken(""), false);
});
