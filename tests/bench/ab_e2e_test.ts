/**
 * The summary of the end-to-end A/B (scripts/bench/ab_e2e.ts): medians of the passing trials
 * per side, failed trials left out, B/A ratios of the medians and paired by round, and the
 * wording of a ratio. No process is started.
 */

import assert from "node:assert/strict";
import { type AbSide, describeRatio, ratio, summarizeAb } from "../../scripts/bench/ab_e2e.ts";
import type { E2eTrial } from "../../scripts/bench/e2e.ts";

const t = (side: AbSide, round: number, cpu: number, rate: number, pass = true) => ({
  side,
  round,
  trial: {
    pass,
    aggregatorCpuUsPerRecord: cpu,
    recordsPerSec: rate,
    coresUsed: 0.5,
    // Slowest / fastest Agent: rate / 100.
    flowgen: { perAgent: [rate, 100, 100, 100] },
  } as E2eTrial,
});

Deno.test("ab_e2e: medians of the passing trials, B/A plain and paired by round", () => {
  const s = summarizeAb([
    t("A", 0, 4, 100),
    t("B", 0, 5, 80),
    t("B", 1, 4.4, 90),
    t("A", 1, 4, 100),
    t("A", 2, 99, 1, false), // failed: out of A's median and of round 2's pair
    t("B", 2, 4.2, 95),
  ]);
  assert.deepEqual(s.a, {
    trials: 3,
    passed: 2,
    cpuUsPerRecord: 4,
    recordsPerSec: 100,
    cores: 0.5,
    agentSpread: 1,
  });
  assert.equal(s.b.agentSpread, 0.9, "the median of the B trials' spreads");
  assert.equal(s.b.passed, 3);
  assert.equal(s.b.cpuUsPerRecord, 4.4);
  assert.equal(s.b.recordsPerSec, 90);
  assert.equal(s.pairedRounds, 2);
  const near = (x: number | null, want: number) =>
    assert.ok(x !== null && Math.abs(x - want) < 1e-9, `${x} != ${want}`);
  near(s.cpuBOverA, 1.1);
  near(s.cpuBOverAPaired, (5 / 4 + 4.4 / 4) / 2);
  near(s.rateBOverA, 0.9);
  near(s.rateBOverAPaired, 0.85);
});

Deno.test("ab_e2e: no passing trial on a side gives null medians and ratios", () => {
  const s = summarizeAb([t("A", 0, 4, 100, false), t("B", 0, 5, 80)]);
  assert.equal(s.a.cpuUsPerRecord, null);
  assert.equal(s.cpuBOverA, null);
  assert.equal(s.cpuBOverAPaired, null);
  assert.equal(s.pairedRounds, 0);
  assert.equal(ratio(1, 0), null);
});

Deno.test("ab_e2e: a ratio in words, lower or higher is better", () => {
  assert.equal(describeRatio(1.031, true), "B is 3.1 % higher than A (A better)");
  assert.equal(describeRatio(0.9, false), "B is 10.0 % lower than A (A better)");
  assert.equal(describeRatio(0.9, true), "B is 10.0 % lower than A (B better)");
  assert.equal(describeRatio(1, true), "B equals A");
  assert.equal(describeRatio(null, true), "no ratio (a side has no passing trial)");
});
