/**
 * Worker entry of the IPFIX exporter: runs it in a worker started with only its permissions.
 *
 * @module
 */

import { runExporterWorker } from "../worker_host.ts";
import { ipfixComponent } from "./mod.ts";

runExporterWorker(ipfixComponent);
