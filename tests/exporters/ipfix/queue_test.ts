import assert from "node:assert/strict";
import {
  CHUNK_BYTES,
  ENTRY_HEADER_BYTES,
  RecordQueue,
} from "../../../src/exporters/ipfix/queue.ts";

/** Queues a record of `n` bytes, each byte `fill`. */
function push(q: RecordQueue, kind: number, n: number, fill: number): void {
  const at = q.reserve(n);
  q.tailBuffer.fill(fill, at, at + n);
  q.commit(kind, n);
}

/** The records taken, as [kind, length, first byte]. */
function takeAll(q: RecordQueue, max = Infinity): [number, number, number][] {
  return q.take(max).map((r) => [r.kind, r.bytes.length, r.bytes[0]]);
}

Deno.test("records come out in order with their kind, counted in records and bytes", () => {
  const q = new RecordQueue();
  push(q, 0, 10, 1);
  push(q, 1, 20, 2);
  push(q, 0, 30, 3);
  assert.equal(q.length, 3);
  assert.equal(q.bytes, 60 + 3 * ENTRY_HEADER_BYTES);
  assert.deepEqual(takeAll(q, 2), [[0, 10, 1], [1, 20, 2]]);
  assert.equal(q.length, 1);
  assert.equal(q.bytes, 30 + ENTRY_HEADER_BYTES);
  assert.deepEqual(takeAll(q), [[0, 30, 3]]);
  assert.equal(q.length, 0);
  assert.equal(q.bytes, 0);
  assert.deepEqual(q.take(5), []);
});

Deno.test("records span chunks; one larger than a chunk gets its own", () => {
  const q = new RecordQueue();
  const n = 1000;
  const count = Math.ceil((3 * CHUNK_BYTES) / (n + ENTRY_HEADER_BYTES));
  for (let i = 0; i < count; i++) push(q, i % 2, n, i & 0xff);
  push(q, 1, CHUNK_BYTES + 10, 0xee);
  push(q, 0, 5, 0xdd);
  const got = takeAll(q);
  assert.equal(got.length, count + 2);
  for (let i = 0; i < count; i++) assert.deepEqual(got[i], [i % 2, n, i & 0xff], `record ${i}`);
  assert.deepEqual(got.slice(count), [[1, CHUNK_BYTES + 10, 0xee], [0, 5, 0xdd]]);
  assert.equal(q.bytes, 0);
});

Deno.test("dropOldest takes from the head, records put back first", () => {
  const q = new RecordQueue();
  for (let i = 0; i < 5; i++) push(q, 0, 8, i);
  const taken = q.take(2);
  q.pushFront(taken);
  assert.equal(q.length, 5);
  assert.equal(q.bytes, 5 * (8 + ENTRY_HEADER_BYTES));
  assert.ok(q.dropOldest());
  assert.deepEqual(takeAll(q).map((r) => r[2]), [1, 2, 3, 4]);
  assert.equal(q.dropOldest(), false);
});

Deno.test("records put back are copies: writing the queue afterwards does not change them", () => {
  const q = new RecordQueue();
  push(q, 1, 4, 7);
  const taken = q.take(1);
  q.pushFront(taken);
  // The emptied chunk is rewound: the next record is written where the taken one was.
  push(q, 0, 4, 9);
  assert.deepEqual(takeAll(q), [[1, 4, 7], [0, 4, 9]]);
});

Deno.test("a reservation never committed leaves nothing; clear() empties", () => {
  const q = new RecordQueue();
  push(q, 0, 4, 1);
  q.reserve(100);
  assert.equal(q.length, 1);
  push(q, 1, 4, 2);
  assert.deepEqual(takeAll(q), [[0, 4, 1], [1, 4, 2]]);
  push(q, 0, 4, 3);
  q.pushFront([{ kind: 1, bytes: new Uint8Array(3) }]);
  q.clear();
  assert.equal(q.length, 0);
  assert.equal(q.bytes, 0);
  assert.deepEqual(q.take(10), []);
});

Deno.test("a queue that keeps draining reuses its chunk instead of growing", () => {
  const q = new RecordQueue();
  q.reserve(1);
  const first = q.tailBuffer;
  for (let round = 0; round < 10_000; round++) {
    push(q, 0, 600, round & 0xff);
    assert.deepEqual(takeAll(q), [[0, 600, round & 0xff]]);
  }
  // 10,000 records of 600 bytes went through one 1 MiB chunk.
  q.reserve(1);
  assert.equal(q.tailBuffer, first);
});
