/**
 * The read gate of trickling TCP connections (src/collector/fairness.ts): a read that caught up
 * with its peer waits for one shared tick, unless a connection of the listener filled the busy
 * buffer within BUSY_MEMORY_MS.
 */

import assert from "node:assert/strict";
import { BUSY_MEMORY_MS, ReadGate } from "../../src/collector/fairness.ts";
import { BUSY_BUFFER_BYTES, IDLE_BUFFER_BYTES } from "../../src/collector/framing.ts";

Deno.test("read gate: caught-up reads share one tick; the next wait starts a new one", async () => {
  const gate = new ReadGate({ nowMs: () => 0 }, 1);
  const a = gate.after(100, IDLE_BUFFER_BYTES);
  const b = gate.after(5000, 8192);
  assert.ok(a !== undefined, "a read that caught up while nobody is busy waits");
  assert.equal(a, b, "one tick for every connection waiting meanwhile");
  assert.equal(gate.after(IDLE_BUFFER_BYTES, IDLE_BUFFER_BYTES), undefined, "a full read goes on");
  await a;
  const c = gate.after(100, IDLE_BUFFER_BYTES);
  assert.ok(c !== undefined && c !== a, "a fired tick is not reused");
  await c;
});

Deno.test("read gate: nobody waits while a connection filled the busy buffer lately", async () => {
  let now = 1_000;
  const gate = new ReadGate({ nowMs: () => now }, 1);
  assert.equal(gate.after(BUSY_BUFFER_BYTES, BUSY_BUFFER_BYTES), undefined, "busy: reads on");
  assert.equal(gate.after(10, IDLE_BUFFER_BYTES), undefined, "another's caught-up read too");
  now += BUSY_MEMORY_MS - 1;
  assert.equal(gate.after(10, IDLE_BUFFER_BYTES), undefined, "still within the busy memory");
  now += 1;
  const t = gate.after(10, IDLE_BUFFER_BYTES);
  assert.ok(t !== undefined, "the listener is quiet again: the caught-up read waits");
  await t;
});
