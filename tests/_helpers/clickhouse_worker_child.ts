/**
 * A child process for the permission tests, run with exactly the flags the product computes for
 * its configuration: the ClickHouse sink (the section as JSON in `Deno.args[0]`) in its
 * permission-narrowed worker inserts one record; the sink's counters are printed as JSON.
 */
import { WorkerExporter } from "../../src/exporters/worker_exporter.ts";
import { clickHouseComponent } from "../../src/exporters/clickhouse/component.ts";
import { fixtureFlow } from "../exporters/fixtures.ts";

const e = new WorkerExporter(clickHouseComponent, JSON.parse(Deno.args[0]), {
  podLabels: false,
  clusterUuid: "2a1c5d0e-3c8f-4b5e-9d4f-0123456789ab",
});
await e.start();
e.addRecord(fixtureFlow(false));
const until = Date.now() + 20_000;
while (e.stats().exported < 1 && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
await e.stop();
console.log(JSON.stringify(e.stats()));
Deno.exit(0);
