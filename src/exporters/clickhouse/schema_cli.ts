/**
 * `flow-aggregator clickhouse schema [--apply] [--config FILE] [--no-ttl]`: prints the v1.13
 * `flows` table (52 columns) and its three views as SQL, or creates them (`--apply`) on the
 * server of the configuration's `clickHouse` section, with `CH_USERNAME` / `CH_PASSWORD` from
 * the environment, for standalone users without Theia. Every statement is `IF NOT EXISTS`, so
 * applying twice is harmless. With `--apply` the table TTL is used only when the server has
 * it (≥ 19.6); printed SQL has it unless `--no-ttl`.
 *
 * @module
 */

import { clickHouseLibrary } from "./connection.ts";
import { flowsSchemaSql, serverHasTtl } from "./table.ts";
import { parseDatabaseUrl } from "./url.ts";
import type { ClickHouseConfig } from "./config.ts";

/** Usage of the subcommand. */
export const CLICKHOUSE_USAGE =
  `Usage: flow-aggregator clickhouse schema [--no-ttl]      print the flows table and views
       flow-aggregator clickhouse schema --apply [--config FILE] [--no-ttl]
                       create them on the clickHouse section's server (CH_USERNAME,
                       CH_PASSWORD from the environment); TTL only where the server has it`;

/** Parsed arguments of the subcommand. */
export interface ClickHouseCommand {
  /** Create on the server instead of printing. */
  apply: boolean;
  /** Configuration file (default: the caller's embedded one). */
  config?: string;
  /** Leave the TTL out (servers before 19.6). */
  noTtl: boolean;
}

/** Parses `clickhouse …` arguments (after `clickhouse`); throws naming a bad one. */
export function parseClickHouseArgs(args: readonly string[]): ClickHouseCommand {
  if (args[0] !== "schema") throw new Error(`clickhouse: unknown command "${args[0] ?? ""}"`);
  const out: ClickHouseCommand = { apply: false, noTtl: false };
  for (let i = 1; i < args.length; i++) {
    const a = args[i];
    if (a === "--apply") out.apply = true;
    else if (a === "--no-ttl") out.noTtl = true;
    else if (a === "--config" || a.startsWith("--config=")) {
      const v = a === "--config" ? args[++i] : a.slice("--config=".length);
      // A missing value, not the next flag taken as the file (`--config --apply`).
      if (v === undefined || v === "" || v.startsWith("--")) {
        throw new Error("clickhouse schema: --config needs a value");
      }
      out.config = v;
    } else throw new Error(`clickhouse schema: unexpected argument "${a}"`);
  }
  if (out.config !== undefined && !out.apply) {
    throw new Error(
      "clickhouse schema: --config is read only with --apply (without, the SQL is printed)",
    );
  }
  return out;
}

/** The SQL text printed by `clickhouse schema` (statements separated by `;`). */
export function schemaText(options: { ttl: boolean }): string {
  return flowsSchemaSql(options).map((s) => `${s};\n`).join("\n");
}

/**
 * Creates the table and views on the server of `config` (the `clickHouse` section); returns
 * what it did, one line per statement.
 */
export async function applySchema(
  config: ClickHouseConfig,
  options: { noTtl: boolean; env?: (name: string) => string | undefined },
): Promise<string[]> {
  const env = options.env ?? ((n: string) => Deno.env.get(n));
  const username = env("CH_USERNAME") ?? "";
  const password = env("CH_PASSWORD") ?? "";
  if (username === "" || password === "") {
    throw new Error("DatabaseURL, Username or Password missing in ClickHouse config");
  }
  const lib = await clickHouseLibrary();
  const url = parseDatabaseUrl(config.databaseURL).httpUrl;
  const client = lib.createClient({
    url,
    database: config.database,
    username,
    password,
    log: { level: lib.ClickHouseLogLevel.OFF },
  });
  // Errors name the server (scheme, host and port only) and say what failed even when the
  // client's message is empty (an HTTP error without a body).
  const server = new URL(url).origin;
  try {
    const rs = await client.query({ query: "SELECT version() AS v", format: "JSONEachRow" });
    const version = String((await rs.json<{ v: string }>())[0]?.v ?? "");
    if (!/^\d+\.\d+/.test(version)) {
      throw new Error(
        `not a ClickHouse server: SELECT version() answered ${JSON.stringify(version)}`,
      );
    }
    const ttl = !options.noTtl && serverHasTtl(version);
    const done = [`server ${version}: ${ttl ? "with" : "without"} TTL`];
    for (const sql of flowsSchemaSql({ ttl })) {
      await client.command({ query: sql });
      done.push(sql.split("\n")[0].replace(/ \($/, ""));
    }
    return done;
  } catch (err) {
    const e = err as Error & { code?: unknown };
    // The client's error for an HTTP error answer is its body: empty for an empty body.
    const what = e.message || [e.name === "Error" ? "" : e.name, e.code].filter((x) =>
      x
    ).join(" ") ||
      "an error answer without a message (not a ClickHouse server?)";
    throw new Error(`${server}: ${what}`);
  } finally {
    await client.close();
  }
}

/** What the subcommand prints and its exit code (main.ts does the printing). */
export interface CommandResult {
  /** Exit code. */
  code: number;
  /** Text for standard output. */
  stdout: string;
  /** Text for standard error. */
  stderr: string;
}

/**
 * Runs the subcommand; `loadConfig` reads the configuration file (or the embedded default)
 * and returns its `clickHouse` section.
 */
export async function runClickHouseCommand(
  args: readonly string[],
  loadConfig: (path?: string) => Promise<ClickHouseConfig>,
  env?: (name: string) => string | undefined,
): Promise<CommandResult> {
  let cmd: ClickHouseCommand;
  try {
    cmd = parseClickHouseArgs(args);
  } catch (err) {
    return { code: 1, stdout: "", stderr: `${(err as Error).message}\n\n${CLICKHOUSE_USAGE}` };
  }
  if (!cmd.apply) return { code: 0, stdout: schemaText({ ttl: !cmd.noTtl }), stderr: "" };
  try {
    const done = await applySchema(await loadConfig(cmd.config), { ...cmd, env });
    return { code: 0, stdout: done.join("\n"), stderr: "" };
  } catch (err) {
    return { code: 1, stdout: "", stderr: `clickhouse schema --apply: ${(err as Error).message}` };
  }
}
