import assert from "node:assert/strict";
import { ManualClock, TaskCachedClock } from "../src/clock.ts";

Deno.test("TaskCachedClock: one reading per synchronous run", () => {
  const source = new ManualClock();
  const clock = new TaskCachedClock(source);
  const mono = clock.nowMs();
  const wall = clock.wallMs();
  source.advance(1000);
  assert.equal(clock.nowMs(), mono);
  assert.equal(clock.wallMs(), wall);
});

Deno.test("TaskCachedClock: reads the source again once the task's microtasks ran", async () => {
  const source = new ManualClock();
  const clock = new TaskCachedClock(source);
  const mono = clock.nowMs();
  const wall = clock.wallMs();
  source.advance(1000);
  await Promise.resolve();
  assert.equal(clock.nowMs(), mono + 1000);
  assert.equal(clock.wallMs(), wall + 1000);
  source.advance(5);
  await Promise.resolve();
  // wall read first this time: it must also arm the reset for the monotonic reading.
  assert.equal(clock.wallMs(), wall + 1005);
  assert.equal(clock.nowMs(), mono + 1005);
  source.advance(5);
  await Promise.resolve();
  assert.equal(clock.nowMs(), mono + 1010);
});

Deno.test("TaskCachedClock: defaults to the system clock", () => {
  const clock = new TaskCachedClock();
  const before = Date.now();
  const wall = clock.wallMs();
  assert.ok(wall >= before && wall <= Date.now());
  assert.ok(clock.nowMs() > 0);
});
