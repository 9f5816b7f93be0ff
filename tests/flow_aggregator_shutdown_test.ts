/**
 * The shutdown export of src/flow_aggregator.ts under volume: every flow held at stop reaches an
 * exporter whose memory buffer is smaller than the held set (as the flow log's 16 MiB is smaller
 * than ~100k held flows after a flood), because the loop hands flows over in slices and awaits
 * the exporter's `flush()` in between; a flush that never finishes does not hang the shutdown.
 */

import assert from "node:assert/strict";
import type { ExportedFlow } from "../src/aggregation/record.ts";
import { ManualClock } from "../src/clock.ts";
import { parseConfig } from "../src/components.ts";
import { BatchWriter, readBatch } from "../src/exporters/batch.ts";
import type { Exporter, ExporterStats } from "../src/exporters/exporter.ts";
import { FlowAggregator } from "../src/flow_aggregator.ts";
import { setLogWriter } from "../src/log.ts";
import { intraNodeRecord } from "./integration/helpers/scenarios.ts";

const logLines: string[] = [];
setLogWriter((l) => logLines.push(l));

/** An exporter with a bounded buffer that drops (and counts) what does not fit, like the log's. */
class BoundedExporter implements Exporter {
  readonly name = "bounded";
  readonly capacity: number;
  buffered: ExportedFlow[] = [];
  written = new Set<number>();
  dropped = 0;
  flushes = 0;
  stuck = false;

  constructor(capacity: number) {
    this.capacity = capacity;
  }
  start(): Promise<void> {
    return Promise.resolve();
  }
  async stop(): Promise<void> {
    if (!this.stuck) await this.flush();
  }
  addRecord(flow: ExportedFlow): void {
    if (this.buffered.length >= this.capacity) this.dropped++;
    else this.buffered.push(flow);
  }
  async flush(): Promise<void> {
    this.flushes++;
    if (this.stuck) return new Promise(() => {}); // a disk that never answers
    await Promise.resolve(); // the write is asynchronous
    for (const f of this.buffered) this.written.add(f.key.sourcePort);
    this.buffered = [];
  }
  stats(): ExporterStats {
    return { received: 0, exported: this.written.size, dropped: this.dropped, errors: 0 };
  }
}

const CONFIG = parseConfig(`activeFlowRecordTimeout: 1h
inactiveFlowRecordTimeout: 1h
aggregatorTransportProtocol: TCP
flowLogger:
  enable: true
  path: /dev/null
`);

async function heldFlows(exporter: BoundedExporter, flows: number, stopTimeoutMs?: number) {
  const fa = new FlowAggregator(CONFIG, {
    clock: new ManualClock(),
    manualSweep: true,
    listenAddress: "127.0.0.1:0",
    exporterFactory: (section) => section === "flowLogger" ? exporter : undefined,
    metricsLogIntervalMs: 0,
    exporterStopTimeoutMs: stopTimeoutMs,
  });
  await fa.start();
  for (let port = 1; port <= flows; port++) fa.ingest([intraNodeRecord(port)]);
  assert.equal(fa.stats().numFlows, flows);
  return fa;
}

Deno.test("shutdown: more held flows than an exporter buffers all reach it, none dropped", async () => {
  const exporter = new BoundedExporter(12_000);
  const fa = await heldFlows(exporter, 25_000);
  await fa.stop();
  assert.equal(exporter.dropped, 0);
  assert.equal(exporter.written.size, 25_000);
  assert.ok(exporter.flushes >= 3, `flushed between slices (${exporter.flushes} flushes)`);
  assert.equal(fa.stats().numRecordsExported, 25_000);
});

Deno.test("shutdown: a flush that never finishes costs its records, not the shutdown", async () => {
  const exporter = new BoundedExporter(12_000);
  exporter.stuck = true;
  const fa = await heldFlows(exporter, 25_000, 50);
  await fa.stop();
  // The first slice waited for the stuck flush (50 ms), later slices were handed over without
  // waiting: what did not fit in the buffer is counted as dropped, nothing vanishes silently.
  assert.equal(exporter.flushes, 1);
  assert.equal(exporter.buffered.length + exporter.dropped, 25_000);
  assert.equal(exporter.dropped, 13_000);
  assert.ok(logLines.some((l) => l.includes("exporter flush did not finish in time")));
});

Deno.test("periodic sweep: a burst of due flows larger than an exporter buffers is sliced, none dropped", async () => {
  const exporter = new BoundedExporter(12_000);
  const clock = new ManualClock();
  const fa = new FlowAggregator(CONFIG, {
    clock,
    listenAddress: "127.0.0.1:0",
    exporterFactory: (section) => section === "flowLogger" ? exporter : undefined,
    metricsLogIntervalMs: 0,
  });
  await fa.start();
  try {
    for (let port = 1; port <= 25_000; port++) fa.ingest([intraNodeRecord(port)]);
    clock.advance(2 * 3_600_000); // every flow is now past both timeouts
    // The real timer runs (at most 1 s away); each tick exports one slice, then awaits flush().
    const deadline = Date.now() + 15_000;
    const handed = (): number => exporter.written.size + exporter.buffered.length;
    while (handed() < 25_000 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    // The last slice waits in the buffer for the exporter's own flush timer; none was dropped.
    assert.equal(exporter.dropped, 0);
    assert.equal(handed(), 25_000);
    assert.ok(exporter.written.size >= 20_000, `written ${exporter.written.size}`);
    assert.ok(exporter.flushes >= 2, `flushed between slices (${exporter.flushes} flushes)`);
    assert.equal(fa.stats().numFlows, 0, "inactive flows deleted after their export");
  } finally {
    await fa.stop();
  }
});

Deno.test("shutdown: flows the final sweep deletes reach a binary sink with their addresses", async () => {
  // A sink reading addresses from the core's words (as the worker batch does): they must still
  // be the flow's when the held flows are handed over, after the sweep freed their slots.
  const seen: { text: string; words: string }[] = [];
  const sink: Exporter = {
    name: "binary",
    start: () => Promise.resolve(),
    stop: () => Promise.resolve(),
    addRecord(flow) {
      const w = new BatchWriter(1);
      w.add(flow);
      seen.push({
        text: flow.key.sourceAddress,
        words: readBatch(w.finish())[0].key.sourceAddress,
      });
    },
    stats: () => ({ received: 0, exported: 0, dropped: 0, errors: 0 }),
  };
  const clock = new ManualClock();
  const fa = new FlowAggregator(
    parseConfig(`activeFlowRecordTimeout: 5s
inactiveFlowRecordTimeout: 10s
aggregatorTransportProtocol: TCP
flowLogger:
  enable: true
  path: /dev/null
`),
    {
      clock,
      manualSweep: true,
      listenAddress: "127.0.0.1:0",
      exporterFactory: (section) => section === "flowLogger" ? sink : undefined,
      metricsLogIntervalMs: 0,
    },
  );
  await fa.start();
  // More flows than one chunk of the copied words (4,096 flows), each with its own address.
  const n = 5000;
  for (let port = 1; port <= n; port++) {
    fa.ingest([{ ...intraNodeRecord(port), sourceIPv4Address: `10.1.${port >> 8}.${port & 255}` }]);
  }
  clock.advance(20_000); // inactive: the stop's sweep exports and deletes them
  await fa.stop();
  assert.equal(seen.length, n);
  for (const s of seen) assert.equal(s.words, s.text);
  assert.equal(new Set(seen.map((s) => s.words)).size, n);
});
