/**
 * The runtime image (issue 16), built here with `scripts/image.ts` (`buildah bud --isolation
 * chroot`, `FROM scratch`, no registry) and run with `buildah run --isolation chroot` on the
 * host network, exactly with the image's entrypoint (the launcher) and command: flowgen traffic
 * over TCP and UDP reaches the flow log in a mounted directory; the process runs as 65532, as
 * the one process of the container (the launcher exec'd it); there is no shell; a configuration
 * enabling a flow log outside the image's directories and an IPFIX collector, which the
 * launcher grants, delivers to both. The collector uses the image's port, 4739.
 */

import assert from "node:assert/strict";
import {
  antctlSource,
  buildImage,
  type BuiltImage,
  compileAntctl,
  cStringLiteral,
  IMAGE_LIBC,
  IMAGE_PATHS,
  imageSpec,
  NONROOT,
  registryContainerfile,
  scratchContainerfile,
} from "../../scripts/image.ts";
import { FLOWGEN_TS } from "../../scripts/bench/process.ts";
import { bundleLayout } from "../../scripts/bundle.ts";
import { waitFor } from "../_helpers/wait.ts";
import { UPSTREAM_DEPLOYMENT_ARGS } from "../_helpers/stock_config.ts";
import { launcherFlags } from "../../src/launcher/mod.ts";
import denoJson from "../../deno.json" with { type: "json" };
import type { Collector } from "../../src/collector/mod.ts";
import { decodingCollector, type Received } from "./helpers/ipfix_export.ts";

const TAG = `localhost/flow-aggregator:test-${Date.now()}`;
const work = await Deno.makeTempDir({ prefix: "fa-image-test-" });
let built: BuiltImage | undefined;

globalThis.addEventListener("unload", () => {
  new Deno.Command("buildah", { args: ["rmi", "-f", TAG], stdout: "null", stderr: "null" })
    .outputSync();
  Deno.removeSync(work, { recursive: true });
});

async function image(): Promise<BuiltImage> {
  built ??= await buildImage({ tag: TAG, archiveDir: `${work}/dist` });
  return built;
}

async function cmd(
  name: string,
  args: string[],
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(name, { args, stdout: "piped", stderr: "piped" }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** A working container of the image, removed by `dispose`. */
async function container(): Promise<{ id: string; dispose: () => Promise<void> }> {
  const r = await cmd("buildah", ["from", "--quiet", TAG]);
  assert.equal(r.code, 0, r.stderr);
  const id = r.stdout.trim();
  return { id, dispose: async () => void await cmd("buildah", ["rm", id]) };
}

/** The image's process, running in a container with the config and log dirs mounted. */
class ImageProcess {
  stderr = "";
  readonly #child: Deno.ChildProcess;
  readonly #pump: Promise<void>;

  constructor(
    id: string,
    confDir: string,
    logDir: string,
    mounts: string[] = [],
    args?: string[],
  ) {
    const spec = imageSpec();
    this.#child = new Deno.Command("buildah", {
      args: [
        "run",
        "--isolation",
        "chroot",
        "--net",
        "host",
        "-v",
        `${confDir}:${IMAGE_PATHS.configDir}`,
        "-v",
        `${logDir}:${IMAGE_PATHS.logDir}`,
        ...mounts.flatMap((m) => ["-v", m]),
        id,
        "--",
        ...spec.entrypoint,
        ...(args ?? spec.cmd),
      ],
      stdout: "null",
      stderr: "piped",
    }).spawn();
    const stderr = this.#child.stderr;
    this.#pump = (async () => {
      for await (const chunk of stderr.pipeThrough(new TextDecoderStream())) {
        this.stderr += chunk;
      }
    })();
  }

  async waitFor(re: RegExp, what: string): Promise<void> {
    await waitFor(() => re.test(this.stderr), {
      timeoutMs: 20_000,
      what: `${what}:\n${this.stderr}`,
    });
  }

  /** Pid of the runtime on the host (chroot isolation: a host process). */
  async pid(): Promise<number> {
    const r = await cmd("pgrep", ["-f", `^${IMAGE_PATHS.deno} run .*${IMAGE_PATHS.program}`]);
    const pids = r.stdout.trim().split("\n").filter((l) => l !== "").map(Number);
    assert.equal(pids.length, 1, `one image process running, got ${r.stdout}`);
    // The launcher exec'd it: no launcher process is left, and the program's parent is
    // buildah's, not a Deno process.
    const launchers = await cmd("pgrep", [
      "-f",
      `^${IMAGE_PATHS.deno} run .*${IMAGE_PATHS.launcher}`,
    ]);
    assert.equal(launchers.stdout.trim(), "", "no launcher process left");
    const ppid = /^PPid:\s+(\d+)/m.exec(await Deno.readTextFile(`/proc/${pids[0]}/status`))![1];
    const parent = await Deno.readTextFile(`/proc/${ppid}/cmdline`).catch(() => "");
    assert.ok(!parent.startsWith(IMAGE_PATHS.deno), `parent ${parent}`);
    return pids[0];
  }

  /** The program's `deno run` arguments (the flags the launcher gave it). */
  async cmdline(): Promise<string[]> {
    return (await Deno.readTextFile(`/proc/${await this.pid()}/cmdline`)).split("\0");
  }

  async stop(): Promise<number> {
    Deno.kill(await this.pid(), "SIGTERM");
    const s = await this.#child.status;
    await this.#pump;
    return s.code;
  }

  /** Kills what is left (a failed test must not leave a process holding port 4739). */
  async dispose(): Promise<void> {
    await cmd("pkill", ["-KILL", "-f", `^${IMAGE_PATHS.deno} run .*${IMAGE_PATHS.program}`]);
    await this.#child.status;
    await this.#pump;
  }
}

async function dirs(conf: string): Promise<{ confDir: string; logDir: string }> {
  const confDir = await Deno.makeTempDir({ dir: work });
  const logDir = await Deno.makeTempDir({ dir: work });
  await Deno.writeTextFile(`${confDir}/flow-aggregator.conf`, conf);
  // The process runs as 65532: it must be able to read the config and write the logs.
  await Deno.chmod(confDir, 0o755);
  await Deno.chmod(logDir, 0o777);
  return { confDir, logDir };
}

function conf(transport: "TCP" | "UDP", extra = ""): string {
  return `activeFlowRecordTimeout: 1s
inactiveFlowRecordTimeout: 2s
aggregatorTransportProtocol: ${transport}
flowLogger:
  enable: true
  path: ${IMAGE_PATHS.logDir}/flows.log
${extra}`;
}

async function flowgen(proto: "tcp" | "udp", records: number): Promise<number> {
  const r = await cmd(Deno.execPath(), [
    "run",
    "-A",
    FLOWGEN_TS,
    "--target",
    "127.0.0.1:4739",
    "--proto",
    proto,
    "--agents",
    "2",
    "--flows",
    "50",
    "--rate",
    "2000",
    "--records",
    String(records),
    "--json",
  ]);
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout).records;
}

async function flowLogLines(path: string): Promise<string[]> {
  try {
    return (await Deno.readTextFile(path)).split("\n").filter((l) => l !== "");
  } catch {
    return [];
  }
}

Deno.test({
  name:
    "image: FROM scratch, no registry: nonroot, the launcher as entrypoint, no shell, OCI archive",
  sanitizeResources: false,
  async fn() {
    const img = await image();
    assert.ok(img.bytes < 120e6, `image file system ${img.bytes} bytes (goal <= 120 MB)`);
    const inspect = await cmd("buildah", ["inspect", "--type", "image", TAG]);
    assert.equal(inspect.code, 0, inspect.stderr);
    const config = JSON.parse(inspect.stdout).OCIv1.config;
    assert.equal(config.User, `${NONROOT}:${NONROOT}`);
    assert.deepEqual(config.Entrypoint, imageSpec().entrypoint);
    assert.deepEqual(config.Cmd, ["--config", IMAGE_PATHS.config]);
    // The launcher with its own permissions only: read, the environment list, FFI of the C
    // library (its execve); no net, write, run or sys. The program gets the computed ones.
    assert.equal(config.Entrypoint.at(-1), IMAGE_PATHS.launcher);
    const allows = config.Entrypoint.filter((a: string) => a.startsWith("--allow-"));
    assert.deepEqual(allows, launcherFlags(IMAGE_LIBC));
    assert.deepEqual(IMAGE_LIBC, [
      "/lib/x86_64-linux-gnu/libc.so.6",
      "/lib/aarch64-linux-gnu/libc.so.6",
    ]);
    const tar = await cmd("tar", ["-tf", img.archive!]);
    assert.equal(tar.code, 0, tar.stderr);
    assert.match(tar.stdout, /^oci-layout$/m);
    assert.match(tar.stdout, /^index\.json$/m);

    const c = await container();
    try {
      const sh = await cmd("buildah", [
        "run",
        "--isolation",
        "chroot",
        c.id,
        "--",
        "/bin/sh",
        "-c",
        "true",
      ]);
      assert.notEqual(sh.code, 0, "no /bin/sh in the image");
      const ls = await cmd("buildah", ["run", "--isolation", "chroot", c.id, "--", "/bin/ls"]);
      assert.notEqual(ls.code, 0, "no coreutils in the image");
      // Deno's cache was filled at build time, as the image's user, for every bundled file
      // where it is installed: a start then does not parse the program to find its imports.
      const cached = await cmd("buildah", [
        "run",
        "--isolation",
        "chroot",
        c.id,
        "--",
        IMAGE_PATHS.deno,
        "eval",
        `import { DatabaseSync } from "node:sqlite";
const dir = Deno.env.get("DENO_DIR");
const db = new DatabaseSync(dir + "/dep_analysis_cache_v2", { readOnly: true });
const rows = db.prepare("SELECT specifier FROM moduleinfocache").all();
const code = new DatabaseSync(dir + "/v8_code_cache_v2", { readOnly: true });
const compiled = code.prepare("SELECT specifier FROM codecache").all();
console.log(JSON.stringify({
  uid: Deno.statSync(dir + "/dep_analysis_cache_v2").uid,
  specifiers: rows.map((r) => r.specifier),
  compiled: compiled.map((r) => r.specifier),
}));`,
      ]);
      assert.equal(cached.code, 0, cached.stderr);
      const warm = JSON.parse(cached.stdout);
      assert.equal(warm.uid, NONROOT);
      for (const { file } of bundleLayout(IMAGE_PATHS.app)) {
        assert.ok(warm.specifiers.includes(`file://${file}`), `${file} not in ${cached.stdout}`);
      }
      assert.ok(warm.compiled.includes(`file://${IMAGE_PATHS.program}`), cached.stdout);
    } finally {
      await c.dispose();
    }
  },
});

for (const transport of ["TCP", "UDP"] as const) {
  Deno.test({
    name:
      `image: runs as ${NONROOT} and logs flowgen's ${transport} flows to the mounted directory`,
    sanitizeResources: false,
    async fn() {
      await image();
      const { confDir, logDir } = await dirs(conf(transport));
      const c = await container();
      const fa = new ImageProcess(c.id, confDir, logDir);
      try {
        await fa.waitFor(/msg="Started (TCP|UDP) collecting process"/, "collector start");
        assert.match(fa.stderr, /msg="exporter worker started" exporter=log /);
        if (transport === "UDP") {
          // The launcher granted the fast path its C library (the image's path).
          assert.match(fa.stderr, /msg="udp receiver listening" mode=ffi /);
          const ffi = (await fa.cmdline()).filter((a) => a.startsWith("--allow-ffi"));
          assert.equal(ffi.length, 1);
          assert.ok(IMAGE_LIBC.includes(ffi[0].slice("--allow-ffi=".length)), ffi[0]);
        }
        const status = await Deno.readTextFile(`/proc/${await fa.pid()}/status`);
        assert.match(status, new RegExp(`^Uid:\\s+${NONROOT}\\s`, "m"));
        const sent = await flowgen(transport === "TCP" ? "tcp" : "udp", 400);
        assert.equal(sent, 400);
        // 2 agents x 50 flows: every flow's line appears within the 1 s active timeout.
        await waitFor(async () => (await flowLogLines(`${logDir}/flows.log`)).length >= 50, {
          timeoutMs: 20_000,
          what: "flow log lines",
        });
        if (transport === "TCP") {
          // antctl in the image, as `kubectl exec deploy/flow-aggregator -- antctl …` runs it
          // (the container's user and environment, no shell): it execs the launcher, which
          // runs the program's CLI with the API's address and the token's directory.
          await fa.waitFor(/msg="API server listening"/, "API start");
          const antctl = (...args: string[]) =>
            cmd("buildah", [
              "run",
              "--isolation",
              "chroot",
              "--net",
              "host",
              c.id,
              "--",
              IMAGE_PATHS.antctl,
              ...args,
            ]);
          // antctl's global flags may come before the command, as cobra takes them.
          const r = await antctl("-v", "get", "recordmetrics", "-o", "json");
          assert.equal(r.code, 0, r.stderr);
          assert.equal(r.stderr, "", "the launcher logs nothing before the CLI's output");
          const m = JSON.parse(r.stdout);
          assert.equal(m.numRecordsReceived, sent);
          assert.equal(m.withLogExporter, true);
          // The flows may have expired by now (2 s inactive timeout): the table's header.
          const f = await antctl("get", "flowrecords");
          assert.equal(f.code, 0, f.stderr);
          assert.match(f.stdout, /^SRC_IP +DST_IP +SPORT +DPORT +PROTO /);
          const v = await antctl("version");
          assert.equal(v.code, 0, v.stderr);
          assert.equal(v.stdout, `flowAggregatorVersion: ${denoJson.version}\n`);
          const level = async () => {
            const l = await antctl("log-level");
            assert.equal(l.code, 0, l.stderr);
            return l.stdout.trim();
          };
          assert.equal(await level(), "0");
          const set = await antctl("log-level", "3");
          assert.equal(set.code, 0, set.stderr);
          assert.equal(set.stdout, "");
          assert.equal(await level(), "3");
          await fa.waitFor(/msg="Changed log level" from=0 to=3/, "the aggregator's log level");
          // `set flow-aggregator` runs (the launcher's plan, the program's checks): without
          // FA_CONFIG_MAP_NAME (no Pod here) it says so, as upstream's, before any API call.
          const cfg = await antctl("set", "flow-aggregator", "clickHouse.enable=true");
          assert.equal(cfg.code, 1);
          assert.equal(cfg.stdout, "");
          // (buildah adds its own lines about the exit status after the program's.)
          assert.match(cfg.stderr, /^failed to locate flow-aggregator-config ConfigMap volume\n/);
          const bad = await antctl("set", "flow-aggregator", "clickHouse.enable");
          assert.equal(bad.code, 1);
          assert.match(bad.stderr, /^query should contain exactly one '='\n/);
          // What would start a second aggregator in the Pod is refused (by the program, run
          // with no permission).
          const set2 = await antctl("--config", "/x");
          assert.equal(set2.code, 1);
          assert.match(set2.stderr, /^antctl: unknown command "--config"/);
          const help = await antctl();
          assert.equal(help.code, 0, help.stderr);
          assert.match(help.stdout, /^Usage \(as antctl[^]*set flow-aggregator KEY=VALUE/);
        }
        assert.equal(await fa.stop(), 0, fa.stderr);
      } finally {
        await fa.dispose();
        await c.dispose();
      }
      const lines = await flowLogLines(`${logDir}/flows.log`);
      assert.ok(lines.every((l) => l.split(",").length >= 28), "whole log lines");
    },
  });
}

Deno.test({
  name: "image: v1.13's arguments and a configuration enabling a flow log outside the image's " +
    "directories and an IPFIX collector: the launcher grants both, records reach both",
  sanitizeResources: false,
  async fn() {
    await image();
    const received: Received[] = [];
    let collector: Collector | undefined;
    const elsewhere = await Deno.makeTempDir({ dir: work });
    await Deno.chmod(elsewhere, 0o777);
    const { confDir, logDir } = await dirs("");
    const c = await container();
    let fa: ImageProcess | undefined;
    try {
      collector = await decodingCollector("tcp", received);
      await Deno.writeTextFile(
        `${confDir}/flow-aggregator.conf`,
        conf("TCP").replace(`${IMAGE_PATHS.logDir}/flows.log`, "/tmp/elsewhere/flows.log") +
          `flowCollector:\n  enable: true\n  address: 127.0.0.1:${collector.port}:tcp\n`,
      );
      // Upstream's Deployment arguments (its `args`; the image's entrypoint runs them).
      fa = new ImageProcess(c.id, confDir, logDir, [`${elsewhere}:/tmp/elsewhere`], [
        ...UPSTREAM_DEPLOYMENT_ARGS,
      ]);
      await fa.waitFor(/msg="Started TCP collecting process"/, "collector start");
      assert.match(fa.stderr, /component=launcher msg="starting the flow aggregator/);
      const argv = await fa.cmdline();
      assert.ok(argv.includes("--exit-on-new-permissions"), argv.join(" "));
      const flag = (kind: string) => argv.find((a) => a.startsWith(`--allow-${kind}=`)) ?? "";
      assert.match(flag("write"), /[=,]\/tmp\/elsewhere(,|$)/);
      assert.match(flag("net"), new RegExp(`[=,]127\\.0\\.0\\.1:${collector.port}(,|$)`));
      for (const a of argv.filter((x) => x.startsWith("--allow-"))) {
        assert.match(a, /^--allow-\w+=/);
      }
      const sent = await flowgen("tcp", 400);
      assert.equal(sent, 400);
      await waitFor(
        async () =>
          (await flowLogLines(`${elsewhere}/flows.log`)).length >= 50 && received.length >= 50,
        { timeoutMs: 20_000, what: "flows in the flow log and at the IPFIX collector" },
      );
      assert.equal(await fa.stop(), 0, fa.stderr);
      assert.doesNotMatch(fa.stderr, /needs --allow|which this process was not given/);
      // klog's files, as v1.13's arguments ask (--logtostderr=false --log_dir=...).
      const klog = [...Deno.readDirSync(logDir)].map((e) => e.name);
      assert.ok(klog.some((n) => n.startsWith("flow-aggregator.")), klog.join(" "));
    } finally {
      await fa?.dispose();
      await c.dispose();
      await collector?.stop();
    }
  },
});

Deno.test("image: antctl's C source keeps every entrypoint argument byte for byte and appends its own", async () => {
  // Quotes, backslashes, trigraph-like `??=`, UTF-8, control characters, an empty string.
  const odd = ['q"uote', "back\\slash", "??=", "é\tü", "a\nb", "", "%d"];
  const dir = await Deno.makeTempDir({ dir: work });
  await compileAntctl(
    { ...imageSpec(), entrypoint: ["/usr/bin/printf", "[%s]", ...odd] },
    `${dir}/antctl`,
  );
  const run = (...args: string[]) => cmd(`${dir}/antctl`, args);
  // Every command line goes to the entrypoint after the `antctl` marker, as it came: the
  // launcher takes it as antctl's whatever it holds (a line that would start an aggregator
  // included: the launcher's tests show it refused there).
  for (
    const args of [
      ["version", "x y", "--server=https://[::1]:1"],
      ["set", "flow-aggregator", "clickHouse.enable=true"],
      ["--config", "/x"],
      [],
    ]
  ) {
    const r = await run(...args);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, [...odd, "antctl", ...args].map((a) => `[${a}]`).join(""));
  }
  const ldd = await cmd("ldd", [`${dir}/antctl`]);
  assert.match(ldd.stdout + ldd.stderr, /not a dynamic executable/, "static");
  assert.ok(antctlSource(imageSpec()).includes(cStringLiteral(IMAGE_PATHS.launcher)));
});

Deno.test("image: the registry Containerfile is the one generated from the image spec", async () => {
  const committed = await Deno.readTextFile(new URL("../../Containerfile", import.meta.url));
  assert.equal(
    committed,
    registryContainerfile(imageSpec()),
    "regenerate it: deno run -A scripts/image.ts --write-containerfile",
  );
  // Both builds declare the same process.
  const scratch = scratchContainerfile(imageSpec());
  const tail = (text: string) => text.slice(text.indexOf("USER "));
  assert.equal(tail(committed), tail(scratch));
});
