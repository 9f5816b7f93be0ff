import assert from "node:assert/strict";
import {
  BUSY_BUFFER_BYTES,
  type FrameResult,
  IDLE_BUFFER_BYTES,
  StreamFramer,
} from "../../src/collector/mod.ts";
import { ReadBudget } from "../../src/collector/read_budget.ts";
import { concat, GOLDEN_DATA, GOLDEN_TEMPLATE } from "./helpers.ts";

function drain(f: StreamFramer): FrameResult[] {
  const out: FrameResult[] = [];
  for (;;) {
    const r = f.next();
    if (r.kind === "need-more") return out;
    out.push(r.kind === "message" ? { kind: "message", message: r.message.slice() } : r);
  }
}

Deno.test("framing: back-to-back messages in one chunk are cut by the header length", () => {
  const f = new StreamFramer();
  f.push(concat(GOLDEN_TEMPLATE, GOLDEN_DATA, GOLDEN_TEMPLATE));
  const got = drain(f);
  assert.deepEqual(got.map((g) => g.kind === "message" ? g.message.length : -1), [288, 175, 288]);
  assert.deepEqual((got[1] as { message: Uint8Array }).message, GOLDEN_DATA);
  assert.equal(f.buffered, 0);
});

Deno.test("framing: a message split at every byte boundary is reassembled", () => {
  const stream = concat(GOLDEN_TEMPLATE, GOLDEN_DATA);
  for (const cut of [1, 2, 3, 4, 15, 16, 17, 287, 288, 289, 400]) {
    const f = new StreamFramer();
    f.push(stream.subarray(0, cut));
    const first = drain(f);
    f.push(stream.subarray(cut));
    const all = [...first, ...drain(f)];
    assert.equal(all.length, 2, `cut ${cut}`);
    assert.deepEqual((all[0] as { message: Uint8Array }).message, GOLDEN_TEMPLATE);
    assert.deepEqual((all[1] as { message: Uint8Array }).message, GOLDEN_DATA);
  }
});

Deno.test("framing: Length 0, Length < 16 and version != 10 are terminal errors", () => {
  for (
    const [bytes, re] of [
      [[0, 10, 0, 0], /length 0 < 16/],
      [[0, 10, 0, 15], /length 15 < 16/],
      [[0, 9, 0, 40], /version 9/],
      [[0, 5, 0, 0], /version 5/],
    ] as const
  ) {
    const f = new StreamFramer();
    f.push(concat(new Uint8Array(bytes), GOLDEN_TEMPLATE));
    const r = f.next();
    assert.equal(r.kind, "error");
    assert.match((r as { reason: string }).reason, re);
    // After an error the stream is unusable: nothing more comes out, even valid bytes.
    f.push(GOLDEN_TEMPLATE);
    assert.equal(f.next().kind, "need-more");
  }
});

Deno.test("framing: fewer than 4 bytes or a partial message waits for more", () => {
  const f = new StreamFramer();
  f.push(GOLDEN_TEMPLATE.subarray(0, 3));
  assert.equal(f.next().kind, "need-more");
  f.push(GOLDEN_TEMPLATE.subarray(3, 200));
  assert.equal(f.next().kind, "need-more");
  assert.equal(f.buffered, 200);
});

Deno.test("framing: maximum-size (65535-byte) messages split across pushes come out whole, repeatedly", () => {
  const f = new StreamFramer();
  const big = new Uint8Array(65535);
  big.set([0, 10, 0xff, 0xff]);
  let n = 0;
  for (let i = 0; i < 50; i++) {
    f.push(big.subarray(0, 30000));
    f.push(big.subarray(30000));
    n += drain(f).length;
  }
  assert.equal(n, 50);
  assert.equal(f.buffered, 0);
});

Deno.test("framing: nextMessage returns views without result objects; takeError reports a framing error once", () => {
  const f = new StreamFramer();
  const bad = GOLDEN_DATA.slice();
  bad[1] = 9; // version 9
  f.push(concat(GOLDEN_TEMPLATE, GOLDEN_DATA.subarray(0, 10)));
  assert.equal(f.nextMessage()?.length, 288);
  assert.equal(f.nextMessage(), undefined, "partial message: need more");
  assert.equal(f.takeError(), undefined, "needing more bytes is not an error");
  f.push(GOLDEN_DATA.subarray(10));
  assert.deepEqual(f.nextMessage(), GOLDEN_DATA);
  f.push(bad);
  assert.equal(f.nextMessage(), undefined);
  assert.equal(f.takeError(), "framing: version 9 is not IPFIX (10)");
  assert.equal(f.takeError(), undefined, "reported once");
  f.push(GOLDEN_DATA);
  assert.equal(f.nextMessage(), undefined, "nothing after a framing error");
  assert.equal(f.next().kind, "need-more");
});

Deno.test("framing: nextMessageStart gives each message's bounds in the framer's buffer, no view", () => {
  const f = new StreamFramer();
  f.push(concat(GOLDEN_TEMPLATE, GOLDEN_DATA, GOLDEN_DATA.subarray(0, 10)));
  const first = f.nextMessageStart();
  assert.deepEqual(f.bytes.subarray(first, f.messageEnd), GOLDEN_TEMPLATE);
  const second = f.nextMessageStart();
  assert.equal(second, first + GOLDEN_TEMPLATE.length);
  assert.deepEqual(f.bytes.subarray(second, f.messageEnd), GOLDEN_DATA);
  assert.equal(f.nextMessageStart(), -1, "partial message: need more");
  assert.equal(f.takeError(), undefined);
  f.push(GOLDEN_DATA.subarray(10));
  const third = f.nextMessageStart();
  assert.deepEqual(f.bytes.subarray(third, f.messageEnd), GOLDEN_DATA);
  const bad = GOLDEN_DATA.slice();
  bad[1] = 9;
  f.push(bad);
  assert.equal(f.nextMessageStart(), -1);
  assert.equal(f.takeError(), "framing: version 9 is not IPFIX (10)");
});

/** Reads `bytes` into the framer the way the TCP listener does: straight into its buffer. */
function readInto(f: StreamFramer, bytes: Uint8Array): number {
  let off = 0;
  let reads = 0;
  while (off < bytes.length) {
    const space = f.readSpace();
    const n = Math.min(space.length, bytes.length - off);
    space.set(bytes.subarray(off, off + n));
    f.commit(n);
    off += n;
    reads++;
    if (n < space.length) break; // the peer has nothing more queued
  }
  assert.equal(off, bytes.length, "everything read");
  return reads;
}

Deno.test("framing: the buffer is 1 KiB while idle, grows while busy and goes back when caught up", () => {
  const f = new StreamFramer();
  assert.equal(f.capacity, IDLE_BUFFER_BYTES);
  // A burst of more than 64 KiB (unread meanwhile): the first read fills the idle buffer, the
  // buffer grows (8 KiB, 64 KiB) with each read that fills it, up to the busy buffer's size.
  const count = Math.ceil(((BUSY_BUFFER_BYTES / 4) * 2) / GOLDEN_DATA.length);
  const burst = concat(...new Array(count).fill(GOLDEN_DATA));
  readInto(f, burst);
  assert.equal(f.capacity, BUSY_BUFFER_BYTES);
  let n = 0;
  while (f.nextMessage() !== undefined) n++;
  assert.equal(n, count);
  assert.equal(f.release(), true, "caught up: the busy buffer is let go");
  assert.equal(f.capacity, IDLE_BUFFER_BYTES);
  assert.equal(f.release(), false, "already idle");
  // Small messages one at a time never grow it.
  for (let i = 0; i < 20; i++) {
    readInto(f, GOLDEN_DATA);
    assert.deepEqual(f.nextMessage(), GOLDEN_DATA);
    f.release();
    assert.equal(f.capacity, IDLE_BUFFER_BYTES);
  }
});

/**
 * Reads `bytes` as a connection does (a read, then every complete message taken out) until the
 * peer has nothing more queued; returns the messages and the largest buffer used.
 */
function readAndFrame(f: StreamFramer, bytes: Uint8Array): { messages: number; largest: number } {
  let off = 0;
  let messages = 0;
  let largest = 0;
  for (;;) {
    const space = f.readSpace();
    largest = Math.max(largest, f.capacity);
    const n = Math.min(space.length, bytes.length - off);
    space.set(bytes.subarray(off, off + n));
    f.commit(n);
    off += n;
    while (f.nextMessage() !== undefined) messages++;
    if (n < space.length) return { messages, largest };
  }
}

Deno.test("framing: growth for speed stays within the shared read budget, given back on release", () => {
  // Room for one busy buffer and an 8 KiB one, not for a second 64 KiB step.
  const budget = new ReadBudget(BUSY_BUFFER_BYTES + 9 * IDLE_BUFFER_BYTES);
  const a = new StreamFramer(budget);
  const b = new StreamFramer(budget);
  const count = Math.ceil((2 * BUSY_BUFFER_BYTES) / GOLDEN_DATA.length);
  const burst = concat(...new Array(count).fill(GOLDEN_DATA));
  assert.deepEqual(readAndFrame(a, burst), { messages: count, largest: BUSY_BUFFER_BYTES });
  assert.equal(budget.held, BUSY_BUFFER_BYTES);
  assert.equal(budget.limited, 0);
  // The second connection reads the same bytes, whole, in 8 KiB pieces; each read held back
  // is counted.
  assert.deepEqual(readAndFrame(b, burst), { messages: count, largest: 8 * IDLE_BUFFER_BYTES });
  assert.equal(budget.held, BUSY_BUFFER_BYTES + 8 * IDLE_BUFFER_BYTES);
  assert.ok(budget.limited >= Math.floor(burst.length / (8 * IDLE_BUFFER_BYTES)) - 1);
  // Caught up, the first gives its room back: the second grows all the way next time.
  assert.equal(a.release(), true);
  assert.equal(budget.held, 8 * IDLE_BUFFER_BYTES);
  const limited = budget.limited;
  assert.deepEqual(readAndFrame(b, burst), { messages: count, largest: BUSY_BUFFER_BYTES });
  assert.equal(budget.limited, limited);
  assert.equal(b.release(), true);
  assert.equal(budget.held, 0);
});

Deno.test("framing: a started message gets the room it needs over the budget; dispose gives it back", () => {
  const budget = new ReadBudget(1);
  const f = new StreamFramer(budget);
  const message = new Uint8Array(65535);
  message.set([0, 10, 0xff, 0xff]);
  message[65534] = 9;
  // Read in pieces the size of each space offered, framing after each: the buffer grows to
  // hold the message although nothing is left in the budget.
  readAndFrame(f, message.subarray(0, 40_000));
  assert.equal(f.buffered, 40_000);
  assert.ok(budget.held >= 40_000, `${budget.held}`);
  readInto(f, message.subarray(40_000));
  assert.equal(f.nextMessage()?.[65534], 9);
  assert.equal(f.release(), true);
  assert.equal(budget.held, 0);
  // A connection closed in the middle of a message gives its buffer back too.
  readAndFrame(f, message.subarray(0, 5000));
  assert.ok(budget.held > 0);
  f.dispose();
  assert.equal(budget.held, 0);
  assert.equal(f.buffered, 0);
  assert.equal(f.capacity, IDLE_BUFFER_BYTES);
});

Deno.test("framing: a started message holds only the bytes received, not the length announced", () => {
  const f = new StreamFramer();
  const header = new Uint8Array([0, 10, 0xff, 0xff, ...new Array(12).fill(0)]);
  f.push(concat(header, new Uint8Array(100)));
  assert.equal(f.nextMessage(), undefined);
  assert.equal(f.capacity, IDLE_BUFFER_BYTES, "116 bytes of a 65,535-byte message");
  assert.equal(f.release(), false, "a started message keeps its buffer");
  // Read directly, 1,100 bytes of it (more than the idle buffer) hold 8 KiB, not 64 KiB.
  const g = new StreamFramer();
  readInto(g, concat(header, new Uint8Array(1100 - 16)));
  assert.equal(g.nextMessage(), undefined);
  assert.equal(g.buffered, 1100);
  assert.equal(g.capacity, 8 * IDLE_BUFFER_BYTES);
  // Its bytes arrive: the buffer grows to what they need, the message comes out whole.
  const rest = new Uint8Array(65535 - 116);
  rest[rest.length - 1] = 7;
  readInto(f, rest);
  assert.ok(f.capacity >= 65535 && f.capacity <= 2 * BUSY_BUFFER_BYTES, `${f.capacity}`);
  const m = f.nextMessage();
  assert.equal(m?.length, 65535);
  assert.equal(m![65534], 7);
  assert.equal(f.buffered, 0);
});

Deno.test("framing: direct reads and pushes interleave, split anywhere, with the same result", () => {
  const stream = concat(GOLDEN_TEMPLATE, GOLDEN_DATA, GOLDEN_DATA, GOLDEN_TEMPLATE);
  for (const cut of [1, 3, 16, 288, 300, 463, 500]) {
    const f = new StreamFramer();
    readInto(f, stream.subarray(0, cut));
    const first = drain(f);
    f.push(stream.subarray(cut));
    const all = [...first, ...drain(f)];
    assert.deepEqual(all.map((m) => m.kind === "message" ? m.message.length : -1), [
      288,
      175,
      175,
      288,
    ], `cut ${cut}`);
  }
});
