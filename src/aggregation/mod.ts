/**
 * Aggregation core: flow keys, correlation of InterNode halves, per-side statistics and
 * throughput, and the expiry queue (spec aggregation.md §1-4). Pure: no I/O, no timers.
 * @module
 */

export * from "./record.ts";
export * from "./core.ts";
export * from "./flow_key.ts";
export * from "./correlation.ts";
export * from "./sharded.ts";
