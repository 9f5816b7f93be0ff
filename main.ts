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
 * The image starts it through the launcher (src/launcher/), which computes those flags for its
 * arguments and execs it with them, adding `--exit-on-new-permissions`.
 */

import denoJson from "./deno.json" with { type: "json" };
import { ConfigWatcher, EMBEDDED_DEFAULT_CONFIG, readConfigFile } from "./src/config/mod.ts";
import { diffConfig, type FlowAggregatorConfig, parseConfig } from "./src/components.ts";
import {
  missingFlags,
  permissionFlags,
  PROCESS_ENV,
  processPermissions,
  shellWord,
  sinkPermissionTable,
} from "./src/permissions.ts";
import {
  type CliOptions,
  EXIT_NEW_PERMISSIONS,
  kubeTarget,
  parseArgs,
  permissionInputs,
  resolveCommand,
  stateFile,
} from "./src/cli_options.ts";
import {
  fastUdpReceiverFactory,
  ffiAvailable,
  openDenoUdpReceiver,
  type UdpReceiverFactory,
} from "./src/collector/mod.ts";
import { FlowAggregator } from "./src/flow_aggregator.ts";
import { logger, setLogFormat, setLogLevel, setVerbosity } from "./src/log.ts";
import { startLogOutput } from "./src/log/mod.ts";
import { DEFAULT_NAMESPACE } from "./src/pki/common.ts";
import type { GeneratedCertificates } from "./src/pki/certificates.ts";
import { apiAddress, DEFAULT_TOKEN_FILE, runCli, startApi } from "./src/api/mod.ts";
import { ANTCTL, CLI_COMMANDS, CLI_USAGE, commandFirst, SET_COMMAND } from "./src/api/cli.ts";
import { PLATFORM } from "./src/platform.ts";
import { systemClock } from "./src/clock.ts";
import { connectKube, type KubeApi } from "./src/k8s/client.ts";
import { ClusterIdentity } from "./src/k8s/cluster_uuid.ts";
// The Pod store and the certificate publisher are imported (below) only with a cluster.
import type { CertificatePublisher } from "./src/k8s/certificates.ts";
import type { PodStore } from "./src/k8s/pod_store.ts";

// The command line's parser moved to src/cli_options.ts (the launcher shares it); its tests and
// scripts keep importing it from here.
export {
  type CliOptions,
  DEFAULT_WORKERS,
  EXIT_NEW_PERMISSIONS,
  parseArgs,
} from "./src/cli_options.ts";

const log = logger("main");

/**
 * How the process stops its configuration watcher on its way out: the watch is not closed (the
 * exit ends it; see `ConfigWatcherStopOptions.leaveWatchOpen`), and a reload stuck in progress
 * (a file read hanging) holds the stop no longer than this.
 */
const WATCHER_EXIT_STOP = { leaveWatchOpen: true, reloadWaitMs: 10_000 } as const;

/** The product version. */
export const VERSION: string = denoJson.version;

export const USAGE = `flow-aggregator ${VERSION}: Antrea-compatible IPFIX flow aggregator

Usage: deno task start [flags]
       deno task permissions [--config FILE] [flags]   print the deno run permission flags
                       this configuration needs (narrowest set), then exit; with --per-sink,
                       a table of the permissions each sink's worker runs with
       flow-aggregator get flowrecords [--srcip X] [--dstip X] [--proto N] [--srcport N]
                       [--dstport N] [--limit N] [-o table|json|yaml] | get recordmetrics
                       [-o ...] | log-level [N] | version    ask the running process (its
                       API), as antctl does; [--server https://127.0.0.1:10348]
                       [--token-file FILE] [--timeout 30s] (get -h: the details)
       flow-aggregator set flow-aggregator KEY=VALUE... [--kubeconfig FILE]   edit the
                       configuration in its ConfigMap ($FA_CONFIG_MAP_NAME), as antctl does
                       (set flow-aggregator -h lists the keys)

Flags:
  --config FILE        configuration file (Antrea v1.13 flow-aggregator.conf format); watched
                       for changes. Default: the embedded configuration (TCP on :4739,
                       flow log to ./flows.log).
  --listen ADDR        collector listen address (default [::]:4739, IPv4 and IPv6).
  --api-listen ADDR    HTTPS API address (default [::]:<apiServer.apiPort>, i.e. 10348).
  --api-token-file F   where the API's loopback bearer token (and its CA, api-ca.crt, next to
                       it) is written; default /var/run/antrea/apiserver/loopback-client-token.
  --udp-receiver MODE  UDP receive path: auto (default: the fast recvmmsg path when started
                       with --allow-ffi on Linux, else one Deno socket), fast, or socket.
  --workers N          aggregation shards: worker threads each owning the flows whose key
                       hashes to it; the main thread reads and routes, the shards decode,
                       aggregate and expire (default: one per available core, at most 8;
                       1 runs the core in the main thread). With a cluster, each shard
                       holds a copy of the Pod store.
  --udp-workers N      fast path: sockets, each read by its own thread, sharing the port
                       (SO_REUSEPORT: the kernel keeps each Agent on one of them). Default:
                       one per aggregation shard (--workers).
  --udp-recv-buffer B  fast path: kernel receive buffer to ask for, in bytes (default 4194304;
                       0 = net.core.rmem_default). The socket path always has rmem_default.
  --cert-dir DIR       with aggregatorTransportProtocol TLS: also write the CA (ca.crt) and Agent
                       client certificate (tls.crt, tls.key) here (without a cluster, the only
                       way the Agents get them).
  --kubeconfig FILE    Kubernetes API access outside a cluster (default: the in-cluster service
                       account, else $KUBECONFIG, else standalone).
  --state-dir DIR      standalone: where the generated cluster UUID is kept (file cluster-uuid),
                       so the IPFIX observation domain id survives restarts. Default: ".".
  --exit-on-new-permissions
                       when the configuration (at start or reloaded) needs permissions this
                       process was not started with, stop as on SIGTERM (the flows held are
                       exported) and exit with code 77, to be started again with them. The
                       image's launcher sets it.
  --exporters-in-process
                       run the sinks in the main thread with the process's permissions
                       instead of one permission-scoped worker each (debugging).
  --log-level LEVEL    error, warn, info (default) or debug.
  --log-format FORMAT  logfmt (default), json, or klog (upstream's text lines).
  --v N                klog verbosity: N >= 4 means debug.
  --version            print the version and exit.
  --help               print this help and exit.

klog's flags, as the upstream Deployment passes them:
  --logtostderr=false  write log files instead of stderr only (default true: stderr only).
  --log_dir DIR        directory of the log files (default the temp directory), named
                       flow-aggregator.<host>.<user>.log.<SEVERITY>.<yyyymmdd-hhmmss>.<pid>,
                       with a flow-aggregator.<SEVERITY> link to the current one.
  --alsologtostderr    with files: every line to stderr too.
  --stderrthreshold S  with files: lines of severity S (default ERROR) and above to stderr.
  --log_file_max_size MB  new file when the current one would exceed MB (default 1800).
  --log_file_max_num N    keep at most N files per severity (default 0: all).
  --log-flush-frequency D how often buffered lines reach the files (default 5s).
  --log_file FILE      with files: every line, whatever its severity, to that one file
                       (appended to; started again empty past --log_file_max_size).
--vmodule, --add_dir_header, --skip_headers, --skip_log_headers, --one_output,
--log_backtrace_at are accepted.

Subcommand: clickhouse schema [--apply [--config FILE]] [--no-ttl]   print (or create on the
configured server) the v1.13 ClickHouse flows table and its views.
`;

function env(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined; // no --allow-env: treated as absent
  }
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
  const fast = fastUdpReceiverFactory({
    mode: "ffi",
    workers: udpSocketsFor(opts),
    recvBufferBytes: opts.udpRecvBuffer,
  });
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

/**
 * Sockets of the fast UDP path: `--udp-workers`, else one per aggregation shard. Each socket
 * has its own kernel receive buffer and receive thread, and SO_REUSEPORT spreads the Agents
 * over them, so a burst the one thread cannot take in time overflows one buffer of several
 * (docs/udp-ingest.md, "The default buffer on the real process").
 */
export function udpSocketsFor(opts: Pick<CliOptions, "udpWorkers" | "workers">): number {
  return opts.udpWorkers ?? opts.workers;
}

/** The `permissions` subcommand: prints the `deno run` flags the configuration needs. */
async function printPermissions(opts: CliOptions): Promise<number> {
  const { config, permissions } = await resolveCommand(opts);
  console.log(
    opts.perSink
      ? sinkPermissionTable(config)
      : permissionFlags(permissions).map(shellWord).join(" "),
  );
  return 0;
}

// The `clickhouse` subcommand needs none of the process set-up below (exporters.md §3.3 DDL).
// Imported here only: the collector itself never loads the ClickHouse schema and connection code.
if (import.meta.main && Deno.args[0] === "clickhouse") {
  const { runClickHouseCommand } = await import("./src/exporters/clickhouse/schema_cli.ts");
  const r = await runClickHouseCommand(
    Deno.args.slice(1),
    async (path) =>
      parseConfig(path === undefined ? EMBEDDED_DEFAULT_CONFIG : await readConfigFile(path))
        .clickHouse,
  );
  if (r.stdout !== "") console.log(r.stdout);
  if (r.stderr !== "") console.error(r.stderr);
  Deno.exit(r.code);
}

async function run(opts: CliOptions): Promise<number> {
  if (opts.verbosity !== undefined) setVerbosity(opts.verbosity);
  setLogLevel(opts.logLevel);
  setLogFormat(opts.logFormat);
  const logOutput = startLogOutput(opts.klog);
  const logFiles = logOutput.files;
  log.info("Flow aggregator starting...", { version: VERSION });
  for (const note of logOutput.notes) log[note.level](note.msg, note.fields);

  const kube = await kubeTarget(opts);
  let api: KubeApi | undefined;
  if (kube === undefined) {
    log.info(
      "no Kubernetes cluster (no in-cluster service account, no --kubeconfig or KUBECONFIG): " +
        "running standalone, Pod metadata is not filled and certificates are not published",
    );
  } else {
    api = await connectKube(kube, { processEnv: PROCESS_ENV });
    log.info("using the Kubernetes API", { mode: kube.mode, server: kube.server });
  }

  // Stopping: a signal, the API failing to start, or (with --exit-on-new-permissions) a
  // configuration that needs permissions this process lacks, which also sets the exit code.
  let stopping = false;
  let exitCode = 0;
  const done = Promise.withResolvers<void>();
  /** The permission flags `c` needs that this process was not started with. */
  const lacking = (c: FlowAggregatorConfig): string[] =>
    missingFlags(processPermissions(c, permissionInputs(opts, c, kube)));

  let watcher: ConfigWatcher<FlowAggregatorConfig> | undefined;
  let config: FlowAggregatorConfig;
  // The watcher reads the first config, so it exists before the aggregator: a change it sees
  // meanwhile waits for the aggregator (whose update() before start() is adopted by start()).
  const aggregator = Promise.withResolvers<FlowAggregator>();
  const clusterIdentity = Promise.withResolvers<ClusterIdentity>();
  if (opts.config !== undefined) {
    watcher = new ConfigWatcher(opts.config, {
      parse: (text) => parseConfig(text),
      diff: diffConfig,
      // Asked before the change is applied (a throw rejects it: counted, the configuration in
      // force is kept, as for an invalid file).
      admit: (next) => {
        if (!opts.exitOnNewPermissions || stopping) return true;
        let missing: string[];
        try {
          missing = lacking(next);
        } catch (err) {
          throw new Error(
            `cannot compute the permissions the new configuration needs: ${(err as Error).message}`,
            { cause: err },
          );
        }
        if (missing.length === 0) return true;
        // Not applied at all: the process stops with the sinks of the configuration it had,
        // which export what it holds, and the next start applies the new one whole.
        stopping = true;
        exitCode = EXIT_NEW_PERMISSIONS;
        log.error(
          "the new configuration needs permissions this process was not started with: " +
            "stopping (the flows held are exported as on SIGTERM) and exiting for a restart " +
            "through the launcher, which grants them",
          { missing: missing.join(" "), exitCode },
        );
        done.resolve();
        return false;
      },
      onChange: async (next, _old, diff) => {
        const fa = await aggregator.promise;
        // Before the update: it rebuilds the sinks that carry the UUID (reload table).
        (await clusterIdentity.promise).setConfigured(next.clusterID);
        return fa.update(next, diff);
      },
    });
    config = await watcher.start();
    log.info("Watching for FlowAggregator configuration file", { path: opts.config });
  } else {
    config = parseConfig(EMBEDDED_DEFAULT_CONFIG);
    log.info("using the embedded default configuration (pass --config FILE to change it)");
  }
  if (opts.exitOnNewPermissions) {
    // The file changed between the launcher's read and ours: nothing runs yet, so exit now.
    const missing = lacking(config);
    if (missing.length > 0) {
      log.error(
        "the configuration needs permissions this process was not started with: exiting for " +
          "a restart through the launcher, which grants them",
        { missing: missing.join(" "), exitCode: EXIT_NEW_PERMISSIONS },
      );
      await watcher?.stop(WATCHER_EXIT_STOP);
      api?.close();
      return EXIT_NEW_PERMISSIONS;
    }
  }

  const clock = systemClock;
  const namespace = env("POD_NAMESPACE") || DEFAULT_NAMESPACE;
  if (api !== undefined && !env("POD_NAMESPACE")) {
    log.warn("POD_NAMESPACE is not set: using the default namespace", { namespace });
  }
  const identity = new ClusterIdentity({
    clock,
    api,
    configured: config.clusterID,
    stateFile: stateFile(opts, kube, config),
  });
  await identity.start();
  clusterIdentity.resolve(identity);
  let podStore: PodStore | undefined;
  let publisher: CertificatePublisher | undefined;
  let certificates: GeneratedCertificates | undefined;
  if (api !== undefined) {
    const [{ PodStore }, { CertificatePublisher }] = await Promise.all([
      import("./src/k8s/pod_store.ts"),
      import("./src/k8s/certificates.ts"),
    ]);
    podStore = new PodStore({
      clock,
      maxPods: config.limits.maxPods,
      maxLabelBytes: config.limits.maxPodLabelBytes,
    });
    podStore.start(api);
    publisher = new CertificatePublisher({ api, namespace, clock });
    if (config.aggregatorTransportProtocol === "TLS") {
      certificates = await publisher.prepare({ address: config.flowAggregatorAddress });
    }
  }
  const store = podStore;
  const certDir = opts.certDir;
  const fa = new FlowAggregator(config, {
    exportersInProcess: opts.exportersInProcess,
    listenAddress: opts.listen,
    udpReceiver: udpReceiverFor(opts),
    namespace,
    configCounters: watcher === undefined ? undefined : () => watcher.stats(),
    logFileCounters: logFiles === undefined ? undefined : () => logFiles.stats(),
    podStoreCounters: store === undefined ? undefined : () => store.stats(),
    certificateCounters: publisher === undefined ? undefined : () => publisher!.stats(),
    clusterUuidCounters: () => identity.stats(),
    kubeClientCounters: api === undefined ? undefined : () => api!.stats(),
    certificates,
    clusterUuid: () => identity.current(),
    hooks: store === undefined ? undefined : { lookupPod: (ip, t) => store.lookup(ip, t) },
    shards: opts.workers,
    podStore: store,
    onCertificates: async (certs) => {
      // In the background: the collector never waits for the API server.
      publisher?.publish(certs);
      if (certDir !== undefined) {
        await writeCertificates(certDir, certs);
      } else if (publisher === undefined) {
        log.warn(
          "TLS collector without a cluster: the CA and Agent client certificate are not " +
            "published anywhere; pass --cert-dir DIR to write them for the Agents",
        );
      }
    },
  });
  identity.onChange(() => void fa.clusterUuidChanged());
  // Where the cluster UUID comes from (the Kubernetes side's counters are on the metrics line
  // and `/metrics`), next to the aggregator's own metrics line.
  const logKubeMetrics = (): void => {
    if (api === undefined) return;
    log.info("kubernetes metrics", { clusterUuidSource: identity.source });
  };
  const kubeMetricsTimer = setInterval(logKubeMetrics, 60_000);
  Deno.unrefTimer(kubeMetricsTimer);

  aggregator.resolve(fa);

  const onSignal = (sig: Deno.Signal) => () => {
    if (stopping) {
      // What the exit throws away is counted in the last lines (it was lost without a number):
      // the flows held, and every counter (the sinks' buffered records among them).
      log.warn(
        "Received second signal, will force exit: the flows held and what the sinks hold are lost",
        {
          signal: sig,
          flowsHeld: fa.stats().numFlows,
        },
      );
      fa.logMetrics();
      Deno.exit(1);
    }
    stopping = true;
    log.info("Stopping flow aggregator", { signal: sig });
    done.resolve();
  };
  // SIGHUP too (a closed terminal): its default action ended the process without a stop, every
  // held flow lost (upstream dies on it likewise).
  const signals: Deno.Signal[] = ["SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP"];
  const handlers = signals.map((s) => {
    const h = onSignal(s);
    Deno.addSignalListener(s, h);
    return [s, h] as const;
  });

  await fa.start();
  // The API starts beside collection (its certificate takes a moment): a signal meanwhile is
  // not held up by it, and its start-up error (a bad cipher name, the port in use) is fatal.
  const apiServer = startApi(fa, {
    address: apiAddress(opts.apiListen, config.apiServer.apiPort),
    tokenFile: opts.apiTokenFile ?? DEFAULT_TOKEN_FILE,
    version: VERSION,
    tlsCipherSuites: config.apiServer.tlsCipherSuites,
    tlsMinVersion: config.apiServer.tlsMinVersion,
    limits: config.limits,
  });
  // The API failing to start (a bad cipher name, its port in use) ends the process, after a
  // stop like a signal's: what was collected meanwhile is exported, not dropped uncounted.
  let apiFailure: Error | undefined;
  apiServer.catch((err) => {
    apiFailure = err as Error;
    stopping = true;
    log.error("API server failed to start: stopping", { err });
    done.resolve();
  });
  await done.promise;
  // No reload from here on (one in progress ends first, fa.stop() waits for its update), and the
  // directory watch is left open for the exit to end: closing it can block this thread for good
  // (a FIFO in the config directory hangs Deno's watch thread, src/config/watcher.ts), which held
  // a SIGTERM before the flows were exported and kept a second signal from being handled.
  await watcher?.stop(WATCHER_EXIT_STOP);
  await fa.stop();
  clearInterval(kubeMetricsTimer);
  logKubeMetrics();
  // A credential plugin still running is killed, not waited for to its timeout by the stops below.
  api?.close();
  await publisher?.stop();
  await podStore?.stop();
  await identity.stop();
  if (apiFailure === undefined) await (await apiServer).close();
  for (const [s, h] of handlers) Deno.removeSignalListener(s, h);
  if (apiFailure !== undefined) throw apiFailure;
  log.info("flow aggregator stopped", { exitCode });
  return exitCode;
}

/** The command line of the image's antctl (`antctl ...`: never the aggregator's), else none. */
const antctlLine = Deno.args[0] === ANTCTL ? commandFirst(Deno.args.slice(1)) : undefined;
/** The CLI's command line: antctl's, or the program's own when it names a CLI command. */
const cliLine = antctlLine ?? Deno.args;

if (import.meta.main && CLI_COMMANDS.includes(cliLine[0])) {
  Deno.exit(await runCli(cliLine));
}

// `set flow-aggregator KEY=VALUE...` edits the configuration's ConfigMap through the Kubernetes
// API (antctl's command); loaded only for it.
if (import.meta.main && cliLine[0] === SET_COMMAND) {
  const { runConfigSet } = await import("./src/k8s/config_set.ts");
  Deno.exit(await runConfigSet(cliLine));
}

// antctl with no command (or `help`, `-h`): its usage; with anything else, an error. Never on to
// start an aggregator.
if (import.meta.main && antctlLine !== undefined) {
  const { SET_USAGE } = await import("./src/k8s/config_set.ts");
  const usage = `${CLI_USAGE}\n${SET_USAGE}`;
  const first = antctlLine[0];
  if (first === undefined || ["help", "-h", "--help"].includes(first)) {
    console.log(usage);
    Deno.exit(0);
  }
  console.error(`antctl: unknown command ${JSON.stringify(first)}\n${usage}`);
  Deno.exit(1);
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
  } else if (opts.version) {
    // Not Deno.exit: the module then finishes evaluating, and Deno stores its compiled code
    // in its cache (the image build runs this to fill it, see scripts/bundle.ts).
    console.log(
      `flow-aggregator version ${VERSION} ${PLATFORM} deno${Deno.version.deno}`,
    );
  } else {
    try {
      Deno.exit(await (opts.permissions ? printPermissions(opts) : run(opts)));
    } catch (err) {
      log.error("Error running flow aggregator", { err });
      Deno.exit(255);
    }
  }
}
