/**
 * Worker entry of the ClickHouse exporter: runs it in a worker started with only its
 * permissions.
 *
 * @module
 */

import { runExporterWorker } from "../worker_host.ts";
import { clickHouseComponent } from "./mod.ts";

runExporterWorker(clickHouseComponent);
