/**
 * The contract between the config layer and a component that owns a configuration section
 * (an exporter: `flowCollector`, `clickHouse`, `s3Uploader`, `flowLogger`). The component
 * declares the section's decode schema, how defaults are applied, its validation (in two
 * phases, so the upstream order of first failures is kept across sections) and its reload
 * rule; the config layer decodes, validates, diffs and reports reload actions from those
 * declarations alone.
 *
 * @module
 */

import type { MapSchema, Raw } from "./schema.ts";

/** What the config layer gives a section when applying defaults. */
export interface BuildContext {
  /** Directory of default file paths (the flow log); `$TMPDIR` or `/tmp`. */
  readonly tmpDir: string;
}

/** Every section config has an on/off switch. */
export interface SectionConfig {
  /** Sink enabled. */
  enable: boolean;
}

/**
 * How a changed key takes effect on reload:
 * - `toggle`: the section's `enable`: the component is started or stopped;
 * - `live`: applied to the running component or core in place;
 * - `rebuild`: the component is replaced by a new one (the old one drains first);
 * - `collector`: the collecting process is restarted in-process;
 * - `restart`: needs a process restart (logged as ignored).
 */
export type ReloadRule = "toggle" | "live" | "rebuild" | "collector" | "restart";

/** Reload declaration of a section. */
export interface SectionReload {
  /** Section-relative keys (`filters`, `maxSize`) applied live; every other key rebuilds. */
  readonly live: readonly string[];
  /** Global key paths whose change rebuilds this component (`recordContents.podLabels`). */
  readonly dependsOn?: readonly string[];
}

/** One configuration section owned by a component. */
export interface ConfigSection<K extends string = string, C extends SectionConfig = SectionConfig> {
  /** Top-level key of the section. */
  readonly key: K;
  /** Decode schema: a wrongly typed value is an error, an unknown key a warning (its path). */
  readonly schema: MapSchema;
  /** Applies defaults to the decoded section (absent mapping: `{}`). Must not throw. */
  build(raw: Raw, ctx: BuildContext): C;
  /**
   * Phase-1 checks, run for every section before the global checks (upstream order: "enabled
   * without address/bucket" comes first). Throws a ConfigError.
   */
  required?(config: C): void;
  /** Phase-2 checks and derived values (parsed addresses, intervals). Throws a ConfigError. */
  validate?(config: C): void;
  /** How changes to this section's keys take effect. */
  readonly reload: SectionReload;
}

/** The typed configs of a list of sections, keyed by section key. */
export type SectionConfigs<S extends readonly ConfigSection<string, SectionConfig>[]> = {
  [E in S[number] as E["key"]]: E extends ConfigSection<string, infer C> ? C : never;
};
