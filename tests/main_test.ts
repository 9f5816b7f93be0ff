/**
 * Tests of main.ts: the command line parser (control-plane.md §6.1) and the process starting on
 * the configuration files operators already have.
 */

import assert from "node:assert/strict";
import denoJson from "../deno.json" with { type: "json" };
import { DEFAULT_WORKERS, parseArgs, udpSocketsFor, VERSION } from "../main.ts";
import { KLOG_DEFAULTS } from "../src/log/mod.ts";
import { FaProcess } from "./_helpers/process.ts";
import {
  NEWER_CHART_CONF,
  NO_SINK_WARNING,
  STOCK_V113_CONF,
  UPSTREAM_DEPLOYMENT_ARGS,
} from "./_helpers/stock_config.ts";

Deno.test("main: VERSION is deno.json's version", () => {
  assert.equal(VERSION, denoJson.version);
  assert.match(VERSION, /^\d+\.\d+\.\d+/);
});

Deno.test("main: no flags gives the defaults", () => {
  assert.deepEqual(parseArgs([]), {
    logLevel: "info",
    logFormat: "logfmt",
    klog: { ...KLOG_DEFAULTS },
    version: false,
    help: false,
    udpReceiver: "auto",
    workers: DEFAULT_WORKERS,
    exportersInProcess: false,
    permissions: false,
    perSink: false,
    exitOnNewPermissions: false,
  });
});

Deno.test("main: --exit-on-new-permissions (the launcher's) is a boolean flag", () => {
  assert.equal(parseArgs(["--exit-on-new-permissions"]).exitOnNewPermissions, true);
  assert.equal(parseArgs(["--exit-on-new-permissions=false"]).exitOnNewPermissions, false);
  assert.throws(() => parseArgs(["--exit-on-new-permissions=maybe"]), /exit-on-new-permissions/);
});

Deno.test("main: --workers takes 1 to 64 shards", () => {
  assert.equal(DEFAULT_WORKERS, Math.min(8, navigator.hardwareConcurrency));
  assert.equal(parseArgs(["--workers", "4"]).workers, 4);
  assert.equal(parseArgs(["--workers=2"]).workers, 2);
  assert.throws(() => parseArgs(["--workers", "0"]), /--workers needs an integer from 1 to 64/);
  assert.throws(() => parseArgs(["--workers", "1.5"]), /--workers needs an integer/);
  // Decimal digits only, as Go reads a flag's integer (0x2 and 1e1 were taken as 2 and 10).
  for (const text of ["0x2", "1e1", " 2", "2 ", "+2", ""]) {
    assert.throws(() => parseArgs(["--workers", text]), /--workers needs an integer from 1 to 64/);
  }
  assert.throws(() => parseArgs(["--v", "0x4"]), /--v needs a non-negative integer/);
  assert.throws(() => parseArgs(["--udp-recv-buffer", "4e6"]), /--udp-recv-buffer needs a byte/);
  assert.equal(parseArgs(["--workers", "02"]).workers, 2);
});

Deno.test("main: the fast UDP path has one socket per shard unless --udp-workers says", () => {
  assert.equal(udpSocketsFor(parseArgs([])), DEFAULT_WORKERS);
  assert.equal(udpSocketsFor(parseArgs(["--workers", "3"])), 3);
  assert.equal(udpSocketsFor(parseArgs(["--workers", "3", "--udp-workers", "1"])), 1);
  assert.equal(udpSocketsFor(parseArgs(["--udp-workers=5"])), 5);
  assert.throws(() => parseArgs(["--udp-workers", "0"]), /--udp-workers needs an integer/);
});

Deno.test("main: the permissions subcommand and --exporters-in-process are parsed", () => {
  const a = parseArgs(["permissions", "--config", "/etc/fa.conf", "--exporters-in-process"]);
  assert.equal(a.permissions, true);
  assert.equal(a.config, "/etc/fa.conf");
  assert.equal(a.exportersInProcess, true);
  // Only as the first word: elsewhere it is an unexpected argument.
  assert.throws(() => parseArgs(["--help", "permissions"]), /unexpected argument "permissions"/);
});

Deno.test("main: --flag value, --flag=value and single-dash forms are accepted", () => {
  const a = parseArgs(["--config", "/etc/fa.conf", "--listen=127.0.0.1:0", "-cert-dir", "/c"]);
  assert.equal(a.config, "/etc/fa.conf");
  assert.equal(a.listen, "127.0.0.1:0");
  assert.equal(a.certDir, "/c");
  assert.equal(parseArgs(["--config=a=b"]).config, "a=b", "only the first = splits");
});

Deno.test("main: --udp-recv-buffer takes a byte count, 0 for the kernel default", () => {
  assert.equal(parseArgs(["--udp-recv-buffer", "0"]).udpRecvBuffer, 0);
  assert.equal(parseArgs(["--udp-recv-buffer=4194304"]).udpRecvBuffer, 4194304);
  assert.throws(() => parseArgs(["--udp-recv-buffer", "-1"]), /--udp-recv-buffer needs/);
  assert.throws(() => parseArgs(["--udp-recv-buffer", "4M"]), /--udp-recv-buffer needs/);
});

Deno.test("main: log level, format and klog verbosity", () => {
  assert.equal(parseArgs(["--log-level", "debug"]).logLevel, "debug");
  assert.equal(parseArgs(["--log-format=json"]).logFormat, "json");
  assert.equal(parseArgs(["--v=4"]).logLevel, "debug");
  assert.equal(parseArgs(["-v", "2"]).logLevel, "info");
  assert.throws(() => parseArgs(["--v", "-1"]), /--v needs a non-negative integer/);
  assert.throws(() => parseArgs(["--log-level", "trace"]), /--log-level "trace"/);
  assert.throws(() => parseArgs(["--log-format", "xml"]), /--log-format "xml": use logfmt, json/);
});

Deno.test("main: the v1.13 Deployment's klog flags are parsed with Go's flag rules", () => {
  const a = parseArgs([
    ...UPSTREAM_DEPLOYMENT_ARGS,
    "--vmodule=x=2",
    "--skip_headers",
    "--log-format=klog",
  ]);
  assert.equal(a.config, "/etc/flow-aggregator/flow-aggregator.conf");
  assert.equal(a.logLevel, "info");
  assert.equal(a.logFormat, "klog");
  assert.deepEqual(a.klog, {
    ...KLOG_DEFAULTS,
    logtostderr: false,
    logDir: "/var/log/antrea/flow-aggregator",
    alsologtostderr: true,
    logFileMaxSizeMB: 100,
    logFileMaxNum: 4,
  });
  // A bool flag takes its value only inline (Go): "false" is then an argument of its own.
  assert.throws(() => parseArgs(["--logtostderr", "false"]), /unexpected argument "false"/);
  assert.equal(parseArgs(["-logtostderr=0", "--alsologtostderr=F"]).klog.logtostderr, false);
  assert.deepEqual(
    [
      parseArgs(["--stderrthreshold=WARNING"]).klog.stderrThreshold,
      parseArgs(["--stderrthreshold", "0"]).klog.stderrThreshold,
      parseArgs(["--log-flush-frequency=250ms"]).klog.flushFrequencyMs,
      parseArgs(["--log_file_max_size=0.01"]).klog.logFileMaxSizeMB,
      // Past a timer's longest delay the flush would run every millisecond.
      parseArgs(["--log-flush-frequency=1000000h"]).klog.flushFrequencyMs,
    ],
    [1, 0, 250, 0.01, 2 ** 31 - 1],
  );
  assert.throws(() => parseArgs(["--logtostderr=maybe"]), /invalid boolean value "maybe"/);
  assert.throws(() => parseArgs(["--log_file_max_num=-1"]), /--log_file_max_num needs a non-neg/);
  assert.throws(() => parseArgs(["--log_file_max_size=big"]), /--log_file_max_size needs/);
  assert.throws(() => parseArgs(["--stderrthreshold=LOUD"]), /--stderrthreshold "LOUD"/);
  assert.throws(() => parseArgs(["--log-flush-frequency=5"]), /missing unit/);
});

Deno.test("main: --version, --help and -h", () => {
  assert.equal(parseArgs(["--version"]).version, true);
  // pflag's shorthand of klog's one-letter flag: -v2 is --v=2.
  assert.equal(parseArgs(["-v2"]).verbosity, 2);
  assert.equal(parseArgs(["-v", "3"]).verbosity, 3);
  assert.equal(parseArgs(["--help"]).help, true);
  assert.equal(parseArgs(["-h"]).help, true);
});

Deno.test("main: boolean flags read as Go's (=false is off, another value refused); --per-sink is the permissions subcommand's", () => {
  // Was: --exporters-in-process=false turned it on, --version=no printed the version.
  assert.equal(parseArgs(["--exporters-in-process=false"]).exportersInProcess, false);
  assert.equal(parseArgs(["--exporters-in-process=true"]).exportersInProcess, true);
  assert.throws(() => parseArgs(["--version=no"]), /invalid boolean value "no" for flag --version/);
  assert.equal(parseArgs(["permissions", "--per-sink"]).perSink, true);
  // Was: ignored, and the collector started.
  assert.throws(() => parseArgs(["--per-sink"]), /--per-sink is a flag of the permissions/);
});

Deno.test("main: unknown flags, positional arguments and missing values are errors", () => {
  assert.throws(() => parseArgs(["--nope"]), /unknown flag --nope/);
  assert.throws(() => parseArgs(["run"]), /unexpected argument "run"/);
  assert.throws(() => parseArgs(["--config"]), /flag --config needs a value/);
  assert.throws(() => parseArgs(["--log_dir"]), /flag --log_dir needs a value/);
});

for (
  const [name, path, warned] of [
    ["Antrea v1.13's stock config (as Helm renders it)", STOCK_V113_CONF, []],
    ["a newer chart's config", NEWER_CHART_CONF, ["mode", "flowCollector.tls"]],
  ] as const
) {
  Deno.test(`main: the process starts on ${name}, warning that no sink is enabled`, async () => {
    const dir = await Deno.makeTempDir({ prefix: "fa-stock-" });
    const fa = await FaProcess.startWithConfig(dir, await Deno.readTextFile(path));
    try {
      await fa.collectorPort(30_000);
      assert.ok(fa.find({ msg: "Started TLS collecting process" }).length === 1, fa.stderr);
      assert.equal(fa.find({ level: "warn", msg: NO_SINK_WARNING }).length, 1, fa.stderr);
      for (const key of warned) {
        assert.equal(
          fa.find({ level: "warn", path: key, msg: /unknown key, ignored$/ }).length,
          1,
          `${key} warned:\n${fa.stderr}`,
        );
      }
      const status = await fa.stop();
      assert.equal(status.code, 0, fa.stderr);
    } finally {
      await fa.dispose();
      await Deno.remove(dir, { recursive: true });
    }
  });
}
