/**
 * What a configuration reload changes (control-plane.md §2.3, exporters.md §6). Unlike
 * upstream, which silently ignored some keys until restart, every exporter whose section
 * changed is reported as `updated` (the export loop replaces or reconfigures it), and changed
 * keys that only take effect at startup are listed so they can be logged (§8 L3).
 */

import type { FlowAggregatorConfig } from "./types.ts";

/** Effect of a reload on one exporter. */
export type ExporterChange = "unchanged" | "enabled" | "disabled" | "updated";

/** Config sections that map to an exporter, in the order reloads are applied. */
export const EXPORTER_SECTIONS = [
  "flowCollector",
  "clickHouse",
  "s3Uploader",
  "flowLogger",
] as const;

/** One of {@linkcode EXPORTER_SECTIONS}. */
export type ExporterSection = typeof EXPORTER_SECTIONS[number];

/** Result of {@linkcode diffConfig}. */
export interface ConfigDiff {
  /** True when any key differs. */
  changed: boolean;
  /** Every changed leaf key path (`flowLogger.maxSize`, `flowLogger.filters`), sorted. */
  changedKeys: string[];
  /** Changed keys that need a restart to take effect (top-level options and `apiServer.*`). */
  restartRequired: string[];
  /** Per-exporter effect, keyed by config section. */
  exporters: Record<ExporterSection, ExporterChange>;
}

/** Keys whose change only takes effect after a restart (prefix match on the path). */
const RESTART_ONLY = [
  "activeFlowRecordTimeout",
  "inactiveFlowRecordTimeout",
  "aggregatorTransportProtocol",
  "flowAggregatorAddress",
  "recordContents.",
  "apiServer.",
];

/** Derived values are compared through the key they come from. */
const DERIVED = new Set([
  "activeFlowRecordTimeoutMs",
  "inactiveFlowRecordTimeoutMs",
  "flowCollector.collector",
  "clickHouse.commitIntervalMs",
  "s3Uploader.uploadIntervalMs",
]);

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function collect(a: unknown, b: unknown, path: string, out: string[]): void {
  if (DERIVED.has(path)) return;
  if (isPlainObject(a) || isPlainObject(b)) {
    const ao = isPlainObject(a) ? a : {};
    const bo = isPlainObject(b) ? b : {};
    const keys = new Set([...Object.keys(ao), ...Object.keys(bo)]);
    for (const k of keys) collect(ao[k], bo[k], path === "" ? k : `${path}.${k}`, out);
    return;
  }
  // Lists (filters) are compared as a whole: their order matters and they are small.
  if (JSON.stringify(a) !== JSON.stringify(b)) out.push(path);
}

/** Compares two validated configurations. */
export function diffConfig(oldCfg: FlowAggregatorConfig, newCfg: FlowAggregatorConfig): ConfigDiff {
  const changedKeys: string[] = [];
  collect(oldCfg, newCfg, "", changedKeys);
  changedKeys.sort();
  const restartRequired = changedKeys.filter((k) =>
    RESTART_ONLY.some((p) => p.endsWith(".") ? k.startsWith(p) : k === p)
  );
  const exporters = {} as Record<ExporterSection, ExporterChange>;
  for (const section of EXPORTER_SECTIONS) {
    const was = oldCfg[section].enable;
    const is = newCfg[section].enable;
    let change: ExporterChange = "unchanged";
    if (!was && is) change = "enabled";
    else if (was && !is) change = "disabled";
    else if (was && is && changedKeys.some((k) => k.startsWith(`${section}.`))) change = "updated";
    exporters[section] = change;
  }
  return { changed: changedKeys.length > 0, changedKeys, restartRequired, exporters };
}
