/**
 * The UDP benchmark's rate search (scripts/bench/udp.ts) against simulated receivers: finds the
 * capacity, forgives a single lossy trial, flags a sender that cannot keep up, and reports 0
 * when even the lowest rate loses. Pure: no sockets.
 */

import assert from "node:assert/strict";
import { searchLosslessRate, type Trial } from "../../scripts/bench/udp.ts";

const OPTS = { start: 10_000, max: 640_000, min: 2_500, refine: 2 };

/** A receiver that loses 5 % above `capacity`, fed by a sender capped at `senderMax`. */
function simulated(capacity: number, senderMax = Infinity, hiccupAt?: number) {
  const calls: number[] = [];
  let hiccupDone = false;
  const run = (rate: number): Promise<Trial> => {
    calls.push(rate);
    const achieved = Math.min(rate, senderMax);
    let loss = achieved > capacity ? 0.05 : 0;
    if (rate === hiccupAt && !hiccupDone) {
      hiccupDone = true;
      loss = 0.01;
    }
    const sent = Math.round(achieved);
    return Promise.resolve({
      requested: rate,
      achieved,
      sent,
      received: Math.round(sent * (1 - loss)),
      loss,
    });
  };
  return { run, calls };
}

Deno.test("rate search: doubles, then bisects to the receiver's capacity", async () => {
  const s = simulated(100_000);
  const r = await searchLosslessRate(s.run, OPTS);
  assert.equal(r.lossless, 100_000);
  assert.equal(r.senderLimited, false);
  // 10k..80k pass, 160k fails twice, 120k fails twice, 100k passes.
  assert.deepEqual(s.calls, [
    10_000,
    20_000,
    40_000,
    80_000,
    160_000,
    160_000,
    120_000,
    120_000,
    100_000,
  ]);
});

Deno.test("rate search: one lossy trial is retried, not taken as the limit", async () => {
  const s = simulated(100_000, Infinity, 40_000);
  const r = await searchLosslessRate(s.run, OPTS);
  assert.equal(r.lossless, 100_000);
  assert.equal(s.calls.filter((c) => c === 40_000).length, 2);
});

Deno.test("rate search: a sender that falls short ends the search as sender-limited", async () => {
  const s = simulated(1_000_000, 50_000);
  const r = await searchLosslessRate(s.run, OPTS);
  assert.equal(r.senderLimited, true);
  assert.equal(r.lossless, 50_000);
  assert.equal(s.calls.at(-1), 80_000);
});

Deno.test("rate search: losing even at the minimum rate reports 0", async () => {
  const s = simulated(1_000);
  const r = await searchLosslessRate(s.run, OPTS);
  assert.equal(r.lossless, 0);
  assert.equal(r.senderLimited, false);
  assert.deepEqual([...new Set(s.calls)], [10_000, 5_000, 2_500]);
});
