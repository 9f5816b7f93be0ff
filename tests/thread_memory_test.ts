import assert from "node:assert/strict";
import { threadMemory } from "../src/thread_memory.ts";

Deno.test("thread memory: this thread's V8 heap, read again once the last reading is a second old", () => {
  const t0 = 1e9; // far from any earlier reading of this test process
  const a = threadMemory(t0);
  assert.ok(a.heapUsedBytes > 0 && a.heapTotalBytes >= a.heapUsedBytes, JSON.stringify(a));
  assert.ok(a.externalMemoryBytes >= 0);
  // Within the second: the same reading (a shard asks after every slice of ingest).
  const held = new Array(200_000).fill(0).map((_, i) => ({ i }));
  assert.equal(threadMemory(t0 + 999), a);
  // A second later: read again, the objects allocated since in it.
  const b = threadMemory(t0 + 1000);
  assert.notEqual(b, a);
  assert.ok(b.heapUsedBytes > a.heapUsedBytes + 1e6, `${a.heapUsedBytes} -> ${b.heapUsedBytes}`);
  assert.equal(held.length, 200_000);
});
