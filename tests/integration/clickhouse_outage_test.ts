/**
 * End to end with a real ClickHouse: the flow-aggregator process (its ClickHouse sink in its
 * permission-scoped worker, the flow log beside it) receives flowgen's Agents over TCP while
 * ClickHouse is killed for `CH_OUTAGE_SECONDS` (default 5; the figure is 30:
 * `CH_OUTAGE_SECONDS=30 deno test -A tests/integration/clickhouse_outage_test.ts`) and started
 * again. Every flow the process exported reaches the
 * `flows` table, compared with the flow log's lines (key and end time): exactly once, except
 * the rows of an insert the kill cut (outcome unknown), whose retry is counted
 * `possiblyDuplicated` (18.16 has no dedup token); the process never stopped collecting, and
 * the sink's counters tell the outage.
 */

import assert from "node:assert/strict";
import { FaProcess, flowgenCli } from "../_helpers/process.ts";
import { clickHouse, closeClickHouse, freshDatabase, selectRows } from "../_helpers/clickhouse.ts";
import { readFlowLog } from "./helpers/flow_log.ts";

/** flowgen (2 Agents over TCP, seed 7) to the collector at `port`; its --json report. */
function flowgen(
  port: number,
  o: { flows: number; rate: number; duration: number },
): Promise<Record<string, unknown>> {
  return flowgenCli([
    ...["--target", `127.0.0.1:${port}`, "--proto", "tcp", "--agents", "2", "--seed", "7"],
    ...["--flows", `${o.flows}`, "--rate", `${o.rate}`, "--duration", `${o.duration}`],
  ]);
}

const OUTAGE_SECONDS = Number(Deno.env.get("CH_OUTAGE_SECONDS") ?? "5");

Deno.test(`ClickHouse killed for ${OUTAGE_SECONDS} s while flowgen sends: every exported flow lands, once unless counted`, async () => {
  const server = await clickHouse();
  const db = await freshDatabase(server, `e2e${Deno.pid}`);
  const dir = await Deno.makeTempDir({ prefix: "fa-ch-e2e-" });
  const config = `activeFlowRecordTimeout: 1s
inactiveFlowRecordTimeout: 2s
aggregatorTransportProtocol: TCP
clickHouse:
  enable: true
  database: ${db}
  databaseURL: ${server.url}
  commitInterval: 1s
  spool:
    dir: ${dir}/spool
flowLogger:
  enable: true
  path: ${dir}/flows.log
  prettyPrint: false
`;
  const fa = await FaProcess.startWithConfig(dir, config, {
    env: { CH_USERNAME: server.username, CH_PASSWORD: server.password },
  });
  try {
    const port = await fa.collectorPort();
    await fa.waitFor({ msg: "ClickHouse ready" }, 20_000);
    const gen = flowgen(port, { flows: 200, rate: 1000, duration: OUTAGE_SECONDS + 5 });
    await new Promise((r) => setTimeout(r, 2000));
    await server.stop("SIGKILL");
    await fa.waitFor({ msg: "ClickHouse sink state", to: "spooling" }, 10_000);
    await new Promise((r) => setTimeout(r, OUTAGE_SECONDS * 1000));
    await server.resume();
    const sent = (await gen).records as number;
    await fa.waitFor({ msg: "ClickHouse sink state", to: "connected" }, 40_000);
    const status = await fa.stop("SIGTERM", 30_000);
    assert.equal(status.code, 0, fa.stderr.slice(-3000));
    const metrics = fa.find({ msg: "record metrics" }).at(-1)!.fields;
    assert.equal(Number(metrics.numRecordsReceived), sent, "collection never stopped");
    const received = Number(metrics["clickHouse.received"]);
    assert.ok(received > 0);
    assert.equal(Number(metrics["clickHouse.exported"]), received, "nothing lost");
    assert.equal(Number(metrics["clickHouse.dropped"]), 0);
    assert.ok(Number(metrics["clickHouse.sink.insertErrors"]) >= 1, "the outage is counted");
    assert.ok(Number(metrics["clickHouse.sink.retries"]) >= 1);
    // An insert cut by the kill has an unknown outcome: its retry is counted (18.16 has no
    // dedup token), and only those rows may be in the table twice.
    const possiblyDuplicated = Number(metrics["clickHouse.sink.possiblyDuplicated"] ?? 0);
    // Every flow of the flow log is in the table: exactly once, except counted retries.
    const key = (r: Record<string, unknown>) =>
      [r.sourceIP, r.destinationIP, r.sourceTransportPort, r.destinationTransportPort, r.fe]
        .join("|");
    const rows = await selectRows(
      server,
      `SELECT sourceIP, destinationIP, sourceTransportPort, destinationTransportPort, ` +
        `toUnixTimestamp(flowEndSeconds) AS fe FROM ${db}.flows`,
    );
    const lines = await readFlowLog(`${dir}/flows.log`);
    assert.equal(lines.length, received);
    const extra = rows.length - received;
    assert.ok(
      extra >= 0 && extra <= possiblyDuplicated,
      `${extra} extra rows, ${possiblyDuplicated} counted`,
    );
    const fromLog = lines.map((l) =>
      [
        l.sourceIP,
        l.destinationIP,
        l.sourceTransportPort,
        l.destinationTransportPort,
        l.flowEndSeconds,
      ].join("|")
    ).sort();
    const inTable = new Map<string, number>();
    for (const r of rows) inTable.set(key(r), (inTable.get(key(r)) ?? 0) + 1);
    const inLog = new Map<string, number>();
    for (const k of fromLog) inLog.set(k, (inLog.get(k) ?? 0) + 1);
    for (const [k, n] of inLog) assert.ok((inTable.get(k) ?? 0) >= n, `missing ${k}`);
    assert.equal(inTable.size, inLog.size, "no row that the process did not export");
    if (possiblyDuplicated === 0) assert.deepEqual(rows.map(key).sort(), fromLog);
  } finally {
    await fa.dispose();
    if (!server.running) await server.resume();
    await server.query(`DROP DATABASE IF EXISTS ${db}`);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("the process SIGKILLed while spooling: the next process replays its spool", async () => {
  const server = await clickHouse();
  const db = await freshDatabase(server, `kill${Deno.pid}`);
  const dir = await Deno.makeTempDir({ prefix: "fa-ch-kill-" });
  const env = { CH_USERNAME: server.username, CH_PASSWORD: server.password };
  const config = (url: string) =>
    `activeFlowRecordTimeout: 1s
inactiveFlowRecordTimeout: 2s
aggregatorTransportProtocol: TCP
clickHouse:
  enable: true
  database: ${db}
  databaseURL: ${url}
  commitInterval: 1s
  spool:
    dir: ${dir}/spool
`;
  let fa: FaProcess | undefined;
  try {
    await server.stop("SIGKILL");
    fa = await FaProcess.startWithConfig(dir, config(server.url), { env });
    const port = await fa.collectorPort();
    const gen = flowgen(port, { flows: 100, rate: 500, duration: 4 });
    await gen; // flowgen exited 0 (or the helper threw)
    // Wait until batches are on disk, then kill it mid-flight.
    await fa.waitFor({ msg: "ClickHouse sink state", to: "spooling" }, 15_000);
    await new Promise((r) => setTimeout(r, 2500));
    fa.kill("SIGKILL");
    await fa.waitExit();
    await server.resume();
    fa = await FaProcess.startWithConfig(dir, config(server.url), { env });
    const opened = await fa.waitFor({ msg: "ClickHouse spool opened" }, 20_000);
    const recovered = Number(opened.fields.recovered);
    assert.ok(recovered > 0, "the killed process left records in its spool");
    const status = await (async () => {
      await fa!.waitFor(
        (e) => e.fields.msg === "ClickHouse sink state" && e.fields.to === "connected",
        20_000,
      );
      return await fa!.stop("SIGTERM", 30_000);
    })();
    assert.equal(status.code, 0);
    const m = fa.find({ msg: "record metrics" }).at(-1)!.fields;
    assert.equal(Number(m["clickHouse.sink.recoveredInserted"]), recovered);
    const rows = Number((await server.query(`SELECT count() FROM ${db}.flows`)).trim());
    assert.equal(rows, recovered + Number(m["clickHouse.exported"]));
  } finally {
    await fa?.dispose();
    if (!server.running) await server.resume();
    await server.query(`DROP DATABASE IF EXISTS ${db}`);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});

Deno.test("close the file's ClickHouse server", async () => {
  await closeClickHouse();
});
