/**
 * Decode or aggregation rate of two checkouts measured in **one process**, alternated many times
 * (A B, B A, A B, ...), medians reported: on these shared 2-core machines, separate processes
 * differ by ±30 % from one another, alternated in-process runs by about ±10 %. Run it in both
 * orders (import order matters to V8) and compare the geometric mean.
 *
 *   deno run -A scripts/bench/ab_core.ts A_ROOT B_ROOT PART [--records=ROOT]
 *
 * PART is decode, realistic, pipeline or aggregate:
 * `decode` is the golden 50-record message (decode_batch_records_per_s), `realistic` the replay
 * stream (decode_realistic_records_per_s, 20,000 flows), `wire` the same in wire-number mode
 * (decode_realistic_wire_records_per_s), `pipeline` its decode in wire-number
 * mode and aggregation (pipeline_realistic_records_per_s, one run per measurement), `route`
 * the main thread's share with 2 shards on that stream (route_realistic_records_per_s), `shard`
 * one shard's share (10,000 flows, 4 rounds: shard_realistic_records_per_s), `steady` the same
 * over 9 rounds with only the 8 rounds of updates timed, `steady-big` that with 50,000 flows (a
 * shard's share at the e2e part's 100,000: a flow table far beyond the caches), 5 rounds.
 * `aggregate` feeds each checkout's own `flowRecords()` input by default; `--records=ROOT` feeds
 * both cores the records built by ROOT's `scripts/bench/core.ts`, so a difference in the input
 * objects (their V8 maps) is told apart from one in the core. A root is a checkout, e.g. a
 * `git worktree add --detach /tmp/base REV` (its node_modules linked to this one's).
 *
 * @module
 */

import { alternate, median } from "./baseline.ts";

type CoreModule = typeof import("./core.ts");

const [aRoot, bRoot, part] = Deno.args;
const recordsRoot = Deno.args.find((a) => a.startsWith("--records="))?.slice(10);
const PARTS = [
  "decode",
  "realistic",
  "wire",
  "pipeline",
  "route",
  "shard",
  "steady",
  "steady-big",
  "aggregate",
];
if (aRoot === undefined || bRoot === undefined || !PARTS.includes(part)) {
  console.error(`usage: ab_core.ts A_ROOT B_ROOT ${PARTS.join("|")} [--records=ROOT]`);
  Deno.exit(2);
}

/** Records/s of one checkout for one ~0.5 s measurement. */
async function runner(rootArg: string): Promise<() => number> {
  // Absolute: a relative root would resolve against this module, not the working directory.
  const root = await Deno.realPath(rootArg);
  const m = await import(`${root}/scripts/bench/core.ts`) as CoreModule;
  if (part === "decode") return () => m.benchDecodeRates(0.4).batch;
  if (part === "realistic") {
    return () => m.benchDecodeRealistic(0.5, { flows: 20_000 }).recordsPerSec;
  }
  if (part === "wire") {
    return () => m.benchDecodeRealistic(0.5, { flows: 20_000, wireNumbers: true }).recordsPerSec;
  }
  if (part === "route") return () => m.benchRouteRealistic(0.5, { flows: 20_000, shards: 2 });
  if (part === "shard") return () => m.benchShardRealistic({ flows: 10_000, runs: 1 });
  if (part === "steady") {
    return () => m.benchShardRealistic({ flows: 10_000, rounds: 9, runs: 1, steady: true });
  }
  if (part === "steady-big") {
    return () => m.benchShardRealistic({ flows: 50_000, rounds: 5, runs: 1, steady: true });
  }
  if (part === "pipeline") return () => m.benchPipelineRealistic({ flows: 20_000, pairs: 1 }).wire;
  if (recordsRoot === undefined) return () => m.benchAggregateRate(10_000, 5, 0.5);
  const recs = (await import(`${recordsRoot}/scripts/bench/core.ts`) as CoreModule)
    .flowRecords(10_000, 5);
  const { AggregationCore } = await import(`${root}/src/aggregation/core.ts`);
  const { ManualClock } = await import(`${root}/src/clock.ts`);
  const clock = new ManualClock();
  return () => {
    const t0 = performance.now();
    let n = 0;
    while (performance.now() - t0 < 500) {
      const core = new AggregationCore({
        activeTimeoutMs: 3_600_000,
        inactiveTimeoutMs: 3_600_000,
        clock,
      });
      for (let i = 0; i < recs.length; i++) core.addRecord(recs[i]);
      n += recs.length;
    }
    return n / (performance.now() - t0) * 1000;
  };
}

const a = await runner(aRoot);
const b = await runner(bRoot);
const runs = alternate(20, a, b);
const ma = median(runs.a)!;
const mb = median(runs.b)!;
console.log(JSON.stringify({
  part,
  records: recordsRoot ?? "own",
  a: Math.round(ma),
  b: Math.round(mb),
  bOverA: Number((mb / ma).toFixed(3)),
}));
