/**
 * The launcher's plan: what it execs for a command line. The aggregator gets exactly the flags
 * `deno task permissions` prints for the same arguments (one computation), then the arguments
 * unchanged and `--exit-on-new-permissions`; help, version and bad arguments go to the program
 * with no permission; the API client's subcommands are refused with a hint.
 */

import assert from "node:assert/strict";
import {
  LAUNCHED_FLAG,
  launcherFlags,
  launchPlan,
  programLocation,
} from "../../src/launcher/mod.ts";
import { PROCESS_ENV } from "../../src/permissions.ts";
import { COMPONENTS } from "../../src/components.ts";
import { DENO_JSON, MAIN_TS, printedPermissions, runDeno } from "../_helpers/process.ts";

const PLAN_CHILD = new URL("../_helpers/launch_plan_child.ts", import.meta.url).pathname;

/**
 * The launcher's plan for `args` computed in a process with the launcher's own permissions
 * (`denoFlags`: default {@linkcode launcherFlags}) and `env` added to the environment.
 */
async function planUnderLauncherFlags(
  args: readonly string[],
  env: Record<string, string>,
  denoFlags: readonly string[] = launcherFlags([]).filter((f) => !f.startsWith("--allow-ffi")),
): Promise<{ permissions?: string[]; error?: string }> {
  const out = await runDeno(["run", ...denoFlags, "--config", DENO_JSON, PLAN_CHILD, ...args], {
    env,
  });
  assert.equal(out.code, 0, out.stderr);
  return JSON.parse(out.stdout.trim().split("\n").at(-1)!);
}

async function withConfig(
  text: (dir: string) => string,
  fn: (dir: string, conf: string) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "fa-launcher-" });
  try {
    await Deno.mkdir(`${dir}/conf`);
    await Deno.writeTextFile(`${dir}/conf/fa.conf`, text(dir));
    await fn(dir, `${dir}/conf/fa.conf`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const SINKS = (dir: string) =>
  `flowLogger:
  enable: true
  path: ${dir}/elsewhere/flows.log
flowCollector:
  enable: true
  address: 127.0.0.1:4740:tcp
clickHouse:
  enable: true
  databaseURL: http://clickhouse.example:8124
`;

Deno.test("launcher: the aggregator runs with exactly the flags deno task permissions prints", async () => {
  await withConfig(SINKS, async (dir, conf) => {
    // Upstream's Deployment arguments (klog files), and a few of ours.
    const args = [
      "--config",
      conf,
      "--logtostderr=false",
      `--log_dir=${dir}/klog`,
      "--alsologtostderr",
      "--log_file_max_size=100",
      "--log_file_max_num=4",
      "--v=0",
      "--listen",
      "127.0.0.1:4739",
    ];
    const plan = await launchPlan(args);
    const printed = await printedPermissions(args);
    assert.deepEqual(plan.permissions, printed);
    assert.deepEqual(plan.argv, [
      Deno.execPath(),
      "run",
      ...printed,
      "--config",
      DENO_JSON,
      MAIN_TS,
      ...args,
      LAUNCHED_FLAG,
    ]);
    // What the sinks need is there: the flow log's directory, the collector, ClickHouse.
    const flags = plan.permissions!.join(" ");
    assert.match(flags, new RegExp(`--allow-write=[^ ]*${dir}/elsewhere`));
    assert.match(flags, /--allow-net=[^ ]*127\.0\.0\.1:4740/);
    assert.match(flags, /--allow-net=[^ ]*clickhouse\.example:8124/);
    assert.match(flags, /--allow-env=[^ ]*CH_PASSWORD/);
  });
});

Deno.test("launcher: --exit-on-new-permissions is added once", async () => {
  await withConfig(() => "", async (_dir, conf) => {
    const plan = await launchPlan(["--config", conf, LAUNCHED_FLAG]);
    assert.equal(plan.argv.filter((a) => a === LAUNCHED_FLAG).length, 1);
  });
});

Deno.test("launcher: --version, --help and bad arguments go to the program with no permission", async () => {
  for (const args of [["--version"], ["--help"], ["--no-such-flag"], ["--config"]]) {
    const plan = await launchPlan(args);
    assert.equal(plan.permissions, undefined);
    assert.deepEqual(plan.argv, [
      Deno.execPath(),
      "run",
      "--unstable-net",
      "--unstable-worker-options",
      "--config",
      DENO_JSON,
      MAIN_TS,
      ...args,
    ]);
  }
});

Deno.test("launcher: the permissions subcommand runs as deno task permissions does", async () => {
  const plan = await launchPlan(["permissions", "--config", "x.conf"]);
  assert.deepEqual(plan.argv.slice(1, 4), ["run", "--allow-read", "--allow-env"]);
  assert.deepEqual(plan.argv.slice(-3), ["permissions", "--config", "x.conf"]);
});

Deno.test("launcher: the API client's subcommands are refused with a hint", async () => {
  await assert.rejects(
    launchPlan(["get", "flowrecords"]),
    /the launcher starts the aggregator; for "get" run the program itself/,
  );
});

Deno.test("launcher: a configuration that cannot be read fails the plan, naming the file", async () => {
  await assert.rejects(launchPlan(["--config", "/nonexistent/fa.conf"]), /\/nonexistent\/fa\.conf/);
});

Deno.test("launcher: in the build, the program is flow-aggregator.js at the build's root", () => {
  const where = programLocation("file:///app/src/launcher/mod.js");
  assert.equal(where.program, "/app/flow-aggregator.js");
  assert.deepEqual(where.denoFlags, []);
  assert.equal(where.deno, Deno.execPath());
});

Deno.test("launcher: its own flags read, the process's environment list and FFI of libc only", () => {
  assert.deepEqual(launcherFlags(["/lib/x86_64-linux-gnu/libc.so.6"]), [
    "--allow-read",
    `--allow-env=${[...PROCESS_ENV].sort().join(",")}`,
    "--allow-ffi=/lib/x86_64-linux-gnu/libc.so.6",
  ]);
});

Deno.test("launcher: the environment it may read includes what every sink's permission computation reads", () => {
  const allowEnv = launcherFlags([]).find((f) => f.startsWith("--allow-env="))!;
  const listed = allowEnv.slice("--allow-env=".length).split(",");
  const read = COMPONENTS.flatMap((c) => c.permissionEnv ?? []);
  assert.ok(read.includes("AWS_ENDPOINT_URL_S3") && read.includes("AWS_ENDPOINT_URL"));
  for (const name of read) assert.ok(listed.includes(name), name);
});

Deno.test("launcher: S3 with AWS_ENDPOINT_URL_S3 set is granted that endpoint, as deno task permissions prints", async () => {
  await withConfig(
    () => "s3Uploader:\n  enable: true\n  bucketName: flows\n",
    async (_dir, conf) => {
      const args = ["--config", conf, "--workers=1"];
      const env = { AWS_ENDPOINT_URL_S3: "http://127.0.0.1:47290", AWS_ENDPOINT_URL: "" };
      const plan = await planUnderLauncherFlags(args, env);
      assert.equal(plan.error, undefined);
      const net = plan.permissions!.find((f) => f.startsWith("--allow-net="))!;
      assert.ok(net.split("=")[1].split(",").includes("127.0.0.1:47290"), net);
      assert.ok(!net.includes("amazonaws.com"), net);
      const printed = await runDeno(
        [
          "run",
          "--allow-read",
          "--allow-env",
          "--config",
          DENO_JSON,
          MAIN_TS,
          "permissions",
          ...args,
        ],
        { env },
      );
      assert.equal(printed.code, 0, printed.stderr);
      assert.deepEqual(plan.permissions, printed.stdout.trim().split(" "));
      // AWS_ENDPOINT_URL alone.
      const fallback = await planUnderLauncherFlags(args, {
        AWS_ENDPOINT_URL_S3: "",
        AWS_ENDPOINT_URL: "http://127.0.0.1:47291",
      });
      assert.match(fallback.permissions!.join(" "), /--allow-net=[^ ]*127\.0\.0\.1:47291/);
    },
  );
});

Deno.test("launcher: a variable the permission computation reads but may not is an error naming it, not unset", async () => {
  await withConfig(
    () => "s3Uploader:\n  enable: true\n  bucketName: flows\n",
    async (_dir, conf) => {
      const env = PROCESS_ENV.filter((v) => v !== "AWS_ENDPOINT_URL");
      const plan = await planUnderLauncherFlags(
        ["--config", conf, "--workers=1"],
        { AWS_ENDPOINT_URL_S3: "", AWS_ENDPOINT_URL: "http://127.0.0.1:47292" },
        ["--allow-read", `--allow-env=${env.join(",")}`],
      );
      assert.equal(plan.permissions, undefined);
      assert.match(
        plan.error!,
        /environment variable AWS_ENDPOINT_URL\b.*--allow-env=AWS_ENDPOINT_URL/,
      );
    },
  );
});
