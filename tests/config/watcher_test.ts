import assert from "node:assert/strict";
import { type CheckResult, type ConfigDiff, ConfigWatcher } from "../../src/config/mod.ts";
import { diffConfig, type FlowAggregatorConfig, parseConfig } from "../../src/components.ts";

/** How the product builds its watcher: its parser and diff. */
const PRODUCT = { parse: (text: string) => parseConfig(text), diff: diffConfig };
import { setLogWriter } from "../../src/log.ts";

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
  /** Resolves at the next re-read with result `want` (stray re-reads from earlier events are skipped). */
  waitFor(want: CheckResult): Promise<void>;
}

function harness(path: string): Harness {
  const changes: Harness["changes"] = [];
  let waiters: { want: CheckResult; resolve: () => void }[] = [];
  const watcher = new ConfigWatcher(path, {
    ...PRODUCT,
    debounceMs: 30,
    pollIntervalMs: 0,
    onChange: (next, old, diff) => {
      changes.push({ next, old, diff });
    },
    onCheck: (r) => {
      const done = waiters.filter((w) => w.want === r);
      waiters = waiters.filter((w) => w.want !== r);
      for (const w of done) w.resolve();
    },
  });
  return {
    watcher,
    changes,
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
): Promise<void> {
  const restoreLog = setLogWriter(() => {});
  const vol = await ConfigMapDir.create(conf("/tmp/a.log"));
  const h = harness(vol.path);
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
