/**
 * The spool on a full disk, without mounting one: a segment writer that stores part of a frame
 * and then fails as `write(2)` does with no space left.
 */

import assert from "node:assert/strict";
import {
  newBatchId,
  type SegmentWriter,
  Spool,
  type SpoolEntry,
  type SpoolStats,
} from "../../src/spool/mod.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

function batch(name: string, records = 2, size = 300): Omit<SpoolEntry, "recovered"> {
  return { id: newBatchId(), records, flags: 0, payload: enc.encode(name.padEnd(size, ".")) };
}

function nameOf(payload: Uint8Array): string {
  return dec.decode(payload).replace(/\.+$/, "");
}

/** Consumes everything (marking each delivery in flight, as the sinks do): the names in order. */
async function drain(spool: Spool, before?: () => Promise<void>): Promise<string[]> {
  const out: string[] = [];
  for (;;) {
    await before?.();
    const lease = await spool.peek({ markInflight: true });
    if (lease === undefined) return out;
    out.push(nameOf(lease.payload));
    await before?.();
    await spool.ack(lease);
  }
}

function assertLedger(s: SpoolStats): void {
  assert.equal(s.appended + s.recovered, s.consumed + s.dropped + s.records);
}

async function withDir(f: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "spool-full-test-" });
  try {
    await f(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function noSpace(): Error {
  return Object.assign(new Error("No space left on device (os error 28)"), { code: "ENOSPC" });
}

/**
 * Opens real segment files; while `fail.after` is set, writes store that many more bytes and
 * then fail (disk full); with `fail.truncate` cutting the file fails too.
 */
function fillingDisk(fail: { after?: number; truncate?: boolean }) {
  return async (path: string): Promise<SegmentWriter> => {
    const f = await Deno.open(path, { write: true, create: true, truncate: true });
    return {
      async write(p: Uint8Array): Promise<number> {
        if (fail.after === undefined) return await f.write(p);
        if (fail.after === 0) throw noSpace();
        const n = await f.write(p.subarray(0, Math.min(p.length, fail.after)));
        fail.after -= n;
        return n;
      },
      truncate: (len?: number) => fail.truncate ? Promise.reject(noSpace()) : f.truncate(len),
      seek: (offset: number | bigint, whence: Deno.SeekMode) => f.seek(offset, whence),
      close: () => f.close(),
    };
  };
}

async function segmentSizes(dir: string): Promise<number[]> {
  const names: string[] = [];
  for await (const e of Deno.readDir(dir)) if (e.name.endsWith(".seg")) names.push(e.name);
  names.sort();
  return await Promise.all(names.map(async (n) => (await Deno.stat(`${dir}/${n}`)).size));
}

const seq = (p: string, n: number) => Array.from({ length: n }, (_, i) => `${p}${i}`);

Deno.test("a frame whose write fails part-way (disk full) is cut off: only that batch is lost", async () => {
  await withDir(async (dir) => {
    const fail: { after?: number } = {};
    const opts = { maxBytes: 1 << 20, segmentBytes: 1 << 20 };
    const spool = await Spool.open(dir, { ...opts, openSegment: fillingDisk(fail) });
    for (const n of seq("a", 3)) assert.equal(await spool.append(batch(n)), true);
    fail.after = 100; // 100 bytes of the next frame reach the file, then the disk is full
    await assert.rejects(spool.append(batch("lost")), /No space left/);
    fail.after = undefined; // space comes back
    assert.deepEqual(await segmentSizes(dir), [spool.stats().bytes], "no stray bytes");
    for (const n of seq("b", 3)) assert.equal(await spool.append(batch(n)), true);
    assert.deepEqual(await drain(spool), [...seq("a", 3), ...seq("b", 3)]);
    let s = spool.stats();
    assert.equal(s.consumed, 12);
    assert.equal(s.dropped, 0);
    assert.equal(s.corruptFrames, 0);
    assertLedger(s);
    assert.equal(await spool.append(batch("c")), true);
    await spool.close();
    // The file holds whole frames only: a restart finds nothing to cut.
    const again = await Spool.open(dir, opts);
    s = again.stats();
    assert.equal(s.corruptFrames, 0);
    assert.equal(s.truncatedBytes, 0);
    assert.deepEqual(await drain(again), ["c"]);
    await again.close();
  });
});

Deno.test("when a partial frame cannot be cut, later batches go to a new segment and all replay", async () => {
  await withDir(async (dir) => {
    const fail: { after?: number; truncate?: boolean } = {};
    const opts = { maxBytes: 1 << 20, segmentBytes: 1 << 20 };
    const spool = await Spool.open(dir, { ...opts, openSegment: fillingDisk(fail) });
    for (const n of seq("a", 3)) await spool.append(batch(n));
    fail.after = 100;
    fail.truncate = true;
    await assert.rejects(spool.append(batch("lost")), /No space left/);
    fail.after = undefined;
    fail.truncate = false;
    for (const n of seq("b", 3)) await spool.append(batch(n));
    const sizes = await segmentSizes(dir);
    assert.equal(sizes.length, 2, "a new segment after the one with the stray bytes");
    assert.equal(sizes[0], spool.stats().bytes - sizes[1] + 100, "the stray bytes stay past it");
    assert.deepEqual(await drain(spool), [...seq("a", 3), ...seq("b", 3)]);
    const s = spool.stats();
    assert.equal(s.dropped, 0);
    assert.equal(s.corruptFrames, 0);
    assertLedger(s);
    await spool.close();
  });
});
