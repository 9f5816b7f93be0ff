/**
 * Smoke tests of the process-level benchmarks (scripts/bench/{e2e,memory,process}.ts) in their
 * quick modes, plus the pass/fail rules of an e2e trial on hand-made outcomes: a benchmark that
 * cannot notice a lost record would report a rate it never sustained.
 */

import assert from "node:assert/strict";
import {
  benchE2eTcp,
  type E2eTrial,
  judgeTrial,
  parseFlowLogStats,
} from "../../scripts/bench/e2e.ts";
import { benchHeapPerFlow } from "../../scripts/bench/memory.ts";
import { benchRssIdle, parseRecordMetrics } from "../../scripts/bench/process.ts";

function goodTrial(): E2eTrial {
  return {
    mode: "worker",
    targetRate: 10_000,
    pass: false,
    failures: [],
    achievedRatio: 0,
    aggregatorCpuSec: 1,
    aggregatorCpuUsPerRecord: NaN,
    flowgenCpuUsPerRecord: NaN,
    aggregatorPeakRssBytes: 1,
    drainMs: 1,
    errorLines: [],
    flowgen: { records: 20_000, rate: 9_990, elapsedSec: 2, errors: 0, bytes: 1 },
    metrics: {
      numRecordsReceived: 20_000,
      numRecordsExported: 7_000,
      numFlows: 0,
      recordsAggregated: 20_000,
      rejected: 0,
      decodeErrors: 0,
      templateMisses: 0,
      exporterErrors: 0,
    },
    flowLog: {
      received: 7_000,
      exported: 7_000,
      dropped: 0,
      errors: 0,
      buffered: 0,
      filtered: 0,
      permissionDenied: 0,
      lostInWorker: 0,
      overflowDropped: 0,
      uncaught: 0,
      workerRestarts: 0,
    },
    exit: { code: 0, killed: false, stopMs: 10, peakRssBytes: NaN },
  };
}

Deno.test("e2e trial: every record accounted for and the rate held passes", () => {
  const t = goodTrial();
  judgeTrial(t);
  assert.deepEqual(t.failures, []);
  assert.equal(t.pass, true);
  assert.equal(t.aggregatorCpuUsPerRecord, 50);
});

Deno.test("e2e trial: each unaccounted record or shortfall fails it, naming the cause", () => {
  const cases: [string, (t: E2eTrial) => void, RegExp][] = [
    ["flowgen behind", (t) => t.flowgen!.rate = 9_000, /achieved 9000\/s < 95%/],
    ["record lost", (t) => t.metrics!.numRecordsReceived = 19_999, /received 19999 != sent/],
    ["not aggregated", (t) => t.metrics!.recordsAggregated = 19_000, /aggregated 19000/],
    ["rejected", (t) => t.metrics!.rejected = 1, /rejected 1/],
    ["decode error", (t) => t.metrics!.decodeErrors = 2, /decodeErrors 2/],
    ["template miss", (t) => t.metrics!.templateMisses = 3, /templateMisses 3/],
    ["flow log drop", (t) => t.flowLog!.dropped = 4, /dropped 4/],
    ["flow log short", (t) => t.flowLog!.exported = 6_999, /exported 6999 of 7000/],
    ["no metrics line", (t) => t.metrics = undefined, /no final record metrics/],
    [
      "killed",
      (t) => t.exit = { code: 137, killed: true, stopMs: 1, peakRssBytes: NaN },
      /exit code 137/,
    ],
    ["still buffered", (t) => t.flowLog!.buffered = 5, /worker buffered 5 at exit/],
    ["lost in worker", (t) => t.flowLog!.lostInWorker = 6, /lostInWorker 6/],
    ["overflow", (t) => t.flowLog!.overflowDropped = 7, /overflowDropped 7/],
    ["not permitted", (t) => t.flowLog!.permissionDenied = 1, /permissionDenied 1/],
    ["no ledger", (t) => delete t.flowLog!.buffered, /worker ledger missing buffered/],
    ["in a worker after all", (t) => t.mode = "inprocess", /ran in a worker despite/],
  ];
  for (const [name, spoil, want] of cases) {
    const t = goodTrial();
    spoil(t);
    judgeTrial(t);
    assert.equal(t.pass, false, name);
    assert.match(t.failures.join("; "), want, name);
  }
});

Deno.test("e2e trial: in process, the flow log without worker fields passes", () => {
  const t = goodTrial();
  t.mode = "inprocess";
  t.flowLog = { received: 7_000, exported: 7_000, dropped: 0, errors: 0, filtered: 0 };
  judgeTrial(t);
  assert.deepEqual(t.failures, []);
});

Deno.test("e2e trial: an unpaced trial (target 0, the replay sender) has no shortfall to fail", () => {
  const t = goodTrial();
  t.targetRate = 0;
  t.flowgen!.rate = 123_456;
  judgeTrial(t);
  assert.deepEqual(t.failures, []);
  assert.equal(t.achievedRatio, 1);
});

Deno.test("exporter stopped line: worker fields kept only when logged", () => {
  const worker = parseFlowLogStats({
    msg: "exporter stopped",
    received: "10",
    exported: 10,
    dropped: 0,
    errors: 0,
    buffered: "0",
    lostInWorker: 0,
    overflowDropped: 0,
    permissionDenied: 0,
  });
  assert.equal(worker.received, 10);
  assert.equal(worker.buffered, 0);
  assert.equal(worker.lostInWorker, 0);
  const inProcess = parseFlowLogStats({ received: 3, exported: 3, dropped: 0, errors: 0 });
  assert.equal(inProcess.buffered, undefined);
  assert.ok(!("lostInWorker" in inProcess));
});

Deno.test("record metrics line: numbers parsed from JSON strings or numbers", () => {
  const m = parseRecordMetrics({
    msg: "record metrics",
    numRecordsReceived: "12",
    numRecordsExported: 3,
    recordsAggregated: "12",
    rejected: 0,
  });
  assert.equal(m.numRecordsReceived, 12);
  assert.equal(m.numRecordsExported, 3);
  assert.equal(m.recordsAggregated, 12);
  assert.ok(Number.isNaN(m.decodeErrors), "a missing field must not read as 0");
});

Deno.test("e2e quick: the real process takes every record flowgen sent over TCP, both modes", async () => {
  const r = await benchE2eTcp({ quick: true });
  assert.deepEqual(r.detail.trials.map((t) => t.mode), ["worker", "inprocess"]);
  for (const t of r.detail.trials) {
    assert.deepEqual(t.failures, [], t.mode);
    assert.ok(t.flowgen !== undefined && t.flowgen.records > 1000);
    assert.equal(t.metrics?.numRecordsReceived, t.flowgen.records);
    assert.equal(t.metrics?.recordsAggregated, t.flowgen.records);
    assert.ok(t.metrics!.numRecordsExported > 0, "flows were exported to the flow log");
    assert.equal(t.flowLog?.exported, t.metrics!.numRecordsExported);
    assert.equal(t.flowLog?.lostInWorker === undefined, t.mode === "inprocess", t.mode);
  }
  const [w, p] = r.detail.trials;
  assert.equal(r.e2e_tcp_records_per_s, w.flowgen!.rate);
  assert.equal(r.e2e_tcp_inprocess_records_per_s, p.flowgen!.rate);
  assert.equal(r.e2e_worker_vs_inprocess_ratio, w.flowgen!.rate / p.flowgen!.rate);
});

Deno.test("memory quick: heap and external bytes per live flow are measured apart", async () => {
  const r = await benchHeapPerFlow({ quick: true });
  for (const s of [r.detail.at100k, r.detail.at1m]) {
    // A flow has no JS object (slot words and intern ids): what remains on the heap is fixed
    // costs spread over the flows, so only an upper bound.
    assert.ok(
      Number.isFinite(s.heapBytesPerFlow) && s.heapBytesPerFlow < 1_000,
      `heap ${s.heapBytesPerFlow}`,
    );
    // Counters live in typed arrays: a core without external growth would mean they moved.
    assert.ok(s.externalBytesPerFlow > 100, `external ${s.externalBytesPerFlow}`);
    assert.equal(s.totalBytesPerFlow, s.heapBytesPerFlow + s.externalBytesPerFlow);
  }
  assert.equal(r.heap_bytes_per_flow_100k, r.detail.at100k.heapBytesPerFlow);
  assert.equal(r.detail.at1m.flows, 20_000);
});

Deno.test("rss quick: the idle process's VmRSS is read from /proc", async () => {
  const r = await benchRssIdle({ quick: true });
  assert.ok(r.rss_bytes_idle > 10 * 2 ** 20 && r.rss_bytes_idle < 2 ** 30, `${r.rss_bytes_idle}`);
  assert.ok(r.detail.peakRssBytes >= r.rss_bytes_idle);
  // The default configuration runs its shards and its flow log sink in workers.
  assert.ok(r.detail.workerThreads >= 2, `${r.detail.workerThreads} worker threads`);
  // Each reference is a real runtime, the one with workers bigger, the process bigger still.
  assert.ok(r.rss_bytes_idle_runtime > 10 * 2 ** 20, `${r.rss_bytes_idle_runtime}`);
  assert.ok(
    r.rss_bytes_idle_runtime_workers > r.rss_bytes_idle_runtime,
    `${r.rss_bytes_idle_runtime_workers} <= ${r.rss_bytes_idle_runtime}`,
  );
  assert.ok(r.rss_bytes_idle > r.rss_bytes_idle_runtime_workers);
  // A runtime listening on a TCP and a TLS port with none of the product's code: a real
  // process, well below the product's.
  assert.ok(r.rss_bytes_idle_runtime_listeners > 10 * 2 ** 20);
  assert.ok(
    r.rss_bytes_idle_runtime_listeners < r.rss_bytes_idle,
    `${r.rss_bytes_idle_runtime_listeners} >= ${r.rss_bytes_idle}`,
  );
  // The build as the image runs it: its Deno cache filled first, as the image build does, it
  // holds less than from an empty cache (about 130 MB against 300 MB measured).
  assert.ok(r.rss_bytes_idle_bundle > r.rss_bytes_idle_runtime_workers);
  assert.ok(
    r.rss_bytes_idle_bundle < r.detail.bundleColdCacheRssBytes,
    `filled cache ${r.rss_bytes_idle_bundle}, empty ${r.detail.bundleColdCacheRssBytes}`,
  );
});
