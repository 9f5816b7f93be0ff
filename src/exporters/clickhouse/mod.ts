/**
 * The ClickHouse exporter: its configuration section, the sink and its component (see
 * `component.ts`, which the registry imports without the sink).
 *
 * @module
 */

export * from "./config.ts";
export * from "./exporter.ts";
export * from "./table.ts";
export * from "./url.ts";
export * from "./component.ts";
