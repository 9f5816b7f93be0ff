/**
 * End to end: the command line of the real process (control-plane.md §6.1, §6.5): `--version`,
 * `--help`, klog compatibility flags, unknown flags (exit 1), bad configuration files (exit 255
 * with an error naming the key), and a `deno task start`-style run without `--config` on the
 * embedded default configuration (flow log written to ./flows.log in the working directory).
 */

import assert from "node:assert/strict";
import denoJson from "../../deno.json" with { type: "json" };
import { sendThenStop } from "./helpers/agent.ts";
import { readFlowLog } from "./helpers/flow_log.ts";
import { DENO_JSON, FaProcess, flowLogConfig, runToExit } from "../_helpers/process.ts";
import { intraNodeKey, intraNodeRecord } from "./helpers/scenarios.ts";
import { lineKey } from "./helpers/flow_log.ts";

/** The permissions `deno task start` grants (deno.json "tasks.start"), no more. */
const TASK_START_FLAGS = [
  "--allow-net",
  "--allow-read",
  "--allow-write",
  "--allow-env",
  "--allow-sys",
  "--config",
  DENO_JSON,
];

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-cli-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The machine's architecture in Go's names, as upstream prints it. */
const GO_ARCH = Deno.build.arch === "x86_64" ? "amd64" : "arm64";

Deno.test("cli: --version prints name, version, platform and runtime, exit 0", async () => {
  const r = await runToExit({ args: ["--version"] });
  assert.equal(r.code, 0);
  assert.equal(
    r.stdout,
    `flow-aggregator version ${denoJson.version} ${Deno.build.os}/${GO_ARCH} deno${Deno.version.deno}\n`,
  );
});

Deno.test("cli: --config= (empty) is fatal with upstream's words", async () => {
  const r = await runToExit({ args: ["--config="] });
  assert.equal(r.code, 255, r.stderr);
  assert.match(r.stderr, /configFile is empty string/);
});

Deno.test("cli: klog flags of the v1.13 Deployment are accepted", async () => {
  const r = await runToExit({
    args: [
      "--logtostderr=false",
      "--log_dir=/var/log/antrea/flow-aggregator",
      "--alsologtostderr",
      "--log_file_max_size=100",
      "--log_file_max_num=4",
      "--v=4",
      "--version",
    ],
  });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^flow-aggregator version /);
});

Deno.test("cli: --help prints the usage with every flag, exit 0", async () => {
  const r = await runToExit({ args: ["--help"] });
  assert.equal(r.code, 0);
  assert.match(r.stdout, /^flow-aggregator .*\n\nUsage:/);
  for (const flag of ["--config", "--listen", "--cert-dir", "--log-level", "--version", "--help"]) {
    assert.ok(r.stdout.includes(flag), `usage mentions ${flag}`);
  }
});

Deno.test("cli: an unknown flag or a flag without its value exits 1 with the usage", async () => {
  const unknown = await runToExit({ args: ["--bogus-flag"] });
  assert.equal(unknown.code, 1);
  assert.match(unknown.stderr, /unknown flag --bogus-flag/);
  assert.match(unknown.stderr, /Usage:/);
  const missing = await runToExit({ args: ["--config"] });
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /flag --config needs a value/);
  const level = await runToExit({ args: ["--log-level", "loud"] });
  assert.equal(level.code, 1);
  assert.match(level.stderr, /--log-level "loud"/);
});

for (
  const [name, content, key] of [
    [
      "a bad duration",
      "activeFlowRecordTimeout: 10x\nflowLogger:\n  enable: true\n",
      "activeFlowRecordTimeout",
    ],
    ["a wrongly typed value", "flowLogger:\n  enable: 1\n", "flowLogger.enable"],
    [
      "a bad collector address",
      "flowCollector:\n  enable: true\n  address: 127.0.0.1:99999:tcp\n",
      "flowCollector.address",
    ],
  ] as const
) {
  Deno.test(`cli: a config file with ${name} exits 255 with an error naming ${key}`, async () => {
    await withTempDir(async (dir) => {
      await Deno.writeTextFile(`${dir}/fa.conf`, content);
      const r = await runToExit({
        args: ["--config", `${dir}/fa.conf`, "--listen", "127.0.0.1:0"],
      });
      assert.equal(r.code, 255, r.stderr);
      const err = r.events.find((e) => e.fields.msg === "Error running flow aggregator");
      assert.ok(err, r.stderr);
      assert.equal(err.fields.level, "error");
      assert.ok(err.fields.err.includes(key), `error names ${key}: ${err.fields.err}`);
      assert.equal(r.events.some((e) => /collecting process/.test(e.fields.msg ?? "")), false);
    });
  });
}

Deno.test("cli: a missing config file exits 255 naming the file", async () => {
  await withTempDir(async (dir) => {
    const r = await runToExit({ args: ["--config", `${dir}/absent.conf`] });
    assert.equal(r.code, 255);
    const err = r.events.find((e) => e.fields.msg === "Error running flow aggregator");
    assert.ok(err?.fields.err.includes("absent.conf"), r.stderr);
  });
});

Deno.test("cli: without --config the embedded default runs with the task's permissions and logs to ./flows.log", async () => {
  await withTempDir(async (dir) => {
    const fa = FaProcess.start({
      denoFlags: TASK_START_FLAGS,
      args: ["--listen", "127.0.0.1:0", "--log-level", "debug"],
      cwd: dir,
    });
    try {
      const port = await fa.collectorPort();
      const started = fa.find({ msg: /^Started (TCP|UDP|TLS) collecting process$/ })[0];
      assert.equal(started.fields.msg, "Started TCP collecting process", "the default is TCP");
      assert.equal(fa.find({ msg: /^using the embedded default configuration/ }).length, 1);
      // Default timeouts are 60 s / 90 s: the line comes from the shutdown flush.
      const status = await sendThenStop(fa, port, [intraNodeRecord(46_001)]);
      assert.equal(status.code, 0, fa.stderr);
      const lines = await readFlowLog(`${dir}/flows.log`);
      assert.deepEqual(lines.map(lineKey), [intraNodeKey(46_001)]);
      assert.equal(lines[0].sourcePodName, "worker");
      assert.equal(lines[0].protocolIdentifier, "TCP", "prettyPrint is on by default");
    } finally {
      await fa.dispose();
    }
  });
});

Deno.test("cli: a collector port already in use is fatal (exit 255), not a silent process without listener", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/fa.conf`, "flowLogger:\n  enable: true\n  path: ./f.log\n");
    const busy = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    try {
      const port = (busy.addr as Deno.NetAddr).port;
      const r = await runToExit({
        args: ["--config", `${dir}/fa.conf`, "--listen", `127.0.0.1:${port}`],
        cwd: dir,
      });
      assert.equal(r.code, 255, r.stderr);
      assert.match(r.stderr, /Error running flow aggregator/);
      // Was "Address already in use (os error 98)" alone: which listener, which address?
      assert.ok(
        r.stderr.includes(`IPFIX collector (TLS) cannot listen on 127.0.0.1:${port}`),
        r.stderr,
      );
    } finally {
      busy.close();
    }
  });
});

Deno.test("cli: an API port in use stops the started process as a signal does (the held flow exported), then exits 255 naming the API and its address", async () => {
  await withTempDir(async (dir) => {
    const busy = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    try {
      const apiPort = (busy.addr as Deno.NetAddr).port;
      const fa = await FaProcess.startWithConfig(
        dir,
        flowLogConfig(`${dir}/flows.log`, { activeTimeout: "1h", inactiveTimeout: "1h" }),
        { args: ["--api-listen", `127.0.0.1:${apiPort}`] },
      );
      try {
        const status = await fa.status;
        assert.equal(status.code, 255, fa.stderr);
        assert.ok(
          fa.stderr.includes(`API server cannot listen on 127.0.0.1:${apiPort}`),
          fa.stderr,
        );
        // Was: exit at once, without the stop (a record collected meanwhile lost uncounted).
        assert.equal(fa.find({ msg: "API server failed to start: stopping" }).length, 1);
        assert.ok(fa.find({ msg: "record metrics" }).length >= 1, "the stop's metrics line");
      } finally {
        await fa.dispose();
      }
    } finally {
      busy.close();
    }
  });
});

Deno.test("cli: a configuration path that is a directory exits 255 naming it", async () => {
  await withTempDir(async (dir) => {
    const r = await runToExit({ args: ["--config", dir], cwd: dir });
    assert.equal(r.code, 255, r.stderr);
    // Was "Is a directory (os error 21)" alone.
    assert.ok(r.stderr.includes(`cannot read configuration file ${dir}`), r.stderr);
  });
});

Deno.test("cli: SIGHUP stops the process as SIGTERM does, the held flow exported", async () => {
  await withTempDir(async (dir) => {
    const fa = await FaProcess.startWithConfig(
      dir,
      flowLogConfig(`${dir}/flows.log`, { activeTimeout: "1h", inactiveTimeout: "1h" }),
      { args: ["--log-level", "debug"] },
    );
    try {
      const port = await fa.collectorPort();
      // Was: exit 129 at once, no stop, the flow lost.
      const status = await sendThenStop(fa, port, [intraNodeRecord(46_201)], "SIGHUP");
      assert.equal(status.code, 0, fa.stderr);
      assert.equal(fa.find({ msg: "Stopping flow aggregator", signal: "SIGHUP" }).length, 1);
      const lines = await readFlowLog(`${dir}/flows.log`);
      assert.deepEqual(lines.map(lineKey), [intraNodeKey(46_201)]);
    } finally {
      await fa.dispose();
    }
  });
});

Deno.test("cli: a bad --listen address exits 255 naming it", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/fa.conf`, "flowLogger:\n  enable: true\n  path: ./f.log\n");
    const r = await runToExit({
      args: ["--config", `${dir}/fa.conf`, "--listen", "localhost:99999"],
      cwd: dir,
    });
    assert.equal(r.code, 255, r.stderr);
    assert.match(r.stderr, /99999/);
  });
});

Deno.test("cli: flow log to stdout (path -) with JSON logs on stderr keeps the two streams apart", async () => {
  await withTempDir(async (dir) => {
    const fa = await FaProcess.startWithConfig(
      dir,
      flowLogConfig('"-"', { activeTimeout: "1h", inactiveTimeout: "1h", prettyPrint: false }),
      { args: ["--log-format", "json", "--log-level", "debug"] },
    );
    try {
      const port = await fa.collectorPort();
      const status = await sendThenStop(fa, port, [intraNodeRecord(46_101)]);
      assert.equal(status.code, 0, fa.stderr);
      // Our events on stderr are JSON objects (Deno itself may print a "Download ..." line);
      // stdout holds only the flow log line.
      const ours = fa.events.filter((e) => e.raw.startsWith("{"));
      assert.ok(ours.length >= 5, fa.stderr);
      for (const e of ours) assert.ok(e.fields.msg && e.fields.level && e.fields.time, e.raw);
      assert.ok(ours.some((e) => e.fields.msg === "Started TCP collecting process"));
      const out = fa.stdout.split("\n");
      assert.equal(out.pop(), "");
      assert.equal(out.length, 1, fa.stdout);
      const f = out[0].split(",");
      assert.equal(f.length, 28);
      assert.deepEqual(f.slice(2, 7), ["10.10.0.100", "10.10.0.101", "46101", "6379", "6"]);
    } finally {
      await fa.dispose();
    }
  });
});
