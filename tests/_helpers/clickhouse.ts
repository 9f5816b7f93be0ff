/**
 * A real ClickHouse server for the tests (`scripts/clickhouse.ts`): one per test file, started
 * on first use and closed by the file's last test ({@linkcode closeClickHouse}). A missing
 * `clickhouse-server` fails the test (CI installs it through `scripts/setup.sh`); nothing skips.
 */

import { ClickHouseServer } from "../../scripts/clickhouse.ts";
import { type ClickHouseConfig, flowsSchemaSql } from "../../src/exporters/clickhouse/mod.ts";

export { ClickHouseServer };

let shared: Promise<ClickHouseServer> | undefined;

/** The file's server, started on first call. */
export function clickHouse(): Promise<ClickHouseServer> {
  shared ??= ClickHouseServer.start();
  return shared;
}

/** Stops and removes the file's server (call from its last test, or a final `Deno.test`). */
export async function closeClickHouse(): Promise<void> {
  const s = shared;
  shared = undefined;
  if (s !== undefined) await (await s).close();
}

/** Rows of a `SELECT … FORMAT JSONEachRow`, parsed (UInt64 columns come back as strings). */
export async function selectRows(
  server: ClickHouseServer,
  sql: string,
): Promise<Record<string, unknown>[]> {
  const text = await server.query(`${sql} FORMAT JSONEachRow`);
  return text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
}

/** `CH_USERNAME` / `CH_PASSWORD` for the sink, from the server's config. */
export function credentials(server: ClickHouseServer): { username: string; password: string } {
  return { username: server.username, password: server.password };
}

/** A database of its own with the v1.13 `flows` table (no TTL: 18.16 has none); its name. */
export async function freshDatabase(server: ClickHouseServer, name: string): Promise<string> {
  await server.query(`DROP DATABASE IF EXISTS ${name}`);
  await server.query(`CREATE DATABASE ${name}`);
  const [table] = flowsSchemaSql({ ttl: false });
  await server.query(
    table.replace("CREATE TABLE IF NOT EXISTS flows", `CREATE TABLE ${name}.flows`),
  );
  return name;
}

/** An enabled `clickHouse` section for `server` (HTTP URL), spool in `spoolDir`. */
export function sinkConfig(
  server: ClickHouseServer,
  options: { database: string; spoolDir: string; url?: string; maxBytes?: number },
): ClickHouseConfig {
  return {
    enable: true,
    database: options.database,
    databaseURL: options.url ?? server.url,
    debug: false,
    compress: true,
    commitInterval: "1s",
    commitIntervalMs: 1000,
    tls: { insecureSkipVerify: false, caCert: false },
    spool: { dir: options.spoolDir, maxBytes: options.maxBytes ?? 1 << 30 },
  };
}

/** The env reader the sink gets: the server's user and password as CH_USERNAME / CH_PASSWORD. */
export function sinkEnv(server: ClickHouseServer): (name: string) => string | undefined {
  return (name) =>
    name === "CH_USERNAME" ? server.username : name === "CH_PASSWORD" ? server.password : undefined;
}
