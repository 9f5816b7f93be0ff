/**
 * The spool on a full disk, without mounting one: a segment writer that stores part of a frame
 * and then fails as `write(2)` does with no space left, and cursor files that are symlinks to
 * `/dev/full` (every write fails with `ENOSPC`).
 */

import assert from "node:assert/strict";
import {
  FLAG_OUTCOME_UNKNOWN,
  newBatchId,
  type SegmentWriter,
  Spool,
  type SpoolEntry,
  type SpoolStats,
} from "../../src/spool/mod.ts";
import { setLogWriter } from "../../src/log.ts";

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

/** Makes the next write of `name` in `dir` fail with ENOSPC (a symlink to /dev/full). */
async function full(dir: string, name: string): Promise<void> {
  await Deno.remove(`${dir}/${name}`).catch(() => {});
  await Deno.symlink("/dev/full", `${dir}/${name}`);
}

Deno.test("on a full disk the cursor is rewritten in place: delivery goes on, a crash still flags the batch in flight", async () => {
  await withDir(async (dir) => {
    const opts = { maxBytes: 1 << 20 };
    const spool = await Spool.open(dir, opts);
    for (const n of ["a", "b", "c", "d"]) await spool.append(batch(n));
    const a = (await spool.peek({ markInflight: true }))!;
    await spool.ack(a);
    const lines: string[] = [];
    const restore = setLogWriter((line) => lines.push(line));
    let c;
    try {
      // From here on no new file can be written (cursor.tmp), but `cursor` can be overwritten.
      await full(dir, "cursor.tmp");
      const b = (await spool.peek({ markInflight: true }))!;
      assert.equal(nameOf(b.payload), "b");
      await full(dir, "cursor.tmp");
      await spool.ack(b);
      await full(dir, "cursor.tmp");
      c = (await spool.peek({ markInflight: true }))!;
      assert.equal(nameOf(c.payload), "c");
    } finally {
      setLogWriter(restore);
    }
    assert.equal(spool.stats().cursorWriteFailures, 0, "saved in place");
    assert.equal(lines.filter((l) => l.includes("cursor rewritten in place")).length, 1);
    await spool.close(); // no ack: the process "died" during the delivery of c
    await Deno.remove(`${dir}/cursor.tmp`).catch(() => {});
    const again = await Spool.open(dir, opts);
    const first = (await again.peek())!;
    assert.equal(first.id, c.id, "b's ack was saved: c comes next");
    assert.equal(first.flags & FLAG_OUTCOME_UNKNOWN, FLAG_OUTCOME_UNKNOWN, "c was in flight");
    await again.ack(first);
    assert.deepEqual(await drain(again), ["d"]);
    await again.close();
  });
});

Deno.test("when the cursor cannot be saved at all, the spool still drains; counted, logged rate-limited", async () => {
  await withDir(async (dir) => {
    const opts = { maxBytes: 1 << 20, segmentBytes: 4096 };
    const spool = await Spool.open(dir, opts);
    const names = seq("x", 10);
    // 1500 bytes each: two batches per segment, so consumed segments are retired as well.
    for (const n of names) await spool.append(batch(n, 2, 1500));
    await spool.ack((await spool.peek({ markInflight: true }))!); // x0: the last saved cursor
    const saved = await Deno.readTextFile(`${dir}/cursor`);
    await full(dir, "cursor");
    const lines: string[] = [];
    const restore = setLogWriter((line) => lines.push(line));
    const delivered: string[] = [];
    try {
      for (let i = 1; i < 10; i++) {
        await full(dir, "cursor.tmp");
        const lease = (await spool.peek({ markInflight: true }))!;
        delivered.push(nameOf(lease.payload));
        if (i === 9) break; // the process "dies" while x9 is delivered
        await full(dir, "cursor.tmp");
        await spool.ack(lease);
      }
    } finally {
      setLogWriter(restore);
    }
    assert.deepEqual(delivered, names.slice(1), "every batch handed out for delivery");
    const s = spool.stats();
    assert.equal(s.consumed, 18);
    // A peek per batch and an ack for each but x9's (one that empties a segment saves where the
    // next segment starts).
    assert.equal(s.cursorWriteFailures, 17);
    assertLedger(s);
    const warned = lines.filter((l) => l.includes("cursor not saved"));
    assert.ok(warned.length >= 1, "logged");
    assert.ok(warned.length < s.cursorWriteFailures, "rate-limited");
    await spool.close();
    // Back to the last saved cursor (the symlink to /dev/full cannot be read): the segments
    // consumed meanwhile are gone, the one of x8 and x9 replays whole, x8 again: nothing lost.
    await Deno.remove(`${dir}/cursor`);
    await Deno.remove(`${dir}/cursor.tmp`).catch(() => {});
    await Deno.writeTextFile(`${dir}/cursor`, saved);
    const again = await Spool.open(dir, opts);
    assert.deepEqual(await drain(again), ["x8", "x9"]);
    assert.equal(again.stats().corruptFrames, 0);
    await again.close();
  });
});

Deno.test("draining frees the space of the open segment too", async () => {
  await withDir(async (dir) => {
    const opts = { maxBytes: 1 << 20, segmentBytes: 1 << 20 };
    const spool = await Spool.open(dir, opts);
    for (const n of seq("a", 3)) await spool.append(batch(n));
    assert.equal((await segmentSizes(dir)).length, 1, "one open segment");
    assert.deepEqual(await drain(spool), seq("a", 3));
    assert.deepEqual(await segmentSizes(dir), [], "the consumed open segment is removed");
    assert.equal(spool.stats().bytes, 0);
    assert.equal(spool.stats().segments, 0);
    await spool.append(batch("b"));
    assert.equal((await segmentSizes(dir)).length, 1, "the next append starts a new one");
    assert.deepEqual(await drain(spool), ["b"]);
    await spool.close();
    const again = await Spool.open(dir, opts);
    assert.equal(again.stats().recovered, 0);
    assert.deepEqual(await drain(again), []);
    await again.close();
  });
});
