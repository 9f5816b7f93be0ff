/**
 * The command line's permission inputs: a parsed command line and its configuration give the
 * inputs of processPermissions (the permissions subcommand, the launcher and the process's own
 * check all go through them), and the exit code of a restart for permissions is distinct.
 */

import assert from "node:assert/strict";
import {
  EXIT_NEW_PERMISSIONS,
  parseArgs,
  permissionInputs,
  resolveCommand,
} from "../src/cli_options.ts";
import { parseConfig } from "../src/components.ts";
import { processPermissions } from "../src/permissions.ts";
import { serviceAccountLookup } from "../src/k8s/client.ts";

Deno.test("cli options: the permission inputs come from the flags, klog's --log_dir included", () => {
  const opts = parseArgs([
    "--config",
    "/etc/flow-aggregator/flow-aggregator.conf",
    "--logtostderr=false",
    "--log_dir=/var/log/antrea/flow-aggregator",
    "--listen",
    "127.0.0.1:4739",
    "--cert-dir",
    "/certs",
    "--workers",
    "2",
    "--state-dir",
    "/state",
  ]);
  const config = parseConfig("", { tmpDir: "/tmp" });
  assert.deepEqual(permissionInputs(opts, config, undefined), {
    configPath: "/etc/flow-aggregator/flow-aggregator.conf",
    listen: "127.0.0.1:4739",
    certDir: "/certs",
    udpReceiver: "auto",
    exportersInProcess: false,
    workers: 2,
    apiListen: undefined,
    apiTokenFile: undefined,
    logDir: "/var/log/antrea/flow-aggregator",
    kube: undefined,
    // Set when this runs in a Pod (KUBERNETES_SERVICE_HOST), as the process would look there.
    serviceAccountLookup: serviceAccountLookup(),
    stateFile: "/state/cluster-uuid",
  });
  // With a cluster there is no state file.
  const kube = { mode: "in-cluster" as const, server: "https://10.96.0.1:443", source: "/sa" };
  assert.equal(permissionInputs(opts, config, kube).stateFile, undefined);
});

Deno.test("cli options: resolveCommand reads the file and computes its permissions", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-cli-options-" });
  try {
    const path = `${dir}/fa.conf`;
    const text = `flowLogger:\n  enable: true\n  path: ${dir}/logs/flows.log\n`;
    await Deno.writeTextFile(path, text);
    const opts = parseArgs(["--config", path, "--state-dir", dir]);
    const r = await resolveCommand(opts);
    assert.equal(r.config.flowLogger.path, `${dir}/logs/flows.log`);
    assert.deepEqual(
      r.permissions,
      processPermissions(r.config, permissionInputs(opts, r.config, r.kube)),
    );
    assert.ok(r.permissions.write.includes(`${dir}/logs`));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cli options: the restart-for-permissions exit code is none of upstream's (0, 1, 255)", () => {
  assert.equal(EXIT_NEW_PERMISSIONS, 77);
});
