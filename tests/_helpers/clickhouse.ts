/**
 * A real ClickHouse server for the tests (`scripts/clickhouse.ts`): one per test file, started
 * on first use and closed by the file's last test ({@linkcode closeClickHouse}). A missing
 * `clickhouse-server` fails the test (CI installs it through `scripts/setup.sh`); nothing skips.
 */

import { ClickHouseServer } from "../../scripts/clickhouse.ts";

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
