/**
 * Configuration of the Flow Aggregator: typed keys with v1.13 defaults, Go duration parsing,
 * strict parsing and validation, reload diffs, and the directory watcher for live reload.
 *
 * @module
 */

export * from "./types.ts";
export { DEFAULTS, EMBEDDED_DEFAULT_CONFIG } from "./defaults.ts";
export { parseDuration, parseDurationNs } from "./duration.ts";
export { DEFAULT_COLLECTOR_PORT, joinHostPort, parseCollectorAddress } from "./address.ts";
export { ConfigError, DECODE_ERROR_PREFIX, parseConfig, type ParseConfigOptions } from "./parse.ts";
export {
  type ConfigDiff,
  diffConfig,
  EXPORTER_SECTIONS,
  type ExporterChange,
  type ExporterSection,
} from "./diff.ts";
export {
  type CheckResult,
  type ConfigChangeHandler,
  ConfigWatcher,
  type ConfigWatcherOptions,
  loadConfigFile,
} from "./watcher.ts";
