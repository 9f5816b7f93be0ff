/**
 * The `flowLogger` section, owned by the flow log exporter: types, defaults, validation and
 * reload rule (exporters.md §5.1, §6).
 *
 * @module
 */

import { dirname, resolve } from "node:path";
import { bool, checkFormat, fail, intOr, nonNegative, type Raw, str } from "../../config/schema.ts";
import { permissionEntryProblem } from "../../permission_entry.ts";
import type { BuildContext, ConfigSection } from "../../config/section.ts";

/** One `flowLogger.filters[]` entry; action names are kept as written (unknown never match). */
export interface FlowLoggerFilter {
  /** `None`/`Allow`/`Drop`/`Reject`; empty = any. */
  ingressNetworkPolicyRuleActions: string[];
  /** `None`/`Allow`/`Drop`/`Reject`; empty = any. */
  egressNetworkPolicyRuleActions: string[];
}

/** `flowLogger` section: the local flow log file. */
export interface FlowLoggerConfig {
  /**
   * Sink enabled.
   * @default {false}
   */
  enable: boolean;
  /**
   * File path; `-` or `/dev/stdout` writes to standard output (no rotation).
   * @default {"$TMPDIR/antrea-flows.log"}
   */
  path: string;
  /**
   * Rotate when the file would exceed this many MiB.
   * @default {100}
   */
  maxSize: number;
  /**
   * Rotated files kept; 0 (or absent) means the default, as upstream (whose docs said "0 =
   * keep all" while its code used 3: an unbounded default would fill the disk).
   * @default {3}
   */
  maxBackups: number;
  /**
   * Days to keep rotated files; 0 = no age-based removal.
   * @default {0}
   */
  maxAge: number;
  /**
   * gzip rotated files.
   * @default {true}
   */
  compress: boolean;
  /**
   * Only `CSV` (validated only when enabled).
   * @default {"CSV"}
   */
  recordFormat: string;
  /** OR of filters; empty = log everything. */
  filters: FlowLoggerFilter[];
  /**
   * Human-readable protocol / rule action / policy type.
   * @default {true}
   */
  prettyPrint: boolean;
}

/** True when a flow log path means standard output. */
export function isStdoutPath(path: string): boolean {
  return path === "-" || path === "/dev/stdout";
}

/**
 * The directory of the log file `path` (absolute, `..` and `.` resolved): what the sink reads
 * and writes (rotation lists, renames, compresses and removes backups there).
 */
export function flowLogDirectory(path: string): string {
  return dirname(resolve(path));
}

/** Defaults of the section (Antrea v1.13 `default.go`). */
export const FLOW_LOGGER_DEFAULTS = {
  fileName: "antrea-flows.log",
  maxSize: 100,
  maxBackups: 3,
  maxAge: 0,
  compress: true,
  recordFormat: "CSV",
  prettyPrint: true,
} as const;

const FILTER_SCHEMA = {
  ingressNetworkPolicyRuleActions: "strlist",
  egressNetworkPolicyRuleActions: "strlist",
} as const;

/** The `flowLogger` configuration section. */
export const flowLoggerSection: ConfigSection<"flowLogger", FlowLoggerConfig> = {
  key: "flowLogger",
  schema: {
    enable: "bool",
    path: "str",
    maxSize: "i32",
    maxBackups: "i32",
    maxAge: "i32",
    compress: "bool",
    recordFormat: "str",
    filters: { list: FILTER_SCHEMA },
    prettyPrint: "bool",
  },
  build(raw: Raw, ctx: BuildContext): FlowLoggerConfig {
    const d = FLOW_LOGGER_DEFAULTS;
    const filters = (Array.isArray(raw.filters) ? raw.filters as Raw[] : []).map((f) => ({
      ingressNetworkPolicyRuleActions: [...(f.ingressNetworkPolicyRuleActions as string[] ?? [])],
      egressNetworkPolicyRuleActions: [...(f.egressNetworkPolicyRuleActions as string[] ?? [])],
    }));
    return {
      enable: bool(raw, "enable", false),
      path: str(raw, "path", `${ctx.tmpDir === "/" ? "" : ctx.tmpDir}/${d.fileName}`),
      maxSize: intOr(raw, "maxSize", d.maxSize),
      // Upstream semantics (§1.2): 0 is unset and gives 3, so a v1.13 file keeps its meaning.
      maxBackups: intOr(raw, "maxBackups", d.maxBackups),
      maxAge: intOr(raw, "maxAge", d.maxAge),
      compress: bool(raw, "compress", d.compress),
      recordFormat: str(raw, "recordFormat", d.recordFormat),
      filters,
      prettyPrint: bool(raw, "prettyPrint", d.prettyPrint),
    };
  },
  validate(c): void {
    if (c.enable) checkFormat("flowLogger.recordFormat", c.recordFormat, ["CSV"]);
    if (c.enable && !isStdoutPath(c.path)) {
      // A path that names a directory is no file to write, and its "directory" would be the
      // parent's (`/tmp/` granted read and write on `/`).
      if (/(^|\/)(\.\.?)?$/.test(c.path)) {
        fail("flowLogger.path", `${JSON.stringify(c.path)} names a directory, not a file`);
      }
      // The directory is granted by name: a comma would split the grant into others.
      const problem = permissionEntryProblem("write", flowLogDirectory(c.path));
      if (problem !== undefined) {
        fail(
          "flowLogger.path",
          `${JSON.stringify(c.path)}: its directory cannot be granted: ${problem}`,
        );
      }
    }
    // Our additions (upstream accepts negatives and misbehaves later).
    nonNegative("flowLogger.maxSize", c.maxSize);
    nonNegative("flowLogger.maxBackups", c.maxBackups);
    nonNegative("flowLogger.maxAge", c.maxAge);
  },
  // The exporter re-opens its file with the new rotation, filters and format in place. A new
  // path changes the directory the exporter may write to (its permissions): that rebuilds it.
  reload: {
    live: ["maxSize", "maxBackups", "maxAge", "compress", "recordFormat", "filters", "prettyPrint"],
  },
};
