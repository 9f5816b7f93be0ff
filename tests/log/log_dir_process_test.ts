/**
 * The real process with the upstream Deployment's klog flags: log files appear under
 * `--log_dir` with klog's names, rotate at `--log_file_max_size`, at most `--log_file_max_num`
 * are kept, every line is a klog line, stderr still gets every line (`--alsologtostderr`), and
 * the lines buffered at exit reach the file; the sink workers' lines reach the files; and the
 * stock config with upstream's args runs on exactly the permissions `permissions` prints.
 */

import assert from "node:assert/strict";
import {
  apiArgs,
  DENO_JSON,
  FaProcess,
  flowLogConfig,
  KLOG_LINE,
  printedPermissions,
} from "../_helpers/process.ts";
import { STOCK_V113_CONF, UPSTREAM_DEPLOYMENT_ARGS } from "../_helpers/stock_config.ts";

const MAX_BYTES = Math.floor(0.002 * 1024 * 1024);
// klog's name; a second file within the same second takes a `.N` suffix.
const NAME =
  /^flow-aggregator\.testhost\.tester\.log\.(INFO|WARNING|ERROR)\.(\d{8}-\d{6})\.(\d+)(?:\.(\d+))?$/;

/** Oldest first: by the time in the name, then the `.N` suffix (numerically). */
function byAge(a: string, b: string): number {
  const [, , sa, , na] = NAME.exec(a) ?? [];
  const [, , sb, , nb] = NAME.exec(b) ?? [];
  return (sa ?? "").localeCompare(sb ?? "") || Number(na ?? 0) - Number(nb ?? 0);
}

Deno.test("log files: klog names under --log_dir, rotation at --log_file_max_size, --log_file_max_num kept", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-logdir-" });
  const logDir = `${dir}/logs`;
  const fa = await FaProcess.startWithConfig(dir, flowLogConfig(`${dir}/flows.log`), {
    args: [
      "--logtostderr=false",
      `--log_dir=${logDir}`,
      "--alsologtostderr",
      "--log_file_max_size=0.002",
      "--log_file_max_num=2",
      "--log-format=klog",
      "--log-level=debug",
    ],
    env: { HOSTNAME: "testhost.example", USER: "tester" },
  });
  try {
    await fa.collectorPort();
    const status = await fa.stop();
    assert.equal(status.code, 0, fa.stderr);
    // --alsologtostderr: stderr has every line, as klog lines.
    assert.ok(fa.events.length > 10);
    for (const e of fa.events) assert.match(e.raw, KLOG_LINE);

    const names = [...Deno.readDirSync(logDir)].map((e) => e.name).sort();
    const info = names.filter((n) => NAME.exec(n)?.[1] === "INFO").sort(byAge);
    assert.equal(info.length, 2, `at most 2 INFO files: ${names.join(" ")}`);
    assert.ok(names.includes("flow-aggregator.INFO"), names.join(" "));
    assert.equal(Number(NAME.exec(info[0])?.[3]), fa.pid);

    const lines: string[] = [];
    for (const n of info) {
      const text = await Deno.readTextFile(`${logDir}/${n}`);
      const body = text.split("\n").slice(4, -1);
      assert.match(text, /^Log file created at: /);
      assert.ok(
        text.length <= MAX_BYTES || body.length === 1,
        `${n}: ${text.length} bytes, over the limit with ${body.length} lines`,
      );
      for (const l of body) assert.match(l, KLOG_LINE);
      lines.push(...body);
    }
    // The files are the tail of stderr (older files were pruned), up to the last line, which
    // was still buffered when the process exited.
    const stderr = fa.events.map((e) => e.raw);
    assert.deepEqual(lines, stderr.slice(stderr.length - lines.length));
    assert.match(lines.at(-1) ?? "", /"flow aggregator stopped"/);
    assert.equal(
      await Deno.readTextFile(`${logDir}/flow-aggregator.INFO`),
      await Deno.readTextFile(`${logDir}/${info[1]}`),
    );
  } finally {
    await fa.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("log files: the sink workers' lines are written to the files by the main thread", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-logdir-" });
  const logDir = `${dir}/logs`;
  const fa = await FaProcess.startWithConfig(dir, flowLogConfig(`${dir}/flows.log`), {
    // Without --alsologtostderr only errors reach stderr: the rest is in the files.
    args: ["--logtostderr=false", `--log_dir=${logDir}`, "--log-flush-frequency=100ms"],
    env: { HOSTNAME: "testhost", USER: "tester" },
  });
  try {
    // The port is in the files only: wait for the INFO file to show the collector started.
    const info = `${logDir}/flow-aggregator.INFO`;
    const deadline = Date.now() + 20_000;
    let text = "";
    while (!/Started TCP collecting process/.test(text)) {
      assert.ok(Date.now() < deadline, `no collector start in ${info}:\n${text}\n${fa.stderr}`);
      await new Promise((r) => setTimeout(r, 200)); // polled: the files are flushed on a timer
      try {
        text = await Deno.readTextFile(info);
      } catch {
        // not created yet
      }
    }
    const status = await fa.stop();
    assert.equal(status.code, 0, fa.stderr);
    assert.equal(fa.events.length, 0, `nothing below ERROR on stderr:\n${fa.stderr}`);
    text = await Deno.readTextFile(info);
    // "Flow logger started" is logged inside the flow log's worker thread.
    assert.match(text, /component=log-exporter msg="Flow logger started"/);
    assert.match(text, /msg="flow aggregator stopped"/);
  } finally {
    await fa.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("log files: the stock config and upstream's klog args run on exactly the printed permissions", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-logdir-" });
  let fa: FaProcess | undefined;
  try {
    await Deno.mkdir(`${dir}/config`);
    const conf = `${dir}/config/flow-aggregator.conf`;
    await Deno.copyFile(STOCK_V113_CONF, conf);
    // Upstream's Deployment args, the config and log directory moved under the test's dir.
    const args = UPSTREAM_DEPLOYMENT_ARGS.map((a) =>
      a.replace("/etc/flow-aggregator", `${dir}/config`).replace("/var/log/antrea", `${dir}/logs`)
    ).concat([
      "--listen",
      "127.0.0.1:0",
      "--log-flush-frequency=100ms",
      "--state-dir",
      dir,
      ...apiArgs(`${dir}/api`),
    ]);
    const flags = await printedPermissions(args);
    const logDir = `${dir}/logs/flow-aggregator`;
    const write = flags.find((f) => f.startsWith("--allow-write="))?.slice(14).split(",") ?? [];
    assert.ok(write.includes(logDir), flags.join(" "));

    fa = FaProcess.start({
      denoFlags: [...flags, "--config", DENO_JSON],
      args,
      cwd: dir,
      env: { HOSTNAME: "testhost", USER: "tester" },
    });
    await fa.collectorPort(30_000);
    const status = await fa.stop();
    assert.equal(status.code, 0, fa.stderr);
    assert.deepEqual(fa.find({ level: "error" }).map((e) => e.raw), [], "nothing denied");
    const names = [...Deno.readDirSync(logDir)].map((e) => e.name);
    // No unscoped --allow-read/--allow-write: the links are hard links, still showing the file.
    const info = names.find((n) => NAME.exec(n)?.[1] === "INFO");
    assert.ok(info, names.join(" "));
    assert.ok(Deno.lstatSync(`${logDir}/flow-aggregator.INFO`).isFile);
    assert.equal(
      await Deno.readTextFile(`${logDir}/flow-aggregator.INFO`),
      await Deno.readTextFile(`${logDir}/${info}`),
    );
    assert.match(
      await Deno.readTextFile(`${logDir}/flow-aggregator.WARNING`),
      /No collector \/ sink has been configured/,
    );
  } finally {
    await fa?.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});
