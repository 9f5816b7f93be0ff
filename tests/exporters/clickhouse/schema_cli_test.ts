import assert from "node:assert/strict";
import {
  parseClickHouseArgs,
  runClickHouseCommand,
} from "../../../src/exporters/clickhouse/schema_cli.ts";
import type { ClickHouseConfig } from "../../../src/exporters/clickhouse/config.ts";
import { FLOWS_TABLE_COLUMNS } from "../../../src/exporters/clickhouse/mod.ts";
import { MAIN_TS, runDeno } from "../../_helpers/process.ts";
import { clickHouse, closeClickHouse, selectRows } from "../../_helpers/clickhouse.ts";

Deno.test("clickhouse schema: arguments", () => {
  assert.deepEqual(parseClickHouseArgs(["schema"]), { apply: false, noTtl: false });
  assert.deepEqual(parseClickHouseArgs(["schema", "--apply", "--config=/x", "--no-ttl"]), {
    apply: true,
    config: "/x",
    noTtl: true,
  });
  assert.throws(() => parseClickHouseArgs(["tables"]), /unknown command "tables"/);
  assert.throws(() => parseClickHouseArgs(["schema", "--nope"]), /unexpected argument "--nope"/);
  // The next flag is not taken as the file (it was: nothing applied, exit 0).
  assert.throws(() => parseClickHouseArgs(["schema", "--config", "--apply"]), /needs a value/);
  assert.throws(() => parseClickHouseArgs(["schema", "--apply", "--config="]), /needs a value/);
  assert.throws(() => parseClickHouseArgs(["schema", "--config", "x"]), /only with --apply/);
});

/** Runs `clickhouse schema --apply` against a server answering every request with `answer`. */
async function applyAgainst(answer: string): Promise<{ code: number; stderr: string }> {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const serving = (async () => {
    for await (const c of listener) {
      await c.read(new Uint8Array(65536)).catch(() => null);
      await c.write(new TextEncoder().encode(answer)).catch(() => 0);
      c.close();
    }
  })();
  try {
    const url = `http://127.0.0.1:${listener.addr.port}`;
    return await runClickHouseCommand(
      ["schema", "--apply"],
      () => Promise.resolve({ databaseURL: url, database: "default" } as ClickHouseConfig),
      () => "x",
    );
  } finally {
    listener.close();
    await serving.catch(() => {});
  }
}

Deno.test("clickhouse schema --apply: a server that is not ClickHouse, or answers an empty error, fails naming the server and the failure", async () => {
  // 200 with a body that is not a version: was exit 0, "server : without TTL" and every
  // statement listed as done.
  const junk = await applyAgainst(
    "HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\n{not json",
  );
  assert.equal(junk.code, 1);
  assert.match(junk.stderr, /http:\/\/127\.0\.0\.1:\d+: not a ClickHouse server/);
  // An error without a body: was "clickhouse schema --apply: " and nothing more.
  const empty = await applyAgainst(
    "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
  );
  assert.equal(empty.code, 1);
  assert.match(
    empty.stderr,
    /--apply: http:\/\/127\.0\.0\.1:\d+: an error answer without a message/,
  );
});

Deno.test("clickhouse schema prints the 52-column table and the three views, with TTL", async () => {
  const out = await runDeno(["run", "-A", MAIN_TS, "clickhouse", "schema"]);
  assert.equal(out.code, 0, out.stderr);
  assert.equal(out.stdout.match(/^CREATE /gm)?.length, 4);
  assert.match(out.stdout, /TTL timeInserted \+ INTERVAL 1 HOUR/);
  for (const [name, type] of FLOWS_TABLE_COLUMNS) assert.ok(out.stdout.includes(`${name} ${type}`));
});

Deno.test("clickhouse schema --apply creates them on 18.16 (no TTL there), twice harmlessly", async () => {
  const server = await clickHouse();
  const db = `schema${Deno.pid}`;
  await server.query(`CREATE DATABASE IF NOT EXISTS ${db}`);
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(
      `${dir}/fa.conf`,
      `clickHouse:\n  enable: true\n  database: ${db}\n  databaseURL: ${server.url}\n`,
    );
    const env = { CH_USERNAME: server.username, CH_PASSWORD: server.password };
    for (let i = 0; i < 2; i++) {
      const out = await runDeno(
        ["run", "-A", MAIN_TS, "clickhouse", "schema", "--apply", "--config", `${dir}/fa.conf`],
        { env },
      );
      assert.equal(out.code, 0, out.stderr);
      assert.match(out.stdout, /server 18\.16\.\d+: without TTL/);
    }
    const cols = await selectRows(server, `DESCRIBE TABLE ${db}.flows`);
    assert.deepEqual(cols.map((c) => c.name), FLOWS_TABLE_COLUMNS.map(([n]) => n));
    const tables = (await server.query(`SHOW TABLES FROM ${db}`)).split("\n");
    for (const v of ["flows_pod_view", "flows_node_view", "flows_policy_view"]) {
      assert.ok(tables.includes(v), v);
    }
  } finally {
    await server.query(`DROP DATABASE IF EXISTS ${db}`);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("clickhouse schema --apply without credentials fails with upstream's text", async () => {
  const out = await runDeno(["run", "-A", MAIN_TS, "clickhouse", "schema", "--apply"], {
    env: { CH_USERNAME: "", CH_PASSWORD: "" },
  });
  assert.equal(out.code, 1);
  assert.match(out.stderr, /Username or Password missing in ClickHouse config/);
});

Deno.test("close the file's ClickHouse server", async () => {
  await closeClickHouse();
});
