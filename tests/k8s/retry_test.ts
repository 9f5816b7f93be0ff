import assert from "node:assert/strict";
import { ManualClock } from "../../src/clock.ts";
import { logger } from "../../src/log.ts";
import { describe, RetryAborted, retrying, sleep, statusOf } from "../../src/k8s/retry.ts";
import { pollUntil, waitFor } from "../_helpers/wait.ts";
import { connectKube, resolveKubeTarget } from "../../src/k8s/client.ts";
import { FakeKubeApiServer } from "../_helpers/k8s_server.ts";

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

Deno.test("retrying: a 429's Retry-After is waited for, bounded by the backoff's cap", async () => {
  const clock = new ManualClock();
  let calls = 0;
  const tooMany = (retryAfter: string) =>
    Object.assign(new Error("Too Many Requests"), {
      code: 429,
      headers: { "Retry-After": retryAfter },
    });
  const work = retrying("step", () => {
    calls++;
    if (calls === 1) return Promise.reject(tooMany("7"));
    if (calls === 2) return Promise.reject(tooMany("3600"));
    return Promise.resolve("done");
  }, { clock, log, initialMs: 100, maxMs: 20_000, attemptTimeoutMs: 1e9 });
  const pauses: number[] = [];
  while (pauses.length < 2) {
    const pause = await pollUntil(() => clock.pendingTimers().find((ms) => ms < 1e6));
    pauses.push(pause);
    clock.advance(pause);
  }
  assert.equal(await work, "done");
  // 7 s asked (over the 100 ms backoff); an hour asked, the cap given.
  assert.deepEqual(pauses, [7_000, 20_000]);
});

Deno.test("describe: a TLS error against the test API server names its cause, not only 'fetch failed'", async () => {
  const server = await new FakeKubeApiServer().start();
  const dir = await Deno.makeTempDir({ prefix: "fa-kube-" });
  try {
    // The server's CA left out: its certificate cannot be verified.
    const config = JSON.parse(server.kubeconfig());
    delete config.clusters[0].cluster["certificate-authority-data"];
    await Deno.writeTextFile(`${dir}/config`, JSON.stringify(config));
    const target = await resolveKubeTarget({ kubeconfig: `${dir}/config`, env: () => undefined });
    const api = await connectKube(target!);
    const err = await api.getConfigMap("ns", "x").then(() => undefined, (e) => e);
    assert.match(describe(err), /^fetch failed: .*certificate/);
    const done = Promise.withResolvers<unknown>();
    await api.watchPods("1", { onEvent: () => {}, onDone: (e) => done.resolve(e) });
    assert.match(describe(await done.promise), /^fetch failed: .*certificate/);
    api.close();
  } finally {
    await server.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
