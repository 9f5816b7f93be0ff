/**
 * The launcher's plan: what it execs for a command line. The aggregator gets exactly the flags
 * `deno task permissions` prints for the same arguments (one computation), then the arguments
 * unchanged and `--exit-on-new-permissions`; help, version and bad arguments go to the program
 * with no permission; the API client's subcommands (the image's antctl) get the API's address
 * and the token's directory; clickhouse is refused with a hint.
 */

import assert from "node:assert/strict";
import { ANTCTL_COMMANDS, CLI_COMMANDS, DEFAULT_SERVER } from "../../src/api/cli.ts";
import { SET_ENV } from "../../src/k8s/config_set.ts";
import {
  cliPermissions,
  LAUNCHED_FLAG,
  launcherFlags,
  launchPlan,
  programLocation,
  setPermissions,
} from "../../src/launcher/mod.ts";
import { PROCESS_ENV } from "../../src/permissions.ts";
import { COMPONENTS } from "../../src/components.ts";
import {
  DENO_JSON,
  MAIN_TS,
  printedPermissions,
  runDeno,
  shellSplit,
} from "../_helpers/process.ts";
import { generateApiCertificate } from "../../src/pki/mod.ts";

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
    assert.deepEqual(plan.argv, programArgv([], args));
  }
});

/** The argv of the program (the source tree's main.ts) run with `flags` on `args`. */
function programArgv(flags: readonly string[], args: readonly string[]): string[] {
  return [
    Deno.execPath(),
    "run",
    ...flags,
    "--unstable-net",
    "--unstable-worker-options",
    "--config",
    DENO_JSON,
    MAIN_TS,
    ...args,
  ];
}

Deno.test("launcher: the permissions subcommand runs as deno task permissions does", async () => {
  const plan = await launchPlan(["permissions", "--config", "x.conf"]);
  assert.deepEqual(plan.argv.slice(1, 4), ["run", "--allow-read", "--allow-env"]);
  assert.deepEqual(plan.argv.slice(-3), ["permissions", "--config", "x.conf"]);
});

/** The argv the launcher execs for a CLI command line granted `permissions`. */
function cliArgv(permissions: readonly string[], args: readonly string[]): string[] {
  return programArgv([...permissions, "--no-prompt"], args);
}

Deno.test("launcher: the API client's subcommands get the default API address and token directory", async () => {
  assert.equal(DEFAULT_SERVER, "https://127.0.0.1:10348");
  for (
    const args of [
      ["get", "flowrecords"],
      ["get", "flowrecords", "--srcip", "10.0.0.1", "-o", "json"],
      ["get", "recordmetrics", "-o", "yaml"],
      ["log-level"],
      ["log-level", "4"],
      ["version"],
    ]
  ) {
    const plan = await launchPlan(args);
    assert.equal(plan.permissions, undefined, "nothing logged before the CLI's output");
    assert.deepEqual(
      plan.argv,
      cliArgv(["--allow-net=127.0.0.1:10348", "--allow-read=/var/run/antrea/apiserver"], args),
    );
  }
});

Deno.test("launcher: a CLI's --server and --token-file (both forms, IPv6, relative) are what is granted", async () => {
  const cases: [string[], string[]][] = [
    [
      ["get", "recordmetrics", "--server", "https://[::1]:9999", "--token-file", "/t/d/tok"],
      ["--allow-net=[::1]:9999", "--allow-read=/t/d"],
    ],
    [
      ["version", "--server=https://flow-aggregator.example:8443/", "--token-file=/x/tok"],
      ["--allow-net=flow-aggregator.example:8443", "--allow-read=/x"],
    ],
    // No port: the scheme's.
    [["log-level", "--server=https://localhost"], [
      "--allow-net=localhost:443",
      "--allow-read=/var/run/antrea/apiserver",
    ]],
    [["log-level", "--server=http://127.0.0.1"], [
      "--allow-net=127.0.0.1:80",
      "--allow-read=/var/run/antrea/apiserver",
    ]],
    // Relative to the working directory, which the program keeps.
    [["get", "flowrecords", "--token-file", "run/tok"], [
      "--allow-net=127.0.0.1:10348",
      `--allow-read=${Deno.cwd()}/run`,
    ]],
    [["get", "flowrecords", "--token-file=tok"], [
      "--allow-net=127.0.0.1:10348",
      `--allow-read=${Deno.cwd()}`,
    ]],
  ];
  for (const [args, permissions] of cases) {
    assert.deepEqual(cliPermissions(args), permissions, args.join(" "));
    assert.deepEqual((await launchPlan(args)).argv, cliArgv(permissions, args));
  }
});

Deno.test("launcher: a CLI command line whose server is not an http(s) URL runs with no permission", async () => {
  for (
    const args of [
      ["get", "recordmetrics", "--server", "not a url"],
      ["get", "recordmetrics", "--server=127.0.0.1:10348"],
      ["version", "--server", "ftp://127.0.0.1:21"],
      ["version", "--server", "https://a,b:1"],
      ["get", "flowrecords", "--token-file", "/a,b/tok"],
      ["get", "flowrecords", "--server"],
    ]
  ) {
    assert.deepEqual(cliPermissions(args), [], args.join(" "));
    assert.deepEqual((await launchPlan(args)).argv, cliArgv([], args));
  }
});

Deno.test("launcher: the CLI, exec'd as planned, reaches no API and says so itself", async () => {
  // Nothing listens on the port: the program's own error, not a permission prompt or denial.
  const dir = await Deno.makeTempDir({ prefix: "fa-launcher-cli-" });
  try {
    await Deno.writeTextFile(`${dir}/tok`, "t");
    await Deno.writeTextFile(`${dir}/api-ca.crt`, (await generateApiCertificate()).caPem);
    const args = ["version", "--server=https://127.0.0.1:47901", `--token-file=${dir}/tok`];
    const argv = (await launchPlan(args)).argv;
    const out = await new Deno.Command(argv[0], {
      args: argv.slice(1),
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 1, stderr);
    // The token and the CA were read, the connection tried: both granted, nothing else asked.
    assert.match(stderr, /^cannot reach the flow aggregator API at https:\/\/127\.0\.0\.1:47901 /);
    assert.match(stderr, /Connection refused/);
    assert.doesNotMatch(stderr, /Requires (read|net) access|NotCapable/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("launcher: clickhouse is refused with a hint", async () => {
  await assert.rejects(
    launchPlan(["clickhouse", "schema"]),
    /the launcher starts the aggregator; for "clickhouse" run the program itself/,
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
      assert.deepEqual(plan.permissions, shellSplit(printed.stdout.trim()));
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

Deno.test("launcher: antctl's commands are the API client's and set", () => {
  assert.deepEqual(ANTCTL_COMMANDS, [...CLI_COMMANDS, "set"]);
});

/** The `--allow-env` of `set`: the variables it reads, no more. */
const SET_ENV_FLAG = `--allow-env=${[...SET_ENV].sort().join(",")}`;

Deno.test("launcher: set in a Pod gets the API server, the service account directory and its variables", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-launcher-sa-" });
  try {
    await Deno.writeTextFile(`${dir}/token`, "t");
    const args = ["set", "flow-aggregator", "clickHouse.enable=true"];
    const pod = (host: string) => ({
      env: (n: string) =>
        ({ KUBERNETES_SERVICE_HOST: host, KUBERNETES_SERVICE_PORT: "6443" } as Record<
          string,
          string
        >)[n],
      serviceAccountDir: dir,
    });
    assert.deepEqual(await setPermissions(args, pod("10.96.0.1")), [
      "--allow-net=10.96.0.1:6443",
      `--allow-read=${dir}`,
      SET_ENV_FLAG,
    ]);
    assert.deepEqual(await setPermissions(args, pod("fd00::1")), [
      "--allow-net=[fd00::1]:6443",
      `--allow-read=${dir}`,
      SET_ENV_FLAG,
    ]);
    // A Pod without a token: the directory (the program tells absent from refused), no server.
    await Deno.remove(`${dir}/token`);
    assert.deepEqual(await setPermissions(args, pod("10.96.0.1")), [
      `--allow-read=${dir}`,
      SET_ENV_FLAG,
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  // Env of the set command: what it reads.
  assert.deepEqual([...SET_ENV].sort(), [
    "FA_CONFIG_MAP_NAME",
    "KUBECONFIG",
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    "LOG_STREAM",
    "LOG_TOKENS",
    "POD_NAMESPACE",
  ]);
});

Deno.test("launcher: set with --kubeconfig (or $KUBECONFIG) gets its server and the file; no cluster, only its variables", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-launcher-kc-" });
  try {
    const kc = `${dir}/config`;
    await Deno.writeTextFile(
      kc,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Config",
        clusters: [{ name: "c", cluster: { server: "https://api.example:8443" } }],
        users: [{ name: "u", user: { token: "x" } }],
        contexts: [{ name: "c", context: { cluster: "c", user: "u" } }],
        "current-context": "c",
      }),
    );
    const none = { env: () => undefined };
    const want = ["--allow-net=api.example:8443", `--allow-read=${kc}`, SET_ENV_FLAG];
    const args = ["set", "flow-aggregator", "--kubeconfig", kc, "clickHouse.enable=true"];
    assert.deepEqual(await setPermissions(args, none), want);
    assert.deepEqual(
      await setPermissions(["set", "flow-aggregator", "flowCollector.enable=1"], {
        env: (n) => n === "KUBECONFIG" ? `${kc}:/other` : undefined,
      }),
      want,
    );
    // The plan: the program with those flags, no prompt.
    assert.deepEqual((await launchPlan(args)).argv, cliArgv(want, args));
    // A kubeconfig that cannot be read: granted alone, the program says why.
    assert.deepEqual(
      await setPermissions(
        ["set", "flow-aggregator", "--kubeconfig", `${dir}/nope`, "a.b=c"],
        none,
      ),
      [],
      "a bad KEY=VALUE: nothing (the program refuses it first)",
    );
    assert.deepEqual(
      await setPermissions(
        ["set", "flow-aggregator", "--kubeconfig", `${dir}/nope`, "clickHouse.debug=1"],
        none,
      ),
      [`--allow-read=${dir}/nope`, SET_ENV_FLAG],
    );
    // Nothing found: the variables only (the program says no API was found).
    assert.deepEqual(
      await setPermissions(["set", "flow-aggregator", "clickHouse.debug=1"], none),
      [SET_ENV_FLAG],
    );
    // -h and command lines that do not parse: no permission.
    for (const a of [["set", "-h"], ["set"], ["set", "flow-aggregator", "--x"], ["set", "x=1"]]) {
      assert.deepEqual(await setPermissions(a, none), [], a.join(" "));
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("launcher: an antctl command line is never the aggregator's: its command gets its permissions, anything else none", async () => {
  const plan = (args: string[]) => launchPlan(["antctl", ...args]);
  const tail = (argv: string[], args: string[]) => argv.slice(-(args.length + 2));
  // Global flags before the command (cobra takes them anywhere).
  const before = ["-v", "--server", "https://127.0.0.1:9999", "get", "recordmetrics", "-ojson"];
  const p1 = await plan(before);
  assert.equal(p1.permissions, undefined);
  assert.ok(p1.argv.includes("--allow-net=127.0.0.1:9999"), p1.argv.join(" "));
  assert.ok(p1.argv.includes("--no-prompt"));
  assert.deepEqual(tail(p1.argv, before), [MAIN_TS, "antctl", ...before]);
  // What would start an aggregator, or nothing: the program with no permission, told it is antctl.
  for (const args of [["--config", "/x"], [], ["help"], ["flow-aggregator"]]) {
    const p = await plan(args);
    assert.equal(p.permissions, undefined, args.join(" "));
    assert.ok(!p.argv.some((a) => a.startsWith("--allow-")), p.argv.join(" "));
    assert.deepEqual(tail(p.argv, args), [MAIN_TS, "antctl", ...args]);
  }
});

Deno.test("launcher: the program told it is antctl prints the usage or refuses; it never starts an aggregator", async () => {
  for (
    const [args, code, out] of [
      [["antctl"], 0, /^Usage \(as antctl[^]*set flow-aggregator KEY=VALUE/],
      [["antctl", "-h"], 0, /^Usage \(as antctl/],
      [["antctl", "--config", "/x"], 1, /^antctl: unknown command "--config"/],
      [["antctl", "--listen", "127.0.0.1:1"], 1, /^antctl: unknown command "--listen"/],
    ] as const
  ) {
    // No permission at all, as the launcher plans it: an aggregator could not even start.
    const r = await runDeno(["run", "--no-prompt", "--config", DENO_JSON, MAIN_TS, ...args]);
    assert.equal(r.code, code, `${args.join(" ")}: ${r.stderr}`);
    assert.match(code === 0 ? r.stdout : r.stderr, out);
    assert.doesNotMatch(r.stderr, /NotCapable|Requires .* access/);
  }
});
