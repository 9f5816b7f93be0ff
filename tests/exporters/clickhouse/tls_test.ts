/**
 * The sink over HTTPS to a real server with a certificate of a private CA: `tls.caCert` (the
 * CA read at connection time), `tls.insecureSkipVerify`, and neither (refused, retried).
 */

import assert from "node:assert/strict";
import { ManualClock } from "../../../src/clock.ts";
import { ClickHouseExporter } from "../../../src/exporters/clickhouse/mod.ts";
import { generateCertificates } from "../../../src/pki/mod.ts";
import { parseConfig } from "../../../src/components.ts";
import { permissionFlags, processPermissions } from "../../../src/permissions.ts";
import { DENO_JSON, REPO } from "../../_helpers/process.ts";
import {
  ClickHouseServer,
  credentials,
  freshDatabase,
  selectRows,
  sinkConfig,
  sinkEnv,
} from "../../_helpers/clickhouse.ts";
import { fixtureFlow } from "../fixtures.ts";

const certs = generateCertificates({ address: "127.0.0.1" });
let server: ClickHouseServer | undefined;

async function tlsServer(): Promise<ClickHouseServer> {
  server ??= await ClickHouseServer.start({
    tls: { certPem: certs.server.certPem, keyPem: certs.server.keyPem },
  });
  return server;
}

async function insertOne(
  tls: { insecureSkipVerify: boolean; caCert: boolean },
  name: string,
): Promise<{ inserted: number; errors: number; rows: number }> {
  const s = await tlsServer();
  const db = await freshDatabase(s, name);
  const dir = await Deno.makeTempDir();
  const config = {
    ...sinkConfig(s, { database: db, spoolDir: dir, url: `https://127.0.0.1:${s.httpsPort}` }),
    tls,
  };
  let caReads = 0;
  const sink = new ClickHouseExporter(config, "u", {
    env: sinkEnv(s),
    clock: new ManualClock(),
    readCa: () => {
      caReads++;
      return Promise.resolve(certs.ca.certPem);
    },
  });
  await sink.start();
  sink.addRecord(fixtureFlow(false));
  await sink.flush();
  const st = sink.stats();
  await sink.stop();
  const rows = (await selectRows(s, `SELECT sourceIP FROM ${db}.flows`)).length;
  await Deno.remove(dir, { recursive: true });
  assert.equal(caReads, tls.caCert ? 1 : 0, "the CA is read once per new connection");
  return { inserted: st.exported, errors: st.insertErrors, rows };
}

Deno.test("https with tls.caCert: the custom CA verifies the server", async () => {
  const r = await insertOne({ insecureSkipVerify: false, caCert: true }, "tls_ca");
  assert.deepEqual(r, { inserted: 1, errors: 0, rows: 1 });
});

Deno.test("https with tls.insecureSkipVerify: no verification", async () => {
  const r = await insertOne({ insecureSkipVerify: true, caCert: false }, "tls_insecure");
  assert.deepEqual(r, { inserted: 1, errors: 0, rows: 1 });
});

Deno.test("https with neither: the unknown CA is refused, counted, nothing inserted", async () => {
  const r = await insertOne({ insecureSkipVerify: false, caCert: false }, "tls_refused");
  assert.equal(r.inserted, 0);
  assert.ok(r.errors >= 1);
  assert.equal(r.rows, 0);
});

// node:https reads the runtime's root certificates for every connection, which Deno grants only
// with --allow-sys: the sink over HTTPS never inserted under the permissions the product
// computed (found by review with the real process). Checked with exactly those flags.
Deno.test("https from its worker, run with exactly the flags `deno task permissions` prints", async () => {
  const s = await tlsServer();
  const db = await freshDatabase(s, "tls_worker");
  const dir = await Deno.makeTempDir();
  try {
    const cfg = parseConfig(`clickHouse:
  enable: true
  databaseURL: https://127.0.0.1:${s.httpsPort}
  database: ${db}
  commitInterval: 1s
  tls:
    insecureSkipVerify: true
  spool:
    dir: ${dir}
`);
    const flags = permissionFlags(processPermissions(cfg, { workers: 1 }));
    assert.ok(flags.includes("--allow-sys"), flags.join(" "));
    const { username, password } = credentials(s);
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--config",
        DENO_JSON,
        ...flags,
        `${REPO}tests/_helpers/clickhouse_worker_child.ts`,
        JSON.stringify(cfg.clickHouse),
      ],
      env: { CH_USERNAME: username, CH_PASSWORD: password },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, stderr);
    const st = JSON.parse(new TextDecoder().decode(out.stdout).trim().split("\n").at(-1)!);
    assert.equal(st.exported, 1, stderr);
    assert.equal(st.permissionDenied, 0, stderr);
    assert.equal((await selectRows(s, `SELECT sourceIP FROM ${db}.flows`)).length, 1);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("close the TLS ClickHouse server", async () => {
  await server?.close();
});
