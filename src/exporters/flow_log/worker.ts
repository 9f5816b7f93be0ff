/**
 * Worker entry of the flow log exporter: runs it in a worker started with only its permissions.
 *
 * @module
 */

import { runExporterWorker } from "../worker_host.ts";
import { flowLogComponent } from "./mod.ts";

runExporterWorker(flowLogComponent);
