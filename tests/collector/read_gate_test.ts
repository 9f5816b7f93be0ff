/**
 * The read gate of trickling connections (src/collector/fairness.ts): a read that caught up with
 * its peer waits for one shared tick; a read that filled its space never waits, also while
 * another connection is busy.
 */

import assert from "node:assert/strict";
import { ReadGate } from "../../src/collector/fairness.ts";
import { BUSY_BUFFER_BYTES, IDLE_BUFFER_BYTES, StreamFramer } from "../../src/collector/framing.ts";

Deno.test("read gate: caught-up reads share one tick; the next wait starts a new one", async () => {
  const gate = new ReadGate(1);
  const a = gate.after(100, IDLE_BUFFER_BYTES);
  const b = gate.after(5000, 8192);
  assert.ok(a !== undefined, "a read that caught up waits");
  assert.equal(a, b, "one tick for every connection waiting meanwhile");
  assert.equal(gate.after(IDLE_BUFFER_BYTES, IDLE_BUFFER_BYTES), undefined, "a full read goes on");
  await a;
  const c = gate.after(100, IDLE_BUFFER_BYTES);
  assert.ok(c !== undefined && c !== a, "a fired tick is not reused");
  await c;
});

Deno.test("read gate: a busy stream's reads never wait; another connection that caught up still does", async () => {
  // A peer sending 1,000-byte messages faster than they are read, read as the TCP listener does:
  // each read fills the framer's space, whole messages are taken, the cut one stays buffered.
  const message = new Uint8Array(1000);
  message.set([0, 10, 1000 >> 8, 1000 & 0xff]);
  let sent = 0;
  const framer = new StreamFramer();
  const gate = new ReadGate(1);
  let busyReads = 0;
  for (let read = 0; read < 12; read++) {
    const space = framer.readSpace();
    for (let i = 0; i < space.length; i++, sent++) space[i] = message[sent % message.length];
    framer.commit(space.length);
    while (framer.nextMessageStart() >= 0);
    if (framer.capacity === BUSY_BUFFER_BYTES) busyReads++;
    assert.equal(gate.after(space.length, space.length), undefined, `read ${read} goes on`);
  }
  assert.ok(busyReads >= 8, `the framer grew to the busy buffer (${busyReads} busy reads)`);
  // A busy-sized buffer's caught-up read waits, and so does another connection's: the tick
  // batches trickling connections whatever else is busy (see ReadGate's doc for the measurement).
  const t = gate.after(BUSY_BUFFER_BYTES - 1, BUSY_BUFFER_BYTES);
  assert.ok(t !== undefined, "a caught-up read waits");
  assert.equal(gate.after(10, IDLE_BUFFER_BYTES), t, "another connection waits for the same tick");
  await t;
});

Deno.test("read gate: with busyFrom, a large short read goes on; a trickling one still waits", async () => {
  const gate = new ReadGate(1, { busyFrom: 16 * 1024 });
  assert.equal(gate.after(16 * 1024, BUSY_BUFFER_BYTES), undefined, "a busy peer's short read");
  const t = gate.after(16 * 1024 - 1, BUSY_BUFFER_BYTES);
  assert.ok(t !== undefined, "under the bound it is caught up");
  assert.equal(gate.after(100, IDLE_BUFFER_BYTES), t, "trickling reads share the tick");
  await t;
});
