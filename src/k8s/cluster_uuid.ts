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
 *    working directory, file `cluster-uuid`), so the id is stable across restarts.
 */

import type { Clock } from "../clock.ts";
import { logger } from "../log.ts";
import type { KubeApi } from "./client.ts";
import { type Backoff, RetryAborted, retrying } from "./retry.ts";

const log = logger("cluster-uuid");

/** Where the Antrea Controller publishes the cluster UUID. */
export const CLUSTER_IDENTITY = {
  namespace: "kube-system",
  name: "antrea-cluster-identity",
  key: "uuid",
} as const;

/** File name of the standalone UUID inside the state directory. */
export const CLUSTER_UUID_FILE = "cluster-uuid";

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** True when `s` is a UUID in its canonical text form. */
export function isUuid(s: string): boolean {
  return UUID_RE.test(s);
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

  /** Creates the identity with a per-process stand-in; {@linkcode start} finds the real one. */
  constructor(options: ClusterIdentityOptions) {
    this.#opts = options;
    this.#configured = this.#validConfigured(options.configured ?? "");
    this.#discovered = { uuid: crypto.randomUUID(), source: "process" };
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
      this.#set(await this.#fromStateFile(stateFile), "state-file");
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

  async #poll(api: KubeApi, signal: AbortSignal): Promise<void> {
    const { namespace, name, key } = CLUSTER_IDENTITY;
    const uuid = await retrying(`reading ConfigMap ${namespace}/${name}`, async (signal) => {
      const cm = await api.getConfigMap(namespace, name, signal);
      const v = cm?.data?.[key] ?? "";
      if (!isUuid(v)) {
        throw new Error(
          cm === undefined ? "not found yet" : `key ${key} is not a UUID yet: ${JSON.stringify(v)}`,
        );
      }
      return v;
    }, { initialMs: 1000, ...this.#opts, log, signal });
    log.info("cluster UUID read from the Antrea cluster identity", {
      uuid,
      configMap: `${namespace}/${name}`,
    });
    this.#set(uuid, "cluster");
  }

  async #fromStateFile(path: string): Promise<string> {
    try {
      const text = (await Deno.readTextFile(path)).trim();
      if (isUuid(text)) return text;
      log.warn("cluster UUID state file holds no UUID: writing a new one", { path });
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) {
        log.warn("cannot read the cluster UUID state file", { path, err });
      }
    }
    const uuid = crypto.randomUUID();
    try {
      await Deno.writeTextFile(path, uuid + "\n");
      log.info("generated the cluster UUID and kept it in the state file", { path, uuid });
    } catch (err) {
      log.warn(
        "cannot write the cluster UUID state file: the observation domain id will change at " +
          "the next start",
        { path, err },
      );
    }
    return uuid;
  }
}
