/**
 * klog's log files: names, per-severity content, the `<program>.<SEVERITY>` link, rotation at
 * the size limit, pruning to `--log_file_max_num`, buffering (control-plane.md §6.1, §6.4); and
 * the faults: a directory removed under the process, a full disk (a write seam), a file that
 * cannot be created, more new files in one second than klog's names can tell apart.
 */

import { PLATFORM } from "../../src/platform.ts";
import assert from "node:assert/strict";
import { prometheusText } from "../../src/api/prometheus.ts";
import { logSettings, setLogFormat } from "../../src/log.ts";
import { parseConfig } from "../../src/components.ts";
import { FlowAggregator, statsFields } from "../../src/flow_aggregator.ts";
import {
  type KlogFileHandle,
  KlogFiles,
  type KlogFilesOptions,
  klogFileStamp,
} from "../../src/log/mod.ts";
import { WallStepClock } from "../_helpers/wall_step_clock.ts";
import { DENO_JSON, runDeno } from "../_helpers/process.ts";

const HEADER_LINES = 4;
const KLOG_DST_CHILD = new URL("../_helpers/klog_dst_child.ts", import.meta.url).pathname;
// Local time, as klog names its files.
const T0 = new Date(2026, 11, 3, 9, 31, 24);

async function withLogDir(fn: (dir: string) => Promise<void> | void): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "fa-klog-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function files(dir: string, extra: Partial<KlogFilesOptions> = {}): KlogFiles {
  return new KlogFiles({
    dir,
    host: "node-1",
    user: "alice",
    pid: 4242,
    maxSizeBytes: 0,
    maxFiles: 0,
    // Frozen unless a test moves its own.
    clock: new WallStepClock(T0.getTime()),
    ...extra,
  });
}

/** The files of `severity`, oldest first: by the time in the name, then its `.N` suffix. */
function list(dir: string, severity: string): string[] {
  const key = (n: string) => {
    const m = /\.(\d{8}-\d{6})\.\d+(?:\.(\d+))?$/.exec(n);
    return { stamp: m?.[1] ?? "", seq: Number(m?.[2] ?? 0) };
  };
  return [...Deno.readDirSync(dir)]
    .filter((e) => e.isFile && e.name.includes(`.log.${severity}.`))
    .map((e) => e.name)
    .sort((a, b) => key(a).stamp.localeCompare(key(b).stamp) || key(a).seq - key(b).seq);
}

/** The log lines of a file (its klog header dropped). */
function body(path: string): string[] {
  const lines = Deno.readTextFileSync(path).split("\n");
  assert.equal(lines.pop(), "", `${path} ends with a newline`);
  assert.match(lines[0], /^Log file created at: \d{4}\/\d{2}\/\d{2} \d{2}:\d{2}:\d{2}$/);
  assert.equal(lines[1], "Running on machine: node-1");
  // The platform in Go's names (linux/amd64), as klog's header and upstream's --version say it.
  assert.ok(lines[2].endsWith(` for ${PLATFORM}`), lines[2]);
  // The lines' own format (logfmt, the default), not klog's, which the header claimed.
  assert.match(lines[3], /^Log line format: logfmt: time=<RFC 3339> level=<level> /);
  return lines.slice(HEADER_LINES);
}

Deno.test("klog files: one per severity, named as klog, each with its severity and higher", async () => {
  await withLogDir((dir) => {
    const f = files(dir);
    f.write("I info line", "info");
    f.write("I debug line", "debug");
    f.write("W warn line", "warn");
    f.write("E error line", "error");
    f.close();
    assert.equal(klogFileStamp(T0), "20261203-093124");
    const name = (sev: string) => `flow-aggregator.node-1.alice.log.${sev}.20261203-093124.4242`;
    assert.deepEqual(list(dir, "INFO"), [name("INFO")]);
    assert.deepEqual(body(`${dir}/${name("INFO")}`), [
      "I info line",
      "I debug line",
      "W warn line",
      "E error line",
    ]);
    assert.deepEqual(body(`${dir}/${name("WARNING")}`), ["W warn line", "E error line"]);
    assert.deepEqual(body(`${dir}/${name("ERROR")}`), ["E error line"]);
    // flow-aggregator.<SEVERITY> shows the current file (symlink, else hard link).
    for (const sev of ["INFO", "WARNING", "ERROR"]) {
      assert.equal(
        Deno.readTextFileSync(`${dir}/flow-aggregator.${sev}`),
        Deno.readTextFileSync(`${dir}/${name(sev)}`),
      );
    }
    assert.deepEqual(f.stats(), {
      filesCreated: 3,
      filesRemoved: 0,
      filesReopened: 0,
      linesDropped: 0,
      errors: 0,
    });
  });
});

Deno.test("klog files: lines are buffered until flush (or 64 KiB), never written one by one", async () => {
  await withLogDir((dir) => {
    const f = files(dir);
    f.write("I first", "info");
    const path = `${dir}/${f.currentName("INFO")}`;
    assert.equal(Deno.statSync(path).size, 0, "nothing written before a flush");
    f.flush();
    assert.deepEqual(body(path), ["I first"]);
    const line = "I " + "x".repeat(1000);
    for (let i = 0; i < 70; i++) f.write(line, "info");
    assert.ok(Deno.statSync(path).size > 64 * 1024, "flushed once 64 KiB were pending");
    f.close();
    assert.equal(body(path).length, 71);
  });
});

Deno.test("klog files: a new file when the current one would exceed the size limit", async () => {
  await withLogDir((dir) => {
    // The clock does not move: every name must still be new (klog would truncate its own file).
    const f = files(dir, { maxSizeBytes: 600 });
    const written: string[] = [];
    for (let i = 0; i < 40; i++) {
      const line = `I line ${String(i).padStart(2, "0")} ${"y".repeat(60)}`;
      written.push(line);
      f.write(line, "info");
    }
    f.close();
    const names = list(dir, "INFO");
    assert.ok(names.length >= 5, names.join(" "));
    assert.equal(new Set(names).size, names.length);
    // A second file within the same second takes a `.N` suffix (klog's name plus a sequence).
    assert.equal(names[0], "flow-aggregator.node-1.alice.log.INFO.20261203-093124.4242");
    assert.equal(names[1], "flow-aggregator.node-1.alice.log.INFO.20261203-093124.4242.1");
    const lines: string[] = [];
    for (const n of names) {
      assert.ok(Deno.statSync(`${dir}/${n}`).size <= 600, `${n} within the limit`);
      lines.push(...body(`${dir}/${n}`));
    }
    assert.deepEqual(lines, written, "every line once, whole, in order");
    assert.equal(f.currentName("INFO"), names.at(-1));
    assert.equal(
      Deno.readTextFileSync(`${dir}/flow-aggregator.INFO`),
      Deno.readTextFileSync(`${dir}/${names.at(-1)}`),
    );
  });
});

Deno.test("klog files: a line longer than the limit still gets written, alone in its file", async () => {
  await withLogDir((dir) => {
    const f = files(dir, { maxSizeBytes: 300 });
    f.write("I short", "info");
    f.write("I " + "z".repeat(500), "info");
    f.write("I after", "info");
    f.close();
    const bodies = list(dir, "INFO").map((n) => body(`${dir}/${n}`));
    assert.deepEqual(bodies, [["I short"], ["I " + "z".repeat(500)], ["I after"]]);
  });
});

Deno.test("klog files: at most maxFiles per severity, oldest (by name time) removed first", async () => {
  await withLogDir((dir) => {
    // Files of an earlier run on another host are counted and pruned first.
    const old = [
      "flow-aggregator.old-pod.alice.log.INFO.20261201-000000.1",
      "flow-aggregator.old-pod.alice.log.INFO.20261202-000000.1",
    ];
    for (const n of old) Deno.writeTextFileSync(`${dir}/${n}`, "old\n");
    Deno.writeTextFileSync(`${dir}/unrelated.log.INFO.20261201-000000.1`, "kept\n");
    const f = files(dir, { maxSizeBytes: 400, maxFiles: 2 });
    f.write("I one " + "a".repeat(150), "info");
    assert.deepEqual(list(dir, "INFO").filter((n) => n.includes("old-pod")), [old[1]]);
    for (let i = 0; i < 30; i++) f.write(`I line ${i} ${"b".repeat(150)}`, "info");
    f.close();
    const names = list(dir, "INFO").filter((n) => n.startsWith("flow-aggregator."));
    assert.equal(names.length, 2, names.join(" "));
    assert.ok(names.every((n) => n.includes("node-1")), "the old run's files went first");
    assert.equal(names.at(-1), f.currentName("INFO"));
    assert.ok(body(`${dir}/${names.at(-1)}`).at(-1)?.startsWith("I line 29 "));
    assert.ok(Deno.statSync(`${dir}/unrelated.log.INFO.20261201-000000.1`).isFile);
    const s = f.stats();
    assert.equal(s.errors, 0);
    assert.equal(s.filesRemoved, s.filesCreated - 2 + old.length);
  });
});

/** A clock the test moves by hand, from T0. */
function manualClock(): WallStepClock {
  return new WallStepClock(T0.getTime());
}

Deno.test("klog files: a log directory removed under the process is recreated within a second", async () => {
  await withLogDir((dir) => {
    const logs = `${dir}/logs`;
    const clock = manualClock();
    // The default size limit (1800 MB): no rotation ever opens a new file by itself.
    const f = files(logs, { maxSizeBytes: 1800 * 1024 * 1024, clock });
    f.write("I before", "info");
    f.flush();
    Deno.removeSync(logs, { recursive: true });
    clock.advance(1500);
    const after = Array.from({ length: 100 }, (_, i) => `I after ${i}`);
    for (const line of after) f.write(line, "info");
    f.flush();
    // The flush found the file gone: the directory again, a new file, the lines in it.
    const names = list(logs, "INFO");
    assert.deepEqual(names, [f.currentName("INFO")]);
    assert.deepEqual(body(`${logs}/${names[0]}`), after);
    assert.equal(
      Deno.readTextFileSync(`${logs}/flow-aggregator.INFO`),
      Deno.readTextFileSync(`${logs}/${names[0]}`),
    );
    f.write("I later", "info");
    f.close();
    assert.deepEqual(body(`${logs}/${names[0]}`), [...after, "I later"]);
    assert.deepEqual(f.stats(), {
      filesCreated: 2,
      filesRemoved: 0,
      filesReopened: 1,
      linesDropped: 0,
      errors: 0,
    });
  });
});

Deno.test("klog files: a removed log directory is recreated at the next rotation, no line lost after it", async () => {
  await withLogDir((dir) => {
    const logs = `${dir}/logs`;
    const f = files(logs, { maxSizeBytes: 600, maxFiles: 3 });
    f.write("I first", "info");
    f.flush();
    Deno.removeSync(logs, { recursive: true });
    // The clock does not move: only the rotations (every ~8 lines) see the directory gone.
    const written: string[] = [];
    for (let i = 0; i < 200; i++) {
      const line = `I line ${String(i).padStart(3, "0")} ${"y".repeat(60)}`;
      written.push(line);
      f.write(line, "info");
    }
    f.close();
    const kept = list(logs, "INFO");
    const lines = kept.flatMap((n) => body(`${logs}/${n}`));
    // The lines before the first rotation went to the removed file; the rest are kept (3 files:
    // two full ones of 4 or 5 lines, as long as the header is, and the current one).
    assert.equal(kept.length, 3);
    assert.ok(lines.length >= 9, `${lines.length} lines`);
    assert.deepEqual(lines, written.slice(written.length - lines.length));
    const s = f.stats();
    assert.equal(s.errors, 0);
    assert.equal(s.linesDropped, 0);
    assert.ok(s.filesCreated >= 20, `${s.filesCreated} files`);
  });
});

/** A disk with `free` bytes left: a write past them is cut short, the next one fails. */
function smallDisk(free: number): {
  wrap: (file: Deno.FsFile) => KlogFileHandle;
  setFree: (bytes: number) => void;
} {
  return {
    wrap: (file) => ({
      writeSync(p) {
        if (free <= 0) throw new Error("No space left on device (os error 28)");
        const n = file.writeSync(p.subarray(0, Math.min(p.length, free)));
        free -= n;
        return n;
      },
      truncateSync: (len) => file.truncateSync(len),
      statSync: () => file.statSync(),
      close: () => file.close(),
    }),
    setFree: (bytes) => free = bytes,
  };
}

Deno.test("klog files: a full disk cuts the partial line off and counts the dropped lines", async () => {
  await withLogDir((dir) => {
    const disk = smallDisk(1000);
    const reports: string[] = [];
    const f = files(dir, { wrapFile: disk.wrap, report: (l) => reports.push(l) });
    const written = Array.from({ length: 40 }, (_, i) => `I line ${i} ${"x".repeat(60)}`);
    for (const line of written) f.write(line, "info");
    f.flush();
    const path = `${dir}/${f.currentName("INFO")}`;
    // The header and the lines that fit whole; the one cut short is gone, not left torn.
    const kept = body(path);
    assert.ok(kept.length >= 5 && kept.length < 40, `${kept.length} lines`);
    assert.deepEqual(kept, written.slice(0, kept.length));
    assert.deepEqual(f.stats(), {
      filesCreated: 1,
      filesRemoved: 0,
      filesReopened: 0,
      linesDropped: 40 - kept.length,
      errors: 1,
    });
    assert.match(reports[0], /cannot write log file .*: No space left on device/);
    // Space again: the next lines start on lines of their own, after a line saying what is
    // missing (before, the file had a gap and nothing said so; stderr only the first error).
    disk.setFree(Infinity);
    f.write("I after 1", "info");
    f.write("I after 2", "info");
    f.close();
    const after = body(path);
    assert.deepEqual(after.slice(0, kept.length), kept);
    assert.deepEqual(after.slice(kept.length + 1), ["I after 1", "I after 2"]);
    assert.match(
      after[kept.length],
      new RegExp(
        `^W\\d{4} [\\d:.]+ +\\d+ log-files:0\\] "log lines were not written to this file" ` +
          `dropped=${
            40 - kept.length
          } since="[^"]+" reason="No space left on device \\(os error 28\\)"$`,
      ),
    );
    assert.equal(f.stats().linesDropped, 40 - kept.length);
    assert.match(
      reports.at(-1)!,
      new RegExp(`^log files: writing to .* again: ${40 - kept.length} lines were dropped since `),
    );
  });
});

Deno.test("klog files: a full disk before the header is written: the header is written later", async () => {
  await withLogDir((dir) => {
    const disk = smallDisk(30);
    const f = files(dir, { wrapFile: disk.wrap, report: () => {} });
    f.write("I lost", "info");
    f.flush();
    const path = `${dir}/${f.currentName("INFO")}`;
    assert.equal(Deno.statSync(path).size, 0, "the partial header was cut off");
    disk.setFree(Infinity);
    f.write("I kept", "info");
    f.close();
    // A new file's header first, its lines, then what was lost before it.
    const kept = body(path);
    assert.equal(kept[0], "I kept");
    assert.match(kept[1], /"log lines were not written to this file" dropped=1 /);
    assert.equal(kept.length, 2);
    assert.equal(f.stats().linesDropped, 1);
  });
});

Deno.test("klog files: a file that cannot be created drops its lines (counted), retried once a second", async () => {
  await withLogDir((dir) => {
    const logs = `${dir}/logs`;
    const clock = manualClock();
    const reports: string[] = [];
    const f = files(logs, { clock, report: (line) => reports.push(line) });
    // A regular file where the directory was: nothing can be created under it.
    Deno.removeSync(logs);
    Deno.writeTextFileSync(logs, "");
    for (let i = 0; i < 1000; i++) f.write(`I lost ${i}`, "info");
    f.flush();
    // One attempt, not one per line; every line counted.
    assert.deepEqual(f.stats(), {
      filesCreated: 0,
      filesRemoved: 0,
      filesReopened: 0,
      linesDropped: 1000,
      errors: 1,
    });
    assert.equal(reports.length, 1);
    assert.match(reports[0], /^log files: cannot create log file .*logs\/flow-aggregator\.node-1/);
    // The path is free again: the next attempt, a second later, recreates the directory.
    Deno.removeSync(logs);
    f.write("I still lost", "info");
    clock.advance(1000);
    f.write("I back", "info");
    f.close();
    assert.deepEqual(body(`${logs}/${f.currentName("INFO")}`), [
      "I back",
      'W1203 09:31:25.000000    4242 log-files:0] "log lines were not written to this file" ' +
      'dropped=1001 since="2026-12-03T09:31:24.000Z" reason="no file could be created"',
    ]);
    assert.match(reports.at(-1)!, /writing to .* again: 1001 lines were dropped since/);
    assert.equal(f.stats().linesDropped, 1001);
    assert.equal(f.stats().errors, 1);
  });
});

Deno.test("klog files: more than 1000 new files in one second all get names, no line lost", async () => {
  await withLogDir((dir) => {
    // A frozen clock: every file falls in the same second (klog's name alone tells none apart).
    const f = files(dir, { maxSizeBytes: 1024 });
    const written: string[] = [];
    for (let i = 0; i < 12_000; i++) {
      const line = `I line ${String(i).padStart(5, "0")} ${"w".repeat(90)}`;
      written.push(line);
      f.write(line, "info");
    }
    f.close();
    const names = list(dir, "INFO");
    assert.ok(names.length > 1100, `${names.length} files`);
    const base = "flow-aggregator.node-1.alice.log.INFO.20261203-093124.4242";
    assert.deepEqual(names.slice(0, 3), [base, `${base}.1`, `${base}.2`]);
    assert.equal(names.at(-1), `${base}.${names.length - 1}`);
    assert.deepEqual(names.flatMap((n) => body(`${dir}/${n}`)), written);
    const s = f.stats();
    assert.equal(s.errors, 0);
    assert.equal(s.linesDropped, 0);
    assert.equal(s.filesCreated, names.length);
  });
});

Deno.test("klog files: pruning orders names of one second by their suffix's number", async () => {
  await withLogDir((dir) => {
    const f = files(dir, { maxSizeBytes: 300, maxFiles: 2 });
    for (let i = 0; i < 24; i++) f.write(`I line ${i} ${"v".repeat(200)}`, "info");
    f.close();
    // 24 files .. `.23`: lexically `.3` sorts after `.23`, but `.22` and `.23` are the newest.
    const base = "flow-aggregator.node-1.alice.log.INFO.20261203-093124.4242";
    assert.deepEqual(list(dir, "INFO"), [`${base}.22`, `${base}.23`]);
    assert.ok(body(`${dir}/${base}.23`)[0].startsWith("I line 23 "));
  });
});

/** The first word (`line-NN`) of each log line of each file of `severity`, by name. */
function linesByFile(dir: string, severity: string): string[][] {
  return [...Deno.readDirSync(dir)]
    .filter((e) => e.isFile && e.name.includes(`.log.${severity}.`))
    .map((e) => e.name)
    .sort()
    .map((n) => body(`${dir}/${n}`).map((l) => l.split(" ")[0]));
}

Deno.test("klog files: after the wall clock steps back, pruning keeps the files written last", async () => {
  await withLogDir((dir) => {
    const clock = manualClock();
    // One line a file, a file a minute.
    const f = files(dir, { clock, maxSizeBytes: 600, maxFiles: 3 });
    const line = (i: number) => {
      f.write(`line-${String(i).padStart(2, "0")} ${"x".repeat(300)}`, "info");
      f.flush();
      clock.advance(60_000);
    };
    for (let i = 0; i < 6; i++) line(i);
    clock.stepWall(-3_600_000);
    for (let i = 6; i < 12; i++) line(i);
    f.close();
    // By the names' time, line-04 and line-05 (an hour "later") were kept and line-06..10 went.
    const kept = linesByFile(dir, "INFO").flat().sort();
    assert.deepEqual(kept, ["line-09", "line-10", "line-11"]);
    assert.ok(f.currentName("INFO").includes(klogFileStamp(new Date(clock.wallMs() - 60_000))));
  });
});

Deno.test("klog files: files of earlier runs count as older than any of this run, whatever their names say", async () => {
  await withLogDir((dir) => {
    // An earlier run's file named an hour after this run's start (a clock stepped back since).
    const later = new Date(T0.getTime() + 3_600_000);
    const earlier = `flow-aggregator.node-1.alice.log.INFO.${klogFileStamp(later)}.17`;
    Deno.writeTextFileSync(`${dir}/${earlier}`, "old\n");
    const f = files(dir, { maxSizeBytes: 400, maxFiles: 2 });
    f.write(`I one ${"a".repeat(300)}`, "info");
    assert.ok(Deno.statSync(`${dir}/${earlier}`).isFile, "two files: nothing pruned yet");
    f.write(`I two ${"a".repeat(300)}`, "info");
    f.close();
    assert.throws(() => Deno.statSync(`${dir}/${earlier}`), Deno.errors.NotFound);
    assert.deepEqual(linesByFile(dir, "INFO").flat().map((l) => l.slice(0, 1)), ["I", "I"]);
  });
});

Deno.test("klog files: across a DST fall-back (America/New_York), pruning keeps the newest files", async () => {
  await withLogDir(async (dir) => {
    const out = await runDeno(
      ["run", "-A", "--config", DENO_JSON, KLOG_DST_CHILD, dir],
      { env: { TZ: "America/New_York" } },
    );
    assert.equal(out.code, 0, out.stderr);
    const { stamps } = JSON.parse(out.stdout) as { stamps: string[] };
    // The names' local time went back an hour: 01:40 EDT, 01:50, then 01:00 EST.
    assert.deepEqual(stamps.slice(0, 3), ["20241103-014000", "20241103-015000", "20241103-010000"]);
    // By the names' time the two newest rotated files (line-02, line-03) were deleted.
    assert.deepEqual(linesByFile(dir, "INFO").flat().sort(), ["line-02", "line-03", "line-04"]);
  });
});

Deno.test("klog files: a write error is reported a minute later by the monotonic clock, a wall step back included", async () => {
  await withLogDir((dir) => {
    const clock = manualClock();
    const reportedAt: number[] = [];
    const f = files(dir, {
      clock,
      wrapFile: (file) => ({
        writeSync: () => {
          throw new Error("No space left on device (injected)");
        },
        truncateSync: () => {},
        statSync: () => file.statSync(),
        close: () => file.close(),
      }),
      report: () => reportedAt.push(clock.nowMs() / 60_000),
    });
    // A failing write every 10 s for 5 minutes; the wall clock goes back an hour after 1 minute.
    for (let i = 0; i < 30; i++) {
      if (i === 6) clock.stepWall(-3_600_000);
      f.write(`I line ${i}`, "info");
      f.flush();
      clock.advance(10_000);
    }
    f.close();
    assert.equal(f.stats().errors, 31, "each write, and the one of close()");
    assert.deepEqual(reportedAt, [0, 1, 2, 3, 4, 5]);
  });
});

Deno.test("klog files: the counters are in the metrics line and /metrics (dropped lines included)", async () => {
  await withLogDir((dir) => {
    const disk = smallDisk(0);
    const f = files(dir, { wrapFile: disk.wrap, report: () => {} });
    for (let i = 0; i < 3; i++) f.write(`W lost ${i}`, "warn");
    f.close();
    const fa = new FlowAggregator(parseConfig(""), {
      manualSweep: true,
      metricsLogIntervalMs: 0,
      logFileCounters: () => f.stats(),
    });
    const stats = fa.stats();
    assert.deepEqual(stats.logFiles, f.stats());
    const fields = statsFields(stats);
    assert.equal(fields["logFiles.linesDropped"], 6, "3 lines, each lost from INFO and WARNING");
    assert.equal(fields["logFiles.errors"], 2);
    const text = prometheusText(stats);
    assert.match(text, /^flow_aggregator_log_files_lines_dropped 6$/m);
    assert.match(text, /^flow_aggregator_log_files_files_reopened 0$/m);
  });
});

Deno.test("klog files: the header names the format the lines are written in", async () => {
  const before = logSettings().format;
  try {
    for (
      const [format, line] of [
        ["klog", /^Log line format: \[IWEF\]mmdd hh:mm:ss\.uuuuuu threadid file:line\] msg$/],
        ["json", /^Log line format: JSON, one object a line/],
        ["logfmt", /^Log line format: logfmt: /],
      ] as const
    ) {
      setLogFormat(format);
      await withLogDir((dir) => {
        const f = files(dir);
        f.write("a line", "info");
        f.close();
        const text = Deno.readTextFileSync(`${dir}/flow-aggregator.INFO`);
        assert.match(text.split("\n")[3], line, format);
      });
    }
  } finally {
    setLogFormat(before);
  }
});

Deno.test("klog files: the single file (--log_file) is started again empty when full, as klog's; a failed write's cut never reaches an earlier run's lines", async () => {
  await withLogDir((dir) => {
    Deno.writeTextFileSync(`${dir}/fa.log`, "earlier\n");
    const f = files(dir, { singleFile: "fa.log", maxSizeBytes: 2048 });
    for (let i = 0; i < 100; i++) {
      f.write(`line ${i} ${"x".repeat(40)}`, i % 3 === 0 ? "error" : "info");
    }
    f.close();
    const text = Deno.readTextFileSync(`${dir}/fa.log`);
    assert.ok(text.length <= 2048, `${text.length} bytes`);
    assert.match(text, /^Log file created at: /, "started again empty, with its header");
    assert.match(text, /line 99 x+\n$/);
    assert.doesNotMatch(text, /earlier|line 0 /);
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), ["fa.log"]);
    assert.ok(f.stats().filesCreated >= 2);
  });
  // A write cut short on a full disk: the torn line is cut off, an earlier run's lines kept.
  await withLogDir((dir) => {
    Deno.writeTextFileSync(`${dir}/fa.log`, "earlier\n");
    const disk = smallDisk(300);
    const f = files(dir, { singleFile: "fa.log", wrapFile: disk.wrap, report: () => {} });
    for (let i = 0; i < 20; i++) f.write(`I line ${i} ${"x".repeat(30)}`, "info");
    f.flush();
    const text = Deno.readTextFileSync(`${dir}/fa.log`);
    assert.match(text, /^earlier\nLog file created at: /);
    assert.match(text, /\n$/, "no torn line left");
    assert.ok(f.stats().linesDropped > 0);
    f.close();
  });
});
