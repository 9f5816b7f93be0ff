/**
 * The ClickHouse sink against a real server (Debian's clickhouse-server 18.16, started by
 * scripts/clickhouse.ts): exporters.md §8.2, rows read back field by field, outages, the
 * spool, retries and reload. Time (commit interval, backoff) comes from a ManualClock.
 */

import assert from "node:assert/strict";
import { ManualClock } from "../../../src/clock.ts";
import {
  ClickHouseExporter,
  type ClickHouseExporterOptions,
  type ClickHouseStats,
  FLAG_ROW_BINARY,
  FLOWS_TABLE_COLUMNS,
  flowsSchemaSql,
  INSERT_COLUMNS,
  rowBinary,
  rowJson,
} from "../../../src/exporters/clickhouse/mod.ts";
import { toFlatRecord } from "../../../src/exporters/flat_record.ts";
import type {
  Connection,
  InsertOptions,
  InsertOutcome,
} from "../../../src/exporters/clickhouse/connection.ts";
import { ClientConnection } from "../../../src/exporters/clickhouse/connection.ts";
import type { ClickHouseConfig } from "../../../src/exporters/clickhouse/config.ts";
import {
  clickHouse,
  type ClickHouseServer,
  closeClickHouse,
  freshDatabase,
  LossyProxy,
  selectRows,
  sinkConfig,
  sinkEnv,
} from "../../_helpers/clickhouse.ts";
import { waitFor } from "../../_helpers/wait.ts";
import { freePort } from "../../../scripts/clickhouse.ts";
import { newBatchId, Spool } from "../../../src/spool/mod.ts";
import { fixtureFlow } from "../fixtures.ts";

const UUID = "5f3b4a3e-2c9a-4b0c-9d57-8a4e3c0f1b2a";
let dbSeq = 0;

interface Rig {
  server: ClickHouseServer;
  db: string;
  dir: string;
  clock: ManualClock;
  config: ClickHouseConfig;
  sink: ClickHouseExporter;
}

async function rig(
  options: ClickHouseExporterOptions & { maxBytes?: number; url?: string; noTable?: boolean } = {},
): Promise<Rig> {
  const server = await clickHouse();
  if (!server.running) await server.resume(); // after a failed test that stopped it
  const db = `t${Deno.pid}_${++dbSeq}`;
  if (options.noTable) {
    await server.query(`DROP DATABASE IF EXISTS ${db}`);
    await server.query(`CREATE DATABASE ${db}`);
  } else await freshDatabase(server, db);
  const dir = await Deno.makeTempDir({ prefix: "ch-spool-" });
  const clock = options.clock as ManualClock ?? new ManualClock();
  const config = sinkConfig(server, {
    database: db,
    spoolDir: dir,
    maxBytes: options.maxBytes,
    url: options.url,
  });
  const sink = new ClickHouseExporter(config, UUID, {
    env: sinkEnv(server),
    ...options,
    clock,
  });
  return { server, db, dir, clock, config, sink };
}

async function count(r: Rig, where = "1"): Promise<number> {
  return Number((await r.server.query(`SELECT count() FROM ${r.db}.flows WHERE ${where}`)).trim());
}

/** received = exported + dropped + memory + spool (nothing in flight). */
function assertLedger(s: ClickHouseStats): void {
  assert.equal(
    s.received,
    s.exported + s.dropped + s.memoryRecords + s.spoolRecords,
    JSON.stringify(s),
  );
}

/** Distinct flows: flowStartSeconds carries the sequence number. */
function flow(i: number) {
  return fixtureFlow(false, { flowStartSeconds: 1_600_000_000 + i, octetTotalCount: BigInt(i) });
}

/**
 * Flushes `sink` (advancing `clock` past the backoff first, when given) until `done` holds:
 * retries run on the injected clock, inserts on the real server.
 */
async function settle(
  sink: ClickHouseExporter,
  done: (s: ClickHouseStats) => boolean,
  options: { what: string; clock?: ManualClock; advanceMs?: number },
): Promise<void> {
  await waitFor(async () => {
    options.clock?.advance(options.advanceMs ?? 30_000);
    await sink.flush();
    return done(sink.stats());
  }, { what: options.what, timeoutMs: 20_000 });
}

async function cleanup(r: Rig): Promise<void> {
  await r.sink.stop();
  if (!r.server.running) await r.server.resume();
  await r.server.query(`DROP DATABASE IF EXISTS ${r.db}`);
  await Deno.remove(r.dir, { recursive: true }).catch(() => {});
}

Deno.test("C2: the row read back matches fixture F field by field (IPv4 and IPv6, u64 > 2^53)", async () => {
  const r = await rig();
  await r.sink.start();
  const big = 2n ** 64n - 1n;
  r.sink.addRecord(fixtureFlow(false));
  r.sink.addRecord(fixtureFlow(true, { octetTotalCount: big, throughput: 2n ** 53n + 1n }));
  await r.sink.flush();
  // Every inserted column, DateTime as unix seconds, compared with the flat record of F.
  const select = FLOWS_TABLE_COLUMNS.map(([c, t]) =>
    t.startsWith("DateTime") ? `toUnixTimestamp(${c}) AS ${c}` : c
  ).join(", ");
  const rows = await selectRows(r.server, `SELECT ${select} FROM ${r.db}.flows`);
  assert.equal(rows.length, 2);
  const [v4, v6] = rows[0].sourceIP === "10.10.0.79" ? rows : [rows[1], rows[0]];
  const want = toFlatRecord(fixtureFlow(false), UUID);
  for (const c of INSERT_COLUMNS) {
    assert.equal(String(v4[c]), String(want[c as keyof typeof want]), c);
  }
  // Spot checks against the spec's literal values (§8.2 C2), and the server defaults.
  assert.equal(v4.octetTotalCount, "30472817041");
  assert.equal(v4.flowEndSecondsFromDestinationNode, 1637706975);
  assert.equal(v4.destinationPodLabels, '{"antrea-e2e":"perftest-b","app":"iperf"}');
  assert.equal(v4.trusted, 0);
  assert.ok(Number(v4.timeInserted) > 1_700_000_000, "timeInserted is the server's now()");
  assert.equal(v6.sourceIP, "2001:0:3238:dfe1:63::fefb");
  assert.equal(v6.destinationIP, "2001:0:3238:dfe1:63::fefc");
  assert.equal(v6.destinationClusterIP, "2001:0:3238:dfe1:64::a");
  assert.equal(v6.octetTotalCount, "18446744073709551615");
  assert.equal(v6.throughput, "9007199254740993");
  const s = r.sink.stats();
  assert.equal(s.exported, 2);
  assert.equal(s.connected, true);
  assertLedger(s);
  await cleanup(r);
});

/** The inserted columns of every row, DateTime as unix seconds, ordered by flowStartSeconds. */
async function readBack(r: Rig): Promise<Record<string, unknown>[]> {
  const select = INSERT_COLUMNS.map((c) =>
    Object.fromEntries(FLOWS_TABLE_COLUMNS)[c] === "DateTime" ? `toUnixTimestamp(${c}) AS ${c}` : c
  ).join(", ");
  return await selectRows(
    r.server,
    `SELECT ${select} FROM ${r.db}.flows ORDER BY flowStartSeconds`,
  );
}

Deno.test("a spool from an older version (JSONEachRow frames, no format bit) replays as JSON, beside RowBinary frames", async () => {
  const r = await rig();
  // Frames as the JSON-rendering version wrote them (flags 0), then one RowBinary frame; the
  // labels are long (a two-byte length) and not ASCII, the counters above 2^53.
  const labels = JSON.stringify({ app: "ünïcødé-✓-🚀", pad: "x".repeat(300) });
  const flats = [0, 1, 2].map((i) =>
    toFlatRecord(
      fixtureFlow(i === 1, {
        flowStartSeconds: 1_600_000_000 + i,
        octetTotalCount: 2n ** 64n - 1n - BigInt(i),
        throughput: 2n ** 53n + 1n,
        sourcePodLabels: labels,
        tcpState: i === 2 ? "" : "TIME_WAIT",
      }),
      UUID,
    )
  );
  const spool = await Spool.open(r.dir, { maxBytes: 1 << 20 });
  const json = new TextEncoder().encode(flats.slice(0, 2).map(rowJson).join("\n"));
  await spool.append({ id: newBatchId(), records: 2, flags: 0, payload: json });
  const bin = rowBinary(flats.slice(2));
  await spool.append({ id: newBatchId(), records: 1, flags: FLAG_ROW_BINARY, payload: bin });
  await spool.close();
  await r.sink.start();
  await settle(r.sink, (s) => s.recoveredInserted === 3, { what: "the old spool replayed" });
  const rows = await readBack(r);
  assert.equal(rows.length, 3);
  rows.forEach((row, i) => {
    for (const c of INSERT_COLUMNS) {
      assert.equal(String(row[c]), String(flats[i][c as keyof (typeof flats)[0]]), `${i} ${c}`);
    }
  });
  assert.equal(rows[0].octetTotalCount, "18446744073709551615");
  assert.equal(rows[1].sourceIP, "2001:0:3238:dfe1:63::fefb");
  assert.equal(rows[2].sourcePodLabels, labels);
  assert.equal(rows[2].tcpState, "");
  assertLedger(r.sink.stats());
  await cleanup(r);
});

Deno.test("C3: ten records go as one batch on the commit tick", async () => {
  const r = await rig();
  await r.sink.start();
  for (let i = 0; i < 10; i++) r.sink.addRecord(flow(i));
  await r.sink.flush(); // first connection
  assert.equal(r.sink.stats().batchesInserted, 1);
  for (let i = 10; i < 20; i++) r.sink.addRecord(flow(i));
  assert.equal(r.sink.stats().memoryRecords, 10);
  r.clock.advance(1000); // commitInterval 1 s
  await waitFor(() => r.sink.stats().exported === 20, { what: "the tick's batch" });
  assert.equal(r.sink.stats().batchesInserted, 2);
  assert.equal(await count(r), 20);
  await cleanup(r);
});

Deno.test("a burst is cut into inserts of at most maxBatchRows", async () => {
  const r = await rig({ maxBatchRows: 100 });
  await r.sink.start();
  for (let i = 0; i < 1050; i++) r.sink.addRecord(flow(i));
  await r.sink.flush();
  assert.equal(r.sink.stats().batchesInserted, 11);
  assert.equal(await count(r), 1050);
  await cleanup(r);
});

Deno.test("inserts name their columns: a table in another order, with egressNodeName, works", async () => {
  const r = await rig({ noTable: true });
  // Theia's order puts `trusted` elsewhere; newer Antrea adds egressNodeName. Reversed order.
  const cols = [...FLOWS_TABLE_COLUMNS].filter(([n]) => n !== "trusted").reverse()
    .map(([n, t]) => `${n} ${t}`).join(", ");
  await r.server.query(
    `CREATE TABLE ${r.db}.flows (trusted UInt8 DEFAULT 0, egressNodeName String, ${cols}) ` +
      "ENGINE = MergeTree ORDER BY timeInserted",
  );
  await r.sink.start();
  r.sink.addRecord(fixtureFlow(false));
  await r.sink.flush();
  const [row] = await selectRows(r.server, `SELECT * FROM ${r.db}.flows`);
  assert.equal(row.sourcePodName, "perftest-a");
  assert.equal(row.egressIP, "172.18.0.1");
  assert.equal(row.egressNodeName, "");
  assert.equal(row.trusted, 0);
  await cleanup(r);
});

Deno.test("C4: a missing table is an error naming it; records wait in the spool, go once it exists", async () => {
  const r = await rig({ noTable: true });
  await r.sink.start();
  for (let i = 0; i < 5; i++) r.sink.addRecord(flow(i));
  r.clock.advance(1000);
  await r.clock.whenTimersPending(2); // commit timer + retry backoff
  await waitFor(() => r.sink.stats().spoolRecords === 5, { what: "records in the spool" });
  const s = r.sink.stats();
  assert.equal(s.spooling, true);
  assert.equal(s.exported, 0);
  assert.ok(s.insertErrors >= 1);
  assertLedger(s);
  const [table] = flowsSchemaSql({ ttl: false });
  await r.server.query(table.replace("IF NOT EXISTS flows", `${r.db}.flows`));
  r.clock.advance(1000); // the first backoff
  await waitFor(() => r.sink.stats().exported === 5 && r.sink.stats().connected, {
    what: "the spooled batch inserted, connected",
  });
  assert.equal(r.sink.stats().spoolRecords, 0);
  assert.equal(await count(r), 5);
  await cleanup(r);
});

Deno.test("C6: stop inserts what is queued, even with a 1 h interval", async () => {
  const r = await rig();
  r.config.commitInterval = "1h";
  r.config.commitIntervalMs = 3_600_000;
  await r.sink.start();
  await r.sink.flush();
  r.sink.addRecord(fixtureFlow(false));
  await r.sink.stop();
  assert.equal(await count(r), 1);
  assert.equal(r.sink.stats().exported, 1);
  await cleanup(r);
});

Deno.test("ClickHouse stopped and restarted while records flow: every row once, counters tell it", async () => {
  const r = await rig();
  await r.sink.start();
  let sent = 0;
  const send = (n: number) => {
    for (let i = 0; i < n; i++) r.sink.addRecord(flow(sent++));
  };
  send(100);
  await r.sink.flush();
  await r.server.stop("SIGKILL");
  // The outage: ticks keep coming, each batch fails or goes to the spool; collection goes on.
  for (let tick = 0; tick < 5; tick++) {
    send(100);
    r.clock.advance(1000);
    await new Promise((res) => setTimeout(res, 20));
  }
  await waitFor(() => r.sink.stats().spooling, { what: "spooling state" });
  await r.sink.flush();
  const during = r.sink.stats();
  assert.equal(during.exported, 100);
  assert.equal(during.spoolRecords + during.memoryRecords, 500);
  assertLedger(during);
  await r.server.resume();
  r.clock.advance(60_000); // past any backoff
  await settle(r.sink, (s) => s.exported === 600, {
    what: "the spool replayed",
    clock: r.clock,
    advanceMs: 1000,
  });
  const after = r.sink.stats();
  assert.equal(after.connected, true);
  assert.equal(after.spoolRecords, 0);
  assert.ok(after.retries >= 1);
  assertLedger(after);
  // Exactly once: 600 rows, 600 distinct keys, and the checksum of the sequence numbers.
  const [sum] = await selectRows(
    r.server,
    `SELECT count() AS n, uniqExact(flowStartSeconds) AS u, sum(octetTotalCount) AS s FROM ${r.db}.flows`,
  );
  assert.equal(Number(sum.n), 600);
  assert.equal(Number(sum.u), 600);
  assert.equal(String(sum.s), String((599 * 600) / 2));
  await cleanup(r);
});

Deno.test("ClickHouse absent at start: the sink starts, collects, and delivers once it appears", async () => {
  const r = await rig();
  await r.server.stop("SIGKILL");
  await r.sink.start(); // resolves at once: never fatal
  for (let i = 0; i < 50; i++) r.sink.addRecord(flow(i));
  r.clock.advance(1000);
  await waitFor(() => r.sink.stats().spoolRecords === 50, { what: "spooled while absent" });
  assert.equal(r.sink.stats().spooling, true);
  await r.server.resume();
  await settle(r.sink, (s) => s.exported === 50, {
    what: "delivery once ClickHouse is up",
    clock: r.clock,
    advanceMs: 30_000,
  });
  assert.equal(await count(r), 50);
  await cleanup(r);
});

Deno.test("a full spool drops its oldest batches and counts them; the ledger is exact", async () => {
  const r = await rig({ maxBytes: 64 * 1024, maxBatchRows: 20 });
  await r.server.stop("SIGKILL");
  await r.sink.start();
  for (let i = 0; i < 1000; i++) r.sink.addRecord(flow(i));
  await r.sink.flush();
  const s = r.sink.stats();
  assert.ok(s.spoolDropped > 0, "something was dropped");
  assert.equal(s.dropped, s.spoolDropped);
  assert.ok(s.spoolBytes <= 64 * 1024);
  assertLedger(s);
  await r.server.resume();
  await settle(r.sink, (s) => s.spoolRecords === 0, {
    what: "replay",
    clock: r.clock,
    advanceMs: 30_000,
  });
  const t = r.sink.stats();
  assert.equal(t.received, t.exported + t.dropped);
  assert.equal(await count(r), t.exported);
  // The newest were kept.
  assert.equal(await count(r, `flowStartSeconds = toDateTime(${1_600_000_000 + 999})`), 1);
  await cleanup(r);
});

Deno.test("after a restart the spool is replayed; a segment cut mid-record is detected and the rest goes", async () => {
  const r = await rig({ maxBatchRows: 10 });
  await r.server.stop("SIGKILL");
  await r.sink.start();
  for (let i = 0; i < 100; i++) r.sink.addRecord(flow(i));
  await r.sink.stop(); // spools everything it holds
  assert.equal(r.sink.stats().spoolRecords, 100);
  // Cut the spool's last segment in the middle of its last frame (a crash mid-write).
  const segs = [...Deno.readDirSync(r.dir)].map((e) => e.name).filter((n) => n.endsWith(".seg"))
    .sort();
  const last = `${r.dir}/${segs.at(-1)}`;
  Deno.truncateSync(last, Deno.statSync(last).size - 50);
  await r.server.resume();
  const next = new ClickHouseExporter(r.config, UUID, {
    env: sinkEnv(r.server),
    clock: r.clock,
  });
  await next.start();
  await settle(next, (s) => s.spoolRecords === 0 && s.recovered > 0, { what: "replay" });
  const s = next.stats();
  assert.equal(s.spoolCorrupt, 1);
  assert.ok(s.spoolTruncatedBytes > 0);
  assert.equal(s.recovered, 90, "the torn batch of 10 is gone, counted as corrupt");
  assert.equal(s.recoveredInserted, 90);
  assert.equal(s.exported, 0, "not records of this process");
  assert.equal(await count(r), 90);
  await next.stop();
  await cleanup(r);
});

Deno.test("SIGKILL while spooling: the next process replays the spool", async () => {
  const server = await clickHouse();
  const db = await freshDatabase(server, `t${Deno.pid}_kill`);
  const dir = await Deno.makeTempDir({ prefix: "ch-spool-kill-" });
  // A process whose sink points at a closed port: every batch goes to the spool.
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("./spooling_process.ts", import.meta.url).pathname,
      dir,
      db,
    ],
    env: { CH_USERNAME: server.username, CH_PASSWORD: server.password },
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const reader = child.stdout.getReader();
  let out = "";
  while (!out.includes("spooled 300")) {
    const { value, done } = await reader.read();
    if (done) break;
    out += new TextDecoder().decode(value);
  }
  child.kill("SIGKILL");
  const status = await child.status;
  reader.releaseLock();
  await child.stdout.cancel().catch(() => {});
  assert.equal(status.signal, "SIGKILL");
  const config = sinkConfig(server, { database: db, spoolDir: dir });
  const sink = new ClickHouseExporter(config, UUID, { env: sinkEnv(server) });
  await sink.start();
  await settle(sink, (s) => s.recoveredInserted === 300, {
    what: "the killed process's spool replayed",
  });
  assert.equal(Number((await server.query(`SELECT count() FROM ${db}.flows`)).trim()), 300);
  await sink.stop();
  await server.query(`DROP DATABASE ${db}`);
  await Deno.remove(dir, { recursive: true });
});

/** A connection that loses the answer of the first insert after the server took it. */
class LosingConnection implements Connection {
  readonly tokens: (string | undefined)[] = [];
  #lost = false;
  constructor(readonly inner: Connection, readonly exact: boolean) {}
  async prepare() {
    const info = await this.inner.prepare();
    // Present the server as one with tokens (22.2+); 18.16 itself cannot take them.
    return { ...info, dedupToken: true, dedupExact: this.exact };
  }
  async insert(body: Uint8Array, o: InsertOptions) {
    this.tokens.push(o.token);
    const r = await this.inner.insert(body, { format: o.format, columns: o.columns });
    if (r.ok && !this.#lost) {
      this.#lost = true;
      return { ok: false as const, unknown: true as const, error: "socket hang up" };
    }
    return r;
  }
  close() {
    return this.inner.close();
  }
}

for (const exact of [true, false]) {
  Deno.test(`a retry after an unknown outcome carries the same token; ${exact ? "an exact table counts it deduplicated" : "otherwise it is counted possiblyDuplicated"}`, async () => {
    let conn: LosingConnection | undefined;
    const r = await rig({
      connect: (s) => (conn = new LosingConnection(new ClientConnection(s), exact)),
    });
    await r.sink.start();
    for (let i = 0; i < 7; i++) r.sink.addRecord(flow(i));
    await r.sink.flush();
    assert.equal(r.sink.stats().spooling, true);
    r.clock.advance(1000);
    await settle(r.sink, (s) => s.exported === 7, { what: "the retry" });
    assert.equal(conn!.tokens.length, 2);
    assert.ok(conn!.tokens[0] !== undefined && conn!.tokens[0] === conn!.tokens[1]);
    const s = r.sink.stats();
    assert.equal(s.possiblyDuplicated, exact ? 0 : 7);
    assert.equal(s.retriedDeduplicated, exact ? 7 : 0);
    // 18.16's MergeTree has no dedup: the rows are really there twice, as counted.
    assert.equal(await count(r), 14);
    await cleanup(r);
  });
}

for (const mode of ["cut", "hold"] as const) {
  Deno.test(`a server whose answer is lost (${mode}) after the insert: the retry is counted possiblyDuplicated on 18.16`, async () => {
    const server = await clickHouse();
    if (!server.running) await server.resume();
    const proxy = new LossyProxy(server, { cut: 1, mode });
    const r = await rig({ url: proxy.url, requestTimeoutMs: 3000 });
    try {
      await r.sink.start();
      for (let i = 0; i < 9; i++) r.sink.addRecord(flow(i));
      await r.sink.flush();
      const failed = r.sink.stats();
      assert.equal(failed.exported, 0);
      assert.equal(failed.spooling, true);
      await settle(r.sink, (s) => s.exported === 9, {
        what: "the retry",
        clock: r.clock,
        advanceMs: 1000,
      });
      const s = r.sink.stats();
      // 18.16 has no insert_deduplication_token: the lost attempt's rows landed too, and every
      // extra copy is counted (a loaded machine may time out more attempts: all are counted).
      assert.equal(s.dedupToken, false);
      assert.ok(s.possiblyDuplicated >= 9, `possiblyDuplicated ${s.possiblyDuplicated}`);
      assert.ok(proxy.inserts >= 2);
      assert.ok(proxy.requestLines.every((l) => !l.includes("insert_deduplication_token")));
      const rows = await count(r);
      assert.ok(rows >= 18, `${rows} rows: the lost attempt landed`);
      assert.ok(rows - 9 <= s.possiblyDuplicated, `${rows} rows, all extra copies counted`);
      assertLedger(s);
    } finally {
      proxy.close();
      await cleanup(r);
    }
  });
}

Deno.test("C7/C9 reload: commitInterval live; a connection setting reconnects once; the queue is kept", async () => {
  const r = await rig();
  await r.sink.start();
  r.sink.addRecord(flow(1));
  await r.sink.flush();
  assert.equal(r.sink.stats().reconnects, 1);
  // Interval 1 s → 5 s: the commit timer is re-armed at 5 s; nothing goes at 1 s.
  const five = { ...r.config, commitInterval: "5s", commitIntervalMs: 5000 };
  await r.sink.update(five);
  assert.deepEqual(r.clock.pendingTimers(), [5000]);
  r.sink.addRecord(flow(2));
  r.clock.advance(1000);
  assert.equal(r.sink.stats().memoryRecords, 1);
  r.clock.advance(4000);
  await waitFor(() => r.sink.stats().exported === 2, { what: "the 5 s tick" });
  // Same connection settings: no new client.
  await r.sink.update({ ...five });
  assert.equal(r.sink.stats().reconnects, 1);
  // Another database: one new client, and the next rows go there.
  const db2 = await freshDatabase(r.server, `${r.db}_b`);
  await r.sink.update({ ...five, database: db2 });
  r.sink.addRecord(flow(3));
  r.clock.advance(5000);
  await settle(r.sink, (s) => s.exported === 3, { what: "insert into the new database" });
  assert.equal(r.sink.stats().reconnects, 2);
  assert.equal(Number((await r.server.query(`SELECT count() FROM ${db2}.flows`)).trim()), 1);
  await r.server.query(`DROP DATABASE ${db2}`);
  await cleanup(r);
});

Deno.test("a rebuilt sink (URL change) waits for the old one's spool and replays it: each row once", async () => {
  const old = await rig({ url: `http://127.0.0.1:${freePort()}`, maxBatchRows: 10 });
  await old.sink.start();
  for (let i = 0; i < 40; i++) old.sink.addRecord(flow(i));
  await old.sink.flush();
  assert.equal(old.sink.stats().spoolRecords, 40, "unreachable: spooled");
  // The new sink (the new URL reaches the server) shares the spool directory.
  const next = new ClickHouseExporter({ ...old.config, databaseURL: old.server.url }, UUID, {
    env: sinkEnv(old.server),
    clock: old.clock,
  });
  await next.start(); // does not wait for the spool's lock
  for (let i = 40; i < 50; i++) next.addRecord(flow(i));
  await old.sink.stop(); // hands the spool over
  await settle(next, (s) => s.exported === 10 && s.recoveredInserted === 40, {
    what: "the new sink's rows and the old sink's spool",
  });
  const [sum] = await selectRows(
    old.server,
    `SELECT count() AS n, uniqExact(flowStartSeconds) AS u FROM ${old.db}.flows`,
  );
  assert.deepEqual([Number(sum.n), Number(sum.u)], [50, 50]);
  await next.stop();
  await cleanup(old);
});

Deno.test("C1: without a usable spool, a full memory queue drops its oldest batch, counted", async () => {
  const r = await rig({ maxBatchRows: 10, maxMemoryRecords: 30 });
  await r.server.stop("SIGKILL");
  // The spool directory cannot be created (a file is in the way): memory only, logged.
  const blocker = await Deno.makeTempFile();
  const sink = new ClickHouseExporter(
    { ...r.config, spool: { dir: `${blocker}/spool`, maxBytes: 1 << 20 } },
    UUID,
    { env: sinkEnv(r.server), clock: r.clock, maxBatchRows: 10, maxMemoryRecords: 30 },
  );
  await sink.start();
  for (let i = 0; i < 100; i++) sink.addRecord(flow(i));
  await sink.flush();
  const s = sink.stats();
  assert.equal(s.retrying, true, "no spool: retrying, not spooling");
  assert.equal(s.memoryRecords, 30, "the newest three batches are kept");
  assert.equal(s.memoryDropped, 70);
  assertLedger(s);
  await r.server.resume();
  await settle(sink, (t) => t.exported === 30, { what: "the kept batches", clock: r.clock });
  const [row] = await selectRows(
    r.server,
    `SELECT toUnixTimestamp(min(flowStartSeconds)) AS m FROM ${r.db}.flows`,
  );
  assert.equal(row.m, 1_600_000_070, "the oldest kept is record 70");
  await sink.stop();
  await Deno.remove(blocker);
  await cleanup(r);
});

/**
 * The real connection, its inserts going through `around`, which decides when (and whether)
 * to call the real insert.
 */
function realWithInsert(
  settings: ConstructorParameters<typeof ClientConnection>[0],
  around: (insert: () => Promise<InsertOutcome>) => Promise<InsertOutcome>,
): Connection {
  const c = new ClientConnection(settings);
  return {
    prepare: () => c.prepare(),
    insert: (body: Uint8Array, o: InsertOptions) => around(() => c.insert(body, o)),
    close: () => c.close(),
  };
}

Deno.test("two batches in flight: the one that fails is retried, the other counted once", async () => {
  let calls = 0;
  let inFlight = 0;
  let maxInFlight = 0;
  const r = await rig({
    maxBatchRows: 10,
    connect: (settings) =>
      realWithInsert(settings, async (insert) => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        // Both requests are out before either answers.
        await new Promise((res) => setTimeout(res, 50));
        try {
          if (++calls === 1) return { ok: false, unknown: false, error: "refused" } as const;
          return await insert();
        } finally {
          inFlight--;
        }
      }),
  });
  await r.sink.start();
  await r.sink.flush(); // connected: batches go to memory
  for (let i = 0; i < 20; i++) r.sink.addRecord(flow(i)); // two batches of 10
  await settle(r.sink, (s) => s.exported === 20, {
    what: "both batches inserted",
    clock: r.clock,
    advanceMs: 1000,
  });
  const s = r.sink.stats();
  assert.equal(maxInFlight, 2);
  assert.equal(s.batchesInserted, 2);
  assert.equal(s.insertErrors, 1);
  assert.equal(s.possiblyDuplicated, 0);
  assertLedger(s);
  const [sum] = await selectRows(
    r.server,
    `SELECT count() AS n, uniqExact(flowStartSeconds) AS u FROM ${r.db}.flows`,
  );
  assert.equal(Number(sum.n), 20);
  assert.equal(Number(sum.u), 20);
  await cleanup(r);
});

Deno.test("the spool opening while a batch is being inserted does not copy that batch", async () => {
  const r = await rig();
  const holder = await Spool.open(r.dir, { maxBytes: 1 << 20 }); // the sink's spool waits
  const gate = Promise.withResolvers<void>();
  const inFlight = Promise.withResolvers<void>();
  const sink = new ClickHouseExporter(r.config, UUID, {
    env: sinkEnv(r.server),
    clock: r.clock,
    maxBatchRows: 10,
    connect: (settings) =>
      realWithInsert(settings, async (insert) => {
        inFlight.resolve();
        await gate.promise;
        return await insert();
      }),
  });
  await sink.start();
  for (let i = 0; i < 10; i++) sink.addRecord(flow(i)); // sealed and sent at the 10th
  await inFlight.promise;
  await holder.close();
  await waitFor(() => sink.stats().spoolOpen, { what: "the sink's spool open" });
  gate.resolve();
  await sink.flush();
  const s = sink.stats();
  assert.equal(s.batchesInserted, 1);
  assert.equal(s.exported, 10);
  assert.equal(await count(r), 10, "inserted once");
  assertLedger(s);
  await sink.stop();
  await cleanup(r);
});

Deno.test("credentials are required, as upstream", async () => {
  const server = await clickHouse();
  const config = sinkConfig(server, { database: "default", spoolDir: "/nonexistent" });
  assert.throws(
    () => new ClickHouseExporter(config, UUID, { env: () => undefined }),
    /^Error: DatabaseURL, Username or Password missing in ClickHouse config$/,
  );
  assert.throws(
    () =>
      new ClickHouseExporter({ ...config, databaseURL: "abc://h:1" }, UUID, {
        env: sinkEnv(server),
      }),
    /connection over abc transport protocol is not supported/,
  );
});

Deno.test("close the file's ClickHouse server", async () => {
  await closeClickHouse();
});
