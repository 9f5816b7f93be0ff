/**
 * flow-aggregator command line: parses flags, loads (and watches) the configuration, starts the
 * Flow Aggregator and handles signals. Without `--config` it runs on the embedded default
 * configuration (TCP collector on port 4739, flow log to ./flows.log), which needs no
 * Kubernetes cluster and no certificates.
 *
 * Permissions: exactly those of the configuration, as `flow-aggregator permissions --config
 * FILE` prints them (src/permissions.ts): the collector port and each sink's hosts (`net`), the
 * config directory and the sinks' worker modules (`read`), each sink's directory and
 * `--cert-dir` (`write`), the environment it reads, `--allow-ffi` only for the UDP fast path.
 * `--unstable-net` enables UDP, `--unstable-worker-options` the permission-scoped sink workers.
 */

import denoJson from "./deno.json" with { type: "json" };
import { ConfigWatcher, EMBEDDED_DEFAULT_CONFIG } from "./src/config/mod.ts";
import { diffConfig, type FlowAggregatorConfig, parseConfig } from "./src/components.ts";
import { permissionFlags, processPermissions, sinkPermissionTable } from "./src/permissions.ts";
import {
  fastUdpReceiverFactory,
  ffiAvailable,
  openDenoUdpReceiver,
  type UdpReceiverFactory,
} from "./src/collector/mod.ts";
import { FlowAggregator } from "./src/flow_aggregator.ts";
import { isLogLevel, logger, type LogLevel, setLogFormat, setLogLevel } from "./src/log.ts";
import { runClickHouseCommand } from "./src/exporters/clickhouse/schema_cli.ts";
import type { GeneratedCertificates } from "./src/pki/mod.ts";

const log = logger("main");

/** The product version. */
export const VERSION: string = denoJson.version;

const USAGE = `flow-aggregator ${VERSION}: Antrea-compatible IPFIX flow aggregator

Usage: deno task start [flags]
       deno task permissions [--config FILE] [flags]   print the deno run permission flags
                       this configuration needs (narrowest set), then exit; with --per-sink,
                       a table of the permissions each sink's worker runs with

Flags:
  --config FILE        configuration file (Antrea v1.13 flow-aggregator.conf format); watched
                       for changes. Default: the embedded configuration (TCP on :4739,
                       flow log to ./flows.log).
  --listen ADDR        collector listen address (default [::]:4739, IPv4 and IPv6).
  --udp-receiver MODE  UDP receive path: auto (default: the fast recvmmsg path when started
                       with --allow-ffi on Linux, else one Deno socket), fast, or socket.
  --udp-workers N      fast path: sockets/threads sharing the port (SO_REUSEPORT), default 1.
  --cert-dir DIR       with aggregatorTransportProtocol TLS and no Kubernetes cluster: write the
                       generated CA (ca.crt) and Agent client certificate (tls.crt, tls.key) here.
  --exporters-in-process
                       run the sinks in the main thread with the process's permissions
                       instead of one permission-scoped worker each (debugging).
  --log-level LEVEL    error, warn, info (default) or debug.
  --log-format FORMAT  logfmt (default) or json.
  --v N                klog verbosity (accepted for compatibility: N >= 4 means debug).
  --version            print the version and exit.
  --help               print this help and exit.

klog flags (--logtostderr, --alsologtostderr, --log_dir, --log_file, --log_file_max_size,
--log_file_max_num, --log-flush-frequency, --vmodule, --stderrthreshold, --add_dir_header,
--skip_headers, --skip_log_headers, --one_output, --log_backtrace_at) are accepted and ignored:
logs always go to stderr, one structured event per line.

Subcommand: clickhouse schema [--apply [--config FILE]] [--no-ttl]   print (or create on the
configured server) the v1.13 ClickHouse flows table and its views.
`;

/** Parsed command line. */
export interface CliOptions {
  config?: string;
  listen?: string;
  certDir?: string;
  udpReceiver: "auto" | "fast" | "socket";
  udpWorkers: number;
  exportersInProcess: boolean;
  /** `permissions` subcommand: print the permission flags and exit. */
  permissions: boolean;
  /** With `permissions`: print each sink's worker permissions as a table instead. */
  perSink: boolean;
  logLevel: LogLevel;
  logFormat: "logfmt" | "json";
  version: boolean;
  help: boolean;
}

const KLOG_VALUE_FLAGS = new Set([
  "log_dir",
  "log_file",
  "log_file_max_size",
  "log_file_max_num",
  "log-flush-frequency",
  "vmodule",
  "stderrthreshold",
  "log_backtrace_at",
]);
const KLOG_BOOL_FLAGS = new Set([
  "logtostderr",
  "alsologtostderr",
  "add_dir_header",
  "skip_headers",
  "skip_log_headers",
  "one_output",
]);

/** Parses `args`; throws an Error naming the bad flag. */
export function parseArgs(args: readonly string[]): CliOptions {
  const opts: CliOptions = {
    logLevel: "info",
    logFormat: "logfmt",
    version: false,
    help: false,
    udpReceiver: "auto",
    udpWorkers: 1,
    exportersInProcess: false,
    permissions: false,
    perSink: false,
  };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (i === 0 && arg === "permissions") {
      opts.permissions = true;
      continue;
    }
    const m = /^--?([A-Za-z_][A-Za-z0-9_-]*)(?:=(.*))?$/.exec(arg);
    if (!m) throw new Error(`unexpected argument "${arg}"`);
    const name = m[1];
    let inline: string | undefined = m[2];
    const value = (): string => {
      if (inline !== undefined) {
        const v = inline;
        inline = undefined;
        return v;
      }
      const v = args[++i];
      if (v === undefined) throw new Error(`flag --${name} needs a value`);
      return v;
    };
    switch (name) {
      case "config":
        opts.config = value();
        break;
      case "listen":
        opts.listen = value();
        break;
      case "cert-dir":
        opts.certDir = value();
        break;
      case "udp-receiver": {
        const v = value();
        if (v !== "auto" && v !== "fast" && v !== "socket") {
          throw new Error(`--udp-receiver "${v}": use auto, fast or socket`);
        }
        opts.udpReceiver = v;
        break;
      }
      case "udp-workers": {
        const v = Number(value());
        if (!Number.isInteger(v) || v < 1 || v > 64) {
          throw new Error(`--udp-workers needs an integer from 1 to 64`);
        }
        opts.udpWorkers = v;
        break;
      }
      case "log-level": {
        const v = value();
        if (!isLogLevel(v)) throw new Error(`--log-level "${v}": use error, warn, info or debug`);
        opts.logLevel = v;
        break;
      }
      case "log-format": {
        const v = value();
        if (v !== "logfmt" && v !== "json") {
          throw new Error(`--log-format "${v}": use logfmt or json`);
        }
        opts.logFormat = v;
        break;
      }
      case "v": {
        const v = Number(value());
        if (!Number.isInteger(v) || v < 0) throw new Error(`--v needs a non-negative integer`);
        if (v >= 4) opts.logLevel = "debug";
        break;
      }
      case "per-sink":
        opts.perSink = true;
        break;
      case "exporters-in-process":
        opts.exportersInProcess = true;
        break;
      case "version":
        opts.version = true;
        break;
      case "help":
      case "h":
        opts.help = true;
        break;
      default:
        if (KLOG_VALUE_FLAGS.has(name)) {
          value();
        } else if (KLOG_BOOL_FLAGS.has(name)) {
          // `--logtostderr=false` carries its value inline; a bare flag means true.
        } else {
          throw new Error(`unknown flag --${name}`);
        }
    }
  }
  return opts;
}

function env(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined; // no --allow-env: treated as absent
  }
}

/** Describes the Kubernetes environment, if any. */
function detectCluster(): string | undefined {
  if (env("KUBERNETES_SERVICE_HOST")) return "in-cluster";
  const kubeconfig = env("KUBECONFIG") ?? (env("HOME") ? `${env("HOME")}/.kube/config` : "");
  if (kubeconfig) {
    try {
      if (Deno.statSync(kubeconfig).isFile) return `kubeconfig ${kubeconfig}`;
    } catch {
      // absent or unreadable: no cluster
    }
  }
  return undefined;
}

async function writeCertificates(dir: string, certs: GeneratedCertificates): Promise<void> {
  await Deno.mkdir(dir, { recursive: true });
  await Deno.writeTextFile(`${dir}/ca.crt`, certs.ca.certPem);
  await Deno.writeTextFile(`${dir}/tls.crt`, certs.client.certPem);
  await Deno.writeTextFile(`${dir}/tls.key`, certs.client.keyPem, { mode: 0o600 });
  log.info("wrote the CA and Agent client certificate", {
    dir,
    files: "ca.crt,tls.crt,tls.key",
  });
}

/**
 * Chooses the UDP receive path. The fast path (recvmmsg in worker threads, see
 * docs/udp-ingest.md) needs `--allow-ffi`, so it is used only when that permission was granted:
 * the process never asks for more than the operator gave it.
 */
function udpReceiverFor(opts: CliOptions): UdpReceiverFactory | undefined {
  if (opts.udpReceiver === "socket") return undefined;
  if (opts.udpReceiver === "fast" && !ffiAvailable()) {
    throw new Error(
      "--udp-receiver fast needs Linux (x86_64 or aarch64) and --allow-ffi",
    );
  }
  if (opts.udpReceiver === "auto" && !ffiAvailable()) return undefined;
  const fast = fastUdpReceiverFactory({ mode: "ffi", workers: opts.udpWorkers });
  if (opts.udpReceiver === "fast") return fast;
  // auto: a build without the receive worker module (the `deno bundle` file) cannot start the
  // fast path even with --allow-ffi; that must not make UDP collection fatal.
  return async (address) => {
    try {
      return await fast(address);
    } catch (err) {
      log.warn("fast UDP receive path unavailable, using one Deno socket", { err });
      return openDenoUdpReceiver(address);
    }
  };
}

/** The `permissions` subcommand: prints the `deno run` flags the configuration needs. */
async function printPermissions(opts: CliOptions): Promise<number> {
  const text = opts.config === undefined
    ? EMBEDDED_DEFAULT_CONFIG
    : await Deno.readTextFile(opts.config);
  const config = parseConfig(text);
  if (opts.perSink) {
    console.log(sinkPermissionTable(config));
    return 0;
  }
  const flags = permissionFlags(processPermissions(config, {
    configPath: opts.config,
    listen: opts.listen,
    certDir: opts.certDir,
    udpReceiver: opts.udpReceiver,
    exportersInProcess: opts.exportersInProcess,
  }));
  console.log(flags.join(" "));
  return 0;
}

// The `clickhouse` subcommand needs none of the process set-up below (exporters.md §3.3 DDL).
if (import.meta.main && Deno.args[0] === "clickhouse") {
  const r = await runClickHouseCommand(
    Deno.args.slice(1),
    async (path) =>
      parseConfig(path === undefined ? EMBEDDED_DEFAULT_CONFIG : await Deno.readTextFile(path))
        .clickHouse,
  );
  if (r.stdout !== "") console.log(r.stdout);
  if (r.stderr !== "") console.error(r.stderr);
  Deno.exit(r.code);
}

async function run(opts: CliOptions): Promise<number> {
  setLogLevel(opts.logLevel);
  setLogFormat(opts.logFormat);
  log.info("Flow aggregator starting...", { version: VERSION });

  const cluster = detectCluster();
  if (cluster === undefined) {
    log.info(
      "no Kubernetes cluster found (no in-cluster environment, no kubeconfig): " +
        "running standalone, Pod metadata is not filled",
    );
  } else {
    log.info(
      "Kubernetes integration is not part of this build yet: running standalone, " +
        "Pod metadata is not filled",
      { cluster },
    );
  }

  let watcher: ConfigWatcher<FlowAggregatorConfig> | undefined;
  let config: FlowAggregatorConfig;
  // The watcher reads the first config, so it exists before the aggregator: a change it sees
  // meanwhile waits for the aggregator (whose update() before start() is adopted by start()).
  const aggregator = Promise.withResolvers<FlowAggregator>();
  if (opts.config !== undefined) {
    watcher = new ConfigWatcher(opts.config, {
      parse: (text) => parseConfig(text),
      diff: diffConfig,
      onChange: async (next, _old, diff) => (await aggregator.promise).update(next, diff),
    });
    config = await watcher.start();
    log.info("Watching for FlowAggregator configuration file", { path: opts.config });
  } else {
    config = parseConfig(EMBEDDED_DEFAULT_CONFIG);
    log.info("using the embedded default configuration (pass --config FILE to change it)");
  }

  const certDir = opts.certDir;
  const fa = new FlowAggregator(config, {
    exportersInProcess: opts.exportersInProcess,
    listenAddress: opts.listen,
    udpReceiver: udpReceiverFor(opts),
    namespace: env("POD_NAMESPACE"),
    onCertificates: async (certs) => {
      if (certDir !== undefined) {
        await writeCertificates(certDir, certs);
      } else {
        // Publication to Kubernetes is not in this build either, so with or without a cluster
        // nobody hands these certificates to the Agents unless they are written out.
        log.warn(
          "TLS collector: the CA and Agent client certificate are not published anywhere; " +
            "pass --cert-dir DIR to write them for the Agents",
          cluster === undefined ? {} : { cluster },
        );
      }
    },
  });

  aggregator.resolve(fa);

  let stopping = false;
  const done = Promise.withResolvers<void>();
  const onSignal = (sig: Deno.Signal) => () => {
    if (stopping) {
      log.warn("Received second signal, will force exit", { signal: sig });
      Deno.exit(1);
    }
    stopping = true;
    log.info("Stopping flow aggregator", { signal: sig });
    done.resolve();
  };
  const signals: Deno.Signal[] = ["SIGTERM", "SIGINT", "SIGQUIT"];
  const handlers = signals.map((s) => {
    const h = onSignal(s);
    Deno.addSignalListener(s, h);
    return [s, h] as const;
  });

  await fa.start();
  await done.promise;
  await watcher?.stop();
  await fa.stop();
  for (const [s, h] of handlers) Deno.removeSignalListener(s, h);
  log.info("flow aggregator stopped");
  return 0;
}

if (import.meta.main) {
  let opts: CliOptions;
  try {
    opts = parseArgs(Deno.args);
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${USAGE}`);
    Deno.exit(1);
  }
  if (opts.help) {
    console.log(USAGE);
    Deno.exit(0);
  }
  if (opts.version) {
    console.log(
      `flow-aggregator version ${VERSION} ${Deno.build.os}/${Deno.build.arch} deno${Deno.version.deno}`,
    );
    Deno.exit(0);
  }
  try {
    Deno.exit(await (opts.permissions ? printPermissions(opts) : run(opts)));
  } catch (err) {
    log.error("Error running flow aggregator", { err });
    Deno.exit(255);
  }
}
