/**
 * End to end: the build of `deno task bundle` (`scripts/bundle.ts`: the program as
 * `flow-aggregator.js`, its worker entries under `src/`, the chunks they share). It must run outside
 * the repository (no deno.json, no node_modules next to it): `--version`, and a short real run
 * that collects a record and writes it to the flow log from the sink's own worker.
 */

import assert from "node:assert/strict";
import denoJson from "../../deno.json" with { type: "json" };
import { sendThenStop, SimAgent } from "./helpers/agent.ts";
import { lineKey, readFlowLog, waitForKeys } from "./helpers/flow_log.ts";
import {
  type DenoOutput,
  FaProcess,
  flowLogConfig,
  REPO,
  runDeno,
  runToExit,
} from "../_helpers/process.ts";
import { intraNodeKey, intraNodeRecord } from "./helpers/scenarios.ts";
import { bundledEntryPath, WORKER_ENTRIES } from "../../src/worker_module.ts";
import { dirname, join } from "node:path";
import { libcPath } from "../../src/collector/udp_fast_ffi.ts";
import { launcherFlags } from "../../src/launcher/mod.ts";

const dir = await Deno.makeTempDir({ prefix: "fa-e2e-bundle-" });
const bundle = `${dir}/flow-aggregator.js`;
// One build shared by the tests of this file, removed when the test module unloads.
globalThis.addEventListener("unload", () => {
  try {
    Deno.removeSync(dir, { recursive: true });
  } catch {
    // already gone
  }
});
let built: DenoOutput | undefined;

async function build(): Promise<void> {
  if (built !== undefined) return;
  built = await runDeno(["run", "-A", "scripts/bundle.ts", `--out=${dir}`], { cwd: REPO });
  assert.equal(built.code, 0, built.stderr);
}

function conf(transport: "TCP" | "UDP"): string {
  return flowLogConfig(`./flows-${transport}.log`, { transport });
}

Deno.test({
  name: "bundle: the build runs --version outside the repository",
  async fn() {
    await build();
    const size = (await Deno.stat(bundle)).size;
    assert.ok(size > 10_000, `bundle has ${size} bytes`);
    const r = await runToExit({
      script: bundle,
      denoFlags: ["--allow-all"],
      cwd: dir,
      args: ["--version"],
    });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, new RegExp(`^flow-aggregator version ${denoJson.version} `));
  },
});

Deno.test({
  name: "bundle: a short real TCP run of the bundle collects and logs a flow",
  async fn() {
    await build();
    await Deno.writeTextFile(`${dir}/tcp.conf`, conf("TCP"));
    const fa = FaProcess.start({
      script: bundle,
      // Outside the repository deno.json's unstable list is not read: the worker options
      // (the sinks' narrowed permissions) are asked for on the command line.
      denoFlags: ["--allow-all", "--unstable-worker-options"],
      cwd: dir,
      args: ["--config", "tcp.conf", "--listen", "127.0.0.1:0", "--log-level", "debug"],
    });
    try {
      const port = await fa.collectorPort();
      const status = await sendThenStop(fa, port, [intraNodeRecord(48_001)]);
      assert.equal(status.code, 0, fa.stderr);
      // The sink ran in its permission-scoped worker, loaded from src/exporters/flow_log/worker.js.
      assert.match(fa.stderr, /msg="exporter worker started" exporter=log /);
      assert.doesNotMatch(fa.stderr, /sink worker module not found/);
      const lines = await readFlowLog(`${dir}/flows-TCP.log`);
      // One line from the shutdown flush, plus one if the 1 s active timeout came first.
      assert.ok(lines.length >= 1 && lines.length <= 2, `${lines.length} lines`);
      assert.deepEqual([...new Set(lines.map(lineKey))], [intraNodeKey(48_001)]);
    } finally {
      await fa.dispose();
    }
  },
});

Deno.test({
  name: "bundle: UDP needs --unstable-net outside the repository and says so; with it, it runs",
  async fn() {
    await build();
    await Deno.writeTextFile(`${dir}/udp.conf`, conf("UDP"));
    const args = ["--config", "udp.conf", "--listen", "127.0.0.1:0"];
    const bare = await runToExit({
      script: bundle,
      denoFlags: ["--allow-all", "--unstable-worker-options"],
      cwd: dir,
      args,
    });
    assert.equal(bare.code, 255);
    assert.match(bare.stderr, /--unstable-net/);

    const fa = FaProcess.start({
      script: bundle,
      denoFlags: ["--allow-all", "--unstable-net", "--unstable-worker-options"],
      cwd: dir,
      args,
    });
    try {
      const port = await fa.collectorPort();
      const agent = await SimAgent.connect("k8s-node-1", port, "udp");
      await agent.sendTemplates();
      // UDP has no end of session to wait for: send enough flows that their lines fill the
      // flow log's 4 KiB buffer when they expire after 1 s, and poll the file.
      const ports = Array.from({ length: 40 }, (_, i) => 48_100 + i);
      for (const p of ports) await agent.sendRecord(intraNodeRecord(p));
      agent.close();
      await waitForKeys(`${dir}/flows-UDP.log`, ports.map((p) => intraNodeKey(p)), 10_000);
      const status = await fa.stop("SIGTERM");
      assert.equal(status.code, 0, fa.stderr);
    } finally {
      await fa.dispose();
    }
  },
});

/**
 * The files `file` loads when it is evaluated: itself and, transitively, its static imports of
 * the build's relative files (`import ... from "./chunk-X.js"`), not its dynamic `import()`s.
 */
async function staticClosure(file: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const todo = [file];
  while (todo.length > 0) {
    const f = todo.pop()!;
    if (out.has(f)) continue;
    const text = await Deno.readTextFile(f);
    out.set(f, text);
    for (
      const m of text.matchAll(/(?:import|export)\s*(?:[^"'();]*?from\s*)?["'](\.[^"']+)["']/g)
    ) {
      todo.push(join(dirname(f), m[1]));
    }
  }
  return out;
}

Deno.test({
  name: "bundle: the launcher execs the bundled program with the permissions it computed",
  async fn() {
    await build();
    const libc = libcPath();
    assert.ok(libc !== undefined, "a C library on this host");
    await Deno.writeTextFile(`${dir}/launched.conf`, flowLogConfig(`${dir}/launched.log`));
    const fa = FaProcess.start({
      script: `${dir}/src/launcher/mod.js`,
      denoFlags: launcherFlags([libc]),
      cwd: dir,
      args: ["--config", "launched.conf", "--listen", "127.0.0.1:0", "--log-level", "debug"],
    });
    try {
      const port = await fa.collectorPort();
      const argv = (await Deno.readTextFile(`/proc/${fa.pid}/cmdline`)).split("\0");
      // The build's program, its modules read from the build's root (the launcher and the
      // program share the permission code, in a chunk at the root).
      assert.ok(argv.includes(bundle), argv.join(" "));
      const read = argv.find((a) => a.startsWith("--allow-read="))!.slice(13).split(",");
      assert.ok(read.includes(dir), read.join(","));
      const status = await sendThenStop(fa, port, [intraNodeRecord(48_002)]);
      assert.equal(status.code, 0, fa.stderr);
      assert.match(fa.stderr, /msg="exporter worker started" exporter=log /);
      const lines = await readFlowLog(`${dir}/launched.log`);
      assert.deepEqual([...new Set(lines.map(lineKey))], [intraNodeKey(48_002)]);
    } finally {
      await fa.dispose();
    }
  },
});

Deno.test({
  name: "bundle: every worker entry is built where the program looks for it",
  async fn() {
    await build();
    for (const rel of Object.values(WORKER_ENTRIES)) {
      const entry = `${dir}/${bundledEntryPath(rel)}`;
      const files = await staticClosure(entry);
      // The entry imports the chunks that hold its code: together they are the worker.
      const size = [...files.values()].reduce((n, t) => n + t.length, 0);
      assert.ok(size > 1000, `${bundledEntryPath(rel)} loads ${size} bytes`);
    }
  },
});

Deno.test({
  name: "bundle: what only an enabled sink or a cluster needs is not loaded at start",
  async fn() {
    await build();
    const loaded = await staticClosure(bundle);
    const text = [...loaded.values()].join("\n");
    // Strings of the libraries, found in the build but not in what the program loads at start:
    // the S3 SDK (request signing), the ClickHouse client (its HTTP headers), the Kubernetes
    // client (its model serializer), node-forge (certificate generation).
    const roots = [...Deno.readDirSync(dir)].filter((e) => e.isFile && e.name.endsWith(".js"));
    const whole = (await Promise.all(roots.map((e) => Deno.readTextFile(`${dir}/${e.name}`))))
      .join("\n");
    for (const mark of ["x-amz-content-sha256", "X-ClickHouse-", "ObjectSerializer", "forge.pki"]) {
      assert.ok(whole.includes(mark), `${mark}: not in the build at all`);
      assert.ok(!text.includes(mark), `${mark}: loaded at start`);
    }
    const size = [...loaded.values()].reduce((n, t) => n + t.length, 0);
    assert.ok(
      size < whole.length / 4,
      `the program loads ${size} of the build's ${whole.length} bytes at start`,
    );
  },
});
