/**
 * The sink over HTTPS to a real server with a certificate of a private CA: `tls.caCert` (the
 * CA read at connection time), `tls.insecureSkipVerify`, and neither (refused, retried).
 */

import assert from "node:assert/strict";
import { ManualClock } from "../../../src/clock.ts";
import { ClickHouseExporter } from "../../../src/exporters/clickhouse/mod.ts";
import { generateCertificates } from "../../../src/pki/mod.ts";
import {
  ClickHouseServer,
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

Deno.test("close the TLS ClickHouse server", async () => {
  await server?.close();
});
