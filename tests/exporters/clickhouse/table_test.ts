import assert from "node:assert/strict";
import {
  FLOWS_TABLE_COLUMNS,
  flowsSchemaSql,
  INSERT_COLUMNS,
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
