import assert from "node:assert/strict";
import { type ProcessStats, processStats } from "../src/process_stats.ts";
import { statsFields } from "../src/flow_aggregator.ts";
import { zeroStats } from "./_helpers/stats.ts";

/**
 * Reads the figures in a process of their own (test modules share this one, whose memory the
 * others move meanwhile): at start, with 64 MiB more touched, with it given back, and after a
 * worker thread spun until it had used 300 ms of CPU by its own reading while the main thread
 * only waited.
 */
const CHILD = `
const { processStats } = await import(${
  JSON.stringify(import.meta.resolve("../src/process_stats.ts"))
});
const before = processStats();
let big = new Uint8Array(64 << 20).fill(1);
const last = big[big.length - 1];
const grown = processStats();
big = new Uint8Array(0);
// V8 frees a dead buffer's memory on a later task: collect, let it, collect again.
globalThis.gc();
await new Promise((resolve) => setTimeout(resolve, 100));
globalThis.gc();
const freed = processStats();
const src = \`import process from "node:process";
  const t0 = process.cpuUsage();
  const used = () => { const t = process.cpuUsage(t0); return (t.user + t.system) / 1e6; };
  let x = 0; while (used() < 0.3) { for (let i = 0; i < 1e5; i++) x += i; }
  postMessage(x);\`;
const w = new Worker(URL.createObjectURL(new Blob([src], { type: "application/javascript" })), {
  type: "module",
});
await new Promise((resolve) => (w.onmessage = resolve));
w.terminate();
console.log(JSON.stringify({ before, grown, freed, after: processStats(), last }));
`;

Deno.test("process stats: memory and its peak, start time, and the CPU of every thread, not the caller's alone", async () => {
  const t0 = Date.now() / 1000;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--v8-flags=--expose-gc", CHILD],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const r = JSON.parse(new TextDecoder().decode(out.stdout)) as Record<string, ProcessStats> & {
    last: number;
  };
  const { before, grown, freed, after } = r;
  assert.equal(r.last, 1);
  assert.ok(before.residentMemoryBytes > 10e6, `rss ${before.residentMemoryBytes}`);
  for (const s of [before, grown, freed, after]) {
    assert.ok(s.maxResidentMemoryBytes >= s.residentMemoryBytes, "peak >= now");
    assert.ok(s.heapTotalBytes >= s.heapUsedBytes && s.heapUsedBytes > 0);
    assert.ok(s.externalMemoryBytes >= 0);
  }
  // 64 MiB touched: the current and the peak figures grow by about that much.
  assert.ok(grown.residentMemoryBytes - before.residentMemoryBytes > 60 << 20, "rss grew");
  // (The peak at start can be above the memory then: start-up's own.)
  assert.ok(grown.maxResidentMemoryBytes - before.residentMemoryBytes > 60 << 20, "peak grew");
  // Given back: the current figure falls, the peak stays.
  assert.ok(grown.residentMemoryBytes - freed.residentMemoryBytes > 32 << 20, "rss fell");
  assert.ok(freed.maxResidentMemoryBytes >= grown.maxResidentMemoryBytes, "the peak stays");
  // The worker's CPU is the process's.
  const grew = after.cpuSecondsTotal - freed.cpuSecondsTotal;
  assert.ok(grew >= 0.3, `process CPU grew ${grew} s while a worker used 0.3 s`);
  assert.equal(after.startTimeSeconds, before.startTimeSeconds);
  assert.ok(Math.abs(before.startTimeSeconds - t0) < 30, `started at ${before.startTimeSeconds}`);
});

Deno.test("process stats: on the metrics line as process.* fields", () => {
  const fields = statsFields(zeroStats({ process: processStats() }));
  for (const k of Object.keys(processStats())) {
    assert.equal(typeof fields[`process.${k}`], "number", k);
  }
});
