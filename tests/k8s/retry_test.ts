import assert from "node:assert/strict";
import { ManualClock } from "../../src/clock.ts";
import { logger } from "../../src/log.ts";
import { describe, RetryAborted, retrying, sleep, statusOf } from "../../src/k8s/retry.ts";
import { pollUntil, waitFor } from "../_helpers/wait.ts";

const log = logger("retry-test");

Deno.test("retrying: backoff doubles up to the cap, failures counted, then the result", async () => {
  const clock = new ManualClock();
  let calls = 0;
  const failures: unknown[] = [];
  const work = retrying("step", () => {
    calls++;
    return calls < 5 ? Promise.reject(new Error(`fail ${calls}`)) : Promise.resolve("done");
  }, {
    clock,
    log,
    initialMs: 100,
    maxMs: 300,
    attemptTimeoutMs: 1e9,
    onFailure: (e) => failures.push(e),
  });
  const pauses: number[] = [];
  while (pauses.length < 4) {
    // The pause after a failure (the attempt timeouts are far longer).
    const pause = await pollUntil(() => clock.pendingTimers().find((ms) => ms < 1e6));
    pauses.push(pause);
    clock.advance(pause);
  }
  assert.equal(await work, "done");
  assert.deepEqual(pauses, [100, 200, 300, 300]);
  assert.equal(failures.length, 4);
});

Deno.test("retrying: a hung attempt times out and is retried; an abort stops it", async () => {
  const clock = new ManualClock();
  const abort = new AbortController();
  let calls = 0;
  const work = retrying("hung", () => {
    calls++;
    return new Promise<never>(() => {});
  }, { clock, log, attemptTimeoutMs: 1000, initialMs: 50, signal: abort.signal });
  await clock.whenTimersPending(1);
  clock.advance(1000); // attempt 1 times out
  await pollUntil(() => clock.pendingTimers().find((ms) => ms === 50), { what: "the pause" });
  clock.advance(50); // then attempt 2
  await waitFor(() => calls === 2, { what: "attempt 2" });
  abort.abort();
  await assert.rejects(work, RetryAborted);
  await assert.rejects(sleep(clock, 10, abort.signal), RetryAborted);
});

Deno.test("describe: status and message of an API error, never the whole response", () => {
  const err = Object.assign(new Error("HTTP-Code: 409\nMessage: ...\nBody: ...\nHeaders: ..."), {
    code: 409,
    body: JSON.stringify({ kind: "Status", message: "the object has been modified", code: 409 }),
  });
  assert.equal(describe(err), "409: the object has been modified");
  assert.equal(describe(new Error("connect refused\nstack")), "connect refused");
});

Deno.test("statusOf: only HTTP statuses count, not a DOMException's code (23 for a timeout)", () => {
  const timeout = new DOMException("no byte for 10000 ms", "TimeoutError");
  assert.equal(timeout.code, 23);
  assert.equal(statusOf(timeout), undefined);
  assert.equal(describe(timeout), "no byte for 10000 ms");
  assert.equal(statusOf(Object.assign(new Error("x"), { code: 7 })), undefined);
  assert.equal(statusOf(Object.assign(new Error("Gone"), { statusCode: 410 })), 410);
  assert.equal(statusOf({ code: 503 }), 503);
});
