/**
 * What a configuration reload changes (control-plane.md §2.3, exporters.md §6), from one table:
 * every key's reload rule is declared once, the global keys here and each section's keys by the
 * component that owns the section, and both the diff and the apply path read it. Unlike
 * upstream, which silently ignored some keys until restart, the timeouts, the Pod labels switch
 * and the transport take effect live; only `apiServer.*` needs a restart, and that is reported.
 */

import { LIMITS_RELOAD } from "./limits.ts";
import { fullSchema, GLOBAL_SCHEMA } from "./parse.ts";
import type { MapSchema } from "./schema.ts";
import type { ConfigSection, ReloadRule, SectionConfig } from "./section.ts";
import type { GlobalConfig } from "./types.ts";

/** Effect of a reload on one exporter. */
export type ExporterChange = "unchanged" | "enabled" | "disabled" | "live" | "rebuild";

/** Reload rules of the global keys (leaf paths of {@linkcode GLOBAL_SCHEMA}). */
export const GLOBAL_RELOAD: Readonly<Record<string, ReloadRule>> = {
  activeFlowRecordTimeout: "live",
  inactiveFlowRecordTimeout: "live",
  aggregatorTransportProtocol: "collector",
  flowAggregatorAddress: "collector",
  clusterID: "live",
  "recordContents.podLabels": "live",
  "apiServer.apiPort": "restart",
  "apiServer.tlsCipherSuites": "restart",
  "apiServer.tlsMinVersion": "restart",
  ...LIMITS_RELOAD,
};

/** One row of the reload table. */
export interface ReloadEntry {
  /** How a change of the key takes effect. */
  rule: ReloadRule;
  /** Sections whose component is rebuilt as well (a global key a component depends on). */
  rebuilds: string[];
}

/** Result of {@linkcode diffConfigWith}. */
export interface ConfigDiff {
  /** True when any key differs. */
  changed: boolean;
  /** Every changed leaf key path (`flowLogger.maxSize`, `flowLogger.filters`), sorted. */
  changedKeys: string[];
  /** Changed keys whose rule is `restart` (they take effect only after a restart). */
  restartRequired: string[];
  /** Changed keys applied live to the aggregation core (timeouts, Pod labels). */
  core: string[];
  /** True when the collecting process must be restarted (transport, server address). */
  collector: boolean;
  /** Per-exporter effect, keyed by config section. */
  exporters: Record<string, ExporterChange>;
}

function leaves(schema: MapSchema, prefix: string, out: string[]): string[] {
  for (const [k, kind] of Object.entries(schema)) {
    const path = prefix === "" ? k : `${prefix}.${k}`;
    // Nested mappings are walked; scalars and lists of mappings (filters) are one key each.
    if (typeof kind === "object" && !("list" in kind)) leaves(kind as MapSchema, path, out);
    else out.push(path);
  }
  return out;
}

/**
 * The reload table: every configuration key (leaf of the decode schema) with its rule. Throws
 * when a global key has no rule or a section declares a rule for a key it does not have, so
 * the table cannot drift from the schema.
 */
export function reloadTable(
  sections: readonly ConfigSection<string, SectionConfig>[],
): Record<string, ReloadEntry> {
  const table: Record<string, ReloadEntry> = {};
  for (const key of leaves(GLOBAL_SCHEMA, "", [])) {
    const rule = GLOBAL_RELOAD[key];
    if (rule === undefined) throw new Error(`config: no reload rule for ${key}`);
    table[key] = { rule, rebuilds: [] };
  }
  for (const s of sections) {
    const keys = leaves(s.schema, "", []);
    for (const k of s.reload.live) {
      if (!keys.includes(k)) {
        throw new Error(`config: ${s.key}: live key ${k} is not in its schema`);
      }
    }
    for (const k of keys) {
      const rule: ReloadRule = k === "enable"
        ? "toggle"
        : s.reload.live.includes(k)
        ? "live"
        : "rebuild";
      table[`${s.key}.${k}`] = { rule, rebuilds: [] };
    }
    for (const dep of s.reload.dependsOn ?? []) {
      const entry = table[dep];
      if (entry === undefined) throw new Error(`config: ${s.key} depends on unknown key ${dep}`);
      entry.rebuilds.push(s.key);
    }
  }
  return table;
}

function valueAt(cfg: unknown, path: string): unknown {
  let v = cfg;
  for (const part of path.split(".")) {
    v = typeof v === "object" && v !== null ? (v as Record<string, unknown>)[part] : undefined;
  }
  return v;
}

/**
 * Compares two validated configurations key by key (the keys of the decode schema: derived
 * values such as parsed durations follow the key they come from) and says what each change
 * does according to {@linkcode reloadTable}.
 */
export function diffConfigWith<C extends GlobalConfig>(
  oldCfg: C,
  newCfg: C,
  sections: readonly ConfigSection<string, SectionConfig>[],
): ConfigDiff {
  const table = reloadTable(sections);
  const changedKeys = leaves(fullSchema(sections), "", []).filter((k) =>
    // Lists (filters) are compared as a whole: their order matters and they are small.
    JSON.stringify(valueAt(oldCfg, k)) !== JSON.stringify(valueAt(newCfg, k))
  ).sort();
  const rebuilt = new Set(changedKeys.flatMap((k) => table[k].rebuilds));
  const exporters: Record<string, ExporterChange> = {};
  for (const s of sections) {
    const was = (valueAt(oldCfg, s.key) as SectionConfig).enable;
    const is = (valueAt(newCfg, s.key) as SectionConfig).enable;
    const own = changedKeys.filter((k) => k.startsWith(`${s.key}.`));
    let change: ExporterChange = "unchanged";
    if (!was && is) change = "enabled";
    else if (was && !is) change = "disabled";
    else if (was && is) {
      if (rebuilt.has(s.key) || own.some((k) => table[k].rule === "rebuild")) change = "rebuild";
      else if (own.length > 0) change = "live";
    }
    exporters[s.key] = change;
  }
  const global = changedKeys.filter((k) => k in GLOBAL_RELOAD);
  return {
    changed: changedKeys.length > 0,
    changedKeys,
    restartRequired: changedKeys.filter((k) => table[k].rule === "restart"),
    core: global.filter((k) => table[k].rule === "live"),
    collector: global.some((k) => table[k].rule === "collector"),
    exporters,
  };
}
