/**
 * Worker entry of the S3 exporter: runs it in a worker started with only its permissions.
 *
 * @module
 */

import { runExporterWorker } from "../worker_host.ts";
import { s3Component } from "./mod.ts";

runExporterWorker(s3Component);
