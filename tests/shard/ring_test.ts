import assert from "node:assert/strict";
import { createRing, RING_MAX_CAPACITY, RingReader, RingWriter } from "../../src/shard/ring.ts";
import { prng } from "../_helpers/prng.ts";
import { frameChecksum, frameContent } from "./ring_frames.ts";
import type { PeerResult, PeerStart } from "./ring_peer_worker.ts";

function pair(capacity: number): { w: RingWriter; r: RingReader } {
  const sab = createRing(capacity);
  return { w: new RingWriter(sab), r: new RingReader(sab) };
}

function bytesOf(n: number, fill: number): Uint8Array {
  return new Uint8Array(n).fill(fill);
}

Deno.test("ring: capacity is rounded up to a power of two; bad capacities throw", () => {
  assert.equal(new RingWriter(createRing(1)).capacity, 64);
  assert.equal(new RingWriter(createRing(1000)).capacity, 1024);
  assert.equal(new RingReader(createRing(4096)).capacity, 4096);
  assert.throws(() => createRing(0), /capacity 0/);
  assert.throws(() => createRing(RING_MAX_CAPACITY + 1), /more than/);
  assert.throws(() => new RingWriter(new SharedArrayBuffer(1024)), /not a ring buffer/);
});

Deno.test("ring: frames come out in order with their bytes; empty ring gives undefined", () => {
  const { w, r } = pair(256);
  assert.equal(r.next(), undefined);
  assert.ok(w.write(new Uint8Array([1, 2, 3])));
  assert.ok(w.write(new Uint8Array(0)));
  const view = w.reserve(5)!;
  view.set([9, 8, 7, 6, 5]);
  w.commit(2); // a shorter commit publishes only the bytes written
  assert.deepEqual([...r.next()!], [1, 2, 3]);
  r.release();
  assert.equal(r.next()!.length, 0);
  r.release();
  assert.deepEqual([...r.next()!], [9, 8]);
  r.release();
  assert.equal(r.next(), undefined);
  assert.equal(w.usedBytes, 0);
});

Deno.test("ring: a full ring refuses a frame until the reader releases one", () => {
  // 64 bytes: four frames of 8 payload bytes (8 header + 8) fill it exactly.
  const { w, r } = pair(64);
  for (let i = 0; i < 4; i++) assert.ok(w.write(bytesOf(8, i)), `frame ${i}`);
  assert.equal(w.usedBytes, 64);
  assert.equal(w.reserve(0), null);
  assert.equal(w.write(bytesOf(1, 9)), false);
  assert.deepEqual([...r.next()!], [0, 0, 0, 0, 0, 0, 0, 0]);
  assert.equal(w.write(bytesOf(1, 9)), false, "not free before release");
  r.release();
  // The freed space is at the start: the frame lands there, the ring ends exactly at its end.
  assert.ok(w.write(bytesOf(8, 4)));
  for (let i = 1; i <= 4; i++) {
    assert.deepEqual([...r.next()!], [...bytesOf(8, i)]);
    r.release();
  }
  assert.equal(r.next(), undefined);
});

Deno.test("ring: frames larger than the ring are refused with an error, the largest fits", () => {
  const { w, r } = pair(256);
  assert.equal(w.maxFrameBytes, 248);
  assert.throws(() => w.reserve(249), /frame of 249 bytes is larger than the ring allows \(248/);
  assert.throws(() => w.write(new Uint8Array(1000)), RangeError);
  assert.ok(w.write(bytesOf(248, 7)));
  assert.equal(r.next()!.length, 248);
  r.release();
  // Not at offset 0 any more: the largest frame needs the skip marker and the reader to pass it.
  assert.ok(w.write(bytesOf(8, 1)));
  assert.deepEqual([...r.next()!], [...bytesOf(8, 1)]);
  r.release();
  assert.equal(w.reserve(248), null);
  assert.equal(r.next(), undefined, "only the skip marker was published");
  const big = w.reserve(248);
  assert.ok(big !== null);
  big.fill(3);
  w.commit();
  assert.deepEqual([...r.next()!], [...bytesOf(248, 3)]);
  r.release();
});

Deno.test("ring: misuse of reserve/commit/next/release throws", () => {
  const { w, r } = pair(256);
  assert.throws(() => w.commit(), /without a reserved frame/);
  w.reserve(4);
  assert.throws(() => w.reserve(4), /before commit/);
  assert.throws(() => w.commit(5), /5 bytes, 4 reserved/);
  w.commit();
  assert.throws(() => r.release(), /without a frame/);
  r.next();
  assert.throws(() => r.next(), /before release/);
  r.release();
  assert.throws(() => w.reserve(-1), RangeError);
});

Deno.test("ring: random frame sizes wrap around in order, against a queue model", () => {
  const rand = prng(42);
  for (const cap of [64, 256, 1024]) {
    const { w, r } = pair(cap);
    const model: Uint8Array[] = [];
    let seq = 0;
    let refused = 0;
    let skips = 0;
    for (let step = 0; step < 20_000; step++) {
      if (rand() < 0.55) {
        const n = Math.floor(rand() * Math.min(w.maxFrameBytes + 1, 200));
        const f = bytesOf(n, seq & 255);
        if (n > 0) f[0] = seq >>> 8;
        const before = w.usedBytes;
        if (w.write(f)) {
          model.push(f);
          seq++;
        } else {
          refused++;
          // Refused only when the frame (header and padding) does not fit in the free bytes.
          assert.ok(w.usedBytes + ((n + 15) & ~7) > cap, `cap ${cap} used ${before} n ${n}`);
          if (w.usedBytes > before) skips++;
        }
      } else {
        const got = r.next();
        const want = model.shift();
        if (want === undefined) {
          assert.equal(got, undefined);
          continue;
        }
        assert.ok(got !== undefined, `frame ${seq - model.length - 1} missing`);
        assert.deepEqual(got, want);
        r.release();
      }
    }
    assert.ok(refused > 100 && skips > 10, `cap ${cap}: refused ${refused}, skips ${skips}`);
    for (const want of model) {
      assert.deepEqual(r.next(), want);
      r.release();
    }
    assert.equal(r.next(), undefined);
  }
});

Deno.test("ring: close lets the reader drain the frames, then reports closed", async () => {
  const { w, r } = pair(256);
  assert.equal(r.waitForData(1), "timeout");
  assert.equal(await r.waitForDataAsync(1), "timeout");
  w.write(bytesOf(3, 1));
  w.close();
  w.close(); // idempotent
  assert.ok(w.closed);
  assert.throws(() => w.write(bytesOf(1, 1)), /write after close/);
  assert.equal(r.done, false);
  assert.equal(r.waitForData(1000), "ready");
  assert.equal(await r.waitForDataAsync(1000), "ready");
  assert.deepEqual([...r.next()!], [1, 1, 1]);
  assert.equal(r.done, false, "a held frame is not done");
  r.release();
  assert.ok(r.done);
  assert.equal(r.waitForData(1000), "closed");
  assert.equal(await r.waitForDataAsync(1000), "closed");
});

Deno.test("ring: an untimed wait ends on the writer's notify, and says whether it waited", async () => {
  const { w, r } = pair(256);
  // An untimed wait does not keep this (main) thread's event loop alive; a worker's is kept
  // alive by its message port.
  const alive = setInterval(() => {}, 1000);
  assert.equal(r.ready(), false);
  // Nothing there: the wait lasts until a frame is published (from a later task).
  setTimeout(() => w.write(bytesOf(2, 7)), 20);
  assert.equal(await r.waitForDataAsync(Infinity), "ready");
  assert.equal(r.waited, true);
  assert.ok(r.ready());
  // A frame already there: at once, without waiting.
  assert.equal(await r.waitForDataAsync(Infinity), "ready");
  assert.equal(r.waited, false);
  assert.deepEqual([...r.next()!], [7, 7]);
  r.release();
  assert.equal(r.ready(), false);
  // The close ends an untimed wait too.
  setTimeout(() => w.close(), 20);
  assert.equal(await r.waitForDataAsync(Infinity), "closed");
  assert.equal(r.waited, true);
  assert.ok(r.done);
  clearInterval(alive);
});

Deno.test("ring: a writer's wait reports space once the reader releases", async () => {
  const { w, r } = pair(64);
  for (let i = 0; i < 4; i++) w.write(bytesOf(8, i));
  assert.equal(w.waitForSpace(8, 1), "timeout");
  assert.equal(await w.waitForSpaceAsync(8, 1), "timeout");
  const waiting = w.waitForSpaceAsync(8, 5000);
  setTimeout(() => {
    r.next();
    r.release();
  }, 10);
  assert.equal(await waiting, "ready");
  assert.ok(w.write(bytesOf(8, 9)));
});

Deno.test("ring: a reader passing a skip marker wakes the writer waiting for that space", async () => {
  const { w, r } = pair(256);
  w.write(bytesOf(8, 1));
  r.next();
  r.release();
  // The largest frame does not fit before the end: a skip marker is published, nothing else.
  assert.equal(w.reserve(248), null);
  const t0 = performance.now();
  // Without the wake-up the wait would end at its timeout, space found then ("ready" too).
  const waiting = w.waitForSpaceAsync(248, 60_000);
  setTimeout(() => assert.equal(r.next(), undefined), 10);
  assert.equal(await waiting, "ready");
  assert.ok(performance.now() - t0 < 30_000, "woken by the reader, not by the timeout");
  w.write(bytesOf(248, 2));
  w.close();
  assert.equal(r.waitForData(0), "ready");
  assert.equal(r.next()!.length, 248);
  r.release();
  assert.ok(r.done);
});

Deno.test("ring: a skip marker alone is not data; with a closed ring it is done", () => {
  const { w, r } = pair(256);
  w.write(bytesOf(8, 1));
  r.next();
  r.release();
  assert.equal(w.reserve(248), null); // publishes only a skip marker
  assert.equal(r.waitForData(1), "timeout");
  w.close();
  assert.ok(r.done);
  assert.equal(r.waitForData(1000), "closed");
});

function startPeer(m: PeerStart): Promise<PeerResult> {
  const worker = new Worker(new URL("./ring_peer_worker.ts", import.meta.url).href, {
    type: "module",
  });
  return new Promise<PeerResult>((resolve, reject) => {
    worker.onmessage = (e: MessageEvent<PeerResult | { error: string }>) => {
      worker.terminate();
      if ("error" in e.data) reject(new Error(`worker: ${e.data.error}`));
      else resolve(e.data);
    };
    worker.onerror = (e) => {
      e.preventDefault();
      worker.terminate();
      reject(new Error(`worker: ${e.message}`));
    };
    worker.postMessage(m);
  });
}

const FRAMES = 100_000;

Deno.test("ring: a Worker consumer reads 1e5 frames from the main thread with checksums", async () => {
  // 4 KiB: the producer (waiting asynchronously) fills it many times over.
  const sab = createRing(4096);
  const result = startPeer({ role: "consume", sab });
  const w = new RingWriter(sab);
  let checksum = 0;
  let bytes = 0;
  let waits = 0;
  for (let i = 0; i < FRAMES; i++) {
    const f = frameContent(7, i);
    while (!w.write(f)) {
      waits++;
      assert.equal(await w.waitForSpaceAsync(f.length, 10_000), "ready");
    }
    checksum = (Math.imul(checksum, 31) + frameChecksum(f)) >>> 0;
    bytes += f.length;
  }
  w.close();
  const got = await result;
  assert.deepEqual(
    { frames: got.frames, bytes: got.bytes, checksum: got.checksum },
    { frames: FRAMES, bytes, checksum },
  );
  assert.ok(waits > 0, "the producer never had to wait: the test did not fill the ring");
});

Deno.test("ring: the main thread reads 1e5 frames from a Worker producer (async waits)", async () => {
  const sab = createRing(4096);
  const result = startPeer({ role: "produce", sab, frames: FRAMES, seed: 11 });
  const r = new RingReader(sab);
  let checksum = 0;
  let bytes = 0;
  let frames = 0;
  for (;;) {
    const f = r.next();
    if (f === undefined) {
      if (await r.waitForDataAsync(10_000) === "closed") break;
      continue;
    }
    checksum = (Math.imul(checksum, 31) + frameChecksum(f)) >>> 0;
    bytes += f.length;
    frames++;
    r.release();
  }
  const sent = await result;
  assert.deepEqual({ frames, bytes, checksum }, {
    frames: sent.frames,
    bytes: sent.bytes,
    checksum: sent.checksum,
  });
  assert.equal(frames, FRAMES);
});
