/**
 * The `flowLogger` section with the defaults of exporters.md §5.1, copied from the spec (not
 * from the section's own defaults, which the config tests check against it): what the config
 * parser must produce for an enabled logger, and the base the flow log exporter tests override.
 */

import type { FlowLoggerConfig } from "../../src/exporters/flow_log/config.ts";

/** An enabled flow logger writing to `path`, every other key at its §5.1 default unless in `extra`. */
export function enabledFlowLogger(
  path: string,
  extra: Partial<FlowLoggerConfig> = {},
): FlowLoggerConfig {
  return {
    enable: true,
    path,
    maxSize: 100,
    maxBackups: 3,
    maxAge: 0,
    compress: true,
    recordFormat: "CSV",
    filters: [],
    prettyPrint: true,
    ...extra,
  };
}
