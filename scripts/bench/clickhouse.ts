/**
 * ClickHouse sink and spool benchmarks (issue 12):
 *
 * - `clickhouse_rows_per_s`: rows per second the sink (in process, the real client over HTTP,
 *   RowBinary bodies, gzip) inserts into a local Debian clickhouse-server from a burst of N
 *   flows, fed as the export loop would (in slices, while at most 100k rows wait in its
 *   memory), rendering included, until every row is acknowledged by the server;
 * - `clickhouse_client_rows_per_s`: the server's own `clickhouse-client` inserting the same
 *   rows (the same JSONEachRow lines, from a file, over the native protocol) in the same run,
 *   and `clickhouse_vs_client_ratio` (goal ≥ 0.5);
 * - `spool_write_mb_per_s` and `spool_replay_rows_per_s`: the spool alone (append frames of
 *   1,000 rows as the sink spools them, RowBinary, then read and acknowledge them all).
 *
 * @module
 */

import { CLICKHOUSE_CLIENT_BIN, ClickHouseServer } from "../clickhouse.ts";
import {
  ClickHouseExporter,
  FLAG_ROW_BINARY,
  flowsSchemaSql,
  INSERT_COLUMNS,
  rowBinary,
  rowJson,
} from "../../src/exporters/clickhouse/mod.ts";
import { toFlatRecord } from "../../src/exporters/flat_record.ts";
import type { AggregatedRecord, ExportedFlow } from "../../src/aggregation/record.ts";
import { newBatchId, Spool } from "../../src/spool/mod.ts";

const UUID = "5f3b4a3e-2c9a-4b0c-9d57-8a4e3c0f1b2a";

/** Results of {@linkcode benchClickHouse}. */
export interface ClickHouseBench {
  clickhouse_rows_per_s: number;
  clickhouse_client_rows_per_s: number;
  clickhouse_vs_client_ratio: number;
  spool_write_mb_per_s: number;
  spool_replay_rows_per_s: number;
  detail: Record<string, unknown>;
}

/** A record like the export loop hands over; `i` makes each one distinct. */
export function benchFlow(i: number): ExportedFlow {
  const ip = `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
  return {
    key: {
      sourceAddress: ip,
      destinationAddress: "10.10.1.2",
      protocol: 6,
      sourcePort: 10_000 + (i % 50_000),
      destinationPort: 5201,
    },
    isIPv6: false,
    uncorrelated: false,
    record: {
      flowStartSeconds: 1_700_000_000 + (i % 3600),
      flowEndSeconds: 1_700_000_060 + (i % 3600),
      flowEndSecondsFromSourceNode: 1_700_000_060,
      flowEndSecondsFromDestinationNode: 1_700_000_061,
      flowEndReason: 2,
      sourceIPv4Address: ip,
      destinationIPv4Address: "10.10.1.2",
      sourceTransportPort: 10_000 + (i % 50_000),
      destinationTransportPort: 5201,
      protocolIdentifier: 6,
      packetTotalCount: BigInt(i) * 10n,
      octetTotalCount: BigInt(i) * 15_000n + 2n ** 53n,
      packetDeltaCount: 10n,
      octetDeltaCount: 15_000n,
      reversePacketTotalCount: 5n,
      reverseOctetTotalCount: 300n,
      reversePacketDeltaCount: 5n,
      reverseOctetDeltaCount: 300n,
      sourcePodName: `client-${i % 500}`,
      sourcePodNamespace: "bench",
      sourceNodeName: `node-${i % 8}`,
      destinationPodName: "server-0",
      destinationPodNamespace: "bench",
      destinationNodeName: "node-9",
      destinationClusterIPv4: "0.0.0.0",
      destinationServicePort: 0,
      destinationServicePortName: "",
      ingressNetworkPolicyName: "",
      ingressNetworkPolicyNamespace: "",
      ingressNetworkPolicyRuleName: "",
      ingressNetworkPolicyRuleAction: 0,
      ingressNetworkPolicyType: 0,
      egressNetworkPolicyName: "",
      egressNetworkPolicyNamespace: "",
      egressNetworkPolicyRuleName: "",
      egressNetworkPolicyRuleAction: 0,
      egressNetworkPolicyType: 0,
      tcpState: "ESTABLISHED",
      flowType: 2,
      egressName: "",
      egressIP: "",
      throughput: 2000n,
      reverseThroughput: 40n,
      throughputFromSourceNode: 2000n,
      throughputFromDestinationNode: 2000n,
      reverseThroughputFromSourceNode: 40n,
      reverseThroughputFromDestinationNode: 40n,
    } as AggregatedRecord,
  };
}

async function createTable(server: ClickHouseServer, db: string): Promise<void> {
  await server.query(`DROP DATABASE IF EXISTS ${db}`);
  await server.query(`CREATE DATABASE ${db}`);
  const [table] = flowsSchemaSql({ ttl: false });
  await server.query(table.replace("IF NOT EXISTS flows", `${db}.flows`));
}

async function rowCount(server: ClickHouseServer, db: string): Promise<number> {
  return Number((await server.query(`SELECT count() FROM ${db}.flows`)).trim());
}

async function sinkRate(server: ClickHouseServer, n: number, spoolDir: string): Promise<number> {
  await createTable(server, "bench_sink");
  const sink = new ClickHouseExporter(
    {
      enable: true,
      database: "bench_sink",
      databaseURL: server.url,
      debug: false,
      compress: true,
      commitInterval: "1s",
      commitIntervalMs: 1000,
      tls: { insecureSkipVerify: false, caCert: false },
      spool: { dir: spoolDir, maxBytes: 1 << 30 },
    },
    UUID,
    {
      env: (k) => k === "CH_USERNAME" ? server.username : server.password,
    },
  );
  await sink.start();
  await sink.flush(); // connected before the clock starts
  const t0 = performance.now();
  for (let i = 0; i < n;) {
    const end = Math.min(n, i + 20_000);
    for (; i < end; i++) sink.addRecord(benchFlow(i));
    // The export loop's pace: do not let more than 100k rows wait in the sink's memory.
    while (sink.stats().memoryRecords > 100_000) await new Promise((r) => setTimeout(r, 5));
  }
  await sink.flush();
  const secs = (performance.now() - t0) / 1000;
  const s = sink.stats();
  await sink.stop();
  if (s.exported !== n || (await rowCount(server, "bench_sink")) !== n) {
    throw new Error(`clickhouse bench: ${s.exported} of ${n} rows exported`);
  }
  return n / secs;
}

async function clientRate(server: ClickHouseServer, n: number, dir: string): Promise<number> {
  await createTable(server, "bench_client");
  const path = `${dir}/rows.json`;
  const file = await Deno.open(path, { write: true, create: true, truncate: true });
  const enc = new TextEncoder();
  for (let i = 0; i < n;) {
    const lines: string[] = [];
    const end = Math.min(n, i + 20_000);
    for (; i < end; i++) lines.push(rowJson(toFlatRecord(benchFlow(i), UUID)));
    const bytes = enc.encode(lines.join("\n") + "\n");
    let off = 0;
    while (off < bytes.length) off += await file.write(bytes.subarray(off));
  }
  file.close();
  const t0 = performance.now();
  const input = await Deno.open(path, { read: true });
  const child = new Deno.Command(CLICKHOUSE_CLIENT_BIN, {
    args: [
      "--host=127.0.0.1",
      `--port=${server.tcpPort}`,
      `--user=${server.username}`,
      `--password=${server.password}`,
      `--query=INSERT INTO bench_client.flows (${INSERT_COLUMNS.join(", ")}) FORMAT JSONEachRow`,
    ],
    stdin: "piped",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  await input.readable.pipeTo(child.stdin);
  const out = await child.output();
  const secs = (performance.now() - t0) / 1000;
  if (!out.success) {
    throw new Error(`clickhouse-client failed: ${new TextDecoder().decode(out.stderr)}`);
  }
  if ((await rowCount(server, "bench_client")) !== n) {
    throw new Error("clickhouse-client bench: row count differs");
  }
  return n / secs;
}

async function spoolRates(
  n: number,
  dir: string,
): Promise<{ writeMbPerS: number; replayRowsPerS: number }> {
  const perFrame = 1000;
  const flats = Array.from({ length: perFrame }, (_, i) => toFlatRecord(benchFlow(i), UUID));
  const payload = rowBinary(flats);
  const frames = Math.max(1, Math.floor(n / perFrame));
  const spool = await Spool.open(`${dir}/spool-bench`, { maxBytes: 4 * 2 ** 30 });
  const t0 = performance.now();
  for (let f = 0; f < frames; f++) {
    await spool.append({ id: newBatchId(), records: perFrame, flags: FLAG_ROW_BINARY, payload });
  }
  const writeSecs = (performance.now() - t0) / 1000;
  const t1 = performance.now();
  let rows = 0;
  for (;;) {
    const lease = await spool.peek({ markInflight: true });
    if (lease === undefined) break;
    rows += lease.records;
    await spool.ack(lease);
  }
  const replaySecs = (performance.now() - t1) / 1000;
  await spool.close();
  if (rows !== frames * perFrame) throw new Error("spool bench: replay lost rows");
  return {
    writeMbPerS: (frames * payload.length) / 1e6 / writeSecs,
    replayRowsPerS: rows / replaySecs,
  };
}

/** Runs the ClickHouse and spool measurements (`quick`: 20k rows instead of 1M). */
export async function benchClickHouse(options: { quick: boolean }): Promise<ClickHouseBench> {
  const n = options.quick ? 20_000 : 1_000_000;
  const dir = await Deno.makeTempDir({ prefix: "fa-bench-ch-" });
  const server = await ClickHouseServer.start();
  try {
    // Alternate sink and client so both see the same machine load; best of the trials.
    const trials = options.quick ? 1 : 2;
    const sink: number[] = [];
    const client: number[] = [];
    for (let t = 0; t < trials; t++) {
      sink.push(await sinkRate(server, n, `${dir}/sink-spool-${t}`));
      client.push(await clientRate(server, n, dir));
    }
    const spool = await spoolRates(options.quick ? 20_000 : 500_000, dir);
    const best = (a: number[]) => Math.max(...a);
    return {
      clickhouse_rows_per_s: best(sink),
      clickhouse_client_rows_per_s: best(client),
      clickhouse_vs_client_ratio: best(sink) / best(client),
      spool_write_mb_per_s: spool.writeMbPerS,
      spool_replay_rows_per_s: spool.replayRowsPerS,
      detail: {
        rows: n,
        sinkTrials: sink,
        clientTrials: client,
        server: (await server.query("SELECT version()")).trim(),
      },
    };
  } finally {
    await server.close();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}
