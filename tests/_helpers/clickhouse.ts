/**
 * A real ClickHouse server for the tests (`scripts/clickhouse.ts`): one per test file, started
 * on first use and closed by the file's last test ({@linkcode closeClickHouse}). A missing
 * `clickhouse-server` fails the test (CI installs it through `scripts/setup.sh`); nothing skips.
 */

import { ClickHouseServer } from "../../scripts/clickhouse.ts";
import { writeAll } from "../../src/bytes.ts";
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

/**
 * A TCP proxy in front of the server that loses the answers of the first `cut` INSERT
 * requests: the request reaches the server (which inserts), then the client's connection is
 * closed without the response (`mode: "cut"`), or held open without an answer (`mode: "hold"`,
 * the client times out). Later requests pass through.
 */
export class LossyProxy {
  readonly #listener: Deno.TcpListener;
  readonly #conns = new Set<Deno.Conn>();
  /** INSERT requests seen (each attempt). */
  inserts = 0;
  /** Request lines of the INSERTs seen, in order. */
  readonly requestLines: string[] = [];
  #cut: number;

  constructor(
    readonly server: ClickHouseServer,
    options: { cut: number; mode: "cut" | "hold" },
  ) {
    this.#cut = options.cut;
    this.#listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    void this.#accept(options.mode);
  }

  /** `http://127.0.0.1:<port>` of the proxy. */
  get url(): string {
    return `http://127.0.0.1:${(this.#listener.addr as Deno.NetAddr).port}`;
  }

  async #accept(mode: "cut" | "hold"): Promise<void> {
    for await (const client of this.#listener) {
      this.#conns.add(client);
      void this.#serve(client, mode).catch(() => {}).finally(() => {
        this.#conns.delete(client);
        try {
          client.close();
        } catch {
          // closed already
        }
      });
    }
  }

  async #serve(client: Deno.Conn, mode: "cut" | "hold"): Promise<void> {
    const upstream = await Deno.connect({ hostname: "127.0.0.1", port: this.server.httpPort });
    this.#conns.add(upstream);
    let losing = false;
    const down = (async () => {
      const buf = new Uint8Array(65536);
      for (;;) {
        const n = await upstream.read(buf);
        if (n === null) return;
        if (losing) {
          if (mode === "cut") {
            client.close(); // the answer is dropped and the client cut off
            return;
          }
          continue; // hold: swallow it, keep the client waiting
        }
        await writeAll(client, buf.subarray(0, n));
      }
    })().catch(() => {});
    const buf = new Uint8Array(65536);
    const dec = new TextDecoder();
    for (;;) {
      const n = await client.read(buf);
      if (n === null) break;
      const head = dec.decode(buf.subarray(0, Math.min(n, 2048)));
      const line = /^POST [^\r\n]*query=INSERT[^\r\n]*/i.exec(head)?.[0];
      if (line !== undefined) {
        this.inserts++;
        this.requestLines.push(line);
        if (this.#cut > 0) {
          this.#cut--;
          losing = true;
        }
      }
      await writeAll(upstream, buf.subarray(0, n));
    }
    await down;
    this.#conns.delete(upstream);
    upstream.close();
  }

  /** Closes the listener and every connection. */
  close(): void {
    this.#listener.close();
    for (const c of this.#conns) {
      try {
        c.close();
      } catch {
        // closed already
      }
    }
  }
}
