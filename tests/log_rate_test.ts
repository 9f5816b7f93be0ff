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

Deno.test("rate-limited log: the limit is per kind: a flood of one kind holds back no other", () => {
  let now = 0;
  const rl = new RateLimitedLog(10_000, () => now);
  assert.equal(feed(rl, peers(5_000)).length, RATE_LOG_LINES_PER_INTERVAL);
  // Another kind of event, from a peer of the flood too, is written, and reports only its own.
  assert.equal(rl.allow("tls|10.0.0.1"), 0);
  assert.equal(rl.allow("refused|maxConnections"), 0);
  now = 10_000;
  // The flood's held-back count comes with the flood's kind's next line.
  assert.equal(rl.allow("miss|192.0.2.1"), 5_000 - RATE_LOG_LINES_PER_INTERVAL);
});

Deno.test("rate-limited log: what forgotten keys suppressed is still reported", () => {
  let now = 0;
  const rl = new RateLimitedLog(10_000, () => now, 1_000_000);
  const lines = feed(rl, peers(10_000));
  assert.equal(lines.length, 10_000);
  feed(rl, peers(10_000)); // each suppressed once
  // A new key past 10,000 remembered ones starts the table over.
  assert.equal(rl.allow("miss|new"), 0);
  now = 1;
  // The 10,000 suppressed events of the forgotten keys come with their kind's next line.
  assert.equal(rl.allow("other"), 0);
  assert.equal(rl.allow("miss|newer"), 10_000);
});

Deno.test("rate-limited log: time gone back (a wall clock stepped) never mutes past the interval", () => {
  let now = 1_700_000_000_000;
  const rl = new RateLimitedLog(10_000, () => now, 2);
  assert.equal(rl.allow("queue full"), 0);
  assert.deepEqual(feed(rl, ["miss|a", "miss|b", "miss|c"]), [0, 0], "the kind's limit is reached");
  now -= 3_600_000; // an NTP step back of an hour: before, muted until the hour was over
  assert.equal(rl.allow("queue full"), 0, "the key logs again at once");
  assert.deepEqual(feed(rl, ["miss|c"]), [1], "the kind's window starts over");
  // From the new time on, the interval applies as usual.
  now += 9_999;
  assert.equal(rl.allow("queue full"), -1);
  now += 1;
  assert.equal(rl.allow("queue full"), 1, "the line reports the one held back");
});

Deno.test("rate-limited log: by default on monotonic time, whatever Date.now says", () => {
  // The limiter read Date.now by default; stubbing it shows it no longer does.
  const realNow = Date.now;
  let wall = realNow();
  Date.now = () => wall;
  try {
    const rl = new RateLimitedLog(10_000);
    assert.equal(rl.allow("queue full"), 0);
    wall -= 3_600_000;
    assert.equal(rl.allow("queue full"), -1);
    wall += 7_200_000; // an hour ahead of the start, on the wall clock only
    assert.equal(rl.allow("queue full"), -1, "no interval has passed on the monotonic clock");
  } finally {
    Date.now = realNow;
  }
});
