/**
 * The configuration layer: strict parsing of the global keys and of the sections the
 * components hand it (it imports none of them), Go durations, reload diffs from one table of
 * reload rules, and the directory watcher for live reload. `src/components.ts` assembles the
 * product's configuration from the exporter components.
 *
 * @module
 */

export * from "./types.ts";
export { DEFAULTS, EMBEDDED_DEFAULT_CONFIG } from "./defaults.ts";
export { parseDuration, parseDurationNs } from "./duration.ts";
export { MAX_CONFIG_FILE_BYTES, readConfigFile } from "./file.ts";
export { ConfigError, type MapSchema, type Raw } from "./schema.ts";
export type {
  BuildContext,
  ConfigSection,
  ReloadRule,
  SectionConfig,
  SectionConfigs,
  SectionReload,
} from "./section.ts";
export {
  type ConfigOf,
  type ConfigWarning,
  DECODE_ERROR_PREFIX,
  fullSchema,
  GLOBAL_SCHEMA,
  type ParseConfigOptions,
  parseConfigWith,
} from "./parse.ts";
export {
  type ConfigDiff,
  diffConfigWith,
  type ExporterChange,
  GLOBAL_RELOAD,
  type ReloadEntry,
  reloadTable,
} from "./diff.ts";
export {
  type CheckResult,
  type ConfigChangeHandler,
  ConfigWatcher,
  type ConfigWatcherOptions,
  type ConfigWatcherStats,
} from "./watcher.ts";
