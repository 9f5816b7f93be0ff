/**
 * Test process for the SIGKILL case: a ClickHouse sink whose server is unreachable (a closed
 * port), so every batch goes to the spool in `Deno.args[0]`; prints `spooled N` once 300
 * records are on disk, then keeps running until killed.
 */

import { ClickHouseExporter } from "../../../src/exporters/clickhouse/mod.ts";
import { freePort } from "../../../scripts/clickhouse.ts";
import { fixtureFlow } from "../fixtures.ts";

const [dir, database] = Deno.args;
const sink = new ClickHouseExporter(
  {
    enable: true,
    database,
    databaseURL: `http://127.0.0.1:${freePort()}`,
    debug: false,
    compress: true,
    commitInterval: "1s",
    commitIntervalMs: 1000,
    tls: { insecureSkipVerify: false, caCert: false },
    spool: { dir, maxBytes: 1 << 30 },
  },
  "5f3b4a3e-2c9a-4b0c-9d57-8a4e3c0f1b2a",
  { maxBatchRows: 100 },
);
await sink.start();
for (let i = 0; i < 300; i++) {
  sink.addRecord(fixtureFlow(false, { flowStartSeconds: 1_600_000_000 + i }));
}
await sink.flush();
console.log(`spooled ${sink.stats().spoolRecords}`);
setInterval(() => {}, 1000);
