/**
 * The Kubernetes API client (control-plane.md §4.1): in-cluster configuration (the service
 * account's token and CA, `KUBERNETES_SERVICE_HOST`/`_PORT`), else a kubeconfig file
 * (`--kubeconfig FILE`, else `$KUBECONFIG`), else none: the process runs standalone. Unlike
 * kubectl, `~/.kube/config` is not read implicitly, so a developer's laptop never publishes
 * certificates into whatever cluster its default context names.
 *
 * The calls are those of `@kubernetes/client-node` (loaded on first use, so a standalone
 * process never loads it); this module only narrows them to what the Flow Aggregator does:
 * get / create / replace its ConfigMaps and Secrets, list and watch Pods. client-node's requests
 * go through our HTTP library (`http.ts`: answers bounded, redirects refused), and a get's
 * answer must be the object asked for.
 */

import type * as k8s from "@kubernetes/client-node";
import { type ExecCredentials, type ExecPluginStats, installExecCredentials } from "./exec_auth.ts";
import {
  boundedHttpLibrary,
  boundedSend,
  type HttpStats,
  MAX_ANSWER_BYTES,
  MAX_LIST_PAGE_BYTES,
  RedirectRefused,
} from "./http.ts";
import { ATTEMPT_TIMEOUT_MS, statusOf } from "./retry.ts";
import { type WatchHandle, type WatchHandlers, watchStream } from "./watch.ts";
import { logger } from "../log.ts";
import { readRegularText } from "../bytes.ts";
import { envOrUnset } from "../permission_entry.ts";
import { typeName } from "../type_name.ts";

const log = logger("k8s");

/**
 * Thrown when a get is answered with something other than the object asked for (another kind,
 * name or namespace, no object at all, text that is no JSON), or a create or replace with text
 * that is no JSON or no object: the call fails (its caller retries), counted. Writing back what
 * such an answer held would write to another object.
 */
export class MalformedAnswer extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "MalformedAnswer";
  }
}

/** Counters of a {@linkcode KubeApi}. */
export interface KubeClientStats extends HttpStats, ExecPluginStats {
  /**
   * Answers to a get that were not the object asked for, or to a create or replace that were
   * no JSON object ({@linkcode MalformedAnswer}).
   */
  malformedAnswers: number;
}

/** Where the service account's files are mounted in a Pod. */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/** How the process reaches the API server. */
export interface KubeTarget {
  /** `in-cluster` (service account) or `kubeconfig` (a file). */
  mode: "in-cluster" | "kubeconfig";
  /** The API server URL (`https://10.96.0.1:443`); for a kubeconfig, read from the file. */
  server: string;
  /** Service-account directory (in-cluster) or kubeconfig path: what the process reads. */
  source: string;
}

/** Options of {@linkcode resolveKubeTarget}. */
export interface KubeTargetOptions {
  /** `--kubeconfig FILE`. */
  kubeconfig?: string;
  /** Environment lookup; default `Deno.env.get` (absent without permission). */
  env?: (name: string) => string | undefined;
  /** Service-account directory; default {@linkcode SERVICE_ACCOUNT_DIR}. */
  serviceAccountDir?: string;
  /** See {@linkcode ConnectOptions.processEnv}. */
  processEnv?: readonly string[];
}

function envGranted(variable: string): boolean {
  return Deno.permissions.querySync({ name: "env", variable }).state === "granted";
}

/**
 * Whether the service account's token is there: `file`; `absent` (not in a Pod, or no token
 * mounted); or why it cannot be told, a permission this process lacks (`--allow-read` of the
 * directory, Deno's `NotCapable`) or the file system refusing this user (`PermissionDenied`).
 */
function tokenState(path: string): "file" | "absent" | "not-capable" | "denied" {
  try {
    return Deno.statSync(path).isFile ? "file" : "absent";
  } catch (err) {
    if (err instanceof Deno.errors.NotCapable) return "not-capable";
    if (err instanceof Deno.errors.PermissionDenied) return "denied";
    return "absent";
  }
}

/**
 * Says why a process whose environment names an API server (`KUBERNETES_SERVICE_HOST`) cannot
 * use the service account: an error, not a quiet standalone run (no Pod metadata, no
 * certificate publication, which Agents on TLS need to connect at all).
 */
function logServiceAccountUnreadable(
  dir: string,
  state: "not-capable" | "denied",
  host: string,
): void {
  const consequence = "running without the Kubernetes API unless a kubeconfig is given: no Pod " +
    "metadata, no certificate publication, the cluster UUID not read";
  if (state === "not-capable") {
    log.error(
      `KUBERNETES_SERVICE_HOST is set but this process may not read the service account ` +
        `(it was not given --allow-read=${dir}): ${consequence}`,
      { host, path: dir, missing: `--allow-read=${dir}` },
    );
  } else {
    log.error(
      `KUBERNETES_SERVICE_HOST is set but the service account's token is not readable by this ` +
        `user (permission denied by the file system): ${consequence}`,
      { host, path: `${dir}/token` },
    );
  }
}

/** Largest kubeconfig read, bytes (one with its certificates inline is a few KiB). */
export const MAX_KUBECONFIG_BYTES = 4 << 20;

/**
 * The text of the kubeconfig at `path`: a regular file only (a FIFO's open would block the start
 * until a writer comes), at most {@linkcode MAX_KUBECONFIG_BYTES}.
 */
async function readKubeconfig(path: string): Promise<string> {
  try {
    return await readRegularText(path, MAX_KUBECONFIG_BYTES);
  } catch (err) {
    throw new Error(`kubeconfig ${path}: ${(err as Error).message}`, { cause: err });
  }
}

/** The server URL of the current context of a kubeconfig's text (YAML or JSON). */
async function kubeconfigServer(path: string, keep: readonly string[]): Promise<string> {
  const { KubeConfig } = await loadClientNode(keep);
  const kc = new KubeConfig();
  kc.loadFromString(await readKubeconfig(path));
  const server = kc.getCurrentCluster()?.server;
  if (server === undefined) {
    throw new Error(`kubeconfig ${path}: no cluster in the current context`);
  }
  return server;
}

/**
 * The service account directory {@linkcode resolveKubeTarget} looks at with these options
 * (`KUBERNETES_SERVICE_HOST` set and no `--kubeconfig`: a Pod, maybe without a token), or
 * undefined when it looks at none. A process granted read of it can tell a token that is absent
 * (standalone, quietly) from one it may not read (an error).
 */
export function serviceAccountLookup(options: KubeTargetOptions = {}): string | undefined {
  const env = options.env ?? envOrUnset;
  if (options.kubeconfig !== undefined || !env("KUBERNETES_SERVICE_HOST")) return undefined;
  return options.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
}

/**
 * Which API server to use, or undefined when there is none (standalone). Throws when a
 * kubeconfig was named but cannot be read: an explicit choice that fails is an error, not a
 * silent fallback to standalone.
 */
export async function resolveKubeTarget(
  options: KubeTargetOptions = {},
): Promise<KubeTarget | undefined> {
  const env = options.env ?? envOrUnset;
  const dir = options.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  const host = env("KUBERNETES_SERVICE_HOST");
  if (options.env === undefined && !envGranted("KUBERNETES_SERVICE_HOST")) {
    log.warn(
      "cannot tell whether this runs in a Kubernetes Pod: this process may not read " +
        "KUBERNETES_SERVICE_HOST (not in its --allow-env)",
      { missing: "--allow-env=KUBERNETES_SERVICE_HOST" },
    );
  }
  const token = options.kubeconfig === undefined && host ? tokenState(`${dir}/token`) : "absent";
  if (host && (token === "not-capable" || token === "denied")) {
    logServiceAccountUnreadable(dir, token, host);
  }
  if (options.kubeconfig === undefined && host && token === "file") {
    const port = env("KUBERNETES_SERVICE_PORT") || "443";
    // Node.js modules only in a cluster: a standalone process does not load them.
    const { isIPv6 } = await import("node:net");
    const h = isIPv6(host) ? `[${host}]` : host;
    return { mode: "in-cluster", server: `https://${h}:${port}`, source: dir };
  }
  const path = kubeconfigPath(options.kubeconfig, env);
  if (path === undefined) return undefined;
  return {
    mode: "kubeconfig",
    server: await kubeconfigServer(path, options.processEnv ?? []),
    source: path,
  };
}

/** The kubeconfig to use: `--kubeconfig`, else the first file of `$KUBECONFIG`, else none. */
export function kubeconfigPath(
  explicit: string | undefined,
  env: (name: string) => string | undefined = envOrUnset,
): string | undefined {
  return explicit ?? (env("KUBECONFIG")?.split(":")[0] || undefined);
}

/** A Pod list (or a page of it) and the resource version to watch from. */
export interface PodList {
  /** The Pods. */
  items: k8s.V1Pod[];
  /** `metadata.resourceVersion` of the list. */
  resourceVersion: string;
  /** `metadata.continue`: the token of the next page, when there is one. */
  continue?: string;
}

/** Which page of a list: at most `limit` items, after the page that gave `continue`. */
export interface ListPage {
  /** Most items in the page. */
  limit: number;
  /** The previous page's continue token; absent for the first page. */
  continue?: string;
}

/** One watch event as the API server sends it. */
export type { WatchEvent, WatchHandle, WatchHandlers } from "./watch.ts";

/**
 * The API calls the Flow Aggregator makes. Each takes an optional `signal`: aborted, it cancels
 * the request and closes its connection (what {@linkcode retrying} gives each attempt).
 */
export interface KubeApi {
  /** The API server URL. */
  readonly server: string;
  /** A ConfigMap, or undefined when it does not exist (404). */
  getConfigMap(
    namespace: string,
    name: string,
    signal?: AbortSignal,
  ): Promise<k8s.V1ConfigMap | undefined>;
  /** Creates a ConfigMap. */
  createConfigMap(
    namespace: string,
    body: k8s.V1ConfigMap,
    signal?: AbortSignal,
  ): Promise<k8s.V1ConfigMap>;
  /** Replaces a ConfigMap (409 when `metadata.resourceVersion` is stale). */
  replaceConfigMap(
    namespace: string,
    body: k8s.V1ConfigMap,
    signal?: AbortSignal,
  ): Promise<k8s.V1ConfigMap>;
  /** A Secret, or undefined when it does not exist (404). */
  getSecret(
    namespace: string,
    name: string,
    signal?: AbortSignal,
  ): Promise<k8s.V1Secret | undefined>;
  /** Creates a Secret. */
  createSecret(namespace: string, body: k8s.V1Secret, signal?: AbortSignal): Promise<k8s.V1Secret>;
  /** Replaces a Secret (409 when `metadata.resourceVersion` is stale). */
  replaceSecret(
    namespace: string,
    body: k8s.V1Secret,
    signal?: AbortSignal,
  ): Promise<k8s.V1Secret>;
  /** Lists the Pods of all namespaces (a consistent read), or one page of the list. */
  listPods(signal?: AbortSignal, page?: ListPage): Promise<PodList>;
  /**
   * Watches the Pods of all namespaces from `resourceVersion`, with bookmarks; `onDone` is
   * called once when the stream ends (error or not).
   */
  watchPods(resourceVersion: string, handlers: WatchHandlers): Promise<WatchHandle>;
  /**
   * Kills the credential plugins running now (their requests fail) and runs none after; for the
   * process's stop, after the callers have been stopped or aborted.
   */
  close(): void;
  /** Counters. */
  stats(): KubeClientStats;
}

/** Server-side watch timeout (seconds): a watch is renewed this often even when quiet. */
const WATCH_TIMEOUT_S = 300;

/** A name for an error message: as is when it could be one, else quoted and short. */
function shown(v: unknown): string {
  if (typeof v !== "string") return typeof v;
  return /^[a-z0-9.-]{1,253}$/.test(v) ? v : JSON.stringify(v.slice(0, 100));
}

/** Why `obj` is not the `kind` `namespace`/`name` a get asked for, if it is not. */
function answerProblem(
  kind: "ConfigMap" | "Secret",
  namespace: string,
  name: string,
  obj: unknown,
): string | undefined {
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) return "no object";
  const o = obj as { kind?: unknown; metadata?: { name?: unknown; namespace?: unknown } };
  if (o.kind !== kind) return `kind ${shown(o.kind)}`;
  // The data first: an answer both unnamed and with a number as data was reported as
  // "ConfigMap undefined/name", not saying what was wrong with the data `set` reads.
  const data = (obj as { data?: unknown }).data;
  if (data !== undefined) {
    if (data === null || typeof data !== "object" || Array.isArray(data)) {
      return "its data is no map";
    }
    // Strings only (base64 for a Secret): a value of another type once passed for a UUID.
    for (const [k, v] of Object.entries(data)) {
      if (typeof v !== "string") {
        return `its data key ${shown(k)} holding ${typeName(v)}, ` +
          "not a string";
      }
    }
  }
  const meta = o.metadata;
  if (meta === null || typeof meta !== "object") return "no metadata";
  if (meta.name !== name || meta.namespace !== namespace) {
    const ns = meta.namespace === undefined ? "(no namespace)" : shown(meta.namespace);
    return `${kind} ${ns}/${meta.name === undefined ? "(no name)" : shown(meta.name)}`;
  }
  return undefined;
}

/**
 * The object a get asked for, undefined when it does not exist (404); a {@linkcode
 * MalformedAnswer} (counted) when the answer is something else.
 */
async function checkedGet<T>(
  what: { kind: "ConfigMap" | "Secret"; namespace: string; name: string },
  call: Promise<T>,
  stats: Pick<KubeClientStats, "malformedAnswers">,
): Promise<T | undefined> {
  const { kind, namespace, name } = what;
  const malformed = (problem: string): MalformedAnswer => {
    stats.malformedAnswers++;
    return new MalformedAnswer(
      `k8s: getting ${kind} ${namespace}/${name}, the API server answered ${problem}: refused`,
    );
  };
  let obj: T;
  try {
    obj = await call;
  } catch (err) {
    if (statusOf(err) === 404) return undefined;
    if (err instanceof SyntaxError) throw malformed(`text that is no JSON (${err.message})`);
    throw err;
  }
  const problem = answerProblem(kind, namespace, name, obj);
  if (problem !== undefined) throw malformed(problem);
  return obj;
}

/**
 * The object a create or replace answered; a {@linkcode MalformedAnswer} (counted) when the
 * answer is no JSON or no object (client-node's bare "Unexpected token" said neither which call
 * nor that the write, answered 2xx, may have been applied).
 */
async function checkedWrite<T>(
  what: { verb: "create" | "replace"; kind: "ConfigMap" | "Secret"; namespace: string },
  body: { metadata?: { name?: string } },
  call: () => Promise<T>,
  stats: Pick<KubeClientStats, "malformedAnswers">,
): Promise<T> {
  const { verb, kind, namespace } = what;
  const malformed = (problem: string): MalformedAnswer => {
    stats.malformedAnswers++;
    return new MalformedAnswer(
      `k8s: ${verb === "create" ? "creating" : "replacing"} ${kind} ${namespace}/` +
        `${shown(body.metadata?.name)}, the API server answered ${problem}: the ${verb} may ` +
        "have been applied",
    );
  };
  let obj: T;
  try {
    obj = await call();
  } catch (err) {
    if (err instanceof SyntaxError) throw malformed(`text that is no JSON (${err.message})`);
    throw err;
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) throw malformed("no object");
  return obj;
}

/**
 * The name a replace writes to: the body's, which must be there and in `namespace` (without a
 * name client-node would write to the collection's path).
 */
function replacedName(
  namespace: string,
  body: { metadata?: { name?: string; namespace?: string } },
): string {
  const name = body.metadata?.name ?? "";
  const ns = body.metadata?.namespace;
  if (name === "" || (ns !== undefined && ns !== namespace)) {
    throw new Error(`k8s: a replace in ${namespace} of an object named ${shown(name)} in ${ns}`);
  }
  return name;
}

/**
 * Loads client-node. Its dependencies read environment variables at import time, one of them
 * (`debug`) by enumerating the whole environment, which needs `--allow-env` without a list.
 * Rather than widen the process's permission, when the environment is only partly granted,
 * `process.env` (what npm code reads) is replaced by a copy of the variables `keep` names (the
 * ones the process reads, granted by `deno task permissions`): the dependencies then see the
 * variables they do not need as unset, as they would be in a Pod.
 */
async function loadClientNode(
  keep: readonly string[],
): Promise<typeof import("@kubernetes/client-node")> {
  if (Deno.permissions.querySync({ name: "env" }).state !== "granted") {
    const { default: process } = await import("node:process");
    const copy: Record<string, string> = {};
    for (const name of keep) {
      const v = envOrUnset(name);
      if (v !== undefined) copy[name] = v;
    }
    Object.defineProperty(process, "env", { value: copy, configurable: true, writable: true });
  }
  return await import("@kubernetes/client-node");
}

/** Options of {@linkcode connectKube}. */
export interface ConnectOptions {
  /**
   * The environment variables the process reads (kept in `process.env` when the environment
   * permission is partial, see above); default none.
   */
  processEnv?: readonly string[];
  /**
   * Longest an exec credential plugin runs before it is killed, ms; default
   * {@linkcode EXEC_PLUGIN_TIMEOUT_MS}.
   */
  execPluginTimeoutMs?: number;
}

/**
 * Connects to `target`. Loads client-node and, for a kubeconfig, reads the file; in-cluster it reads
 * nothing before the first call (the token file is re-read by client-node, so bound tokens
 * that kubelet rotates keep working).
 */
export async function connectKube(
  target: KubeTarget,
  options: ConnectOptions = {},
): Promise<KubeApi> {
  const k8s = await loadClientNode(options.processEnv ?? []);
  const kc = new k8s.KubeConfig();
  if (target.mode === "in-cluster") {
    kc.loadFromClusterAndUser(
      {
        name: "in-cluster",
        server: target.server,
        caFile: `${target.source}/ca.crt`,
        skipTLSVerify: false,
      },
      {
        name: "service-account",
        authProvider: { name: "tokenFile", config: { tokenFile: `${target.source}/token` } },
      },
    );
  } else {
    kc.loadFromString(await readKubeconfig(target.source));
  }
  const credentials = installExecCredentials(kc, { timeoutMs: options.execPluginTimeoutMs });
  // What client-node sends its requests with; loaded with it (the watch is read by us).
  const { fetch } = await import("undici");
  return {
    ...clientFor(k8s, kc, fetch, credentials),
    close: () => credentials.close(),
  };
}

/**
 * A {@linkcode KubeApi} over a loaded client-node configuration; `credentials` are told of each
 * 401 answer (an exec plugin's credential is then dropped) and give their counters.
 */
function clientFor(
  k8s: typeof import("@kubernetes/client-node"),
  kc: k8s.KubeConfig,
  fetch: typeof import("undici").fetch,
  credentials: ExecCredentials,
): Omit<KubeApi, "close"> {
  const api = kc.makeApiClient(k8s.CoreV1Api);
  // Every call's failure passes here: a 401 means the credential used was refused.
  const seen = <T>(call: Promise<T>): Promise<T> =>
    call.catch((err) => {
      if (statusOf(err) === 401) credentials.refused();
      throw err;
    });
  const stats: Omit<KubeClientStats, keyof ExecPluginStats> = {
    answersTooLarge: 0,
    malformedAnswers: 0,
    redirectsRefused: 0,
  };
  const objects = boundedHttpLibrary({ lib: k8s, fetch }, { maxBytes: MAX_ANSWER_BYTES, stats });
  const sendListPage = boundedSend({ lib: k8s, fetch }, { maxBytes: MAX_LIST_PAGE_BYTES, stats });
  // client-node's per-call options: our HTTP library, and a middleware giving the request the
  // caller's signal.
  const by = (signal: AbortSignal | undefined, httpApi = objects) =>
    signal === undefined ? { httpApi } : {
      httpApi,
      middleware: [{
        pre: (ctx: k8s.RequestContext) => {
          ctx.setSignal(signal);
          return new k8s.Observable(Promise.resolve(ctx));
        },
        post: (res: k8s.ResponseContext) => new k8s.Observable(Promise.resolve(res)),
      }],
      middlewareMergeStrategy: "append" as const,
    };
  return {
    server: kc.getCurrentCluster()?.server ?? "",
    stats: () => ({ ...stats, ...credentials.stats() }),
    getConfigMap: (namespace, name, signal) =>
      checkedGet(
        { kind: "ConfigMap", namespace, name },
        seen(api.readNamespacedConfigMap({ namespace, name }, by(signal))),
        stats,
      ),
    createConfigMap: (namespace, body, signal) =>
      checkedWrite(
        { verb: "create", kind: "ConfigMap", namespace },
        body,
        () => seen(api.createNamespacedConfigMap({ namespace, body }, by(signal))),
        stats,
      ),
    replaceConfigMap: (namespace, body, signal) =>
      checkedWrite(
        { verb: "replace", kind: "ConfigMap", namespace },
        body,
        () =>
          seen(api.replaceNamespacedConfigMap(
            { namespace, name: replacedName(namespace, body), body },
            by(signal),
          )),
        stats,
      ),
    getSecret: (namespace, name, signal) =>
      checkedGet(
        { kind: "Secret", namespace, name },
        seen(api.readNamespacedSecret({ namespace, name }, by(signal))),
        stats,
      ),
    createSecret: (namespace, body, signal) =>
      checkedWrite(
        { verb: "create", kind: "Secret", namespace },
        body,
        () => seen(api.createNamespacedSecret({ namespace, body }, by(signal))),
        stats,
      ),
    replaceSecret: (namespace, body, signal) =>
      checkedWrite(
        { verb: "replace", kind: "Secret", namespace },
        body,
        () =>
          seen(api.replaceNamespacedSecret(
            { namespace, name: replacedName(namespace, body), body },
            by(signal),
          )),
        stats,
      ),
    // Sent as client-node would (authentication, TLS, the page's bound), but the answer is
    // parsed by us: client-node's deserializer reshapes what it does not expect (labels `"abc"`
    // became {"0":"a","1":"b","2":"c"}, which the Pod store could not tell from real labels),
    // and walks every field of every Pod a second time after JSON.parse.
    listPods: (signal, page) => seen(listPods(signal, page)),
    watchPods: (resourceVersion, handlers) =>
      Promise.resolve(watchStream(
        { lib: k8s, kc, fetch },
        "/api/v1/pods",
        { resourceVersion, allowWatchBookmarks: true, timeoutSeconds: WATCH_TIMEOUT_S },
        {
          ...handlers,
          onDone: (err) => {
            if (err instanceof RedirectRefused) stats.redirectsRefused++;
            if (statusOf(err) === 401) credentials.refused();
            handlers.onDone(err);
          },
        },
        // Credentials (an exec plugin is killed at its own timeout) and then headers each as
        // soon as any call's answer. The server renews the watch every WATCH_TIMEOUT_S;
        // without a byte for longer than that plus a minute (bookmarks come about every
        // minute), the stream is dead.
        {
          authMs: ATTEMPT_TIMEOUT_MS,
          headersMs: ATTEMPT_TIMEOUT_MS,
          inactivityMs: (WATCH_TIMEOUT_S + 60) * 1000,
          // The server ends it at WATCH_TIMEOUT_S: one open a minute longer is renewed.
          maxMs: (WATCH_TIMEOUT_S + 60) * 1000,
        },
      )),
  };

  async function listPods(
    signal: AbortSignal | undefined,
    page: ListPage | undefined,
  ): Promise<PodList> {
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error("no current cluster in the Kubernetes configuration");
    const url = new URL(cluster.server + "/api/v1/pods");
    if (page?.limit !== undefined) url.searchParams.set("limit", String(page.limit));
    if (page?.continue !== undefined) url.searchParams.set("continue", page.continue);
    const ctx = new k8s.RequestContext(url.toString(), k8s.HttpMethod.GET);
    ctx.setHeaderParam("Accept", "application/json");
    await kc.applySecurityAuthentication(ctx);
    if (signal !== undefined) ctx.setSignal(signal);
    const res = await sendListPage(ctx);
    const text = await res.body.text();
    if (res.httpStatusCode !== 200) {
      // As client-node's ApiException: the status, the Status body (describe() reads its
      // message) and the headers (a 429's Retry-After).
      throw Object.assign(new Error(`HTTP ${res.httpStatusCode}`), {
        statusCode: res.httpStatusCode,
        body: text.slice(0, 64 * 1024),
        headers: res.headers,
      });
    }
    let list: { items?: unknown; metadata?: { resourceVersion?: unknown; continue?: unknown } };
    try {
      list = JSON.parse(text);
    } catch {
      stats.malformedAnswers++;
      throw new MalformedAnswer("k8s: the Pod list is not JSON");
    }
    if (list === null || typeof list !== "object" || !Array.isArray(list.items)) {
      stats.malformedAnswers++;
      throw new MalformedAnswer("k8s: the Pod list has no items");
    }
    const meta = typeof list.metadata === "object" && list.metadata !== null ? list.metadata : {};
    return {
      items: list.items as k8s.V1Pod[],
      resourceVersion: typeof meta.resourceVersion === "string" ? meta.resourceVersion : "",
      continue: typeof meta.continue === "string" && meta.continue !== ""
        ? meta.continue
        : undefined,
    };
  }
}
