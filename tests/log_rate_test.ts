/** Unit tests of {@linkcode RateLimitedLog} (src/log.ts). */

import assert from "node:assert/strict";
import { RATE_LOG_LINES_PER_INTERVAL, RateLimitedLog } from "../src/log.ts";

/** Feeds `keys` to `rl` once each; returns the numbers of the lines it lets through. */
function feed(rl: RateLimitedLog, keys: Iterable<string>): number[] {
  const written: number[] = [];
  for (const k of keys) {
    const n = rl.allow(k);
    if (n >= 0) written.push(n);
  }
  return written;
}

const peers = (n: number, from = 0) =>
  Array.from({ length: n }, (_, i) => `miss|10.${(from + i) >> 8}.${(from + i) & 255}.1`);

const sum = (a: number[]) => a.reduce((x, y) => x + y, 0);

Deno.test("rate-limited log: one line per key per interval", () => {
  let now = 0;
  const rl = new RateLimitedLog(10_000, () => now);
  assert.deepEqual(feed(rl, ["a", "a", "a", "b"]), [0, 0]);
  now = 9_999;
  assert.deepEqual(feed(rl, ["a"]), []);
  now = 10_000;
  assert.deepEqual(feed(rl, ["a", "b"]), [3, 0]);
});

Deno.test("rate-limited log: thousands of peers (a key each) write at most the limit's lines per interval", () => {
  let now = 0;
  const rl = new RateLimitedLog(10_000, () => now);
  // 5,000 spoofed UDP sources, one bad datagram each: one line each before.
  const first = feed(rl, peers(5_000));
  assert.equal(first.length, RATE_LOG_LINES_PER_INTERVAL);
  assert.equal(sum(first), 0);
  now = 5_000;
  assert.deepEqual(feed(rl, peers(5_000, 5_000)), []);
  // The next interval: the held-back keys are due, the limit applies again, and the first line
  // reports every event suppressed across keys so far.
  now = 10_000;
  const second = feed(rl, peers(100, 20));
  assert.equal(second.length, RATE_LOG_LINES_PER_INTERVAL);
  assert.equal(second[0], 10_000 - RATE_LOG_LINES_PER_INTERVAL);
  // Every event is either written or reported by a written line's number.
  const events = 5_000 + 5_000 + 100;
  assert.equal(first.length + second.length + sum(first) + sum(second) + 80, events);
});

Deno.test("rate-limited log: what forgotten keys suppressed is still reported", () => {
  let now = 0;
  const rl = new RateLimitedLog(10_000, () => now, 1_000_000);
  const lines = feed(rl, peers(10_000));
  assert.equal(lines.length, 10_000);
  feed(rl, peers(10_000)); // each suppressed once
  // A new key past 10,000 remembered ones starts the table over.
  assert.equal(rl.allow("new"), 0);
  now = 1;
  // The 10,000 suppressed events of the forgotten keys come with the next line.
  assert.equal(rl.allow("newer"), 10_000);
});
