import assert from "node:assert/strict";
import { parseClickHouseArgs } from "../../../src/exporters/clickhouse/schema_cli.ts";
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
