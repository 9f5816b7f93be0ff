/**
 * The flow log exporter: its configuration section, the sink and its component (see
 * `component.ts`, which the registry imports without the sink).
 *
 * @module
 */

export * from "./config.ts";
export * from "./exporter.ts";
export * from "./component.ts";
