/**
 * End to end: the launcher (`src/launcher/mod.ts`, the image's entrypoint) run from the source
 * tree with its own narrow flags, as the image runs it. It computes the permissions of the
 * command line and configuration and execs the aggregator with them: a flow log outside every
 * default directory and an IPFIX collector on a local listener both get their records; the
 * aggregator has the launcher's PID (exec, not a child); SIGTERM stops it with 0. A reload
 * enabling a sink the process has no permission for stops it gracefully (every flow held
 * written) with exit code 77, and the next start, through the launcher, runs that sink.
 */

import assert from "node:assert/strict";
import { libcPath } from "../../src/collector/udp_fast_ffi.ts";
import { EXIT_NEW_PERMISSIONS } from "../../src/cli_options.ts";
import type { Collector } from "../../src/collector/mod.ts";
import { LAUNCHED_FLAG, launcherFlags } from "../../src/launcher/mod.ts";
import { DENO_JSON, FaProcess, flowLogConfig, LAUNCHER_TS, MAIN_TS } from "../_helpers/process.ts";
import { waitFor } from "../_helpers/wait.ts";
import { SimAgent } from "./helpers/agent.ts";
import { ConfigMapDir } from "./helpers/configmap.ts";
import { readFlowLog } from "./helpers/flow_log.ts";
import { decodingCollector, type Received } from "./helpers/ipfix_export.ts";
import { intraNodeRecord } from "./helpers/scenarios.ts";

const LIBC = libcPath();

/** Starts the launcher on `conf` in `dir`, as the image's entrypoint would (its flags only). */
function launch(dir: string, conf: string): FaProcess {
  assert.ok(LIBC !== undefined, "a C library on this host");
  return FaProcess.start({
    script: LAUNCHER_TS,
    // The source tree's import map; the image's build needs none.
    denoFlags: [...launcherFlags([LIBC]), "--config", DENO_JSON],
    // Debug: the "session closed" event tells all an Agent sent was read.
    args: ["--config", conf, "--listen", "127.0.0.1:0", "--state-dir", dir, "--log-level", "debug"],
    cwd: dir,
  });
}

function ipfixSink(port: number): string {
  return `flowCollector:
  enable: true
  address: 127.0.0.1:${port}:tcp
`;
}

/** Sends one intra-node record per port from a TCP Agent and waits until the process read them. */
async function sendFlows(fa: FaProcess, ports: number[]): Promise<void> {
  const agent = await SimAgent.connect("k8s-node-1", await fa.collectorPort(), "tcp");
  await agent.sendTemplates();
  for (const p of ports) await agent.sendRecord(intraNodeRecord(p));
  agent.close();
  await fa.waitFor({ msg: "session closed" }, 10_000);
}

function range(from: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => from + i);
}

/** The argument vector of process `pid`. */
async function cmdline(pid: number): Promise<string[]> {
  return (await Deno.readTextFile(`/proc/${pid}/cmdline`)).split("\0").slice(0, -1);
}

/** The PIDs of the children of `pid` (every thread's). */
async function children(pid: number): Promise<number[]> {
  const out: number[] = [];
  for await (const t of Deno.readDir(`/proc/${pid}/task`)) {
    const text = await Deno.readTextFile(`/proc/${pid}/task/${t.name}/children`);
    out.push(...text.split(" ").filter((s) => s.trim() !== "").map(Number));
  }
  return out;
}

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-launcher-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("e2e launcher: a flow log outside the default directories and an IPFIX collector get their records; exec keeps the PID; SIGTERM exits 0", async () => {
  await withDir(async (dir) => {
    const received: Received[] = [];
    let collector: Collector | undefined;
    let fa: FaProcess | undefined;
    try {
      collector = await decodingCollector("tcp", received);
      await Deno.mkdir(`${dir}/config`);
      await Deno.mkdir(`${dir}/elsewhere`);
      const conf = `${dir}/config/flow-aggregator.conf`;
      await Deno.writeTextFile(
        conf,
        flowLogConfig(`${dir}/elsewhere/flows.log`) + ipfixSink(collector.port),
      );
      fa = launch(dir, conf);
      const started = await fa.waitFor({ component: "launcher" }, 15_000);
      assert.match(started.fields.msg, /^starting the flow aggregator with the permissions/);
      assert.equal(Number(started.fields.pid), fa.pid, "the launcher logs its own PID");
      // The computed flags: the flow log's directory, the collector's address, nothing broad.
      const perms = started.fields.permissions.split(" ");
      assert.ok(perms.some((f) => /^--allow-write=.*\/elsewhere(,|$)/.test(f)), perms.join(" "));
      const net = perms.find((f) => f.startsWith("--allow-net="))?.slice(12).split(",");
      assert.ok(net?.includes(`127.0.0.1:${collector.port}`), perms.join(" "));
      for (const f of perms.filter((x) => x.startsWith("--allow-"))) {
        assert.match(f, /^--allow-\w+=/);
      }

      await fa.collectorPort();
      // The process with the launcher's PID is the aggregator now, and it has no child.
      const argv = await cmdline(fa.pid);
      assert.ok(argv.includes(MAIN_TS), argv.join(" "));
      assert.ok(argv.includes(LAUNCHED_FLAG), argv.join(" "));
      assert.ok(!argv.includes(LAUNCHER_TS), argv.join(" "));
      const allows = (a: string[]) => a.filter((f) => f.startsWith("--allow-"));
      assert.deepEqual(allows(argv), allows(perms));
      assert.deepEqual(await children(fa.pid), []);

      const n = 20;
      await sendFlows(fa, range(41_000, n));
      await waitFor(
        async () =>
          (await readFlowLog(`${dir}/elsewhere/flows.log`).catch(() => [])).length >= n &&
          received.length >= n,
        { timeoutMs: 15_000, what: `${n} flows in the flow log and at the IPFIX collector` },
      );
      const status = await fa.stop("SIGTERM", 20_000);
      assert.equal(status.code, 0, fa.stderr);
      assert.deepEqual(fa.find({ level: "error" }).map((e) => e.raw), []);
      for (const section of ["flowLogger", "flowCollector"]) {
        const [stopped] = fa.find({ msg: "exporter stopped", section });
        assert.ok(stopped !== undefined, `${section} stopped:\n${fa.stderr}`);
        assert.equal(stopped.fields.permissionDenied, "0");
        assert.equal(stopped.fields.dropped, "0");
      }
      const ports = new Set(received.map((r) => r.record.sourceTransportPort));
      assert.deepEqual([...ports].sort(), range(41_000, n));
    } finally {
      await fa?.dispose();
      await collector?.stop();
    }
  });
});

Deno.test("e2e launcher: a reload enabling a sink that needs new permissions stops gracefully with exit 77; the next start runs it", async () => {
  await withDir(async (dir) => {
    const received: Received[] = [];
    let collector: Collector | undefined;
    let fa: FaProcess | undefined;
    try {
      collector = await decodingCollector("tcp", received);
      await Deno.mkdir(`${dir}/config`);
      await Deno.mkdir(`${dir}/logs`);
      const log = `${dir}/logs/flows.log`;
      // Long timeouts: the flows stay held until the stop.
      const base = flowLogConfig(log, { activeTimeout: "10m", inactiveTimeout: "10m" });
      const volume = await ConfigMapDir.create(`${dir}/config`, base);
      fa = launch(dir, volume.path);
      const n = 30;
      await sendFlows(fa, range(42_000, n));
      assert.deepEqual(await readFlowLog(log).catch(() => []), [], "flows held, none written yet");

      // The ConfigMap gains the IPFIX collector: an address this process may not connect to.
      await volume.update(base + ipfixSink(collector.port));
      const status = await fa.waitExit(30_000);
      assert.equal(status.code, EXIT_NEW_PERMISSIONS, fa.stderr);
      assert.equal(EXIT_NEW_PERMISSIONS, 77);
      const [why] = fa.find({ level: "error", msg: /^the new configuration needs permissions/ });
      assert.ok(why !== undefined, fa.stderr);
      assert.equal(why.fields.missing, `--allow-net=127.0.0.1:${collector.port}`);
      assert.equal(why.fields.exitCode, "77");
      // Stopped as on SIGTERM, with the sinks it had: every flow held is in the flow log.
      assert.equal(fa.find({ msg: "flushed flows held at shutdown" })[0]?.fields.flows, String(n));
      assert.equal((await readFlowLog(log)).length, n);
      assert.equal(fa.find({ msg: "flow aggregator stopped" })[0]?.fields.exitCode, "77");
      assert.equal(received.length, 0, "the new configuration was not applied");
      assert.deepEqual(fa.find({ msg: "cannot create exporter" }), []);
      // Nor reported as applied (it was logged "Updating Flow Aggregator" and counted).
      assert.deepEqual(fa.find({ msg: "Updating Flow Aggregator" }), []);
      const metrics = fa.find({ msg: "record metrics" }).at(-1)!;
      assert.equal(metrics.fields.configReloads, "0", metrics.raw);
      assert.equal(metrics.fields.configReloadsRejected, "0", metrics.raw);

      // What kubelet does next: the same command again. The launcher grants the new sink.
      fa = launch(dir, volume.path);
      const m = 10;
      await sendFlows(fa, range(43_000, m));
      const again = await fa.stop("SIGTERM", 20_000);
      assert.equal(again.code, 0, fa.stderr);
      assert.deepEqual(fa.find({ level: "error" }).map((e) => e.raw), []);
      assert.equal((await readFlowLog(log)).length, n + m);
      await waitFor(() => received.length >= m, { timeoutMs: 5_000, what: "IPFIX records" });
      const ports = new Set(received.map((r) => r.record.sourceTransportPort));
      assert.deepEqual([...ports].sort(), range(43_000, m));
    } finally {
      await fa?.dispose();
      await collector?.stop();
    }
  });
});

Deno.test("e2e launcher: UDP gets the fast path's --allow-ffi (scoped to the C library) and starts without a restart", async () => {
  await withDir(async (dir) => {
    let fa: FaProcess | undefined;
    try {
      await Deno.mkdir(`${dir}/config`);
      const conf = `${dir}/config/flow-aggregator.conf`;
      await Deno.writeTextFile(conf, flowLogConfig(`${dir}/flows.log`, { transport: "UDP" }));
      fa = launch(dir, conf);
      const started = await fa.waitFor({ component: "launcher" }, 15_000);
      assert.ok(started.fields.permissions.split(" ").includes(`--allow-ffi=${LIBC}`));
      await fa.waitFor({ msg: "udp receiver listening", mode: "ffi" }, 15_000);
      const port = await fa.collectorPort();
      const agent = await SimAgent.connect("k8s-node-1", port, "udp");
      await agent.sendTemplates();
      for (const p of range(44_000, 10)) await agent.sendRecord(intraNodeRecord(p));
      agent.close();
      await waitFor(
        async () => (await readFlowLog(`${dir}/flows.log`).catch(() => [])).length >= 10,
        {
          timeoutMs: 10_000,
          what: "UDP flows in the log",
        },
      );
      const status = await fa.stop("SIGTERM", 20_000);
      assert.equal(status.code, 0, fa.stderr);
      assert.deepEqual(fa.find({ level: "error" }).map((e) => e.raw), []);
    } finally {
      await fa?.dispose();
    }
  });
});

Deno.test("e2e launcher: with every sink, klog files and a flow log through a symlink, the launched process holds all it needs (its own check agrees)", async () => {
  await withDir(async (dir) => {
    let fa: FaProcess | undefined;
    try {
      await Deno.mkdir(`${dir}/config`);
      await Deno.mkdir(`${dir}/real-logs`);
      await Deno.symlink(`${dir}/real-logs`, `${dir}/logs`);
      const conf = `${dir}/config/flow-aggregator.conf`;
      // Nothing listens on the sinks' ports (9: discard): they fail to connect, which is not
      // what this test is about; a missing permission would be logged with `missing=` and the
      // launched process would exit 77 at start.
      await Deno.writeTextFile(
        conf,
        `${flowLogConfig(`${dir}/logs/flows.log`, { transport: "UDP" })}${ipfixSink(9)}` +
          `clickHouse:\n  enable: true\n  databaseURL: http://127.0.0.1:9\n` +
          `s3Uploader:\n  enable: true\n  bucketName: flows\n  region: us-east-1\n` +
          `  endpoint: http://127.0.0.1:9\n`,
      );
      fa = FaProcess.start({
        script: LAUNCHER_TS,
        denoFlags: [...launcherFlags([LIBC!]), "--config", DENO_JSON],
        args: [
          "--config",
          conf,
          "--listen",
          "127.0.0.1:0",
          "--state-dir",
          dir,
          "--logtostderr=false",
          `--log_dir=${dir}/klog`,
          "--alsologtostderr",
        ],
        cwd: dir,
        env: { TMPDIR: dir },
      });
      await fa.collectorPort();
      await fa.waitFor({ msg: "exporter enabled", section: "flowLogger" }, 30_000);
      await fa.waitFor({ msg: "exporter enabled", section: "s3Uploader" }, 30_000);
      assert.deepEqual(fa.find({ missing: /./ }).map((e) => e.raw), []);
      assert.deepEqual(fa.find({ msg: /needs permissions/ }).map((e) => e.raw), []);
      const status = await fa.stop("SIGTERM", 60_000);
      assert.equal(status.code, 0, fa.stderr);
      assert.deepEqual(fa.find({ missing: /./ }).map((e) => e.raw), []);
      assert.deepEqual(fa.find({ permissionDenied: /^[1-9]/ }).map((e) => e.raw), []);
    } finally {
      await fa?.dispose();
    }
  });
});

Deno.test("e2e launcher: in a Pod without a service account token (KUBERNETES_SERVICE_HOST set), standalone without an error", async () => {
  await withDir(async (dir) => {
    let fa: FaProcess | undefined;
    try {
      await Deno.mkdir(`${dir}/config`);
      const conf = `${dir}/config/flow-aggregator.conf`;
      await Deno.writeTextFile(conf, flowLogConfig(`${dir}/flows.log`));
      assert.ok(LIBC !== undefined);
      // No token here (as in a Pod with automountServiceAccountToken: false): the launcher
      // grants the directory's read all the same, so the process sees it absent, not refused.
      fa = FaProcess.start({
        script: LAUNCHER_TS,
        denoFlags: [...launcherFlags([LIBC]), "--config", DENO_JSON],
        args: ["--config", conf, "--listen", "127.0.0.1:0", "--state-dir", dir],
        cwd: dir,
        env: { KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" },
      });
      const started = await fa.waitFor({ component: "launcher" }, 15_000);
      assert.match(
        started.fields.permissions,
        /--allow-read=[^ ]*\/var\/run\/secrets\/kubernetes\.io\/serviceaccount/,
      );
      await fa.collectorPort();
      assert.equal(fa.find({ msg: /^no Kubernetes cluster/ }).length, 1);
      const status = await fa.stop("SIGTERM", 20_000);
      assert.equal(status.code, 0, fa.stderr);
      assert.deepEqual(fa.find({ level: /^(error|warn)$/ }).map((e) => e.raw), []);
    } finally {
      await fa?.dispose();
    }
  });
});
