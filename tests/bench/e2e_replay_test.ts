import assert from "node:assert/strict";
import { agentSpread, benchE2eReplay, bestTrial } from "../../scripts/bench/e2e_replay.ts";
import type { E2eTrial } from "../../scripts/bench/e2e.ts";

Deno.test("e2e replay: the best trial is the fastest that passed", () => {
  const t = (pass: boolean, recordsPerSec?: number) => ({ pass, recordsPerSec }) as E2eTrial;
  assert.equal(bestTrial([t(true, 1), t(false, 9), t(true, 5), t(true)])?.recordsPerSec, 5);
  assert.equal(bestTrial([t(false, 9)]), undefined);
});

Deno.test("e2e replay: the Agent spread is slowest / fastest", () => {
  assert.equal(agentSpread([50, 100, 80, 100]), 0.5);
  assert.equal(agentSpread([0, 10]), 0);
  assert.equal(agentSpread([]), null);
  assert.equal(agentSpread(undefined), null);
});

Deno.test("e2e replay quick: the real process takes every replayed record over TCP and TLS, every figure measured", async () => {
  const r = await benchE2eReplay({ quick: true });
  const t = r.detail.trials[0];
  assert.deepEqual(t.failures, []);
  assert.equal(t.sender, "replay");
  assert.equal(t.metrics?.numRecordsReceived, t.flowgen?.records);
  for (const [k, v] of Object.entries(r)) {
    if (k !== "detail") assert.ok(typeof v === "number" && v > 0, `${k} = ${v}`);
  }
  assert.ok(r.e2e_replay_cores! < 4, `${r.e2e_replay_cores} cores`);
  const perAgent = t.flowgen?.perAgent ?? [];
  assert.equal(perAgent.length, 4);
  assert.equal(perAgent.reduce((a, b) => a + b, 0), t.flowgen?.records);
  // The mutual-TLS trial: the process's own certificates, every record accounted for.
  const tls = r.detail.tlsTrials[0];
  assert.equal(tls.transport, "TLS");
  assert.deepEqual(tls.failures, []);
  assert.equal(tls.metrics?.numRecordsReceived, tls.flowgen?.records);
  assert.equal(t.transport, undefined, "the headline trials are TCP");
});
