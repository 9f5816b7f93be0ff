import assert from "node:assert/strict";
import { REPORT_CELL_BYTES, REPORT_FIELDS, ReportCell } from "../../src/shard/report_cell.ts";
import { CoreCounters } from "../../src/aggregation/counters.ts";
import type { AggregationStats } from "../../src/aggregation/counters.ts";
import type { ShardReport } from "../../src/shard/protocol.ts";
import { waitFor } from "../_helpers/wait.ts";

/** A report whose every number is `k` (and the nested ones too). */
function uniform(k: number): ShardReport {
  const stats = new CoreCounters().snapshot(k, k) as unknown as Record<string, unknown>;
  for (const [key, v] of Object.entries(stats)) {
    if (typeof v === "number") stats[key] = k;
    else for (const sub of Object.keys(v as object)) (v as Record<string, number>)[sub] = k;
  }
  return {
    stats: stats as unknown as AggregationStats,
    stringsTruncated: k,
    memory: { heapUsedBytes: k, heapTotalBytes: k, externalMemoryBytes: k },
  };
}

Deno.test("report cell: nothing before the first write, then the report written, every counter", () => {
  const cell = new ReportCell(ReportCell.create());
  assert.equal(cell.read(), undefined);
  const c = new CoreCounters();
  c.recordsIn = 7;
  c.recordsAccepted = 5;
  c.rejected.maxFlows = 2;
  c.exported = 3;
  const memory = { heapUsedBytes: 5e6, heapTotalBytes: 8e6 + 3, externalMemoryBytes: 1 };
  const r = { stats: c.snapshot(4, 1234), stringsTruncated: 9, memory };
  cell.write(r);
  assert.deepEqual(cell.read(), r);
  // Every counter of the core has its place (derived from the counters object itself).
  const flat = Object.entries(c.snapshot(0, 0)).flatMap(([k, v]) =>
    typeof v === "number" ? [k] : Object.keys(v).map((s) => `${k}.${s}`)
  );
  assert.deepEqual(REPORT_FIELDS.map(([k, s]) => s === undefined ? k : `${k}.${s}`), flat);
  // The counters, the cut strings, then the thread's memory figures.
  assert.equal(REPORT_CELL_BYTES, 8 + 2 * 8 * (flat.length + 1 + Object.keys(memory).length));
});

Deno.test("report cell: a reader in another thread on the same memory sees the writes", () => {
  const sab = ReportCell.create();
  const writer = new ReportCell(sab);
  const reader = new ReportCell(sab);
  writer.write(uniform(1));
  assert.deepEqual(reader.read(), uniform(1));
  writer.write(uniform(2));
  assert.deepEqual(reader.read(), uniform(2));
});

/**
 * A worker writing uniform reports 1, 2, 3, ... into `sab` until `control[0]` is set, storing in
 * `control[1]` the last one it finished writing; `done` once it stopped by itself.
 */
function writerWorker(sab: SharedArrayBuffer, control: Int32Array): {
  worker: Worker;
  done: Promise<unknown>;
} {
  const src = `
    import { ReportCell } from ${
    JSON.stringify(new URL("../../src/shard/report_cell.ts", import.meta.url).href)
  };
    import { CoreCounters } from ${
    JSON.stringify(new URL("../../src/aggregation/counters.ts", import.meta.url).href)
  };
    self.onmessage = (e) => {
      const cell = new ReportCell(e.data.sab);
      const control = new Int32Array(e.data.control);
      const stats = new CoreCounters().snapshot(0, 0);
      for (let k = 1; Atomics.load(control, 0) === 0; k++) {
        for (const key of Object.keys(stats)) {
          if (typeof stats[key] === "number") stats[key] = k;
          else for (const sub of Object.keys(stats[key])) stats[key][sub] = k;
        }
        cell.write({
          stats,
          stringsTruncated: k,
          memory: { heapUsedBytes: k, heapTotalBytes: k, externalMemoryBytes: k },
        });
        Atomics.store(control, 1, k);
      }
      self.postMessage("done");
    };`;
  const worker = new Worker(`data:application/javascript,${encodeURIComponent(src)}`, {
    type: "module",
  });
  const done = new Promise((res) => (worker.onmessage = res));
  worker.postMessage({ sab, control: control.buffer });
  return { worker, done };
}

Deno.test("report cell: a writer terminated part-way leaves the last report it wrote whole, for a reader that never read", async () => {
  for (let trial = 0; trial < 8; trial++) {
    const sab = ReportCell.create();
    const control = new Int32Array(new SharedArrayBuffer(8));
    const { worker } = writerWorker(sab, control);
    await waitFor(() => Atomics.load(control, 1) > 1000 + trial * 997, {
      timeoutMs: 60_000,
      what: "the writer's reports",
    });
    // Terminated wherever it is: in a write most of the time (as a stuck shard worker is
    // terminated by the pool, or dies).
    worker.terminate();
    const finished = Atomics.load(control, 1);
    // The pool reads a dying shard's cell with its own reader, which may never have read.
    const r = new ReportCell(sab).read();
    assert.ok(r !== undefined, `trial ${trial}: a report (${finished} written whole)`);
    assert.deepEqual(r, uniform(r.stringsTruncated), `trial ${trial}: one write's numbers`);
    assert.ok(
      r.stringsTruncated >= finished,
      `trial ${trial}: ${r.stringsTruncated} < ${finished}`,
    );
  }
});

Deno.test("report cell: reads racing a writer thread are never torn", async () => {
  const sab = ReportCell.create();
  const control = new Int32Array(new SharedArrayBuffer(8));
  const { worker: w, done } = writerWorker(sab, control);
  const reader = new ReportCell(sab);
  try {
    // The worker starts (loads its modules) with this thread's event loop free.
    await waitFor(() => reader.read() !== undefined, {
      timeoutMs: 60_000,
      what: "the writer's first report",
    });
    let reads = 0, changes = 0, last = 0;
    const until = performance.now() + 20_000;
    // Spins in 5 ms slices (a read as often as possible), letting the event loop in between,
    // until the writer was seen to move 100 times.
    while (changes < 100 && performance.now() < until) {
      const slice = performance.now() + 5;
      while (performance.now() < slice) {
        const r = reader.read()!;
        reads++;
        const k = r.stringsTruncated;
        // Every number of one read comes from the same write.
        assert.deepEqual(r, uniform(k), `read ${reads} mixes writes`);
        assert.ok(k >= last, "never older than a previous read");
        if (k !== last) changes++;
        last = k;
      }
      await new Promise((r) => setTimeout(r, 0));
    }
    assert.ok(
      changes >= 100,
      `the reads saw the writer move: ${changes} changes in ${reads} reads`,
    );
  } finally {
    Atomics.store(control, 0, 1);
    await done;
    w.terminate();
  }
});
