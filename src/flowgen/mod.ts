/**
 * Antrea-Agent traffic generator: a seeded flow model (scenario mix of ipfix.md §6.4), a paced
 * sender that speaks IPFIX like v1.13 Agents over UDP, TCP or mutual TLS, a replay sender that
 * resends one pre-encoded round of that traffic with only headers, flow end and totals patched
 * (benchmarks), and a capture server used as a test collector. `scripts/flowgen.ts` and
 * `scripts/replay.ts` are the command lines around them.
 *
 * @module
 */

// Every export of these modules is public: re-exporting them whole keeps one list of names (the
// modules' own declarations) instead of a second one here to keep in step.
export * from "./model.ts";
export * from "./sender.ts";
export * from "./replay.ts";
export * from "./capture.ts";
export * from "./aggregate.ts";
