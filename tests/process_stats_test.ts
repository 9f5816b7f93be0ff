import assert from "node:assert/strict";
import { processStats } from "../src/process_stats.ts";
import { statsFields } from "../src/flow_aggregator.ts";
import { zeroStats } from "./_helpers/stats.ts";

Deno.test("process stats: memory, start time, and the CPU of every thread, not the caller's alone", async () => {
  const before = processStats();
  assert.ok(before.residentMemoryBytes > 10e6, `rss ${before.residentMemoryBytes}`);
  assert.ok(before.maxResidentMemoryBytes >= before.residentMemoryBytes, "peak >= now");
  assert.ok(before.heapTotalBytes >= before.heapUsedBytes && before.heapUsedBytes > 0);
  assert.ok(before.externalMemoryBytes >= 0);
  const now = Date.now() / 1000;
  assert.ok(before.startTimeSeconds <= now && before.startTimeSeconds > now - 3600);
  // A worker spins until its thread (not this one, which only waits) has used 300 ms of CPU by
  // its own reading; the process's figure must have grown by that much too.
  const src = `import process from "node:process";
    const t0 = process.cpuUsage();
    const used = () => { const t = process.cpuUsage(t0); return (t.user + t.system) / 1e6; };
    let x = 0; while (used() < 0.3) { for (let i = 0; i < 1e5; i++) x += i; }
    postMessage(x);`;
  const url = URL.createObjectURL(new Blob([src], { type: "application/javascript" }));
  const w = new Worker(url, { type: "module" });
  try {
    await new Promise((resolve, reject) => {
      w.onmessage = resolve;
      w.onerror = reject;
    });
  } finally {
    w.terminate();
    URL.revokeObjectURL(url);
  }
  const after = processStats();
  const grew = after.cpuSecondsTotal - before.cpuSecondsTotal;
  assert.ok(grew >= 0.3, `process CPU grew ${grew} s while a worker used 0.3 s`);
  assert.equal(after.startTimeSeconds, before.startTimeSeconds);
});

Deno.test("process stats: on the metrics line as process.* fields", () => {
  const fields = statsFields(zeroStats({ process: processStats() }));
  for (const k of Object.keys(processStats())) {
    assert.equal(typeof fields[`process.${k}`], "number", k);
  }
});
