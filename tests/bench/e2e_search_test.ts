/**
 * The e2e benchmark's rate search and the interleaving of its two modes (scripts/bench/e2e.ts)
 * against simulated trials, plus how a mode's trials are summed up. Pure: no process started.
 */

import assert from "node:assert/strict";
import {
  type E2eMode,
  type E2eTrial,
  interleaveSearches,
  pairedCpu,
  rateSearch,
  type SearchOutcome,
  summarizeMode,
  workerVsInprocessRatio,
} from "../../scripts/bench/e2e.ts";

/** Drives one search against a process that passes up to `capacity`; returns the rates tried. */
function drive(
  capacity: number,
  opts: { single?: boolean; shortfallOnceAt?: number; lossAt?: number } = {},
): number[] {
  const gen = rateSearch({ startRate: 40_000, single: opts.single });
  const tried: number[] = [];
  let hiccup = opts.shortfallOnceAt;
  let step = gen.next();
  while (!step.done && tried.length < 50) {
    const rate = step.value;
    tried.push(rate);
    let o: SearchOutcome = { pass: rate <= capacity, shortfallOnly: rate > capacity };
    if (rate === hiccup) {
      hiccup = undefined;
      o = { pass: false, shortfallOnly: true };
    }
    if (rate === opts.lossAt) o = { pass: false, shortfallOnly: false };
    step = gen.next(o);
  }
  return tried;
}

Deno.test("rate search: doubles while passing, retries a shortfall once, bisects twice", () => {
  assert.deepEqual(drive(170_000), [
    40_000,
    80_000,
    160_000,
    320_000,
    320_000,
    240_000,
    240_000,
    200_000,
    200_000,
  ]);
});

Deno.test("rate search: a lost record is not retried", () => {
  const tried = drive(1_000_000, { lossAt: 80_000 });
  assert.deepEqual(tried.slice(0, 3), [40_000, 80_000, 60_000]);
  assert.equal(tried.filter((r) => r === 80_000).length, 1);
});

Deno.test("rate search: a passing retry after a shortfall keeps doubling", () => {
  const tried = drive(170_000, { shortfallOnceAt: 80_000 });
  assert.deepEqual(tried.slice(0, 4), [40_000, 80_000, 80_000, 160_000]);
});

Deno.test("rate search: halves when the first rate fails", () => {
  assert.deepEqual(drive(12_000).filter((r, i, a) => a.indexOf(r) === i).slice(0, 3), [
    40_000,
    20_000,
    10_000,
  ]);
});

Deno.test("rate search: quick mode is one trial, never retried", () => {
  assert.deepEqual(drive(1_000, { single: true }), [40_000]);
});

Deno.test("interleave: trials alternate between the modes; an ended search drops out", async () => {
  const order: string[] = [];
  const short = function* (): Generator<number, void, SearchOutcome> {
    yield 1;
  };
  const long = function* (): Generator<number, void, SearchOutcome> {
    for (let r = 1; r <= 3; r++) yield r;
  };
  await interleaveSearches(
    [["worker", long()], ["inprocess", short()], ["third", long()]],
    (key, rate) => {
      order.push(`${key}@${rate}`);
      return Promise.resolve({ pass: true, shortfallOnly: false });
    },
    { fits: () => true },
  );
  assert.deepEqual(order, [
    "worker@1",
    "inprocess@1",
    "third@1",
    "worker@2",
    "third@2",
    "worker@3",
    "third@3",
  ]);
});

Deno.test("interleave: out of budget, every search still gets its first trial", async () => {
  const order: string[] = [];
  await interleaveSearches(
    [["worker", rateSearch({ startRate: 10 })], ["inprocess", rateSearch({ startRate: 10 })]],
    (key, rate) => {
      order.push(`${key}@${rate}`);
      return Promise.resolve({ pass: true, shortfallOnly: false });
    },
    { fits: () => false },
  );
  assert.deepEqual(order, ["worker@10", "inprocess@10"]);
});

Deno.test("interleave: outcomes go back to the search that asked", async () => {
  // worker passes everything up to 40, in-process up to 20: their next rates must differ.
  const cap: Record<string, number> = { worker: 40, inprocess: 20 };
  const order: string[] = [];
  let budget = 8;
  await interleaveSearches(
    [["worker", rateSearch({ startRate: 10 })], ["inprocess", rateSearch({ startRate: 10 })]],
    (key, rate) => {
      order.push(`${key}@${rate}`);
      return Promise.resolve({ pass: rate <= cap[key], shortfallOnly: false });
    },
    { fits: () => --budget >= 0 },
  );
  assert.deepEqual(order.slice(0, 8), [
    "worker@10",
    "inprocess@10",
    "worker@20",
    "inprocess@20",
    "worker@40",
    "inprocess@40",
    "worker@80",
    "inprocess@30",
  ]);
});

function trial(
  mode: E2eMode,
  targetRate: number,
  pass: boolean,
  cpuUs = 5,
): E2eTrial {
  return {
    mode,
    targetRate,
    pass,
    failures: pass ? [] : ["x"],
    achievedRatio: 1,
    aggregatorCpuSec: 1,
    aggregatorCpuUsPerRecord: cpuUs,
    flowgenCpuUsPerRecord: 5,
    aggregatorPeakRssBytes: 1,
    drainMs: 1,
    errorLines: [],
    flowgen: { records: 1, rate: targetRate * 0.99, elapsedSec: 1, errors: 0, bytes: 1 },
  };
}

Deno.test("summarizeMode: best pass, lowest fail that never passed on a retry", () => {
  const s = summarizeMode([
    trial("worker", 40_000, true),
    trial("worker", 80_000, false),
    trial("worker", 80_000, true),
    trial("worker", 160_000, false),
    trial("worker", 120_000, false),
  ]);
  assert.equal(s.bestTargetRate, 80_000);
  assert.equal(s.recordsPerSec, 79_200);
  assert.equal(s.firstFailRate, 120_000);
  assert.equal(s.trials, 5);
  const none = summarizeMode([trial("worker", 40_000, false)]);
  assert.equal(none.recordsPerSec, 0);
  assert.equal(none.firstFailRate, 40_000);
});

Deno.test("pairedCpu: only rates both modes passed, mean of each mode's trials", () => {
  const p = pairedCpu([
    trial("worker", 40_000, true, 6),
    trial("inprocess", 40_000, true, 4),
    trial("inprocess", 40_000, true, 6),
    trial("worker", 80_000, true, 6),
    trial("inprocess", 80_000, false, 6),
  ]);
  assert.deepEqual(p, [{ targetRate: 40_000, workerUsPerRecord: 6, inprocessUsPerRecord: 5 }]);
});

Deno.test("workerVsInprocessRatio: null unless both are measured and in-process > 0", () => {
  assert.equal(workerVsInprocessRatio(90, 100), 0.9);
  assert.equal(workerVsInprocessRatio(0, 100), 0);
  assert.equal(workerVsInprocessRatio(90, 0), null);
  assert.equal(workerVsInprocessRatio(null, 100), null);
  assert.equal(workerVsInprocessRatio(90, undefined), null);
});
