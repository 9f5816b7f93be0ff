/**
 * A process whose flow log goes to its standard output (path `-`): 5,000 lines written in one
 * flush, then its sink counters as one JSON line on stderr. For
 * tests/exporters/flow_log/stdout_test.ts, whose reader leaves part-way.
 *
 * @module
 */

import { LogExporter } from "../../src/exporters/flow_log/exporter.ts";
import { setLogWriter } from "../../src/log.ts";
import { fixtureFlow } from "../exporters/fixtures.ts";
import { enabledFlowLogger } from "./flow_logger_config.ts";

setLogWriter(() => {});
const e = new LogExporter(enabledFlowLogger("-"), {
  flushIntervalMs: 100_000,
  maxPendingBytes: 64 * 1024 * 1024,
});
await e.start();
for (let i = 0; i < 5000; i++) e.addRecord(fixtureFlow(false, { flowEndSeconds: i }));
await e.flush();
Deno.stderr.writeSync(new TextEncoder().encode(JSON.stringify(e.stats()) + "\n"));
await e.stop();
Deno.exit(0);
