/** The log output klog's flags select (src/log/flags.ts), in process. */

import assert from "node:assert/strict";
import { logger, setLogWriter, writeStderr } from "../../src/log.ts";
import { KLOG_DEFAULTS, type KlogFlags, startLogOutput } from "../../src/log/mod.ts";

const log = logger("flags-test");

async function withDir(fn: (dir: string) => Promise<void> | void): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "fa-klogflags-" });
  try {
    await fn(dir);
  } finally {
    setLogWriter(writeStderr);
    await Deno.remove(dir, { recursive: true });
  }
}

function flags(extra: Partial<KlogFlags>): KlogFlags {
  return { ...KLOG_DEFAULTS, ...extra };
}

Deno.test("log output: --logtostderr (the default) writes no files, whatever --log_dir says", async () => {
  await withDir((dir) => {
    const out = startLogOutput(flags({ logDir: `${dir}/logs` }));
    assert.equal(out.files, undefined);
    assert.deepEqual(out.notes, []);
    out.close();
    assert.throws(() => Deno.statSync(`${dir}/logs`), Deno.errors.NotFound);
  });
});

Deno.test("log output: files in --log_dir; errors reach the disk at once, the rest at flush", async () => {
  await withDir((dir) => {
    const out = startLogOutput(
      flags({ logtostderr: false, logDir: dir, stderrThreshold: 3 }),
      { now: () => new Date(2026, 11, 3, 10, 0, 0), pid: 77 },
    );
    assert.ok(out.files);
    log.info("buffered line");
    const info = `${dir}/${out.files.currentName("INFO")}`;
    assert.equal(Deno.statSync(info).size, 0);
    log.error("urgent line", { err: new Error("boom") });
    const onDisk = Deno.readTextFileSync(info);
    assert.match(onDisk, /msg="buffered line"/);
    assert.match(onDisk, /msg="urgent line" err=boom/);
    assert.match(out.files.currentName("ERROR"), /\.log\.ERROR\.20261203-100000\.77$/);
    out.close();
  });
});

Deno.test("log output: unsupported or out-of-range flags and a bad directory become notes", async () => {
  await withDir((dir) => {
    const out = startLogOutput(flags({
      logtostderr: false,
      logDir: `${dir}/logs`,
      logFileMaxSizeMB: 200_000,
    }));
    assert.deepEqual(out.notes.map((n) => [n.level, n.msg]), [
      ["error", "--log_file_max_size above 102400 MB is ignored"],
    ]);
    out.close();
    // A directory that cannot be created: stderr only, said so, nothing thrown.
    Deno.writeTextFileSync(`${dir}/file`, "");
    const bad = startLogOutput(flags({ logtostderr: false, logDir: `${dir}/file/logs` }));
    assert.equal(bad.files, undefined);
    assert.deepEqual(bad.notes.map((n) => n.msg), [
      "cannot create the log directory: logging to stderr only",
    ]);
  });
});

Deno.test("log output: --log_file writes every severity to that one file (klog's), appended to; --log_dir is not used", async () => {
  await withDir((dir) => {
    Deno.mkdirSync(`${dir}/one`);
    Deno.writeTextFileSync(`${dir}/one/fa.log`, "an earlier run's line\n");
    const out = startLogOutput(
      flags({ logtostderr: false, logDir: `${dir}/logs`, logFile: `${dir}/one/fa.log` }),
    );
    assert.deepEqual(out.notes, []);
    log.info("an info line");
    log.warn("a warning line");
    log.error("an error line");
    out.close();
    const text = Deno.readTextFileSync(`${dir}/one/fa.log`);
    assert.match(text, /^an earlier run's line\nLog file created at: /);
    for (const m of ["an info line", "a warning line", "an error line"]) {
      assert.equal(text.split(m).length, 2, `${m} once`);
    }
    assert.deepEqual([...Deno.readDirSync(`${dir}/one`)].map((e) => e.name), ["fa.log"]);
    assert.throws(() => Deno.statSync(`${dir}/logs`), Deno.errors.NotFound);
  });
});
