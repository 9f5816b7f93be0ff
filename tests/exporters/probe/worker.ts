/** Worker entry of the probe sink. */

import { runExporterWorker } from "../../../src/exporters/worker_host.ts";
import { probeComponent } from "./component.ts";

runExporterWorker(probeComponent);
