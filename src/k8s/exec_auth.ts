/**
 * Exec credential plugins (a kubeconfig user's `exec`: `aws eks get-token`,
 * `gke-gcloud-auth-plugin`, …) run by us instead of by client-node's `ExecAuth`, which waits for
 * a plugin without end and starts one per request while no valid credential is cached: a hung
 * plugin left one process per attempt, alive after stop and after exit, and every request waited
 * on it. Here a plugin runs in a process group of its own and is killed with it (SIGKILL) after
 * `timeoutMs` or when the process unloads; one runs at a time per user (the requests meanwhile
 * share its answer). Its credential is kept until its `expirationTimestamp`, or, without one,
 * until the API server answers 401 (the Kubernetes credential-plugin contract; client-node kept
 * it for good, so a revoked or rotated token failed every call until a restart): the client
 * calls {@linkcode ExecCredentials.refused} on a 401 and the next request runs the plugin again.
 * What the plugin prints is checked before it is used or kept: JSON, an `ExecCredential` whose
 * status holds a token or a certificate and key as strings.
 *
 * @module
 */

import type * as k8s from "@kubernetes/client-node";
import { concatBytes } from "../bytes.ts";
import { typeName } from "../type_name.ts";

/** Longest a credential plugin may run before it is killed, ms. */
export const EXEC_PLUGIN_TIMEOUT_MS = 10_000;

/** Most bytes of a plugin's error output kept for the error message. */
const STDERR_KEPT = 300;

/**
 * Most bytes of a plugin's answer (an `ExecCredential` is a few KB): past it the plugin is
 * killed and the attempt fails, rather than its output growing this process's memory.
 */
export const MAX_ANSWER_BYTES = 1024 * 1024;

/**
 * The first `max` bytes of `stream`, read to its end (a child's pipe must be drained); `over`
 * is called once when more arrived.
 */
async function collect(
  stream: ReadableStream<Uint8Array>,
  max: number,
  over: () => void = () => {},
): Promise<Uint8Array> {
  const parts: Uint8Array[] = [];
  let kept = 0;
  let told = false;
  for await (const chunk of stream) {
    const room = max - kept;
    if (chunk.length <= room) {
      parts.push(chunk);
      kept += chunk.length;
      continue;
    }
    if (room > 0) {
      parts.push(chunk.subarray(0, room));
      kept = max;
    }
    if (!told) {
      told = true;
      over();
    }
  }
  return concatBytes(parts);
}

/** A kubeconfig user's `exec` section (the fields used). */
interface ExecConfig {
  command: string;
  args?: string[];
  env?: { name: string; value: string }[];
}

/** What a plugin prints (`ExecCredential`, the fields used), once checked. */
interface ExecCredential {
  status: {
    token?: string;
    clientCertificateData?: string;
    clientKeyData?: string;
    expirationTimestamp?: string;
  };
}

/** Most characters of a plugin's output quoted in an error. */
const OUTPUT_SHOWN = 120;

/** What the plugin printed, for an error: its first non-empty line, cut. */
function quoted(text: string): string {
  const line = text.split("\n").map((l) => l.trim()).find((l) => l !== "") ?? "";
  return JSON.stringify(
    line.length > OUTPUT_SHOWN ? `${line.slice(0, OUTPUT_SHOWN)}…` : line,
  );
}

/**
 * The credential in a plugin's output, or an error naming the plugin and what was wrong (the
 * Kubernetes client-go checks: an `ExecCredential` with a status holding a token or a
 * certificate and key). The output is quoted only when it is no JSON (a plugin printing its own
 * error, "Error: could not refresh SSO session"): JSON of the wrong shape may hold a token.
 */
function parseCredential(command: string, text: string): ExecCredential {
  const fail = (what: string): Error =>
    new Error(`credential plugin ${command} printed ${what}: no credential`);
  if (text.trim() === "") throw fail("nothing");
  let out: unknown;
  try {
    out = JSON.parse(text);
  } catch {
    throw fail(`text that is no JSON (${quoted(text)})`);
  }
  if (out === null || typeof out !== "object" || Array.isArray(out)) {
    throw fail(`${typeName(out)}, not an ExecCredential`);
  }
  const o = out as { kind?: unknown; status?: unknown };
  if (o.kind !== undefined && o.kind !== "ExecCredential") {
    const kind = typeof o.kind === "string"
      ? JSON.stringify(o.kind.slice(0, 60))
      : typeName(o.kind);
    throw fail(`kind ${kind}, not an ExecCredential`);
  }
  const status = o.status;
  if (status === null || typeof status !== "object" || Array.isArray(status)) {
    throw fail(`an ExecCredential whose status is ${typeName(status)}, not an object`);
  }
  const st = status as Record<string, unknown>;
  for (const field of ["token", "clientCertificateData", "clientKeyData", "expirationTimestamp"]) {
    if (st[field] !== undefined && typeof st[field] !== "string") {
      throw fail(`an ExecCredential whose status.${field} is ${typeName(st[field])}, not a string`);
    }
  }
  const cred = out as ExecCredential;
  const { token, clientCertificateData: cert, clientKeyData: key, expirationTimestamp: at } =
    cred.status;
  if (!token && !cert && !key) {
    throw fail("an ExecCredential with neither a token nor a client certificate and key");
  }
  if (!cert !== !key) {
    throw fail(
      `an ExecCredential with a client ${cert ? "certificate" : "key"} but no ${
        cert ? "key" : "certificate"
      }`,
    );
  }
  if (at !== undefined && Number.isNaN(Date.parse(at))) {
    throw fail("an ExecCredential whose status.expirationTimestamp is no time");
  }
  return cred;
}

/** The request options client-node's authenticators fill. */
interface AuthOptions {
  headers?: Record<string, string>;
  cert?: string;
  key?: string;
}

function execOf(user: k8s.User | undefined): ExecConfig | undefined {
  // deno-lint-ignore no-explicit-any
  const u = user as any;
  const exec = u?.exec ??
    (u?.authProvider?.name === "exec" || u?.authProvider?.config?.exec
      ? u.authProvider.config?.exec
      : undefined);
  return exec !== null && typeof exec === "object" ? exec : undefined;
}

/** Counters of {@linkcode ExecCredentials} (on the metrics line under `kubeClient.`). */
export interface ExecPluginStats {
  /**
   * Exec credential plugin runs (`exec` users of a kubeconfig), those refused before a process
   * started (no command, the client closed) included.
   */
  credentialPluginRuns: number;
  /**
   * Plugin runs that gave no credential: it failed (exit code), gave no answer in time, wrote
   * too much, printed no valid `ExecCredential`, or was killed at stop. The calls that waited
   * on it failed with its error (logged by their callers).
   */
  credentialPluginFailures: number;
  /** Credentials dropped because the API server answered 401 (the plugin runs again). */
  credentialsRefused: number;
}

/** Options of {@linkcode ExecCredentials}. */
export interface ExecCredentialsOptions {
  /** Longest a plugin runs, ms; default {@linkcode EXEC_PLUGIN_TIMEOUT_MS}. */
  timeoutMs?: number;
  /** Wall clock for the credentials' expiry, ms; default `Date.now`. */
  now?: () => number;
}

/** A client-node authenticator for `exec` users; see the module doc. */
export class ExecCredentials {
  readonly #timeoutMs: number;
  readonly #now: () => number;
  readonly #cache = new Map<string, { credential: ExecCredential; expiresMs: number }>();
  readonly #inFlight = new Map<string, Promise<ExecCredential>>();
  /** Kills each plugin running now (its process group). */
  readonly #running = new Set<() => void>();
  #closed = false;
  readonly #stats: ExecPluginStats = {
    credentialPluginRuns: 0,
    credentialPluginFailures: 0,
    credentialsRefused: 0,
  };

  /** Creates the authenticator; {@linkcode installExecCredentials} puts it in a configuration. */
  constructor(options: ExecCredentialsOptions = {}) {
    this.#timeoutMs = options.timeoutMs ?? EXEC_PLUGIN_TIMEOUT_MS;
    this.#now = options.now ?? Date.now;
  }

  /**
   * Kills the plugins running now (the requests waiting on them fail) and runs none after: the
   * process's stop does not wait for a plugin's timeout.
   */
  close(): void {
    this.#closed = true;
    for (const kill of this.#running) kill();
  }

  /** True for a user with an `exec` section (client-node's test). */
  isAuthProvider(user: k8s.User): boolean {
    return execOf(user) !== undefined;
  }

  /**
   * The API server answered 401: the credentials kept are dropped, so the next request runs the
   * plugin again (a credential without expiry is kept until then, by the plugin contract).
   */
  refused(): void {
    if (this.#cache.size > 0) this.#stats.credentialsRefused++;
    this.#cache.clear();
  }

  /** The counters so far (a copy). */
  stats(): ExecPluginStats {
    return { ...this.#stats };
  }

  /** Adds the user's credential (token, client certificate) to a request's options. */
  async applyAuthentication(user: k8s.User, opts: AuthOptions): Promise<void> {
    const status = (await this.#credential(user)).status;
    if (status.clientCertificateData) opts.cert = status.clientCertificateData;
    if (status.clientKeyData) opts.key = status.clientKeyData;
    if (status.token) {
      opts.headers ??= {};
      opts.headers.Authorization = `Bearer ${status.token}`;
    }
  }

  #credential(user: k8s.User): Promise<ExecCredential> {
    const key = user.name;
    const cached = this.#cache.get(key);
    if (cached !== undefined && cached.expiresMs > this.#now()) {
      return Promise.resolve(cached.credential);
    }
    let running = this.#inFlight.get(key);
    if (running === undefined) {
      running = this.#run(execOf(user)!).then((credential) => {
        // Checked by parseCredential: absent (kept until a 401) or a time.
        const at = credential.status.expirationTimestamp;
        this.#cache.set(key, {
          credential,
          expiresMs: at === undefined ? Infinity : Date.parse(at),
        });
        return credential;
      }, (err) => {
        this.#stats.credentialPluginFailures++;
        throw err;
      }).finally(() => this.#inFlight.delete(key));
      this.#inFlight.set(key, running);
    }
    return running;
  }

  async #run(exec: ExecConfig): Promise<ExecCredential> {
    // Every attempt counts, the ones refused before a process starts too: a failure is always
    // one of the runs.
    this.#stats.credentialPluginRuns++;
    if (typeof exec?.command !== "string" || exec.command === "") {
      throw new Error("kubeconfig: an exec user without a command");
    }
    if (this.#closed) {
      throw new Error(`credential plugin ${exec.command} not run: the client is closed`);
    }
    const child = new Deno.Command(exec.command, {
      args: exec.args ?? [],
      env: Object.fromEntries((exec.env ?? []).map((e) => [e.name, e.value])),
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      // A group of its own: killing it kills what the plugin started too (a shell's children).
      detached: true,
    }).spawn();
    let timedOut = false;
    const kill = (): void => {
      try {
        Deno.kill(-child.pid, "SIGKILL");
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, this.#timeoutMs);
    globalThis.addEventListener("unload", kill);
    this.#running.add(kill);
    let tooLong = false;
    try {
      const [stdout, stderr, status] = await Promise.all([
        collect(child.stdout, MAX_ANSWER_BYTES, () => {
          tooLong = true;
          kill();
        }),
        collect(child.stderr, STDERR_KEPT),
        child.status,
      ]);
      if (tooLong) {
        throw new Error(
          `credential plugin ${exec.command} wrote over ${MAX_ANSWER_BYTES} bytes: killed`,
        );
      }
      if (this.#closed) {
        throw new Error(`credential plugin ${exec.command} killed: the client was closed`);
      }
      if (timedOut) {
        throw new Error(
          `credential plugin ${exec.command} gave no answer within ${this.#timeoutMs} ms: killed`,
        );
      }
      if (!status.success) {
        const text = new TextDecoder().decode(stderr).trim();
        throw new Error(`credential plugin ${exec.command} failed (exit ${status.code}): ${text}`);
      }
      return parseCredential(exec.command, new TextDecoder().decode(stdout));
    } finally {
      clearTimeout(timer);
      globalThis.removeEventListener("unload", kill);
      this.#running.delete(kill);
      // What the plugin left running in its group (a background child) goes with it.
      kill();
    }
  }
}

/**
 * Makes `kc` authenticate its `exec` users with an {@linkcode ExecCredentials} (ahead of
 * client-node's own `ExecAuth`, which then never runs).
 */
export function installExecCredentials(
  kc: k8s.KubeConfig,
  options: ExecCredentialsOptions = {},
): ExecCredentials {
  const list = (kc as unknown as { authenticators?: unknown }).authenticators;
  if (!Array.isArray(list)) {
    throw new Error("client-node: its authenticators are not where they were (KubeConfig changed)");
  }
  const credentials = new ExecCredentials(options);
  list.unshift(credentials);
  return credentials;
}
