/**
 * klog's log files: names, per-severity content, the `<program>.<SEVERITY>` link, rotation at
 * the size limit, pruning to `--log_file_max_num`, buffering (control-plane.md §6.1, §6.4).
 */

import assert from "node:assert/strict";
import { KlogFiles, type KlogFilesOptions, klogFileStamp } from "../../src/log/mod.ts";

const HEADER_LINES = 4;
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
    now: () => T0,
    ...extra,
  });
}

function list(dir: string, severity: string): string[] {
  return [...Deno.readDirSync(dir)]
    .filter((e) => e.isFile && e.name.includes(`.log.${severity}.`))
    .map((e) => e.name)
    .sort();
}

/** The log lines of a file (its klog header dropped). */
function body(path: string): string[] {
  const lines = Deno.readTextFileSync(path).split("\n");
  assert.equal(lines.pop(), "", `${path} ends with a newline`);
  assert.match(lines[0], /^Log file created at: \d{4}\/\d{2}\/\d{2} \d{2}:\d{2}:\d{2}$/);
  assert.equal(lines[1], "Running on machine: node-1");
  assert.match(
    lines[3],
    /^Log line format: \[IWEF\]mmdd hh:mm:ss\.uuuuuu threadid file:line\] msg$/,
  );
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
    assert.deepEqual(f.stats(), { filesCreated: 3, filesRemoved: 0, errors: 0 });
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
    // Stamps go up one second per file created within the same second, so names sort in order.
    assert.equal(names[1], "flow-aggregator.node-1.alice.log.INFO.20261203-093125.4242");
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

Deno.test("klog files: a file that cannot be created is counted and reported, never thrown", async () => {
  await withLogDir((dir) => {
    const reports: string[] = [];
    const f = files(`${dir}/logs`, { report: (line) => reports.push(line) });
    Deno.removeSync(`${dir}/logs`); // the directory disappears under the process
    f.write("I lost", "info");
    f.write("I lost too", "info");
    f.close();
    assert.equal(f.stats().errors, 2);
    assert.equal(reports.length, 1, "reported at most once a minute");
    assert.match(reports[0], /^log files: cannot create log file .*logs\/flow-aggregator\.node-1/);
  });
});
