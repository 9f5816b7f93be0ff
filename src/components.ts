/**
 * The one place sinks are registered. The order of {@linkcode COMPONENTS} is the order records
 * are handed to the sinks (IPFIX first, as upstream) and the order of validation; the product's
 * configuration type, parser, diff and reload table are derived from it. Adding a sink: one
 * folder `src/exporters/<sink>/` with its section, permissions, factory and worker entry, and
 * one line here.
 *
 * @module
 */

import {
  type ConfigDiff,
  type ConfigSection,
  diffConfigWith,
  type GlobalConfig,
  type ParseConfigOptions,
  parseConfigWith,
  type ReloadEntry,
  reloadTable,
  type SectionConfig,
} from "./config/mod.ts";
import type { ExporterComponent } from "./exporters/component.ts";
import { clickHouseComponent } from "./exporters/clickhouse/component.ts";
import { flowLogComponent } from "./exporters/flow_log/component.ts";
import { ipfixComponent } from "./exporters/ipfix/component.ts";
import { s3Component } from "./exporters/s3/component.ts";

/** Every sink, in export order. */
export const COMPONENTS = [
  ipfixComponent,
  clickHouseComponent,
  s3Component,
  flowLogComponent,
] as const;

type Component = typeof COMPONENTS[number];

/** The configuration sections of {@linkcode COMPONENTS}, in the same order. */
export const SECTIONS: readonly ConfigSection<string, SectionConfig>[] = COMPONENTS.map((c) =>
  c.section
);

/** The whole configuration file, defaults applied: global keys plus every sink's section. */
export type FlowAggregatorConfig =
  & GlobalConfig
  & {
    [E in Component as E["section"]["key"]]: E extends ExporterComponent<string, infer C> ? C
      : never;
  };

/** A configuration section key of a sink (`flowCollector`, …, `flowLogger`). */
export type ExporterSection = typeof COMPONENTS[number]["section"]["key"];

/** The section keys in export order. */
export const EXPORTER_SECTIONS: readonly ExporterSection[] = COMPONENTS.map((c) => c.section.key);

/**
 * Parses and validates a configuration file's text (Antrea v1.13 format). Throws a
 * `ConfigError` whose message names the key path.
 */
export function parseConfig(text: string, options: ParseConfigOptions = {}): FlowAggregatorConfig {
  return parseConfigWith(text, SECTIONS, options) as unknown as FlowAggregatorConfig;
}

/** What changed between two configurations and how each change takes effect. */
export function diffConfig(
  oldConfig: FlowAggregatorConfig,
  newConfig: FlowAggregatorConfig,
): ConfigDiff {
  return diffConfigWith(oldConfig, newConfig, SECTIONS);
}

/** The reload rule of every configuration key. */
export function configReloadTable(): Record<string, ReloadEntry> {
  return reloadTable(SECTIONS);
}
