/**
 * The senders' pacing (src/flowgen/pace.ts) on an injected clock: the rate asked is the rate
 * sent, never ahead of schedule, a stall is caught up at most CATCH_UP_MS worth at a time.
 */

import assert from "node:assert/strict";
import { CATCH_UP_MS, Pacer } from "../../src/flowgen/pace.ts";
import { ManualPaceClock } from "../_helpers/pace_clock.ts";

/**
 * Sends `records` as a sender does, each batch costing `costMs` (plus `stallMs` once, at
 * `stallAt` records); returns the batches sent and the elapsed milliseconds.
 */
async function run(
  rate: number,
  records: number,
  opts: { costMs?: number; stallAt?: number; stallMs?: number } = {},
): Promise<{ batches: number[]; elapsedMs: number; aheadMax: number; clock: ManualPaceClock }> {
  const clock = new ManualPaceClock();
  const pacer = new Pacer(rate, { unpacedBatch: 512, clock });
  const batches: number[] = [];
  let sent = 0;
  let aheadMax = -Infinity;
  let stalled = false;
  while (sent < records) {
    const due = Math.min(pacer.due(sent), records - sent);
    if (due <= 0) {
      await pacer.wait(sent);
      continue;
    }
    sent += due;
    batches.push(due);
    // Records sent beyond what the schedule allows by now (the next one is due at its time).
    aheadMax = Math.max(aheadMax, sent - (Math.floor((rate * pacer.elapsedMs()) / 1000) + 1));
    clock.t += opts.costMs ?? 0.05;
    if (!stalled && opts.stallAt !== undefined && sent >= opts.stallAt) {
      stalled = true;
      clock.t += opts.stallMs ?? 0;
    }
  }
  return { batches, elapsedMs: pacer.elapsedMs(), aheadMax, clock };
}

Deno.test("pace: 20,000 records/s for 100,000 records takes 5 s of its clock, never ahead", async () => {
  const r = await run(20_000, 100_000, { costMs: 0.01 });
  const rate = 100_000 / (r.elapsedMs / 1000);
  assert.ok(Math.abs(rate / 20_000 - 1) < 0.001, `paced at ${rate.toFixed(1)}/s`);
  assert.ok(r.aheadMax <= 0, `at most on schedule (${r.aheadMax} ahead)`);
  assert.ok(r.clock.slept > 1000, "it waited between batches");
  assert.ok(Math.max(...r.batches) <= 20_000 * CATCH_UP_MS / 1000);
});

Deno.test("pace: a stall is caught up at most CATCH_UP_MS worth at a time, the average rate recovers", async () => {
  const r = await run(4_000, 8_000, { stallAt: 2_000, stallMs: 300 });
  const cap = Math.ceil(4_000 * CATCH_UP_MS / 1000);
  assert.equal(Math.max(...r.batches), cap, "the catch-up batches are capped");
  assert.ok(r.batches.filter((b) => b === cap).length >= 5, "300 ms is caught up over batches");
  const rate = 8_000 / (r.elapsedMs / 1000);
  assert.ok(Math.abs(rate / 4_000 - 1) < 0.01, `average ${rate.toFixed(1)}/s after the stall`);
  assert.ok(r.aheadMax <= 0);
});

Deno.test("pace: a sender slower than the rate sends what is due each pass, without waiting", async () => {
  // Each batch costs 10 ms: ~200 records come due per pass at 20,000/s.
  const r = await run(20_000, 10_000, { costMs: 10 });
  assert.equal(r.clock.slept, 0);
  assert.ok(r.batches.slice(1, -1).every((b) => b >= 190 && b <= 210), `${r.batches.slice(0, 5)}`);
});

Deno.test("pace: rate 0 sends unpaced batches and never waits", async () => {
  const r = await run(0, 5_000);
  assert.equal(r.clock.slept, 0);
  assert.deepEqual(r.batches.slice(0, 3), [512, 512, 512]);
});
