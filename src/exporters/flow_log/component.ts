/**
 * The flow log exporter component (exporters.md §5): one line per flow in a size-rotated file.
 *
 * Permissions: `read` and `write` on the log file's directory (rotation lists, renames,
 * compresses and removes backups there); none for standard output (`-`, `/dev/stdout`).
 *
 * The sink itself (`exporter.ts`) is imported by `create`: the main thread of a process whose
 * flow log runs in its worker never loads it. The registry (src/components.ts) imports this
 * file, not `mod.ts`.
 *
 * @module
 */

import { directoryGrants, type ExporterComponent, noPermissions } from "../component.ts";
import {
  flowLogDirectory,
  type FlowLoggerConfig,
  flowLoggerSection,
  isStdoutPath,
} from "./config.ts";
import { workerModule } from "../../worker_module.ts";
import { fileKind } from "../../bytes.ts";

/** What `path` is ({@linkcode fileKind}), or undefined when it is not there or cannot be looked at. */
function existingKind(path: string): string | undefined {
  try {
    return fileKind(Deno.statSync(path));
  } catch {
    return undefined;
  }
}

/** The flow log exporter component. */
export const flowLogComponent: ExporterComponent<"flowLogger", FlowLoggerConfig> = {
  name: "log",
  section: flowLoggerSection,
  permissions(config) {
    if (isStdoutPath(config.path)) return noPermissions();
    // A directory cannot be the log file: its parent would be granted for nothing (`/tmp`
    // granted read and write on `/`). A path ending in `/` is refused by validation already.
    const kind = existingKind(config.path);
    if (kind === "directory") {
      throw new Error(
        `flowLogger.path ${config.path} is a directory: it names the log file (e.g. ` +
          `${config.path.replace(/\/+$/, "")}/flows.log)`,
      );
    }
    // Nor a device, FIFO or socket: rotation renames the log file away (`/dev/null`, as root,
    // would be renamed to a backup and a regular file made in its place), and the open of a
    // FIFO blocks until a reader comes. To log nothing, disable the section.
    if (kind !== undefined && kind !== "regular file") {
      throw new Error(
        `flowLogger.path ${config.path} is a ${kind}, not a regular file: rotation would rename ` +
          `it (to log nothing, set flowLogger.enable: false)`,
      );
    }
    // Through a symlink (or under one, not created yet) also the real path.
    const dirs = directoryGrants(flowLogDirectory(config.path));
    return { net: [], read: dirs, write: dirs, env: [] };
  },
  async create(config) {
    const { LogExporter } = await import("./exporter.ts");
    return new LogExporter(config);
  },
  workerModule: workerModule("flow_log"),
};
