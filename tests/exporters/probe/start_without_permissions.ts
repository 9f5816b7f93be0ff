/**
 * Starts the probe sink in a process that lacks its permissions and prints the start error
 * (run by worker_exporter_test.ts with only `--allow-read`). Argument: the probe's directory.
 */

import { WorkerExporter } from "../../../src/exporters/worker_exporter.ts";
import { probeComponent } from "./component.ts";

const e = new WorkerExporter(probeComponent, {
  enable: true,
  dir: Deno.args[0],
  allowedNet: "127.0.0.1:9",
  otherNet: "127.0.0.1:1",
  secretFile: "/nonexistent",
}, { podLabels: false, clusterUuid: "2a1c5d0e-3c8f-4b5e-9d4f-0123456789ab" });
try {
  await e.start();
  console.log("started");
  await e.stop();
} catch (err) {
  console.log((err as Error).message);
}
