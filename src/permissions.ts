/**
 * The minimal Deno permissions of a process running a given configuration: the collector's
 * listen address, every enabled sink's own permissions (from its component), the config
 * directory (watched), the sinks' worker modules, the certificate directory, klog's log
 * directory (`--log_dir`), the environment the process reads, and `--allow-ffi` only for the
 * UDP fast path. `flow-aggregator
 * permissions --config FILE` prints them as `deno run` flags.
 *
 * @module
 */

import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { DEFAULT_LISTEN_ADDRESS, libcPath, UDP_FAST_WORKER_MODULE } from "./collector/mod.ts";
import { workerModule } from "./worker_module.ts";

/** The aggregation shards' worker module (`src/shard/worker.ts`). */
const SHARD_WORKER_MODULE: URL = workerModule("shard");
import { COMPONENTS, type FlowAggregatorConfig } from "./components.ts";
import { apiAddress, DEFAULT_TOKEN_FILE } from "./api/mod.ts";
import type { ExporterPermissions } from "./exporters/component.ts";
import { missingPermissions } from "./exporters/worker_exporter.ts";
import { KLOG_FILE_ENV } from "./log/mod.ts";
import type { KubeTarget } from "./k8s/client.ts";
import { stateFileTemp } from "./k8s/cluster_uuid.ts";
import { permissionEntryProblem, type PermissionListKind } from "./permission_entry.ts";

/**
 * Environment variables the process itself reads: Kubernetes detection, the default flow log
 * directory, the two debug switches npm:yaml's parser reads on every parse, and those the
 * sinks' permission computations read (each component's `permissionEnv`: the S3 endpoint's).
 * The launcher may read these and no other (`launcherFlags`); every process may too, so a
 * reload computes what the launcher computed.
 */
export const PROCESS_ENV: readonly string[] = [
  ...new Set([
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    "KUBECONFIG",
    "HOME",
    "POD_NAMESPACE",
    "TMPDIR",
    "LOG_TOKENS",
    "LOG_STREAM",
    ...COMPONENTS.flatMap((c) => c.permissionEnv ?? []),
  ]),
];

/** The directory of the product's modules (`src/`), which worker threads load. */
const SOURCE_DIR = fileURLToPath(new URL(".", import.meta.url)).replace(/\/$/, "");

/** What besides the configuration decides the permissions. */
export interface PermissionInputs {
  /** The configuration file (its directory is watched); absent: the embedded configuration. */
  configPath?: string;
  /** `--listen`; default the collector's (`[::]:4739`). */
  listen?: string;
  /** `--cert-dir`. */
  certDir?: string;
  /** `--udp-receiver`; the fast path (needs FFI) is used by `auto` and `fast` on UDP. */
  udpReceiver?: "auto" | "fast" | "socket";
  /** Sinks run in process (no worker modules to read). */
  exportersInProcess?: boolean;
  /**
   * `--workers`: aggregation shards, worker threads whose module is read from `moduleDir` when
   * more than one. Default: unknown (the image's, which runs with its host's core count), so
   * the module directory is readable.
   */
  workers?: number;
  /**
   * Directory the worker modules are read from where the process will run (the image's
   * `/app`); default the directory of the running program's own modules.
   */
  moduleDir?: string;
  /** `--api-listen`; default `[::]:<apiServer.apiPort>`. */
  apiListen?: string;
  /** `--api-token-file`; default upstream's loopback token path. */
  apiTokenFile?: string;
  /** Directory of klog's log files, when the process writes them (`--logtostderr=false`). */
  logDir?: string;
  /**
   * The Kubernetes API server in use (`src/k8s/client.ts`): its host (net) and the service
   * account directory or kubeconfig file (read). Absent: standalone.
   */
  kube?: KubeTarget;
  /**
   * The service account directory the process looks at to tell whether it runs in a Pod
   * (`serviceAccountLookup` in `src/k8s/client.ts`), read so that it can see a token absent
   * (a Pod without one) rather than refused; the API server's when in-cluster.
   */
  serviceAccountLookup?: string;
  /** Standalone: the cluster UUID state file (read and written). */
  stateFile?: string;
}

/** One permission entry, with where it comes from (named when it cannot be granted). */
export interface PermissionGrant {
  /** The `--allow-<kind>` list. */
  kind: "net" | "read";
  /** What needs it. */
  source: string;
  /** The entry. */
  value: string;
}

/**
 * What using the Kubernetes API needs: the API server's `host:port` (net) and the service
 * account directory or the kubeconfig file (read), `kube` being the server in use
 * (`resolveKubeTarget`); and the service account directory looked at to tell whether the process
 * runs in a Pod (`serviceAccountLookup`), read so that a token absent is told from one refused.
 * The aggregator's permissions and the `set flow-aggregator` command's (the launcher) both come
 * from here.
 */
export function kubeGrants(
  kube: KubeTarget | undefined,
  serviceAccountLookup: string | undefined,
): PermissionGrant[] {
  const out: PermissionGrant[] = [];
  if (kube !== undefined) {
    const u = new URL(kube.server);
    const server = `${u.hostname}:${u.port || (u.protocol === "http:" ? 80 : 443)}`;
    out.push({ kind: "net", source: "the Kubernetes API server", value: server });
    out.push({ kind: "read", source: "the Kubernetes credentials", value: resolve(kube.source) });
  }
  if (serviceAccountLookup !== undefined) {
    out.push({ kind: "read", source: "the service account", value: resolve(serviceAccountLookup) });
  }
  return out;
}

/** The process's permissions: allow-lists per kind, and the booleans. */
export interface ProcessPermissions extends ExporterPermissions {
  /**
   * `--allow-ffi` (UDP fast path): the C library's path when found (the grant is scoped to it),
   * true for the bare flag when it is not, false for none.
   */
  ffi: string | boolean;
}

/** Per enabled sink: its name and permissions (what its worker gets). */
export function sinkPermissions(
  config: FlowAggregatorConfig,
): {
  section: string;
  name: string;
  permissions: ExporterPermissions;
  component: typeof COMPONENTS[number];
}[] {
  const out = [];
  for (const c of COMPONENTS) {
    const section = config[c.section.key];
    if (!section.enable) continue;
    // Each component's permissions() takes its own section's config.
    const permissions = (c.permissions as (s: typeof section) => ExporterPermissions)(section);
    out.push({ section: c.section.key, name: c.name, permissions, component: c });
  }
  return out;
}

function uniq(a: string[]): string[] {
  return [...new Set(a)].sort();
}

/**
 * Computes the permissions of a process running `config`. Throws, naming the value and where it
 * comes from, when a value cannot be an entry of Deno's permission lists (a comma, which would
 * split it into other grants; an empty entry; a host Deno refuses): see
 * src/permission_entry.ts.
 */
export function processPermissions(
  config: FlowAggregatorConfig,
  inputs: PermissionInputs = {},
): ProcessPermissions {
  const lists: Record<PermissionListKind, string[]> = { net: [], read: [], write: [], env: [] };
  /** Adds `values` to the `kind` list, from `source` (named when one cannot be granted). */
  const grant = (kind: PermissionListKind, source: string, ...values: string[]) => {
    for (const value of values) {
      const problem = permissionEntryProblem(kind, value);
      if (problem !== undefined) {
        throw new Error(
          `${source}: cannot grant --allow-${kind}=${JSON.stringify(value)}: ${problem}`,
        );
      }
      lists[kind].push(value);
    }
  };
  grant("net", "--listen", inputs.listen ?? DEFAULT_LISTEN_ADDRESS);
  grant("net", "--api-listen", apiAddress(inputs.apiListen, config.apiServer.apiPort));
  // The API's loopback token and CA.
  grant("write", "--api-token-file", dirname(resolve(inputs.apiTokenFile ?? DEFAULT_TOKEN_FILE)));
  grant("env", "the process's environment", ...PROCESS_ENV);
  let sys = false;
  const moduleDir = inputs.moduleDir ?? SOURCE_DIR;
  if (inputs.configPath !== undefined) {
    grant("read", "--config", dirname(resolve(inputs.configPath)));
  }
  if (inputs.certDir !== undefined) grant("write", "--cert-dir", resolve(inputs.certDir));
  if (inputs.logDir !== undefined) {
    // Read: pruning lists the directory (`--log_file_max_num`). Env: host and user names.
    grant("read", "--log_dir", resolve(inputs.logDir));
    grant("write", "--log_dir", resolve(inputs.logDir));
    grant("env", "--log_dir", ...KLOG_FILE_ENV);
  }
  for (const g of kubeGrants(inputs.kube, inputs.serviceAccountLookup)) {
    grant(g.kind, g.source, g.value);
  }
  if (inputs.stateFile !== undefined) {
    // The file, and the one it is written through (atomic: renamed over it).
    const files = [resolve(inputs.stateFile), resolve(stateFileTemp(inputs.stateFile))];
    grant("read", "--state-dir", ...files);
    grant("write", "--state-dir", ...files);
  }
  for (const { component: c, section, permissions: p } of sinkPermissions(config)) {
    if (c.create === undefined) continue; // no sink in this build: nothing runs
    const source = `${section} (the ${c.name} sink)`;
    for (const kind of ["net", "read", "write", "env"] as const) grant(kind, source, ...p[kind]);
    if (p.sys === true) sys = true;
    // A worker's module graph is loaded under the process's read permission (the worker's
    // own, narrowed one is not consulted for its imports): the source tree, nothing else.
    if (!inputs.exportersInProcess && c.workerModule?.protocol === "file:") {
      grant("read", "the program's modules", moduleDir);
    }
  }
  // No --allow-read for /proc/net/udp (the socket path's kernel drops) or
  // /proc/sys/net/core/rmem_*: Deno checks every path under /proc against --allow-all, so such
  // a flag would grant nothing. The fast path (--allow-ffi) counts kernel drops itself.
  const fast = config.aggregatorTransportProtocol === "UDP" &&
    (inputs.udpReceiver ?? "auto") !== "socket" && Deno.build.os === "linux";
  const ffi = fast ? (libcPath() ?? true) : false;
  if (fast && UDP_FAST_WORKER_MODULE.protocol === "file:") {
    grant("read", "the program's modules", moduleDir);
  }
  if ((inputs.workers ?? 2) > 1 && SHARD_WORKER_MODULE.protocol === "file:") {
    grant("read", "the program's modules", moduleDir);
  }
  return {
    net: uniq(lists.net),
    read: uniq(lists.read),
    write: uniq(lists.write),
    env: uniq(lists.env),
    ...(sys ? { sys } : {}),
    ffi,
  };
}

/**
 * The permissions of `p` this process does not hold, as `deno run` flags (empty: it holds them
 * all). A process started by the launcher compares what its configuration needs with what it
 * was given, at start and at every reload.
 */
export function missingFlags(p: ProcessPermissions): string[] {
  const missing = missingPermissions(p);
  if (p.ffi !== false) {
    const d: Deno.PermissionDescriptor = p.ffi === true
      ? { name: "ffi" }
      : { name: "ffi", path: p.ffi };
    if (Deno.permissions.querySync(d).state !== "granted") {
      missing.push(p.ffi === true ? "--allow-ffi" : `--allow-ffi=${p.ffi}`);
    }
  }
  return missing;
}

/** The unstable APIs the process uses, as `deno run` flags (UDP sockets, scoped workers). */
export const UNSTABLE_FLAGS: readonly string[] = ["--unstable-net", "--unstable-worker-options"];

/**
 * V8's settings of every run, as `deno run` flags: each semi-space of the young generation at
 * most 2 MiB. Every thread (main, shards, sink workers) has its own isolate, and each grows its
 * young generation up to 2 x 16 MiB under a burst of allocation and gives it back lazily: with a
 * flow log at 600 records/s the default process went from 150 to 263 MB of RSS in 20 min, from
 * 131 to 206 MB with the cap (the flow log worker's heap 36 MB against 15); a flood of 1,000,000
 * templates grew it by 64-104 MiB, 46-49 with the cap. CPU per record unchanged within the noise
 * (`scripts/bench/ab_e2e.ts`, same checkout with and without: paced 1.008, unpaced 0.977).
 */
export const V8_FLAGS: readonly string[] = ["--v8-flags=--max-semi-space-size=2"];

/** The `deno run` flags of the program besides its permissions: unstable APIs, V8's settings. */
export const RUN_FLAGS: readonly string[] = [...UNSTABLE_FLAGS, ...V8_FLAGS];

/** The permissions as `deno run` flags (plus {@linkcode RUN_FLAGS}). */
export function permissionFlags(p: ProcessPermissions): string[] {
  const flags = [];
  const list = (name: string, values: string[]) => {
    if (values.length > 0) flags.push(`--allow-${name}=${values.join(",")}`);
  };
  list("net", p.net);
  list("read", p.read);
  list("write", p.write);
  list("env", p.env);
  if (p.sys === true) flags.push("--allow-sys");
  if (p.ffi !== false) flags.push(p.ffi === true ? "--allow-ffi" : `--allow-ffi=${p.ffi}`);
  flags.push(...RUN_FLAGS);
  return flags;
}

/**
 * `arg` as one POSIX shell word: as it is when it holds only characters no shell treats
 * specially, else in single quotes, so the printed line can be pasted or `eval`ed: a path with a
 * space, `;`, `$` or a quote reaches `deno run` as one argument and runs nothing, and an address
 * list with `[::]` is not a glob pattern (bash's failglob and zsh refuse an unmatched one, and a
 * file of a matching name would replace it).
 */
export function shellWord(arg: string): string {
  return /^[A-Za-z0-9_\-=.,:/@%+]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

/** A Markdown table of each enabled sink's worker permissions (for the README and operators). */
export function sinkPermissionTable(config: FlowAggregatorConfig): string {
  const cell = (a: string[]) => a.length === 0 ? "—" : a.map((v) => `\`${v}\``).join(", ");
  const rows = sinkPermissions(config).map(({ section, name, permissions: p }) =>
    `| ${name} (\`${section}\`) | ${cell(p.net)} | ${cell(p.read)} | ${cell(p.write)} | ${
      cell(p.env)
    } | ${p.sys === true ? "all" : "—"} |`
  );
  return [
    "| sink | net | read | write | env | sys |",
    "| --- | --- | --- | --- | --- | --- |",
    ...rows,
  ].join("\n");
}
