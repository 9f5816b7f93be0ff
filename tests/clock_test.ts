import assert from "node:assert/strict";
import { ManualClock, systemClock, TaskCachedClock } from "../src/clock.ts";

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

Deno.test("ManualClock: a timer fires when advance reaches its due time, not before", () => {
  const clock = new ManualClock();
  const fired: number[] = [];
  clock.setTimer(1000, () => fired.push(clock.nowMs()));
  clock.advance(999);
  assert.deepEqual(fired, []);
  assert.deepEqual(clock.pendingTimers(), [1]);
  clock.advance(1);
  assert.deepEqual(fired, [1000]);
  assert.deepEqual(clock.pendingTimers(), []);
  clock.advance(5000);
  assert.deepEqual(fired, [1000], "fires once");
});

Deno.test("ManualClock: one advance fires due timers in due order, each at its own time", () => {
  const clock = new ManualClock(0);
  const fired: string[] = [];
  const at = (name: string) => () => fired.push(`${name}@${clock.nowMs()}/${clock.wallMs()}`);
  clock.setTimer(300, at("c"));
  clock.setTimer(100, () => {
    at("a")();
    // Armed from a callback: due at 100 + 150 = 250, still inside this advance.
    clock.setTimer(150, at("b"));
  });
  clock.setTimer(300, at("d")); // same due time as c: arming order
  clock.setTimer(900, at("late"));
  clock.advance(500);
  assert.deepEqual(fired, ["a@100/100", "b@250/250", "c@300/300", "d@300/300"]);
  assert.equal(clock.nowMs(), 500);
  assert.deepEqual(clock.pendingTimers(), [400]);
});

Deno.test("ManualClock: a cancelled timer never fires; zero delay fires on advance(0)", () => {
  const clock = new ManualClock();
  let fired = 0;
  const t = clock.setTimer(10, () => fired++);
  t.cancel();
  t.cancel();
  clock.advance(20);
  assert.equal(fired, 0);
  clock.setTimer(0, () => fired++);
  clock.setTimer(-5, () => fired++);
  assert.equal(fired, 0, "never synchronously");
  clock.advance(0);
  assert.equal(fired, 2);
});

Deno.test("ManualClock: whenTimersPending resolves once enough timers are armed", async () => {
  const clock = new ManualClock();
  let resolved = false;
  const p = clock.whenTimersPending(2).then(() => (resolved = true));
  clock.setTimer(5, () => {});
  await Promise.resolve();
  assert.equal(resolved, false);
  clock.setTimer(7, () => {});
  await p;
  assert.equal(resolved, true);
  await clock.whenTimersPending(2); // already true: resolves at once
});

Deno.test("systemClock and TaskCachedClock: timers fire on real time and can be cancelled", async () => {
  for (const clock of [systemClock, new TaskCachedClock()]) {
    let cancelled = false;
    clock.setTimer(1, () => (cancelled = true)).cancel();
    await new Promise<void>((resolve) => clock.setTimer(1, resolve, { unref: false }));
    assert.equal(cancelled, false);
  }
});

Deno.test("TaskCachedClock: timers are its source's", () => {
  const source = new ManualClock();
  const clock = new TaskCachedClock(source);
  let fired = 0;
  clock.setTimer(50, () => fired++);
  assert.deepEqual(source.pendingTimers(), [50]);
  source.advance(50);
  assert.equal(fired, 1);
});

Deno.test("systemClock: a delay past a timer's longest waits, it does not fire at once", async () => {
  let fired = 0;
  const t = systemClock.setTimer(2 ** 31, () => fired++, { unref: true });
  const u = systemClock.setTimer(Number.MAX_SAFE_INTEGER, () => fired++, { unref: true });
  await new Promise((r) => setTimeout(r, 100));
  t.cancel();
  u.cancel();
  assert.equal(fired, 0);
});
