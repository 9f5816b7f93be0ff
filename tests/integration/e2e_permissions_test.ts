/**
 * End to end: `flow-aggregator permissions --config FILE` prints the narrowest `deno run` flags
 * for a configuration, and the real process runs on exactly those flags: the collector listens,
 * the flow log sink runs in its own worker (allowed to write only its directory) and every flow
 * sent is logged. On flags that lack something (an explicit command, no launcher) the process
 * says what: a service account it may not read in a Pod, a sink a reload enables.
 */

import assert from "node:assert/strict";
import {
  apiArgs,
  DENO_JSON,
  FaProcess,
  flowLogConfig,
  printedPermissions,
} from "../_helpers/process.ts";
import { SimAgent } from "./helpers/agent.ts";
import { readFlowLog } from "./helpers/flow_log.ts";
import { intraNodeRecord } from "./helpers/scenarios.ts";
import { waitFor } from "../_helpers/wait.ts";
import { libcPath } from "../../src/collector/udp_fast_ffi.ts";

const SRC = new URL("../../src", import.meta.url).pathname;

Deno.test("e2e permissions: the process runs on exactly the printed flags, its flow log in a worker", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-perm-" });
  let fa: FaProcess | undefined;
  try {
    await Deno.mkdir(`${dir}/config`);
    await Deno.mkdir(`${dir}/logs`);
    const conf = `${dir}/config/flow-aggregator.conf`;
    await Deno.writeTextFile(conf, flowLogConfig(`${dir}/logs/flows.log`));
    // Standalone: the generated cluster UUID is kept in <state-dir>/cluster-uuid.
    const args = [
      "--config",
      conf,
      "--listen",
      "127.0.0.1:0",
      "--state-dir",
      dir,
      ...apiArgs(`${dir}/api`),
    ];
    const flags = await printedPermissions(args);
    assert.deepEqual(flags, [
      "--allow-net=127.0.0.1:0",
      // Each list is sorted, so where the checkout lies decides the order.
      `--allow-read=${
        [`${dir}/cluster-uuid`, `${dir}/cluster-uuid.tmp`, `${dir}/config`, `${dir}/logs`, SRC]
          .sort().join(",")
      }`,
      `--allow-write=${
        [`${dir}/api`, `${dir}/cluster-uuid`, `${dir}/cluster-uuid.tmp`, `${dir}/logs`].sort()
          .join(",")
      }`,
      "--allow-env=AWS_ENDPOINT_URL,AWS_ENDPOINT_URL_S3,HOME,KUBECONFIG,KUBERNETES_SERVICE_HOST,KUBERNETES_SERVICE_PORT,LOG_STREAM,LOG_TOKENS,POD_NAMESPACE,TMPDIR",
      "--unstable-net",
      "--unstable-worker-options",
      "--v8-flags=--max-semi-space-size=2",
    ]);

    // Debug level, for the "session closed" event that tells all sent data was read.
    fa = FaProcess.start({
      denoFlags: [...flags, "--config", DENO_JSON],
      args: [...args, "--log-level", "debug"],
      cwd: dir,
    });
    const port = await fa.collectorPort();
    const started = await fa.waitFor({ msg: "exporter worker started", exporter: "log" }, 15_000);
    assert.equal(started.fields.write, `${dir}/logs`);
    assert.equal(started.fields.net, "-");
    const agent = await SimAgent.connect("k8s-node-1", port, "tcp");
    await agent.sendTemplates();
    const n = 50;
    for (let i = 0; i < n; i++) await agent.sendRecord(intraNodeRecord(52_000 + i));
    agent.close();
    await fa.waitFor({ msg: "session closed" }, 10_000);
    const status = await fa.stop("SIGTERM", 20_000);
    assert.equal(status.code, 0, fa.stderr);
    const lines = await readFlowLog(`${dir}/logs/flows.log`);
    assert.equal(lines.length, n, fa.stderr);
    const stopped = fa.find({ msg: "exporter stopped", section: "flowLogger" });
    assert.equal(stopped.length, 1);
    assert.equal(stopped[0].fields.received, String(n));
    assert.equal(stopped[0].fields.exported, String(n));
    assert.equal(stopped[0].fields.permissionDenied, "0");
    assert.deepEqual(fa.find({ level: "error" }).map((e) => e.raw), []);
    // Standalone: the cluster UUID was generated and kept for the next start.
    const [uuid] = fa.find({ msg: "cluster UUID", source: "state-file" });
    assert.equal((await Deno.readTextFile(`${dir}/cluster-uuid`)).trim(), uuid.fields.uuid);
  } finally {
    fa?.kill("SIGKILL");
    await fa?.status;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("e2e permissions: UDP on the printed flags takes the fast path (--allow-ffi=<libc>)", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-perm-udp-" });
  let fa: FaProcess | undefined;
  try {
    const conf = `${dir}/flow-aggregator.conf`;
    await Deno.writeTextFile(conf, flowLogConfig(`${dir}/flows.log`, { transport: "UDP" }));
    const args = ["--config", conf, "--listen", "127.0.0.1:0", ...apiArgs(`${dir}/api`)];
    const flags = await printedPermissions(args);
    // Scoped to the C library: the receive loop uses no pointer API (which Deno grants only
    // with the bare flag), so libc's path is all it needs.
    assert.deepEqual(flags.filter((f) => f.startsWith("--allow-ffi")), [
      `--allow-ffi=${libcPath()}`,
    ]);
    fa = FaProcess.start({ denoFlags: [...flags, "--config", DENO_JSON], args, cwd: dir });
    const port = await fa.collectorPort();
    await fa.waitFor({ msg: "udp receiver listening", mode: "ffi" }, 15_000);
    const agent = await SimAgent.connect("k8s-node-1", port, "udp");
    await agent.sendTemplates();
    const n = 40;
    for (let i = 0; i < n; i++) await agent.sendRecord(intraNodeRecord(53_000 + i));
    agent.close();
    await waitFor(async () => (await readFlowLog(`${dir}/flows.log`).catch(() => [])).length >= n, {
      timeoutMs: 10_000,
      what: "UDP flows in the log",
    });
    const status = await fa.stop("SIGTERM", 20_000);
    assert.equal(status.code, 0, fa.stderr);
    assert.deepEqual(fa.find({ level: "error" }).map((e) => e.raw), []);
  } finally {
    fa?.kill("SIGKILL");
    await fa?.status;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("e2e permissions: in a Pod (KUBERNETES_SERVICE_HOST) without --allow-read for the service account, an error names the flag", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-perm-sa-" });
  let fa: FaProcess | undefined;
  try {
    const conf = `${dir}/flow-aggregator.conf`;
    await Deno.writeTextFile(conf, flowLogConfig(`${dir}/flows.log`));
    const args = ["--config", conf, "--listen", "127.0.0.1:0", "--state-dir", dir];
    // Flags printed outside a Pod (no service account here): as narrow as the image's former
    // fixed entrypoint, which ran in Pods so.
    const flags = await printedPermissions([...args, ...apiArgs(`${dir}/api`)]);
    assert.ok(!flags.join(" ").includes("serviceaccount"));
    fa = FaProcess.start({
      denoFlags: [...flags, "--config", DENO_JSON],
      args: [...args, ...apiArgs(`${dir}/api`)],
      cwd: dir,
      env: { KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" },
    });
    const sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    const e = await fa.waitFor({ level: "error", component: "k8s" }, 15_000);
    assert.match(e.fields.msg, /^KUBERNETES_SERVICE_HOST is set but this process may not read/);
    assert.equal(e.fields.missing, `--allow-read=${sa}`);
    await fa.collectorPort();
    assert.equal(fa.find({ msg: /^no Kubernetes cluster/ }).length, 1);
    const status = await fa.stop("SIGTERM", 20_000);
    assert.equal(status.code, 0, fa.stderr);
  } finally {
    await fa?.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("e2e permissions: without the launcher, a reload enabling a sink the process may not run logs an error naming the flags, counts it, and collection goes on", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-perm-reload-" });
  let fa: FaProcess | undefined;
  try {
    await Deno.mkdir(`${dir}/config`);
    const conf = `${dir}/config/flow-aggregator.conf`;
    const base = flowLogConfig(`${dir}/flows.log`);
    await Deno.writeTextFile(conf, base);
    const args = ["--config", conf, "--listen", "127.0.0.1:0", "--state-dir", dir];
    const flags = await printedPermissions([...args, ...apiArgs(`${dir}/api`)]);
    fa = FaProcess.start({
      denoFlags: [...flags, "--config", DENO_JSON],
      args: [...args, ...apiArgs(`${dir}/api`)],
      cwd: dir,
    });
    const port = await fa.collectorPort();
    // Port 9 (discard): nothing needs to listen, the sink never gets to connect.
    await Deno.writeTextFile(
      `${conf}.new`,
      `${base}flowCollector:\n  enable: true\n  address: 127.0.0.1:9:tcp\n`,
    );
    await Deno.rename(`${conf}.new`, conf);
    const e = await fa.waitFor({ level: "error", msg: "cannot create exporter" }, 15_000);
    assert.equal(e.fields.section, "flowCollector");
    assert.equal(e.fields.missing, "--allow-net=127.0.0.1:9");
    assert.equal(e.fields.exporterCreatesFailed, "1");
    // Still collecting, into the flow log it had.
    const agent = await SimAgent.connect("k8s-node-1", port, "tcp");
    await agent.sendTemplates();
    await agent.sendRecord(intraNodeRecord(54_000));
    agent.close();
    await waitFor(async () => (await readFlowLog(`${dir}/flows.log`).catch(() => [])).length >= 1, {
      timeoutMs: 10_000,
      what: "the flow in the log",
    });
    const status = await fa.stop("SIGTERM", 20_000);
    assert.equal(status.code, 0, fa.stderr);
    const [metrics] = fa.find({ msg: "record metrics" }).slice(-1);
    assert.equal(metrics.fields.exporterCreatesFailed, "1");
  } finally {
    await fa?.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});
