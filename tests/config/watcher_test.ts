import assert from "node:assert/strict";
import {
  type CheckResult,
  type ConfigDiff,
  ConfigWatcher,
  MAX_CONFIG_FILE_BYTES,
  readConfigFile,
} from "../../src/config/mod.ts";
import { diffConfig, type FlowAggregatorConfig, parseConfig } from "../../src/components.ts";
import { ManualClock } from "../../src/clock.ts";
import { setLogWriter } from "../../src/log.ts";

/** How the product builds its watcher: its parser and diff. */
const PRODUCT = { parse: (text: string) => parseConfig(text), diff: diffConfig };

const CONF = "flow-aggregator.conf";

function conf(path: string): string {
  return `flowLogger:\n  enable: true\n  path: ${path}\n`;
}

/** A kubelet-style ConfigMap volume: `..<ts>/` dirs, a `..data` symlink, a stable file link. */
class ConfigMapDir {
  readonly dir: string;
  #gen = 0;
  #current = "";

  constructor(dir: string) {
    this.dir = dir;
  }

  static async create(content: string): Promise<ConfigMapDir> {
    const v = new ConfigMapDir(await Deno.makeTempDir({ prefix: "fa-config-" }));
    await v.#writeGeneration(content);
    await Deno.symlink(v.#current, `${v.dir}/..data`);
    await Deno.symlink(`..data/${CONF}`, `${v.dir}/${CONF}`);
    return v;
  }

  get path(): string {
    return `${this.dir}/${CONF}`;
  }

  async #writeGeneration(content: string): Promise<string> {
    const name = `..2026_12_02_13_00_0${this.#gen++}.${Math.random().toString(36).slice(2, 8)}`;
    await Deno.mkdir(`${this.dir}/${name}`);
    await Deno.writeTextFile(`${this.dir}/${name}/${CONF}`, content);
    this.#current = name;
    return name;
  }

  /** The kubelet swap: new dir, `..data_tmp` symlink renamed over `..data`, old dir removed. */
  async swap(content: string): Promise<void> {
    const old = this.#current;
    const name = await this.#writeGeneration(content);
    await Deno.symlink(name, `${this.dir}/..data_tmp`);
    await Deno.rename(`${this.dir}/..data_tmp`, `${this.dir}/..data`);
    await Deno.remove(`${this.dir}/${old}`, { recursive: true });
  }
}

interface Harness {
  watcher: ConfigWatcher<FlowAggregatorConfig>;
  changes: { next: FlowAggregatorConfig; old: FlowAggregatorConfig; diff: ConfigDiff }[];
  /** Every re-read's result, in order. */
  results: CheckResult[];
  /** Resolves at the next re-read with result `want` (stray re-reads from earlier events are skipped). */
  waitFor(want: CheckResult): Promise<void>;
}

/** Watcher options of a test: a manual clock (else real time, shortened) and the stable time. */
interface HarnessOptions {
  clock?: ManualClock;
  stableMs?: number;
}

function harness(path: string, { clock, stableMs }: HarnessOptions = {}): Harness {
  const changes: Harness["changes"] = [];
  const results: CheckResult[] = [];
  let waiters: { want: CheckResult; resolve: () => void }[] = [];
  const watcher = new ConfigWatcher(path, {
    ...PRODUCT,
    // On a manual clock the real defaults (200 ms, 1 s) cost nothing; in real time keep it short.
    ...(clock === undefined ? { debounceMs: 30, stableMs: 30 } : { clock, stableMs }),
    pollIntervalMs: 0,
    onChange: (next, old, diff) => {
      changes.push({ next, old, diff });
    },
    onCheck: (r) => {
      results.push(r);
      const done = waiters.filter((w) => w.want === r);
      waiters = waiters.filter((w) => w.want !== r);
      for (const w of done) w.resolve();
    },
  });
  return {
    watcher,
    changes,
    results,
    // Fails instead of hanging when the watch is dead.
    waitFor: (want) =>
      new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`no "${want}" re-read within 5s`)), 5000);
        waiters.push({
          want,
          resolve: () => {
            clearTimeout(t);
            resolve();
          },
        });
      }),
  };
}

/**
 * Runs `body` on a ConfigMap volume holding conf("/tmp/a.log") with a (not yet started) watcher
 * harness on it and the log silenced; stops the watcher and removes the volume afterwards.
 */
async function withConfigMap(
  body: (vol: ConfigMapDir, h: Harness) => Promise<void>,
  clock?: ManualClock,
): Promise<void> {
  const restoreLog = setLogWriter(() => {});
  const vol = await ConfigMapDir.create(conf("/tmp/a.log"));
  const h = harness(vol.path, { clock });
  try {
    await body(vol, h);
  } finally {
    await h.watcher.stop();
    setLogWriter(restoreLog);
    await Deno.remove(vol.dir, { recursive: true });
  }
}

Deno.test("watcher: a ConfigMap swap fires onChange once per real change", async () => {
  await withConfigMap(async (vol, h) => {
    const initial = await h.watcher.start();
    assert.equal(initial.flowLogger.path, "/tmp/a.log");

    let check = h.waitFor("changed");
    await vol.swap(conf("/tmp/b.log"));
    await check;
    assert.equal(h.changes.length, 1);
    assert.equal(h.changes[0].old.flowLogger.path, "/tmp/a.log");
    assert.equal(h.changes[0].next.flowLogger.path, "/tmp/b.log");
    assert.deepEqual(h.changes[0].diff.changedKeys, ["flowLogger.path"]);
    // A new path is a new directory to write to (new worker permissions): a rebuild.
    assert.equal(h.changes[0].diff.exporters.flowLogger, "rebuild");
    assert.equal(h.watcher.config.flowLogger.path, "/tmp/b.log");

    // Identical content: a swap happens, the file is re-read, nothing is reported.
    check = h.waitFor("unchanged");
    await vol.swap(conf("/tmp/b.log"));
    await check;
    assert.equal(h.changes.length, 1);

    // Invalid content is ignored and the last good config stays.
    check = h.waitFor("invalid");
    await vol.swap("flowLogger:\n  enable: true\n  maxSize: nope\n");
    await check;
    assert.equal(h.changes.length, 1);
    assert.equal(h.watcher.config.flowLogger.path, "/tmp/b.log");

    // A second real change after the invalid one still works (the watch survived 3 swaps).
    check = h.waitFor("changed");
    await vol.swap(conf("/tmp/c.log"));
    await check;
    assert.equal(h.changes.length, 2);
    assert.equal(h.changes[1].old.flowLogger.path, "/tmp/b.log");
    assert.equal(h.changes[1].next.flowLogger.path, "/tmp/c.log");
  });
});

Deno.test("watcher: writes to another file of the directory (a log) re-read nothing", async () => {
  await withConfigMap(async (vol, h) => {
    await h.watcher.start();
    // Was: a re-read after each write (and, at debug level, a log line per event, itself an
    // event when the log is written there).
    for (let i = 0; i < 10; i++) {
      await Deno.writeTextFile(`${vol.dir}/err.log`, `line ${i}\n`, { append: true });
      await new Promise((r) => setTimeout(r, 50));
    }
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(h.results, []);
    const check = h.waitFor("changed");
    await vol.swap(conf("/tmp/b.log"));
    await check;
    assert.deepEqual(h.results, ["changed"]);
  });
});

// Found by review of 12d802e: the event filter missed a link swapped through a directory
// entry other than kubelet's `..data` (a deploy renaming `current.new` over `current`).
Deno.test("watcher: a file linked through a directory entry reloads when that entry is swapped", async () => {
  const restoreLog = setLogWriter(() => {});
  const dir = await Deno.makeTempDir({ prefix: "fa-config-" });
  try {
    for (const [release, path] of [["r1", "/tmp/a.log"], ["r2", "/tmp/b.log"]]) {
      await Deno.mkdir(`${dir}/${release}`);
      await Deno.writeTextFile(`${dir}/${release}/${CONF}`, conf(path));
    }
    await Deno.symlink("r1", `${dir}/current`);
    await Deno.symlink(`current/${CONF}`, `${dir}/${CONF}`);
    const h = harness(`${dir}/${CONF}`);
    try {
      assert.equal((await h.watcher.start()).flowLogger.path, "/tmp/a.log");
      const check = h.waitFor("changed");
      await Deno.symlink("r2", `${dir}/current.new`);
      await Deno.rename(`${dir}/current.new`, `${dir}/current`);
      await check;
      assert.equal(h.watcher.config.flowLogger.path, "/tmp/b.log");
    } finally {
      await h.watcher.stop();
    }
  } finally {
    setLogWriter(restoreLog);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("watcher: going back to content seen before an invalid edit is not a change", async () => {
  await withConfigMap(async (vol, h) => {
    await h.watcher.start();
    let check = h.waitFor("invalid");
    await vol.swap("not: [valid");
    await check;
    check = h.waitFor("unchanged");
    await vol.swap(conf("/tmp/a.log"));
    await check;
    assert.equal(h.changes.length, 0);
  });
});

Deno.test("watcher: check() applies a plain in-place edit and reports unreadable files", async () => {
  const restoreLog = setLogWriter(() => {});
  const dir = await Deno.makeTempDir({ prefix: "fa-config-" });
  const path = `${dir}/${CONF}`;
  await Deno.writeTextFile(path, conf("/tmp/a.log"));
  const changes: FlowAggregatorConfig[] = [];
  const watcher = new ConfigWatcher(path, {
    ...PRODUCT,
    // Long debounce: only explicit check() calls re-read in this test.
    debounceMs: 60_000,
    stableMs: 10,
    pollIntervalMs: 0,
    onChange: (next) => {
      changes.push(next);
    },
  });
  try {
    await watcher.start();
    assert.equal(await watcher.check(), "unchanged");
    await Deno.writeTextFile(path, conf("/tmp/z.log"));
    assert.equal(await watcher.check(), "changed");
    assert.equal(changes.length, 1);
    assert.equal(changes[0].flowLogger.path, "/tmp/z.log");
    await Deno.remove(path);
    assert.equal(await watcher.check(), "unreadable");
    assert.equal(watcher.config.flowLogger.path, "/tmp/z.log");
  } finally {
    await watcher.stop();
    setLogWriter(restoreLog);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("watcher: start fails cleanly for a missing directory or an invalid file", async () => {
  const w1 = new ConfigWatcher("/nonexistent-dir-fa/flow-aggregator.conf", {
    ...PRODUCT,
    onChange: () => {},
  });
  await assert.rejects(
    () => w1.start(),
    /^Error: error when starting file watch on configuration dir/,
  );
  const dir = await Deno.makeTempDir({ prefix: "fa-config-" });
  try {
    await Deno.writeTextFile(`${dir}/${CONF}`, "flowLogger:\n  enable: 1\n");
    const w2 = new ConfigWatcher(`${dir}/${CONF}`, { ...PRODUCT, onChange: () => {} });
    await assert.rejects(() => w2.start(), /flowLogger\.enable: expected a bool/);
    assert.throws(() => w2.config, /not started/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("watcher: the safety-net poll picks up a change the watch did not report", async () => {
  const restoreLog = setLogWriter(() => {});
  const dir = await Deno.makeTempDir({ prefix: "fa-config-" });
  const path = `${dir}/${CONF}`;
  await Deno.writeTextFile(path, conf("/tmp/a.log"));
  let resolveChange: (c: FlowAggregatorConfig) => void = () => {};
  const changed = new Promise<FlowAggregatorConfig>((r) => (resolveChange = r));
  const watcher = new ConfigWatcher(path, {
    ...PRODUCT,
    // Events would only be handled after a minute; the 20 ms poll must see the edit first.
    debounceMs: 60_000,
    stableMs: 10,
    pollIntervalMs: 20,
    onChange: (next) => resolveChange(next),
  });
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await watcher.start();
    await Deno.writeTextFile(path, conf("/tmp/p.log"));
    const next = await Promise.race([
      changed,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("poll did not fire")), 5000);
      }),
    ]);
    assert.equal(next.flowLogger.path, "/tmp/p.log");
  } finally {
    clearTimeout(timer);
    await watcher.stop();
    setLogWriter(restoreLog);
    await Deno.remove(dir, { recursive: true });
  }
});

/**
 * Moves `clock` to each pending timer in turn (the watcher's debounce and stability waits)
 * while the watcher's real file I/O completes in between, until `done()` holds; fails after
 * 5 s of real time instead of hanging.
 */
/**
 * Fires the clock's timers one by one until `done` (5 s of real time at most); with `beforeMs`,
 * never a timer due at or past that time: the work they started is waited for in real time.
 */
async function driveUntil(
  clock: ManualClock,
  done: () => boolean,
  what: string,
  beforeMs = Infinity,
): Promise<void> {
  const deadline = performance.now() + 5000;
  while (!done()) {
    if (performance.now() > deadline) throw new Error(`watcher: no ${what} within 5 s`);
    const pending = clock.pendingTimers();
    if (pending.length > 0 && clock.nowMs() + pending[0] < beforeMs) clock.advance(pending[0]);
    else await new Promise((r) => setTimeout(r, 5));
    await new Promise((r) => setTimeout(r, 0));
  }
}

const TCP_A = `aggregatorTransportProtocol: TCP\n${conf("/tmp/a.log")}`;
// The new file puts the transport last, so its first half is valid YAML without it (upstream
// layouts often do): applied alone, the transport would fall back to the TLS default.
const FULL_B = `${conf("/tmp/b.log")}aggregatorTransportProtocol: TCP\n`;
const HALF_B = conf("/tmp/b.log");

/**
 * Runs `body` on a plain directory holding TCP_A with a manual-clock watcher started on it
 * (`stableMs` as given), the log silenced; cleans up afterwards.
 */
async function withPlainFile(
  stableMs: number | undefined,
  body: (path: string, clock: ManualClock, h: Harness) => Promise<void>,
): Promise<void> {
  const restoreLog = setLogWriter(() => {});
  const dir = await Deno.makeTempDir({ prefix: "fa-config-" });
  const path = `${dir}/${CONF}`;
  await Deno.writeTextFile(path, TCP_A);
  const clock = new ManualClock();
  const h = harness(path, { clock, stableMs });
  try {
    const initial = await h.watcher.start();
    assert.equal(initial.aggregatorTransportProtocol, "TCP");
    await body(path, clock, h);
  } finally {
    await h.watcher.stop();
    setLogWriter(restoreLog);
    await Deno.remove(dir, { recursive: true });
  }
}

/** Opens `path` truncated and writes `text` into it, leaving it open (a writer mid-file). */
async function startWriting(path: string, text: string): Promise<Deno.FsFile> {
  const f = await Deno.open(path, { write: true, truncate: true });
  await f.write(new TextEncoder().encode(text));
  return f;
}

Deno.test("watcher: without the stability check a slow write is applied half-written", async () => {
  // The defect of issue 10, reproduced with the check off (stableMs 0 = the old behaviour).
  await withPlainFile(0, async (path, clock, h) => {
    const f = await startWriting(path, HALF_B);
    await driveUntil(clock, () => h.changes.length === 1, "reload of the half file");
    assert.equal(h.changes[0].next.flowLogger.path, "/tmp/b.log");
    assert.equal(h.changes[0].next.aggregatorTransportProtocol, "TLS", "transport lost");
    await f.write(new TextEncoder().encode(FULL_B.slice(HALF_B.length)));
    f.close();
    await driveUntil(clock, () => h.changes.length === 2, "reload of the whole file");
    assert.equal(h.changes[1].next.aggregatorTransportProtocol, "TCP");
  });
});

Deno.test("watcher: a slow, non-atomic write is never applied half-written", async () => {
  await withPlainFile(undefined, async (path, clock, h) => {
    const f = await startWriting(path, HALF_B);
    // The half file was read and the watcher now waits (1 s, the default) to read it again.
    await driveUntil(clock, () => clock.pendingTimers().includes(1000), "stability wait");
    assert.equal(h.changes.length, 0);
    // The writer finishes during that wait.
    await f.write(new TextEncoder().encode(FULL_B.slice(HALF_B.length)));
    f.close();
    await driveUntil(clock, () => h.results.includes("changed"), "reload of the whole file");
    // Exactly one configuration was applied: the whole file, transport kept.
    assert.equal(h.changes.length, 1);
    assert.equal(h.changes[0].next.aggregatorTransportProtocol, "TCP");
    assert.equal(h.changes[0].next.flowLogger.path, "/tmp/b.log");
    assert.deepEqual(h.changes[0].diff.changedKeys, ["flowLogger.path"]);
    assert.equal(h.results.filter((r) => r === "unstable").length, 1);
    assert.deepEqual(h.watcher.stats(), { configReloads: 1, configReloadsRejected: 1 });
  });
});

Deno.test("watcher: invalid content is rejected and counted once, the last good config stays", async () => {
  await withPlainFile(undefined, async (path, clock, h) => {
    await Deno.writeTextFile(path, "aggregatorTransportProtocol: SCTP\n");
    await driveUntil(clock, () => h.results.includes("invalid"), "rejection");
    // Re-reading the same bad bytes (another event, the poll) is not a second rejection.
    assert.equal(await h.watcher.check(), "invalid");
    assert.deepEqual(h.watcher.stats(), { configReloads: 0, configReloadsRejected: 1 });
    assert.equal(h.watcher.config.aggregatorTransportProtocol, "TCP");
    // Back to the good file, then the same mistake again: a new edit, a new rejection.
    await Deno.writeTextFile(path, TCP_A);
    assert.equal(await h.watcher.check(), "unchanged");
    await Deno.writeTextFile(path, "aggregatorTransportProtocol: SCTP\n");
    let again: CheckResult | undefined;
    h.watcher.check().then((r) => again = r);
    await driveUntil(clock, () => again !== undefined, "second rejection");
    assert.equal(again, "invalid");
    assert.deepEqual(h.watcher.stats(), { configReloads: 0, configReloadsRejected: 2 });
    assert.equal(h.changes.length, 0);
  });
});

// A file of hundreds of MiB in the config's place was read and parsed whole on the main thread
// at every reload and poll (found by review: 303 MB, /healthz 15 s late, +600 MB RSS kept).
Deno.test("watcher: a file over MAX_CONFIG_FILE_BYTES is refused unread, the last good config stays", async () => {
  await withPlainFile(undefined, async (path, clock, h) => {
    // Valid YAML (comments) past the bound: only its size is wrong.
    const huge = TCP_A.replace("TCP", "UDP") + "#".repeat(MAX_CONFIG_FILE_BYTES) + "\n";
    await Deno.writeTextFile(path, huge);
    let r: CheckResult | undefined;
    h.watcher.check().then((x) => r = x);
    await driveUntil(clock, () => r !== undefined, "the re-read");
    assert.equal(r, "unreadable");
    // Counted at each read (the file's own event may have caused one more).
    assert.equal(h.watcher.stats().configReloads, 0);
    assert.ok(h.watcher.stats().configReloadsRejected >= 1);
    assert.equal(h.watcher.config.aggregatorTransportProtocol, "TCP");
    // At the bound exactly, it is read.
    await Deno.writeTextFile(path, huge.slice(0, MAX_CONFIG_FILE_BYTES));
    void h.watcher.check();
    await driveUntil(
      clock,
      () => h.watcher.config.aggregatorTransportProtocol === "UDP",
      "the file at the bound applied",
    );
    assert.equal(h.watcher.stats().configReloads, 1);
  });
  const dir = await Deno.makeTempDir({ prefix: "fa-config-" });
  try {
    await Deno.writeTextFile(`${dir}/${CONF}`, "#".repeat(MAX_CONFIG_FILE_BYTES + 1));
    await assert.rejects(() => readConfigFile(`${dir}/${CONF}`), /larger than 1048576 bytes/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("watcher: ConfigMap symlink swaps reload on the injected clock, stability included", async () => {
  const clock = new ManualClock();
  await withConfigMap(async (vol, h) => {
    await h.watcher.start();
    await vol.swap(conf("/tmp/b.log"));
    await driveUntil(clock, () => h.changes.length === 1, "reload after the swap");
    assert.equal(h.changes[0].next.flowLogger.path, "/tmp/b.log");
    await vol.swap(conf("/tmp/c.log"));
    await driveUntil(clock, () => h.changes.length === 2, "reload after the second swap");
    assert.equal(h.watcher.config.flowLogger.path, "/tmp/c.log");
    // A swap is atomic: the second read always agrees, nothing is rejected.
    assert.equal(h.results.includes("unstable"), false);
    assert.deepEqual(h.watcher.stats(), { configReloads: 2, configReloadsRejected: 0 });
  }, clock);
});

Deno.test("watcher: the product's parser logs a file's warnings at start and at each reload", async () => {
  const lines: string[] = [];
  const restoreLog = setLogWriter((l) => lines.push(l));
  const dir = await Deno.makeTempDir({ prefix: "fa-config-" });
  const path = `${dir}/${CONF}`;
  await Deno.writeTextFile(path, conf("/tmp/a.log") + "mode: Aggregate\n");
  const watcher = new ConfigWatcher(path, {
    ...PRODUCT,
    debounceMs: 60_000,
    pollIntervalMs: 0,
    onChange: () => {},
  });
  const warned = (key: string) =>
    lines.filter((l) => l.includes("level=warn") && l.includes(`path=${key}`)).length;
  try {
    await watcher.start();
    assert.equal(warned("mode"), 1, lines.join("\n"));
    await Deno.writeTextFile(path, conf("/tmp/b.log") + "recordBufferSize: 8192\n");
    assert.equal(await watcher.check(), "changed");
    assert.equal(watcher.config.flowLogger.path, "/tmp/b.log");
    assert.equal(warned("recordBufferSize"), 1, lines.join("\n"));
    // Disabling every sink is a valid reload now (upstream's V3 refused it), with its warning.
    await Deno.writeTextFile(path, "flowLogger:\n  enable: false\n");
    assert.equal(await watcher.check(), "changed");
    assert.ok(lines.some((l) => /level=warn .*No collector \/ sink has been configured/.test(l)));
  } finally {
    await watcher.stop();
    setLogWriter(restoreLog);
    await Deno.remove(dir, { recursive: true });
  }
});

/** `promise`, or a rejection naming `what` after `ms` (a test of something that used to hang). */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: still pending after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// A FIFO as --config (or moved over the file) held the launcher, the start and every reload in
// open(2) until a writer came (found by review: the launcher sat 20 s with no output).
Deno.test("readConfigFile: a FIFO, a directory or a device is refused at once, never opened", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-config-" });
  const fifo = `${dir}/${CONF}`;
  try {
    const mk = await new Deno.Command("mkfifo", { args: [fifo] }).output();
    assert.equal(mk.code, 0, "mkfifo");
    let settled = false;
    const read = readConfigFile(fifo).finally(() => settled = true);
    read.catch(() => {});
    try {
      await assert.rejects(
        () => within(read, 2000, "readConfigFile of a FIFO"),
        (err: Error) => {
          assert.match(err.message, /still pending|not a regular file \(FIFO\)/);
          assert.doesNotMatch(err.message, /still pending/, "it hung in the FIFO's open");
          assert.ok(
            err.message.startsWith(`cannot read configuration file ${fifo}: `),
            err.message,
          );
          return true;
        },
      );
    } finally {
      // An open still blocked (the old code) is released by a writer, else the test never ends.
      if (!settled) (await Deno.open(fifo, { write: true })).close();
      await read.catch(() => {});
    }
    // Through a symlink as well (a ConfigMap's link): the target is looked at.
    await Deno.symlink(fifo, `${dir}/link.conf`);
    await assert.rejects(
      () => within(readConfigFile(`${dir}/link.conf`), 2000, "readConfigFile of a link to a FIFO"),
      /cannot read configuration file .*link\.conf: not a regular file \(FIFO\)/,
    );
    await assert.rejects(() => readConfigFile(dir), /not a regular file \(directory\)/);
    await assert.rejects(
      () => within(readConfigFile("/dev/zero"), 2000, "readConfigFile of /dev/zero"),
      /not a regular file \(character device\)/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("watcher: stop({ reloadWaitMs }) does not wait past the bound for a reload that hangs", async () => {
  const restoreLog = setLogWriter(() => {});
  const dir = await Deno.makeTempDir({ prefix: "fa-config-" });
  const path = `${dir}/${CONF}`;
  await Deno.writeTextFile(path, TCP_A);
  const clock = new ManualClock();
  let called = false;
  const watcher = new ConfigWatcher(path, {
    ...PRODUCT,
    clock,
    stableMs: 0,
    pollIntervalMs: 0,
    onChange: () => {
      called = true;
      return new Promise<void>(() => {}); // never ends
    },
  });
  try {
    await watcher.start();
    await Deno.writeTextFile(path, conf("/tmp/b.log"));
    void watcher.check();
    await driveUntil(clock, () => called, "handler call");
    let stopped = false;
    const stop = watcher.stop({ reloadWaitMs: 3000 }).then(() => stopped = true);
    await driveUntil(clock, () => clock.pendingTimers().includes(3000), "the bounded wait");
    assert.equal(stopped, false);
    clock.advance(3000);
    await within(stop, 2000, "stop");
    assert.equal(stopped, true);
  } finally {
    setLogWriter(restoreLog);
    await Deno.remove(dir, { recursive: true });
  }
});

// A handler that threw on B left the process on A while the watcher held B as the configuration
// in force: C (B without its bad part) was diffed against B, so what B and C share (review:
// flowLogger.prettyPrint) was never applied, and nothing counted the failure.
Deno.test("watcher: a change the handler throws on is rejected and counted; the next one is diffed against what was applied", async () => {
  const lines: string[] = [];
  const restoreLog = setLogWriter((line) => lines.push(line));
  const dir = await Deno.makeTempDir({ prefix: "fa-config-" });
  const path = `${dir}/${CONF}`;
  await Deno.writeTextFile(path, TCP_A);
  const applied: { next: FlowAggregatorConfig; diff: ConfigDiff }[] = [];
  let admitCalls = 0;
  const watcher = new ConfigWatcher(path, {
    ...PRODUCT,
    // Only explicit check() calls re-read in this test.
    debounceMs: 60_000,
    stableMs: 0,
    pollIntervalMs: 0,
    admit: (next) => {
      admitCalls++;
      if (next.flowLogger.path === "/tmp/admit-throws.log") throw new Error("admit failed");
      return next.flowLogger.path !== "/tmp/deferred.log";
    },
    onChange: (next, _old, diff) => {
      if (next.clickHouse.enable) throw new Error("invalid host '127.0.0.1,localhost'");
      applied.push({ next, diff });
    },
  });
  try {
    await watcher.start();
    const B = TCP_A + "  prettyPrint: false\nclickHouse:\n  enable: true\n";
    await Deno.writeTextFile(path, B);
    assert.equal(await watcher.check(), "rejected");
    assert.deepEqual(watcher.stats(), { configReloads: 0, configReloadsRejected: 1 });
    assert.equal(watcher.config.flowLogger.prettyPrint, true, "B is not in force");
    assert.ok(
      lines.some((l) => /handler failed.*configReloadsRejected=1/.test(l)),
      lines.join("\n"),
    );
    // The same bytes again (an event, the poll): not a new rejection.
    assert.equal(await watcher.check(), "invalid");
    assert.equal(watcher.stats().configReloadsRejected, 1);
    // C = B without ClickHouse: diffed against A, the configuration applied.
    await Deno.writeTextFile(path, TCP_A + "  prettyPrint: false\n");
    assert.equal(await watcher.check(), "changed");
    assert.equal(applied.length, 1);
    assert.deepEqual(applied[0].diff.changedKeys, ["flowLogger.prettyPrint"]);
    assert.equal(watcher.config.flowLogger.prettyPrint, false);
    assert.deepEqual(watcher.stats(), { configReloads: 1, configReloadsRejected: 1 });

    // admit: false defers a change (neither counted nor logged as an update), a throw rejects it.
    const updates = lines.filter((l) => l.includes("Updating Flow Aggregator")).length;
    await Deno.writeTextFile(path, conf("/tmp/deferred.log"));
    assert.equal(await watcher.check(), "deferred");
    await Deno.writeTextFile(path, conf("/tmp/admit-throws.log"));
    assert.equal(await watcher.check(), "rejected");
    assert.equal(admitCalls, 4);
    assert.equal(applied.length, 1);
    assert.equal(lines.filter((l) => l.includes("Updating Flow Aggregator")).length, updates);
    assert.deepEqual(watcher.stats(), { configReloads: 1, configReloadsRejected: 2 });
    assert.equal(watcher.config.flowLogger.path, "/tmp/a.log");
  } finally {
    await watcher.stop();
    setLogWriter(restoreLog);
    await Deno.remove(dir, { recursive: true });
  }
});

// Bytes that are not UTF-8 were decoded as U+FFFD and used (a flowLogger.path holding U+FFFD
// was applied); at start the file is now a fatal error, at a reload a rejection, counted once.
Deno.test("watcher: a file that is not UTF-8 text is refused at start, rejected at a reload", async () => {
  const bad = new TextEncoder().encode(
    "aggregatorTransportProtocol: TCP\nflowLogger:\n  path: /tmp/",
  );
  const bytes = new Uint8Array([...bad, 0xff, 0xfe, ...new TextEncoder().encode(".log\n")]);
  const dir = await Deno.makeTempDir({ prefix: "fa-config-" });
  try {
    await Deno.writeFile(`${dir}/${CONF}`, bytes);
    await assert.rejects(
      readConfigFile(`${dir}/${CONF}`),
      new RegExp(
        `^ConfigFileNotUtf8: configuration file ${dir}/${CONF} is not UTF-8 text \\(line 3\\)`,
      ),
    );
    const w = new ConfigWatcher(`${dir}/${CONF}`, { ...PRODUCT, onChange: () => {} });
    await assert.rejects(w.start(), /is not UTF-8 text/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  await withPlainFile(0, async (path, _clock, h) => {
    await Deno.writeFile(path, bytes);
    assert.equal(await h.watcher.check(), "invalid");
    assert.equal(await h.watcher.check(), "invalid", "the same bytes again");
    assert.deepEqual(h.watcher.stats(), { configReloads: 0, configReloadsRejected: 1 });
    assert.equal(h.watcher.config.flowLogger.path, "/tmp/a.log");
    assert.equal(h.changes.length, 0);
  });
});

// A reload in which only unknown keys (or comments) changed logged `Updating Flow Aggregator
// changed=""` and counted a reload.
Deno.test("watcher: a file whose settings did not change (comments, unknown keys) is no reload", async () => {
  const lines: string[] = [];
  await withPlainFile(0, async (path, _clock, h) => {
    const restore = setLogWriter((l) => lines.push(l));
    try {
      await Deno.writeTextFile(path, `${TCP_A}# a comment\nnewerKey: 1\n`);
      assert.equal(await h.watcher.check(), "unchanged");
      assert.deepEqual(h.watcher.stats(), { configReloads: 0, configReloadsRejected: 0 });
      assert.equal(h.changes.length, 0);
      assert.ok(!lines.some((l) => l.includes("Updating Flow Aggregator")), lines.join("\n"));
      // The file read is the new baseline: a real change after it is one reload.
      await Deno.writeTextFile(path, `${TCP_A.replace("/tmp/a.log", "/tmp/c.log")}newerKey: 1\n`);
      assert.equal(await h.watcher.check(), "changed");
      assert.deepEqual(h.watcher.stats(), { configReloads: 1, configReloadsRejected: 0 });
      assert.deepEqual(h.changes[0].diff.changedKeys, ["flowLogger.path"]);
    } finally {
      setLogWriter(restore);
    }
  });
});

// After a FIFO once took the file's place (refused, then removed), Deno's watch thread stayed
// blocked in its open(2) and every later change waited for the 30 s poll. The check that finds
// the FIFO holds it open (a writer: the blocked open returns, later ones do not block).
Deno.test({
  name: "watcher: a FIFO in the file's place does not leave the watch stuck",
  // On the old code the stuck watch cannot be closed (that blocks the main thread): it is
  // released at the end by a writer on the FIFO, through a link kept outside the directory.
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const restoreLog = setLogWriter(() => {});
    const dir = await Deno.makeTempDir({ prefix: "fa-config-" });
    const keep = await Deno.makeTempDir({ prefix: "fa-fifo-" });
    const path = `${dir}/${CONF}`;
    await Deno.writeTextFile(path, TCP_A);
    const clock = new ManualClock();
    const changes: string[] = [];
    const results: CheckResult[] = [];
    const watcher = new ConfigWatcher(path, {
      ...PRODUCT,
      clock,
      stableMs: 0,
      pollIntervalMs: 30_000,
      onChange: (next) => void changes.push(next.flowLogger.path),
      onCheck: (r) => void results.push(r),
    });
    try {
      await watcher.start();
      // A FIFO renamed over the file: the watch thread opens it and hangs, no event comes.
      const mk = await new Deno.Command("mkfifo", { args: [`${dir}/new.fifo`] }).output();
      assert.equal(mk.code, 0, "mkfifo");
      await Deno.link(`${dir}/new.fifo`, `${keep}/held`);
      await Deno.rename(`${dir}/new.fifo`, path);
      await new Promise((r) => setTimeout(r, 300));
      // The poll finds it and refuses it.
      clock.advance(30_000);
      await driveUntil(clock, () => results.includes("unreadable"), "the FIFO refused");
      await Deno.remove(path);
      await Deno.writeTextFile(path, TCP_A.replace("/tmp/a.log", "/tmp/b.log"));
      // The edit is seen through the watch (its debounce armed), not 30 s later by the poll.
      const deadline = performance.now() + 5000;
      while (!clock.pendingTimers().some((t) => t < 30_000) && performance.now() < deadline) {
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.ok(clock.pendingTimers().some((t) => t < 30_000), "an event came for the edit");
      // Before the next poll (at 60 s), however long the reload takes here.
      await driveUntil(clock, () => changes.length === 1, "the edit's reload", 60_000);
      assert.deepEqual(changes, ["/tmp/b.log"]);
      assert.ok(clock.nowMs() < 60_000, "before the next poll");
    } finally {
      // Release an open(2) still stuck (the old code): a writer on the same FIFO, bounded.
      const w = Deno.open(`${keep}/held`, { write: true });
      const opened = await Promise.race([w, new Promise((r) => setTimeout(r, 500))]);
      if (opened === undefined) (await Deno.open(`${keep}/held`, { read: true })).close();
      (await w).close();
      await watcher.stop();
      setLogWriter(restoreLog);
      await Deno.remove(dir, { recursive: true });
      await Deno.remove(keep, { recursive: true });
    }
  },
});
