/**
 * A sink that cannot be created (its worker did not start in time on a busy machine) is tried
 * again with backoff while its section is enabled; one the process lacks a permission for is not.
 * Before, any failure left the section without a sink until a reload or a restart: its records
 * reached no sink at all (seen: a flow log worker slower than its 15 s start bound under load).
 */

import assert from "node:assert/strict";
import type { ExportedFlow } from "../src/aggregation/record.ts";
import { ManualClock } from "../src/clock.ts";
import { diffConfig, parseConfig } from "../src/components.ts";
import type { Exporter, ExporterStats } from "../src/exporters/exporter.ts";
import { MissingPermissionsError, WorkerStartTimeout } from "../src/exporters/worker_exporter.ts";
import { FlowAggregator } from "../src/flow_aggregator.ts";
import { setLogWriter } from "../src/log.ts";

const logLines: string[] = [];
setLogWriter((l) => logLines.push(l));

class CountingExporter implements Exporter {
  readonly name = "counting";
  records = 0;
  start(): Promise<void> {
    return Promise.resolve();
  }
  stop(): Promise<void> {
    return Promise.resolve();
  }
  addRecord(_flow: ExportedFlow): void {
    this.records++;
  }
  stats(): ExporterStats {
    return { received: this.records, exported: this.records, dropped: 0, errors: 0 };
  }
}

const CONFIG = parseConfig(`aggregatorTransportProtocol: TCP
flowLogger:
  enable: true
  path: /dev/null
`);

function aggregator(clock: ManualClock, create: () => Exporter) {
  return new FlowAggregator(CONFIG, {
    clock,
    manualSweep: true,
    listenAddress: "127.0.0.1:0",
    exporterFactory: (section) => section === "flowLogger" ? create() : undefined,
    metricsLogIntervalMs: 0,
  });
}

/** Lets the serialised retry (a promise chain behind the timer) run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 0));
}

Deno.test("exporter create: a sink worker that did not start in time is retried with backoff", async () => {
  const clock = new ManualClock();
  const sink = new CountingExporter();
  let attempts = 0;
  const fa = aggregator(clock, () => {
    attempts++;
    if (attempts <= 3) throw new WorkerStartTimeout("log", 15_000);
    return sink;
  });
  try {
    await fa.start();
    assert.equal(attempts, 1);
    assert.equal(fa.stats().exporterCreatesFailed, 1);
    // 1 s, then 2 s, then 4 s.
    clock.advance(999);
    await settle();
    assert.equal(attempts, 1, "not before its pause");
    clock.advance(1);
    await settle();
    assert.equal(attempts, 2);
    clock.advance(1_999);
    await settle();
    assert.equal(attempts, 2, "the pause doubled");
    clock.advance(1);
    await settle();
    assert.equal(attempts, 3);
    clock.advance(4_000);
    await settle();
    assert.equal(attempts, 4);
    assert.equal(fa.stats().exporterCreatesFailed, 3);
    const retried = logLines.filter((l) => l.includes("cannot create exporter"));
    assert.match(retried.at(-1)!, /retryInMs=4000/);
    // Created: nothing more is tried.
    clock.advance(120_000);
    await settle();
    assert.equal(attempts, 4);
  } finally {
    await fa.stop();
  }
});

Deno.test("exporter create: a missing permission or a refused configuration is not retried, and stop cancels a retry", async () => {
  const clock = new ManualClock();
  let attempts = 0;
  const fa = aggregator(clock, () => {
    attempts++;
    throw new MissingPermissionsError("flowLogger", ["--allow-write=/x"]);
  });
  await fa.start();
  clock.advance(600_000);
  await settle();
  assert.equal(attempts, 1);
  await fa.stop();

  const refusedClock = new ManualClock();
  let refused = 0;
  const fr = aggregator(refusedClock, () => {
    refused++;
    throw new Error("exporter clickhouse: DatabaseURL, Username or Password missing");
  });
  await fr.start();
  refusedClock.advance(600_000);
  await settle();
  assert.equal(refused, 1);
  await fr.stop();

  const stopClock = new ManualClock();
  let tries = 0;
  const fb = aggregator(stopClock, () => {
    tries++;
    throw new WorkerStartTimeout("log", 15_000);
  });
  await fb.start();
  assert.deepEqual(stopClock.pendingTimers().length > 0, true, "a retry armed");
  await fb.stop();
  stopClock.advance(600_000);
  await settle();
  assert.equal(tries, 1, "the stop cancelled it");
});

// A retry that fired while a reload was creating the same sink ran right after it: a second
// attempt at once (each up to 15 s, the reloads and the stop waiting behind them).
Deno.test("exporter create: a retry that fires during a reload's attempt is dropped; the reload's own retry starts at 1 s", async () => {
  const clock = new ManualClock();
  let attempts = 0;
  let gate: PromiseWithResolvers<void> | undefined;
  const fa = aggregator(clock, () => {
    attempts++;
    throw new WorkerStartTimeout("log", 15_000);
  });
  // The factory above throws at once; the reload's attempt is held by a slow update instead.
  try {
    await fa.start();
    assert.equal(attempts, 1);
    clock.advance(1_000); // the first retry: 2 attempts, the next armed at 2 s
    await settle();
    assert.equal(attempts, 2);
    // A reload starts (any change: the section stays enabled without a sink, so it tries).
    gate = Promise.withResolvers<void>();
    const held = gate;
    const next = parseConfig(`aggregatorTransportProtocol: TCP
activeFlowRecordTimeout: 30s
flowLogger:
  enable: true
  path: /dev/null
`);
    const reload = (async () => {
      await held.promise;
      await fa.update(next, diffConfig(fa.config, next));
    })();
    clock.advance(2_000); // the armed retry fires: queued behind nothing yet, runs: 3
    await settle();
    assert.equal(attempts, 3);
    held.resolve();
    await reload; // the reload's attempt: 4, its retry armed at 1 s (not 8 s)
    await settle();
    assert.equal(attempts, 4);
    clock.advance(999);
    await settle();
    assert.equal(attempts, 4);
    clock.advance(1);
    await settle();
    assert.equal(attempts, 5, "the reload started the pauses again");
  } finally {
    await fa.stop();
  }
});
