import assert from "node:assert/strict";
import { relative as relativePath } from "node:path";
import { ManualClock } from "../../../src/clock.ts";
import type { FlowLoggerConfig } from "../../../src/exporters/flow_log/config.ts";
import { LogExporter } from "../../../src/exporters/flow_log/exporter.ts";
import {
  backupTimestamp,
  encodeLines,
  type LogFileHandle,
  RotatingFile,
} from "../../../src/exporters/flow_log/rotate.ts";
import { formatLogLine } from "../../../src/exporters/flow_log/format.ts";
import { toFlatRecord } from "../../../src/exporters/flat_record.ts";
import { setLogWriter } from "../../../src/log.ts";
import { fixtureFlow } from "../fixtures.ts";
import { enabledFlowLogger } from "../../_helpers/flow_logger_config.ts";

const BACKUP_RE = /^flows-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}\.\d{3}\.log(\.gz)?$/;

/** An enabled logger that rotates at 1 MiB, with raw (not pretty) lines. */
function loggerConfig(path: string, extra: Partial<FlowLoggerConfig> = {}): FlowLoggerConfig {
  return enabledFlowLogger(path, { maxSize: 1, prettyPrint: false, ...extra });
}

async function listDir(dir: string): Promise<string[]> {
  const names: string[] = [];
  for await (const e of Deno.readDir(dir)) names.push(e.name);
  return names.sort();
}

async function readMaybeGzip(path: string): Promise<string> {
  const data = await Deno.readFile(path);
  if (!path.endsWith(".gz")) return new TextDecoder().decode(data);
  const stream = new Blob([data]).stream().pipeThrough(new DecompressionStream("gzip"));
  return await new Response(stream).text();
}

/** A 10-byte RotatingFile keeping no backups, over a file at `path` that already holds `existing`. */
async function tenByteFileOver(path: string, existing: string): Promise<RotatingFile> {
  await Deno.writeTextFile(path, existing);
  return new RotatingFile(path, {
    maxSizeBytes: 10,
    maxBackups: 0,
    maxAgeDays: 0,
    compress: false,
    clock: new ManualClock(),
  });
}

function assertWholeLines(text: string, where: string): number {
  assert.ok(text === "" || text.endsWith("\n"), `${where} ends mid-line`);
  const lines = text === "" ? [] : text.slice(0, -1).split("\n");
  for (const l of lines) {
    assert.equal(l.split(",").length, 28, `${where}: split line ${JSON.stringify(l)}`);
    assert.ok(l.startsWith("1637706961,"), `${where}: line does not start a record`);
  }
  return lines.length;
}

/**
 * Log files whose writes can be made to fail part-way once, as on a full disk: `failAfter(n)`
 * lets n more bytes through (short writes), then the next write throws ENOSPC. `failTruncate`
 * makes the next truncate fail too.
 */
function faultyFiles() {
  let budget: number | undefined;
  let truncateFails = 0;
  let failures = 0;
  const wrap = (f: Deno.FsFile): LogFileHandle => ({
    async write(p: Uint8Array): Promise<number> {
      if (budget === undefined) return await f.write(p);
      if (budget === 0) {
        budget = undefined;
        failures++;
        throw new Error("No space left on device (os error 28)");
      }
      const n = await f.write(p.subarray(0, Math.min(p.length, budget)));
      budget -= n;
      return n;
    },
    truncate(len?: number): Promise<void> {
      if (truncateFails > 0) {
        truncateFails--;
        return Promise.reject(new Error("Input/output error (os error 5)"));
      }
      return f.truncate(len);
    },
    stat: () => f.stat(),
    close: () => f.close(),
  });
  return {
    wrap,
    failAfter(bytes: number): void {
      budget = bytes;
    },
    failTruncate(): void {
      truncateFails = 1;
    },
    get failures(): number {
      return failures;
    },
  };
}

/** Bytes of one raw fixture line, to place a fault in the middle of a line. */
const LINE_BYTES = new TextEncoder().encode(formatLogLine(toFlatRecord(fixtureFlow()), false))
  .length;

Deno.test("backup timestamps are UTC with millisecond precision", () => {
  assert.equal(backupTimestamp(Date.UTC(2023, 6, 25, 10, 0, 0, 7)), "2023-07-25T10-00-00.007");
});

Deno.test("rotation by size never splits a line; backups are gzipped and capped", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-" });
  const clock = new ManualClock();
  const exp = new LogExporter(loggerConfig(`${dir}/flows.log`, { maxBackups: 2 }), {
    clock,
    maxSizeBytes: 1000, // two ~370-byte lines per file
    flushIntervalMs: 3_600_000,
  });
  try {
    await exp.start();
    for (let i = 0; i < 9; i++) {
      exp.addRecord(fixtureFlow());
      await exp.flush();
      clock.advance(1000);
    }
    await exp.stop(); // also waits for compression and cleanup
    const names = await listDir(dir);
    const backups = names.filter((n) => n !== "flows.log");
    assert.ok(names.includes("flows.log"));
    assert.equal(backups.length, 2, names.join(" "));
    for (const b of backups) assert.match(b, BACKUP_RE), assert.ok(b.endsWith(".log.gz"), b);
    let lines = 0;
    for (const n of names) {
      const text = await readMaybeGzip(`${dir}/${n}`);
      assert.ok(new TextEncoder().encode(text).length <= 1000, `${n} too large`);
      lines += assertWholeLines(text, n);
    }
    // 9 lines, 2 per file: 5 files were produced, the 2 oldest backups were removed.
    assert.equal(exp.stats().rotations, 4);
    assert.equal(lines, 5);
    assert.equal(exp.stats().exported, 9);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("one big flush is split at line boundaries across several files", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-" });
  const exp = new LogExporter(
    loggerConfig(`${dir}/flows.log`, { maxBackups: 0, compress: false }),
    { clock: new ManualClock(), maxSizeBytes: 1000, flushIntervalMs: 3_600_000 },
  );
  try {
    for (let i = 0; i < 7; i++) exp.addRecord(fixtureFlow());
    await exp.stop();
    const names = await listDir(dir);
    // Same manual time for every rotation: names must still be distinct.
    assert.equal(names.length, 4, names.join(" "));
    let lines = 0;
    for (const n of names) lines += assertWholeLines(await Deno.readTextFile(`${dir}/${n}`), n);
    assert.equal(lines, 7);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a log path that is a FIFO (or a device) is neither opened nor rotated: the batch fails, counted", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-" });
  const path = `${dir}/flows.log`;
  const made = await new Deno.Command("mkfifo", { args: [path] }).output();
  assert.ok(made.success, new TextDecoder().decode(made.stderr));
  const errors: Error[] = [];
  const f = new RotatingFile(path, {
    maxSizeBytes: 10,
    maxBackups: 1,
    maxAgeDays: 0,
    compress: false,
    clock: new ManualClock(),
    onError: (e) => errors.push(e),
  });
  try {
    // Before, the open (write, append) of the FIFO blocked until a reader came.
    let timer: ReturnType<typeof setTimeout> | undefined;
    const result = await Promise.race([
      f.writeLines(["a line longer than ten bytes\n", "another\n"]),
      new Promise<"blocked">((r) => timer = setTimeout(() => r("blocked"), 3000)),
    ]);
    clearTimeout(timer);
    assert.notEqual(result, "blocked", "the write blocked on the FIFO");
    if (result === "blocked") return;
    assert.equal(result.written, 0);
    assert.match(String(result.error), /not a regular file \(FIFO\): not written to, not rotated/);
    assert.ok((await Deno.lstat(path)).isFifo, "the FIFO is still there, not renamed");
    assert.deepEqual(await listDir(dir), ["flows.log"]);
  } finally {
    await f.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("maxAge removes backups older than the limit (clock-driven)", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-" });
  const clock = new ManualClock();
  const line = "x".repeat(99) + "\n";
  const f = new RotatingFile(`${dir}/flows.log`, {
    maxSizeBytes: 150,
    maxBackups: 0,
    maxAgeDays: 1,
    compress: false,
    clock,
  });
  try {
    await f.writeLines([line, line]); // rotation 1 at t0
    await f.settled();
    const first = `flows-${backupTimestamp(clock.wallMs())}.log`;
    assert.deepEqual(await listDir(dir), [first, "flows.log"]);
    clock.advance(2 * 86_400_000);
    await f.writeLines([line]); // rotation 2, two days later: the first backup is too old
    await f.settled();
    assert.deepEqual(await listDir(dir), [
      `flows-${backupTimestamp(clock.wallMs())}.log`,
      "flows.log",
    ]);
  } finally {
    await f.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a line larger than maxSize is dropped and counted, the rest is written", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-" });
  const restore = setLogWriter(() => {});
  const f = new RotatingFile(`${dir}/flows.log`, {
    maxSizeBytes: 50,
    maxBackups: 0,
    maxAgeDays: 0,
    compress: false,
  });
  try {
    const res = await f.writeLines(["short\n", "y".repeat(80) + "\n", "after\n"]);
    assert.deepEqual(res, { written: 2, tooLong: 1 });
    assert.equal(await Deno.readTextFile(`${dir}/flows.log`), "short\nafter\n");
  } finally {
    await f.close();
    setLogWriter(restore);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("I/O errors are logged and counted, then the file is reopened", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-" });
  const logLines: string[] = [];
  const restore = setLogWriter((l) => logLines.push(l));
  const sub = `${dir}/sub`;
  const path = `${sub}/flows.log`;
  const exp = new LogExporter(loggerConfig(path), { flushIntervalMs: 3_600_000 });
  try {
    await exp.start();
    exp.addRecord(fixtureFlow());
    await exp.flush();
    assert.equal((await Deno.readTextFile(path)).split("\n").length, 2);

    // The directory disappears while the file is open: the next write goes to a new file.
    await Deno.remove(sub, { recursive: true });
    exp.addRecord(fixtureFlow());
    await exp.flush();
    assert.equal(assertWholeLines(await Deno.readTextFile(path), "recreated"), 1);

    // The directory is replaced by a regular file: writes fail, addRecord does not throw.
    await Deno.remove(sub, { recursive: true });
    await Deno.writeTextFile(sub, "not a directory");
    exp.addRecord(fixtureFlow());
    await exp.flush();
    exp.addRecord(fixtureFlow());
    await exp.flush();
    let s = exp.stats();
    assert.equal(s.errors, 2);
    assert.equal(s.dropped, 2);
    assert.equal(s.exported, 2);
    assert.ok(
      logLines.some((l) => l.includes("level=error") && l.includes("Cannot write flow log")),
    );

    // Recreate the directory: the next write succeeds, nothing sticky.
    await Deno.remove(sub);
    await Deno.mkdir(sub);
    exp.addRecord(fixtureFlow());
    await exp.stop();
    assert.equal(assertWholeLines(await Deno.readTextFile(path), "after recovery"), 1);
    s = exp.stats();
    assert.equal(s.exported, 3);
    assert.equal(s.received, 5);
  } finally {
    await exp.stop();
    setLogWriter(restore);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an existing file that this write would fill exactly is rotated first", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-" });
  const path = `${dir}/flows.log`;
  try {
    const f = await tenByteFileOver(path, "12345\n");
    await f.writeLines(["abc\n"]); // 6 + 4 = 10 >= 10
    await f.writeLines(["de\n"]); // 4 + 3 = 7 <= 10: append
    await f.close();
    assert.equal(await Deno.readTextFile(path), "abc\nde\n");
    assert.equal(f.rotations, 1);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("an existing file is appended to, and rotated first when it is already full", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-" });
  const path = `${dir}/flows.log`;
  try {
    const f = await tenByteFileOver(path, "old\n");
    await f.writeLines(["ab\n"]);
    assert.equal(await Deno.readTextFile(path), "old\nab\n");
    await f.writeLines(["cdefgh\n"]);
    await f.close();
    assert.equal(await Deno.readTextFile(path), "cdefgh\n");
    const backups = (await listDir(dir)).filter((n) => n !== "flows.log");
    assert.equal(await Deno.readTextFile(`${dir}/${backups[0]}`), "old\nab\n");
    assert.equal(((await Deno.stat(path)).mode ?? 0) & 0o777, 0o644 & ~Deno.umask());
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** Runs `body` with a started flow log exporter whose file writes `faults` can make fail. */
async function withFaultyExporter(
  body: (exp: LogExporter, path: string, faults: ReturnType<typeof faultyFiles>) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-" });
  const restore = setLogWriter(() => {});
  const path = `${dir}/flows.log`;
  const faults = faultyFiles();
  const exp = new LogExporter(loggerConfig(path), {
    flushIntervalMs: 3_600_000,
    wrapFile: faults.wrap,
  });
  try {
    await exp.start();
    await body(exp, path, faults);
  } finally {
    await exp.stop();
    setLogWriter(restore);
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("a write that fails part-way is truncated to its last whole line; exported = lines on disk", async () => {
  await withFaultyExporter(async (exp, path, faults) => {
    for (let i = 0; i < 3; i++) exp.addRecord(fixtureFlow());
    // Disk full in the middle of the second line: one line whole, half a line, then ENOSPC.
    faults.failAfter(LINE_BYTES + 40);
    await exp.flush();
    assert.equal(faults.failures, 1);
    let s = exp.stats();
    assert.deepEqual([s.exported, s.dropped, s.errors], [1, 2, 1]);
    assert.equal(assertWholeLines(await Deno.readTextFile(path), "after the failure"), 1);

    // Space again: the next lines start on a line boundary, never glued to a fragment.
    for (let i = 0; i < 2; i++) exp.addRecord(fixtureFlow());
    await exp.flush();
    s = exp.stats();
    assert.deepEqual([s.received, s.exported, s.dropped, s.errors], [5, 3, 2, 1]);
    assert.equal(assertWholeLines(await Deno.readTextFile(path), "after recovery"), s.exported);
  });
});

Deno.test("a torn line that cannot be truncated at once is cut after the reopen, before writing", async () => {
  await withFaultyExporter(async (exp, path, faults) => {
    for (let i = 0; i < 3; i++) exp.addRecord(fixtureFlow());
    faults.failAfter(2 * LINE_BYTES + 7);
    faults.failTruncate();
    await exp.flush();
    // The fragment is still there: the truncate on the failing handle failed.
    assert.equal((await Deno.stat(path)).size, 2 * LINE_BYTES + 7);
    exp.addRecord(fixtureFlow());
    await exp.flush();
    const s = exp.stats();
    assert.deepEqual([s.exported, s.dropped, s.errors], [3, 1, 1]);
    assert.equal(assertWholeLines(await Deno.readTextFile(path), "after reopen"), s.exported);
  });
});

Deno.test("on the rotating path, a failed write reports exactly the lines written whole", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-" });
  const restore = setLogWriter(() => {});
  const path = `${dir}/flows.log`;
  const faults = faultyFiles();
  const f = new RotatingFile(path, {
    maxSizeBytes: 50,
    maxBackups: 0,
    maxAgeDays: 0,
    compress: false,
    clock: new ManualClock(),
    wrapFile: faults.wrap,
  });
  try {
    // 9 lines of 10 bytes after one too long: the batch needs a rotation, so it is written
    // chunk by chunk; the first chunk (5 lines) fails after 2.5 lines.
    const lines = ["y".repeat(79) + "\n", ...Array.from({ length: 9 }, (_, i) => `line-${i}...\n`)];
    faults.failAfter(25);
    const res = await f.writeLines(lines);
    assert.deepEqual([res.written, res.tooLong], [2, 1]);
    assert.match(String(res.error?.message), /No space left/);
    assert.equal(await Deno.readTextFile(path), "line-0...\nline-1...\n");

    assert.deepEqual(await f.writeLines(["again....\n"]), { written: 1, tooLong: 0 });
    assert.equal(await Deno.readTextFile(path), "line-0...\nline-1...\nagain....\n");
  } finally {
    await f.close();
    setLogWriter(restore);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("encodeLines: lines back to back in UTF-8, growing the buffer it was given", () => {
  const lines = ["plain line\n", "ünïcödé ✓ 名前\n", "x".repeat(5000) + "\n", "\n"];
  const want = new TextEncoder().encode(lines.join(""));
  const small = new Uint8Array(16);
  const got = encodeLines(lines, small);
  assert.deepEqual(got, want);
  assert.notEqual(got.buffer, small.buffer, "a larger buffer when the given one is too small");
  const big = new Uint8Array(64 * 1024);
  const again = encodeLines(lines, big);
  assert.deepEqual(again, want);
  assert.equal(again.buffer, big.buffer, "the given buffer when it is large enough");
  assert.equal(encodeLines([], big).length, 0);
});

// Compressing a backup on a full disk kept a truncated .gz and removed its source: the lines
// already counted exported were gone, no error counted (found by review on a 256 KiB tmpfs).
Deno.test("a backup whose compression fails (disk full) is kept uncompressed, the error counted", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-" });
  const path = `${dir}/flows.log`;
  const errors: Error[] = [];
  try {
    const f = new RotatingFile(path, {
      maxSizeBytes: 64,
      maxBackups: 0,
      maxAgeDays: 0,
      compress: true,
      clock: new ManualClock(),
      onError: (e) => errors.push(e),
      // Compressed backups take 10 bytes, then the disk is full.
      wrapFile: (file, p) => {
        if (!p.endsWith(".gz")) return file;
        let left = 10;
        return {
          write: async (b: Uint8Array) => {
            if (left === 0) throw new Error("No space left on device (os error 28)");
            const n = await file.write(b.subarray(0, left));
            left -= n;
            return n;
          },
          truncate: (len?: number) => file.truncate(len),
          stat: () => file.stat(),
          close: () => file.close(),
        };
      },
    });
    const line = "x".repeat(39) + "\n";
    await f.writeLines([line]);
    await f.writeLines([line]); // over 64 bytes: the first line is rotated out
    await f.close(); // waits for the compression
    const backups = (await listDir(dir)).filter((n) => n !== "flows.log");
    assert.equal(backups.length, 1, `only the uncompressed backup: ${backups}`);
    assert.ok(!backups[0].endsWith(".gz"));
    assert.equal(await Deno.readTextFile(`${dir}/${backups[0]}`), line);
    assert.equal(errors.length, 1);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// After the wall clock went back, the backup just rotated had the oldest name and was the one
// pruned, older backups kept (lumberjack does the same).
// (The path as configured: absolute, or relative to the working directory, where the name
// of the backup once lost its first characters.)
for (const relative of [false, true]) {
  Deno.test(`the backup just rotated is kept by maxBackups and maxAge even when the clock went back (${relative ? "relative" : "absolute"} path)`, async () => {
    const dir = await Deno.makeTempDir({ prefix: "fa-rot-" });
    // "./<dir>/flows.log": a directory part that joining a name to it rewrites.
    const path = relative ? `./${relativePath(Deno.cwd(), dir)}/flows.log` : `${dir}/flows.log`;
    const clock = new ManualClock(Date.UTC(2026, 11, 6));
    try {
      const f = new RotatingFile(path, {
        maxSizeBytes: 10,
        maxBackups: 2,
        maxAgeDays: 7,
        compress: false,
        clock,
      });
      for (const text of ["aaaaaaa\n", "bbbbbbb\n", "ccccccc\n"]) {
        await f.writeLines([text]);
        clock.advance(1000);
      }
      // Two backups: aaa (t0) and bbb (t0 + 1 s). The clock goes back 30 days (past maxAge).
      clock.advance(-30 * 86_400_000);
      await f.writeLines(["ddddddd\n"]); // ccc rotated out, its name 30 days old
      await f.close();
      const kept = [];
      for (const n of (await listDir(dir)).filter((n) => n !== "flows.log")) {
        kept.push(await Deno.readTextFile(`${dir}/${n}`));
      }
      assert.ok(kept.includes("ccccccc\n"), `the backup just rotated is kept: ${kept}`);
      assert.equal(kept.length, 2);
      assert.equal(await Deno.readTextFile(path), "ddddddd\n");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  });
}
