/**
 * The cluster UUID (control-plane.md §4.4): the IPFIX observation domain id is derived from it
 * (FNV-1 of its 16 bytes) and the ClickHouse and S3 sinks write it in their `clusterUUID`
 * column. Where it comes from, first match wins:
 *
 * 1. the `clusterID` configuration key (newer Antrea's), when it is a UUID;
 * 2. in a cluster, ConfigMap `kube-system/antrea-cluster-identity`, key `uuid` (written by the
 *    Antrea Controller), polled with backoff until it appears. Meanwhile a UUID drawn for this
 *    process stands in (records are never held back for it) and, once the real one is read,
 *    the sinks that carry it are rebuilt (v1.13 gave up after 10 s and kept a random id);
 * 3. standalone, a UUID generated once and kept in a state file (`--state-dir`, default the
 *    working directory, file `cluster-uuid`), so the id is stable across restarts. Only a regular
 *    file of at most {@linkcode STATE_FILE_MAX_BYTES} is read (a link to `/dev/zero` grew memory
 *    by gigabytes, a FIFO held the start forever); anything else holds no UUID, is counted and
 *    replaced, by writing a temporary file renamed over it (a crash leaves the old file or the
 *    new one, never half of one).
 */

import { NotRegularFile, openRegularFile, readUpTo } from "../bytes.ts";
import type { Clock } from "../clock.ts";
import { logger } from "../log.ts";
import type { KubeApi } from "./client.ts";
import { type Backoff, nextBackoff, RetryAborted, retrying, sleep } from "./retry.ts";

const log = logger("cluster-uuid");

/** Where the Antrea Controller publishes the cluster UUID. */
export const CLUSTER_IDENTITY = {
  namespace: "kube-system",
  name: "antrea-cluster-identity",
  key: "uuid",
} as const;

/** File name of the standalone UUID inside the state directory. */
export const CLUSTER_UUID_FILE = "cluster-uuid";

/** Most bytes of the state file read (a UUID and a newline are 37). */
export const STATE_FILE_MAX_BYTES = 1024;

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** True when `s` is a string holding a UUID in its canonical text form. */
export function isUuid(s: unknown): s is string {
  // A test of the string's type, not of String(s): ["<uuid>"] passed as its text.
  return typeof s === "string" && UUID_RE.test(s);
}

/** Counters of {@linkcode ClusterIdentity}. */
export interface ClusterIdentityStats {
  /**
   * State files that held no UUID (not a regular file, over {@linkcode STATE_FILE_MAX_BYTES},
   * unreadable, or not a UUID): replaced by a new UUID.
   */
  stateFileRejected: number;
  /** State files that could not be written: the UUID changes at the next start. */
  stateFileWriteFailures: number;
  /** Reads of the Antrea cluster identity that failed (absent yet, no UUID, API errors). */
  pollFailures: number;
  /** Unexpected errors of the polling (bugs): logged, polling goes on after a pause. */
  pollErrors: number;
}

/** Where the UUID in force came from. */
export type ClusterUuidSource = "config" | "cluster" | "state-file" | "process";

/** Options of {@linkcode ClusterIdentity}. */
export interface ClusterIdentityOptions extends Backoff {
  /** Time source of the polling. */
  clock: Clock;
  /** The API (in a cluster); absent: standalone. */
  api?: KubeApi;
  /** The `clusterID` configuration key (`""`: none). */
  configured?: string;
  /** Standalone: the state file; absent: a UUID per process. */
  stateFile?: string;
}

/** The cluster UUID in force, and its changes. */
export class ClusterIdentity {
  readonly #opts: ClusterIdentityOptions;
  #configured: string;
  #discovered: { uuid: string; source: ClusterUuidSource };
  #listeners: ((uuid: string) => void)[] = [];
  #abort: AbortController | undefined;
  #polling: Promise<void> = Promise.resolve();
  readonly #stats: ClusterIdentityStats = {
    stateFileRejected: 0,
    stateFileWriteFailures: 0,
    pollFailures: 0,
    pollErrors: 0,
  };

  /** Creates the identity with a per-process stand-in; {@linkcode start} finds the real one. */
  constructor(options: ClusterIdentityOptions) {
    this.#opts = options;
    this.#configured = this.#validConfigured(options.configured ?? "");
    this.#discovered = { uuid: crypto.randomUUID(), source: "process" };
  }

  /** Counters. */
  stats(): ClusterIdentityStats {
    return { ...this.#stats };
  }

  /** The UUID in force. */
  current(): string {
    return this.#configured !== "" ? this.#configured : this.#discovered.uuid;
  }

  /** Where {@linkcode current} comes from. */
  get source(): ClusterUuidSource {
    return this.#configured !== "" ? "config" : this.#discovered.source;
  }

  /** Calls `fn` with the new UUID whenever {@linkcode current} changes. */
  onChange(fn: (uuid: string) => void): void {
    this.#listeners.push(fn);
  }

  /**
   * Standalone: reads (or creates) the state file. In a cluster: starts polling the Antrea
   * cluster identity in the background. Never throws.
   */
  async start(): Promise<void> {
    const { api, stateFile } = this.#opts;
    if (api !== undefined) {
      const abort = new AbortController();
      this.#abort = abort;
      this.#polling = this.#poll(api, abort.signal).catch((err) => {
        if (!(err instanceof RetryAborted)) log.error("cluster UUID polling stopped", { err });
      });
    } else if (stateFile !== undefined) {
      const kept = await this.#fromStateFile(stateFile);
      this.#set(kept.uuid, kept.saved ? "state-file" : "process");
    }
    log.info("cluster UUID", { uuid: this.current(), source: this.source });
  }

  /** Resolves when the cluster identity was read (or polling stopped). */
  get discovered(): Promise<void> {
    return this.#polling;
  }

  /** Stops polling. */
  async stop(): Promise<void> {
    this.#abort?.abort();
    await this.#polling;
  }

  /**
   * Applies a new `clusterID` configuration value; true when the UUID in force changed (the
   * caller's config reload rebuilds the sinks that carry it, see `clusterID` in the reload
   * table), so no listener is called for it.
   */
  setConfigured(clusterID: string): boolean {
    const before = this.current();
    this.#configured = this.#validConfigured(clusterID);
    return this.current() !== before;
  }

  #validConfigured(clusterID: string): string {
    if (clusterID === "" || isUuid(clusterID)) return clusterID.toLowerCase();
    log.warn("clusterID is not a UUID: ignored, the discovered cluster UUID is used", {
      clusterID,
    });
    return "";
  }

  #set(uuid: string, source: ClusterUuidSource): void {
    const before = this.current();
    this.#discovered = { uuid: uuid.toLowerCase(), source };
    const now = this.current();
    if (now === before) return;
    for (const fn of this.#listeners) {
      try {
        fn(now);
      } catch (err) {
        log.error("cluster UUID listener failed", { err });
      }
    }
  }

  /**
   * Polls until the Antrea cluster identity is read. An unexpected error (a bug: a value of the
   * wrong type once threw past the retries and ended the polling for good) is logged, counted
   * and followed by a pause and a new poll.
   */
  async #poll(api: KubeApi, signal: AbortSignal): Promise<void> {
    let pause = this.#opts.initialMs ?? 1000;
    for (;;) {
      try {
        await this.#pollOnce(api, signal);
        return;
      } catch (err) {
        if (err instanceof RetryAborted) throw err;
        this.#stats.pollErrors++;
        log.error("cluster UUID polling failed: polling again", { err, retryInMs: pause });
        await sleep(this.#opts.clock, pause, signal);
        pause = nextBackoff(pause, this.#opts);
      }
    }
  }

  async #pollOnce(api: KubeApi, signal: AbortSignal): Promise<void> {
    const { namespace, name, key } = CLUSTER_IDENTITY;
    const uuid = await retrying(`reading ConfigMap ${namespace}/${name}`, async (signal) => {
      const cm = await api.getConfigMap(namespace, name, signal);
      const v: unknown = cm?.data?.[key];
      if (!isUuid(v)) {
        throw new Error(
          cm === undefined
            ? "not found yet"
            : `key ${key} is not a UUID yet: ${(JSON.stringify(v) ?? "absent").slice(0, 100)}`,
        );
      }
      return v;
    }, {
      initialMs: 1000,
      ...this.#opts,
      log,
      signal,
      onFailure: () => this.#stats.pollFailures++,
    });
    log.info("cluster UUID read from the Antrea cluster identity", {
      uuid,
      configMap: `${namespace}/${name}`,
    });
    this.#set(uuid, "cluster");
  }

  /** The state file's UUID, else a new one; `saved` false when it could not be written. */
  async #fromStateFile(path: string): Promise<{ uuid: string; saved: boolean }> {
    const read = await readStateFile(path);
    if (read.uuid !== undefined) return { uuid: read.uuid, saved: true };
    if (read.problem !== undefined) {
      this.#stats.stateFileRejected++;
      log.warn("cluster UUID state file holds no UUID: writing a new one", {
        path,
        reason: read.problem,
      });
    }
    const uuid = crypto.randomUUID();
    try {
      await writeStateFile(path, uuid + "\n");
      log.info("generated the cluster UUID and kept it in the state file", { path, uuid });
      return { uuid, saved: true };
    } catch (err) {
      this.#stats.stateFileWriteFailures++;
      log.warn(
        "cannot write the cluster UUID state file: the observation domain id will change at " +
          "the next start",
        { path, err },
      );
    }
    // Not saved: the process's own, as without a state file (the log says so).
    return { uuid, saved: false };
  }
}

/**
 * The UUID of the state file at `path`; `problem` says why there is none when the file exists,
 * neither field when it does not. Only a regular file is opened (a FIFO's open blocks until a
 * writer comes, a device never ends) and at most {@linkcode STATE_FILE_MAX_BYTES} are read.
 */
async function readStateFile(path: string): Promise<{ uuid?: string; problem?: string }> {
  let opened: { file: Deno.FsFile; size: number };
  try {
    opened = await openRegularFile(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return {};
    if (err instanceof NotRegularFile) return { problem: err.message };
    return { problem: `cannot read it: ${(err as Error).message}` };
  }
  const { file, size } = opened;
  try {
    if (size > STATE_FILE_MAX_BYTES) {
      return { problem: `${size} bytes, over ${STATE_FILE_MAX_BYTES}` };
    }
    const bytes = await readUpTo(file, STATE_FILE_MAX_BYTES);
    if (bytes === undefined) return { problem: `over ${STATE_FILE_MAX_BYTES} bytes` };
    const text = new TextDecoder().decode(bytes).trim();
    return isUuid(text) ? { uuid: text } : { problem: "not a UUID" };
  } catch (err) {
    return { problem: `cannot read it: ${(err as Error).message}` };
  } finally {
    file.close();
  }
}

/** The temporary file a state file at `path` is written through (`deno task permissions` grants it). */
export function stateFileTemp(path: string): string {
  return `${path}.tmp`;
}

/**
 * Writes `text` to `path` through `<path>.tmp` renamed over it: atomic, and whatever was at
 * `path` (a link, a FIFO) is replaced rather than written through. When the process may not
 * write the temporary file (its `--allow-write` names the state file alone), in place: what is
 * at `path` is removed first unless it is a regular file, and the file is created anew.
 */
async function writeStateFile(path: string, text: string): Promise<void> {
  const tmp = stateFileTemp(path);
  try {
    await Deno.remove(tmp).catch(() => {}); // a crash's leftover
    await Deno.writeTextFile(tmp, text, { createNew: true, mode: 0o644 });
  } catch (err) {
    if (!(err instanceof Deno.errors.NotCapable)) throw err;
    await writeInPlace(path, text);
    return;
  }
  try {
    await Deno.rename(tmp, path);
  } catch (err) {
    await Deno.remove(tmp).catch(() => {});
    throw err;
  }
}

async function writeInPlace(path: string, text: string): Promise<void> {
  let info: Deno.FileInfo | undefined;
  try {
    info = await Deno.lstat(path);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  if (info !== undefined && !info.isFile) await Deno.remove(path);
  // createNew (O_EXCL) never follows a link put there meanwhile.
  await Deno.writeTextFile(path, text, info?.isFile ? { create: false } : { createNew: true });
}
