/**
 * The README's counters table (`scripts/counters_doc.ts`) is the one the source derives, and it
 * has a row for every key of a real `record metrics` line: a counter added to a stats interface
 * without `deno task counters-doc --write`, or a key the script does not know how the line
 * builds, fails here.
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import {
  type CounterRow,
  counterRows,
  formattedReadme,
  parseTable,
  README,
  readmeTable,
  renderTable,
  rowFor,
} from "../scripts/counters_doc.ts";
import { parseConfig } from "../src/components.ts";
import { FlowAggregator } from "../src/flow_aggregator.ts";
import { logger, setLogLevel, setLogWriter } from "../src/log.ts";

let derived: Promise<CounterRow[]> | undefined;
function rows(): Promise<CounterRow[]> {
  derived ??= counterRows();
  return derived;
}

/** The keys of a logfmt line. */
function logfmtKeys(line: string): string[] {
  return [...line.matchAll(/([^\s=]+)=("(?:[^"\\]|\\.)*"|\S*)/g)].map((m) => m[1]);
}

Deno.test("counters doc: the README's table is the one derived from the stats interfaces", async () => {
  const readme = await Deno.readTextFile(README);
  const table = readmeTable(readme);
  assert.ok(table !== undefined, "README.md has the counters markers");
  const want = await rows();
  // Which keys differ first, for a readable failure; then the text itself.
  const have = parseTable(table).map((r) => r.key);
  const missing = want.map((r) => r.key).filter((k) => !have.includes(k));
  const extra = have.filter((k) => !want.some((r) => r.key === k));
  assert.deepEqual(
    { missing, extra },
    { missing: [], extra: [] },
    "README counters table out of date: run `deno task counters-doc --write`",
  );
  assert.equal(
    readme,
    await formattedReadme(readme, renderTable(want)),
    "README counters table out of date (a meaning changed): run `deno task counters-doc --write`",
  );
});

Deno.test("counters doc: every key of a real record metrics line has a row", async () => {
  const rowsNow = await rows();
  const dir = await Deno.makeTempDir({ prefix: "counters_doc_" });
  const lines: string[] = [];
  const prevWriter = setLogWriter((l) => lines.push(l));
  setLogLevel("info");
  // UDP, two aggregation shards and a sink in its worker: the collector's, the UDP receive
  // path's, the shards' and a sink's counters all on the line.
  const fa = new FlowAggregator(
    parseConfig(`aggregatorTransportProtocol: UDP
flowCollector:
  enable: false
flowLogger:
  enable: true
  path: ${join(dir, "flows.log")}
`),
    { listenAddress: "127.0.0.1:0", shards: 2, metricsLogIntervalMs: 0 },
  );
  try {
    await fa.start();
    // On a busy machine the sink's worker may miss its 15 s start bound: the process tries it
    // again (exporterCreatesFailed), so wait for the sink rather than log without it.
    const deadline = Date.now() + 90_000;
    while (fa.stats().exporters.flowLogger === undefined && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    fa.logMetrics();
  } finally {
    await fa.stop();
    setLogWriter(prevWriter);
    await Deno.remove(dir, { recursive: true });
  }
  const metrics = lines.filter((l) => l.includes("record metrics"));
  assert.ok(metrics.length > 0, "a record metrics line");
  const keys = new Set(metrics.flatMap(logfmtKeys));
  // The keys every line has (time, level, component, msg) are no counters.
  const probe: string[] = [];
  setLogWriter((l) => probe.push(l));
  logger("counters-doc-test").info("probe");
  setLogWriter(prevWriter);
  for (const meta of logfmtKeys(probe[0])) keys.delete(meta);
  console.log(`${keys.size} keys on the line, each with a row`);
  // The line's groups this configuration runs are all there.
  const errors = lines.filter((l) => l.includes("level=error")).join("\n");
  for (const k of ["udpQueueDrops", "shards.shardsFailed", "flowLogger.received"]) {
    assert.ok(keys.has(k), `${k} on the line; the errors logged:\n${errors}`);
  }
  const uncovered = [...keys].filter((k) => rowFor(rowsNow, k) === undefined);
  assert.deepEqual(uncovered, [], "keys of the record metrics line the script does not derive");
  const readmeRows = parseTable(readmeTable(await Deno.readTextFile(README)) ?? "");
  const notInReadme = [...keys].filter((k) => rowFor(readmeRows, k) === undefined);
  assert.deepEqual(notInReadme, [], "keys of the record metrics line without a README row");
});
