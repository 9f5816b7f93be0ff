/**
 * The flow log exporter component (exporters.md §5): one line per flow in a size-rotated file.
 *
 * Permissions: `read` and `write` on the log file's directory (rotation lists, renames,
 * compresses and removes backups there); none for standard output (`-`, `/dev/stdout`).
 *
 * @module
 */

import { dirname, resolve } from "node:path";
import { type ExporterComponent, noPermissions } from "../component.ts";
import { type FlowLoggerConfig, flowLoggerSection } from "./config.ts";
import { isStdoutPath, LogExporter } from "./exporter.ts";
import { workerModule } from "../../worker_module.ts";

export * from "./config.ts";
export * from "./exporter.ts";

/** The flow log exporter component. */
export const flowLogComponent: ExporterComponent<"flowLogger", FlowLoggerConfig> = {
  name: "log",
  section: flowLoggerSection,
  permissions(config) {
    if (isStdoutPath(config.path)) return noPermissions();
    const dir = dirname(resolve(config.path));
    return { net: [], read: [dir], write: [dir], env: [] };
  },
  create(config) {
    return new LogExporter(config);
  },
  workerModule: workerModule("flow_log"),
};
