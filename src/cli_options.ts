/**
 * The process's command line: its flags parsed into {@linkcode CliOptions}, and what a command
 * line and the configuration it names need as Deno permissions. One place for both, so the
 * `permissions` subcommand, the image's launcher (`src/launcher/`) and the running process's
 * own check of a reloaded configuration compute the same flags from the same inputs.
 *
 * @module
 */

import { DEBUG_VERBOSITY, isLogFormat, isLogLevel, type LogFormat, type LogLevel } from "./log.ts";
import { boolFlag, KLOG_DEFAULTS, klogFileDir, type KlogFlags, parseKlogFlag } from "./log/mod.ts";
import { type FlowAggregatorConfig, parseConfig } from "./components.ts";
import { EMBEDDED_DEFAULT_CONFIG, readConfigFile } from "./config/mod.ts";
import { type KubeTarget, resolveKubeTarget, serviceAccountLookup } from "./k8s/client.ts";
import { CLUSTER_UUID_FILE } from "./k8s/cluster_uuid.ts";
import {
  type PermissionInputs,
  PROCESS_ENV,
  type ProcessPermissions,
  processPermissions,
} from "./permissions.ts";

/**
 * Exit code of a process started with `--exit-on-new-permissions` whose configuration came to
 * need permissions it was not started with: it stopped as on SIGTERM (every flow held exported
 * or counted) so that it is started again, by kubelet in a Pod, through the launcher, which
 * grants them. 77 is sysexits.h's `EX_NOPERM`; upstream exits only with 0, 1 and 255.
 */
export const EXIT_NEW_PERMISSIONS = 77;

/** Parsed command line. */
export interface CliOptions {
  config?: string;
  /** `--v`: klog verbosity (debug lines from `DEBUG_VERBOSITY` on; `/loglevel` reads it). */
  verbosity?: number;
  listen?: string;
  certDir?: string;
  /** `--api-listen`: the API's address; default `[::]:<apiServer.apiPort>`. */
  apiListen?: string;
  /** `--api-token-file`: where the API's loopback token is written. */
  apiTokenFile?: string;
  kubeconfig?: string;
  stateDir?: string;
  udpReceiver: "auto" | "fast" | "socket";
  /** `--udp-workers`; undefined: one per shard ({@linkcode udpSocketsFor}). */
  udpWorkers?: number;
  /** `--workers`: aggregation shards. */
  workers: number;
  /** `--udp-recv-buffer`: the fast path's SO_RCVBUF request; absent = its default (4 MiB). */
  udpRecvBuffer?: number;
  exportersInProcess: boolean;
  /** `permissions` subcommand: print the permission flags and exit. */
  permissions: boolean;
  /** With `permissions`: print each sink's worker permissions as a table instead. */
  perSink: boolean;
  /**
   * `--exit-on-new-permissions` (set by the launcher, `src/launcher/`): when the configuration
   * in force needs permissions this process was not started with, stop as on SIGTERM and exit
   * with {@linkcode EXIT_NEW_PERMISSIONS}, so the container restarts and the launcher grants
   * them.
   */
  exitOnNewPermissions: boolean;
  logLevel: LogLevel;
  logFormat: LogFormat;
  /** klog's output flags (`--log_dir`, `--logtostderr`, …). */
  klog: KlogFlags;
  version: boolean;
  help: boolean;
}

/** Default of `--workers`: one aggregation shard per available core, at most 8. */
export const DEFAULT_WORKERS: number = Math.max(1, Math.min(8, navigator.hardwareConcurrency ?? 1));

/**
 * A flag's decimal integer in `[min, max]`, as Go's `strconv.Atoi` reads one (`Number` also took
 * `0x2`, `1e1` and ` 2`); else an error `what from min to max`.
 */
function decimal(text: string, min: number, max: number, what: string): number {
  const v = /^\d{1,10}$/.test(text) ? Number(text) : NaN;
  if (!(v >= min && v <= max)) throw new Error(`${what} from ${min} to ${max}, got "${text}"`);
  return v;
}

/** Parses `args`; throws an Error naming the bad flag. */
export function parseArgs(args: readonly string[]): CliOptions {
  const opts: CliOptions = {
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
  };
  for (let i = 0; i < args.length; i++) {
    // `-v2` is `--v=2`: pflag gives a one-letter Go flag (klog's v) its shorthand, which takes
    // its value attached.
    const arg = /^-v\d+$/.test(args[i]) ? `--v=${args[i].slice(2)}` : args[i];
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
      case "api-listen":
        opts.apiListen = value();
        break;
      case "api-token-file":
        opts.apiTokenFile = value();
        break;
      case "kubeconfig":
        opts.kubeconfig = value();
        break;
      case "state-dir":
        opts.stateDir = value();
        break;
      case "udp-receiver": {
        const v = value();
        if (v !== "auto" && v !== "fast" && v !== "socket") {
          throw new Error(`--udp-receiver "${v}": use auto, fast or socket`);
        }
        opts.udpReceiver = v;
        break;
      }
      case "workers":
        opts.workers = decimal(value(), 1, 64, "--workers needs an integer");
        break;
      case "udp-workers":
        opts.udpWorkers = decimal(value(), 1, 64, "--udp-workers needs an integer");
        break;
      case "udp-recv-buffer": {
        opts.udpRecvBuffer = decimal(
          value(),
          0,
          0x3fffffff,
          "--udp-recv-buffer needs a byte count",
        );
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
        if (!isLogFormat(v)) throw new Error(`--log-format "${v}": use logfmt, json or klog`);
        opts.logFormat = v;
        break;
      }
      case "v": {
        const v = decimal(value(), 0, 2 ** 31 - 1, "--v needs a non-negative integer");
        opts.verbosity = v;
        if (v >= DEBUG_VERBOSITY) opts.logLevel = "debug";
        break;
      }
      // Boolean flags as Go's: `--version=no` is refused, `--exporters-in-process=false` is off.
      case "per-sink":
        opts.perSink = boolFlag(name, inline);
        break;
      case "exporters-in-process":
        opts.exportersInProcess = boolFlag(name, inline);
        break;
      case "exit-on-new-permissions":
        opts.exitOnNewPermissions = boolFlag(name, inline);
        break;
      case "version":
        opts.version = boolFlag(name, inline);
        break;
      case "help":
      case "h":
        opts.help = boolFlag(name, inline);
        break;
      default:
        if (!parseKlogFlag(opts.klog, { name, inline, next: value })) {
          throw new Error(`unknown flag --${name}`);
        }
    }
  }
  if (opts.perSink && !opts.permissions) {
    throw new Error("--per-sink is a flag of the permissions subcommand");
  }
  return opts;
}

/** The Kubernetes API server to use, if any (`--kubeconfig`, in-cluster, `$KUBECONFIG`). */
export function kubeTarget(opts: CliOptions): Promise<KubeTarget | undefined> {
  return resolveKubeTarget({ kubeconfig: opts.kubeconfig, processEnv: PROCESS_ENV });
}

/**
 * Standalone: the file that keeps the generated cluster UUID, with a `clusterID` too (a reload
 * that removes it falls back to the file's UUID, not to one drawn for the process).
 */
export function stateFile(
  opts: CliOptions,
  kube: KubeTarget | undefined,
  _config: FlowAggregatorConfig,
): string | undefined {
  if (kube !== undefined) return undefined;
  return `${opts.stateDir ?? "."}/${CLUSTER_UUID_FILE}`;
}

/** What decides the permissions of the process `opts` starts on `config`, `kube` its API server. */
export function permissionInputs(
  opts: CliOptions,
  config: FlowAggregatorConfig,
  kube: KubeTarget | undefined,
): PermissionInputs {
  return {
    configPath: opts.config,
    listen: opts.listen,
    certDir: opts.certDir,
    udpReceiver: opts.udpReceiver,
    exportersInProcess: opts.exportersInProcess,
    workers: opts.workers,
    apiListen: opts.apiListen,
    apiTokenFile: opts.apiTokenFile,
    logDir: klogFileDir(opts.klog),
    kube,
    serviceAccountLookup: serviceAccountLookup({ kubeconfig: opts.kubeconfig }),
    stateFile: stateFile(opts, kube, config),
  };
}

/** A command line resolved: its configuration, API server and the permissions they need. */
export interface ResolvedCommand {
  /** The configuration `--config` names (or the embedded one). */
  config: FlowAggregatorConfig;
  /** The Kubernetes API server in use; undefined: standalone. */
  kube: KubeTarget | undefined;
  /** What the process needs (`permissionFlags` of permissions.ts makes `deno run` flags of it). */
  permissions: ProcessPermissions;
}

/**
 * Reads the configuration `opts` names (or the embedded one), finds the Kubernetes API server
 * and computes the permissions of the process: what `deno task permissions` prints and what the
 * launcher grants. Throws when the configuration cannot be read or is invalid.
 */
export async function resolveCommand(opts: CliOptions): Promise<ResolvedCommand> {
  const text = opts.config === undefined
    ? EMBEDDED_DEFAULT_CONFIG
    : await readConfigFile(opts.config);
  const config = parseConfig(text);
  const kube = await kubeTarget(opts);
  return {
    config,
    kube,
    permissions: processPermissions(config, permissionInputs(opts, config, kube)),
  };
}
