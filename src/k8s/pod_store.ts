/**
 * The Pod store (control-plane.md §4.3): an informer over the Pods of all namespaces (list,
 * then watch from the list's resourceVersion with bookmarks; a dropped watch resumes from the
 * last version seen, a `410 Gone` re-lists and reconciles) keeping only what the export path
 * needs, and {@linkcode PodStore.lookup}: the Pod that owned an IP when a flow started.
 *
 * Unlike v1.13 (L8–L10): only the needed fields are kept (name, namespace, Node, IPs, labels,
 * times); host-network Pods are never indexed (they share their Node's IP); a Pod that
 * terminates (phase Succeeded or Failed) is treated as deleted then, since its IP can be given
 * to a new Pod while the object lingers; a re-list marks Pods that vanished meanwhile as
 * deleted. A deleted Pod stays findable for 5 minutes, for records that arrive late.
 *
 * Lookup is one map access per IP: with one Pod on the IP it is returned whatever the time
 * (clock skew between Nodes); with several (IP reuse), the latest-created Pod with
 * `created <= t < deleted`.
 *
 * What the API server sends is bounded (`limits.maxPods`, `limits.maxPodLabelBytes`): past
 * `maxPods` the oldest deleted Pod still kept is forgotten early to make room, and when none is
 * left a new Pod is not held; a Pod whose labels are over `maxPodLabelBytes` is held without
 * them (a cut set would export labels the Pod does not have). Each is counted and logged,
 * rate-limited. It is type-checked too (`malformed`): a Pod whose uid, name, namespace or Node
 * name is no string of a length Kubernetes allows is not held (its flows would be exported
 * under a wrong or huge name); one whose labels are no object of strings is held without them,
 * one whose creation time is unreadable as created when seen.
 */

import { canonicalAnyAddress } from "../aggregation/flow_key.ts";
import type { PodInfo } from "../aggregation/mod.ts";
import { type Clock, type ClockTimer, within } from "../clock.ts";
import { LIMIT_KEYS } from "../config/limits.ts";
import { logger, RateLimitedLog } from "../log.ts";
import { typeName } from "../type_name.ts";
import type { KubeApi, WatchEvent, WatchHandle } from "./client.ts";
import { AnswerTooLarge, MAX_LIST_PAGE_BYTES } from "./http.ts";
import {
  type Backoff,
  describe,
  nextBackoff,
  pauseAfter,
  RetryAborted,
  retrying,
  type RetryOptions,
  sleep,
  statusOf,
} from "./retry.ts";

const log = logger("pod-store");

/** Longest wait at stop for the informer's loop to end (an abort-ignoring call is left). */
const STOP_WAIT_MS = 5_000;

/**
 * A watch that ends without advancing the resourceVersion counts as progress (no backoff after
 * it) only when it lasted this long.
 */
const WATCH_PROGRESS_MS = 10_000;

/**
 * A watch that advanced the resourceVersion counts as progress only when it lasted this long:
 * one that moved it by a bookmark and closed at once is no progress.
 */
const WATCH_MIN_PROGRESS_MS = 1_000;

/**
 * Watch failures in a row (other than a refused connection or 429) after which the next round
 * lists instead of resuming from the same resourceVersion.
 */
export const WATCH_FAILURES_RELIST = 3;

/**
 * True for a watch failure after which client-go resumes the watch rather than list: the
 * connection refused (the API server restarting) or 429 (it sheds load).
 */
function resumableWatchFailure(err: unknown): boolean {
  if (statusOf(err) === 429) return true;
  for (let e = err, depth = 0; e != null && depth < 5; depth++) {
    // deno-lint-ignore no-explicit-any
    const x = e as any;
    if (x.code === "ECONNREFUSED" || x.name === "ConnectionRefused") return true;
    e = x.cause;
  }
  return false;
}

/**
 * Pods asked for per page of a list (client-go's informers ask for 500): a cluster-wide list is
 * read in pages, the event loop free between them, instead of one answer parsed in one piece
 * (200,000 Pods: a 9 s stall, 745 MiB at its peak, a stop held 4 s).
 */
export const LIST_PAGE_SIZE = 500;

/** How long a deleted Pod stays findable (upstream: 5 minutes). */
export const DELETED_POD_RETENTION_MS = 5 * 60_000;

/** The fields of a Pod the store reads (a client-node `V1Pod` or the watch's JSON). */
export interface PodObject {
  /** Identity, labels, creation time. */
  metadata?: {
    uid?: string;
    name?: string;
    namespace?: string;
    labels?: Record<string, string> | null;
    creationTimestamp?: Date | string;
    resourceVersion?: string;
  };
  /** Node and host networking. */
  spec?: { nodeName?: string; hostNetwork?: boolean };
  /** Phase and IPs. */
  status?: { phase?: string; podIP?: string; podIPs?: { ip?: string }[] | null };
}

/**
 * A change of the store's index, for a replica (an aggregation shard's copy, fed by
 * {@linkcode PodStore.replicate} and {@linkcode PodStore.applyChange}): an entry as it is now,
 * or its removal at the end of its retention.
 */
export type PodChange =
  | {
    readonly t: "put";
    readonly uid: string;
    readonly info: PodInfo;
    readonly ips: readonly string[];
    readonly created: number;
    readonly deleted: number;
  }
  | { readonly t: "remove"; readonly uid: string };

/** What a sharded process needs of the Pod store: its index, as changes. */
export interface PodReplicaSource {
  /** See {@linkcode PodStore.replicate}. */
  replicate(listener: (c: PodChange) => void): PodChange[];
  /** See {@linkcode PodStore.snapshot}. */
  snapshot(): PodChange[];
}

interface PodEntry {
  readonly uid: string;
  info: PodInfo;
  ips: readonly string[];
  /** Unix seconds. */
  readonly created: number;
  /** Unix seconds; 0 while the Pod lives. */
  deleted: number;
}

/** Longest Pod name, namespace and Node name Kubernetes allows (DNS subdomain, DNS label). */
export const MAX_POD_NAME = 253;
/** See {@linkcode MAX_POD_NAME}. */
export const MAX_NAMESPACE = 63;
/** See {@linkcode MAX_POD_NAME}. */
export const MAX_NODE_NAME = 253;
/** Longest uid taken (Kubernetes gives a 36-character UUID). */
const MAX_UID = 128;

/**
 * Why an object from the API server cannot be applied as a Pod event of `type`, or undefined:
 * the fields it is keyed and exported by must be strings of the lengths Kubernetes allows (a
 * 200 KB name was held whole, `{evil:1}` exported as "[object Object]"). A DELETED needs its
 * uid only. Labels and the creation time are checked where they are used (held without them).
 */
function podProblem(type: string, pod: PodObject): string | undefined {
  const m = pod.metadata as Record<string, unknown> | undefined | null;
  if (m === undefined || m === null || typeof m !== "object") return "no metadata";
  const text = (v: unknown, field: string, max: number, required: boolean) =>
    v === undefined || v === null
      ? required ? `no ${field}` : undefined
      : typeof v !== "string"
      ? `${field} is ${typeName(v)}, not a string`
      : v.length > max
      ? `${field} is ${v.length} characters, over ${max}`
      : required && v === ""
      ? `empty ${field}`
      : undefined;
  const uid = text(m.uid, "metadata.uid", MAX_UID, true);
  if (uid !== undefined || type === "DELETED") return uid;
  const spec = pod.spec as Record<string, unknown> | undefined | null;
  if (spec !== undefined && spec !== null && typeof spec !== "object") return "spec: not an object";
  const status = pod.status as unknown;
  if (status !== undefined && status !== null && typeof status !== "object") {
    return "status: not an object";
  }
  return text(m.name, "metadata.name", MAX_POD_NAME, false) ??
    text(m.namespace, "metadata.namespace", MAX_NAMESPACE, false) ??
    text(spec?.nodeName, "spec.nodeName", MAX_NODE_NAME, false);
}

/** Names the name table may hold beyond twice the Pods before it is pruned. */
const NAMES_SLACK = 1024;

/** Counters of {@linkcode PodStore}. */
export interface PodStoreStats {
  /** Pods held (deleted ones still retained included). */
  pods: number;
  /** IPs indexed. */
  ips: number;
  /** Distinct namespace and Node names kept to share one string among their Pods. */
  names: number;
  /** Full lists (the first one and every re-list). */
  lists: number;
  /** Pages read (lists come in pages of {@linkcode LIST_PAGE_SIZE}, or fewer: `listPagesHalved`). */
  listPages: number;
  /**
   * Lists cut short at their page bound (twice `maxPods` over the page size): what they had
   * was applied, no Pod marked deleted for missing from them.
   */
  listsTruncated: number;
  /**
   * Re-lists caused by `410 Gone` (of a watch, or of a list's continue token: after the first
   * restart of one list, each waits a backoff pause).
   */
  relistsGone: number;
  /**
   * Re-lists caused by a failing watch (an ERROR event other than 410, or several failures in
   * a row). The ERROR events: 504 "Too large resource version", 500; the failures in a row:
   * {@linkcode WATCH_FAILURES_RELIST} of them other than a refused connection or 429 (resuming
   * from the same version forever left the store stale).
   */
  relistsWatchFailed: number;
  /**
   * Times a page of the list was over the client's bound for a page (`MAX_LIST_PAGE_BYTES`,
   * 8 MiB: Pods with large annotations or labels) and the page size was halved (kept for later lists).
   */
  listPagesHalved: number;
  /** Watches opened. */
  watches: number;
  /**
   * Seconds since the informer last heard from the API server: a list page, a watch event or a
   * bookmark (0 before it starts). Bookmarks come about every minute: a value that keeps
   * growing past a few minutes is a store going stale (a watch kept open but silent).
   */
  lastEventAgeSeconds: number;
  /**
   * Backoff pauses before a watch, taken because the watches before it made no progress (three
   * in a row that ended at once, or under 1 s even if a bookmark moved the version).
   */
  watchesBackedOff: number;
  /** Watch events applied (bookmarks excluded). */
  events: number;
  /** Failed list or watch calls (each retried). */
  failures: number;
  /** Host-network Pods skipped. */
  hostNetworkSkipped: number;
  /**
   * List items, watch objects and watch events the store cannot use, each logged (rate-limited).
   * Skipped when no Pod (null, no `metadata.uid`, a name, namespace or Node name that is no
   * string or longer than Kubernetes allows: 253, 63 and 253 characters) or an event of an
   * unknown type; held without the field when the labels are no object of strings (no labels)
   * or the creation time is unreadable (created when seen).
   */
  malformed: number;
  /** New Pods not held: `maxPods` held, none of them deleted. */
  podsRefused: number;
  /** Deleted Pods forgotten before their retention ended, to make room under `maxPods`. */
  deletedForgottenEarly: number;
  /** Pods held without their labels, over `maxPodLabelBytes`. */
  labelsDropped: number;
  /**
   * DELETED events for a Pod not held (control-plane §4.3: an error, logged rate-limited): a Pod
   * refused at `maxPods`, or an event missed. Host-network and terminated Pods, never held, are
   * not counted.
   */
  deletesUnknown: number;
  /** IPs of a Pod not indexed: past {@linkcode MAX_IPS_PER_POD}, or text that is no IP. */
  ipsDropped: number;
}

/** Options of {@linkcode PodStore}. */
export interface PodStoreOptions extends Backoff {
  /** Time source: Pod times, retention and retries. */
  clock: Clock;
  /** How long a deleted Pod stays findable; default {@linkcode DELETED_POD_RETENTION_MS}. */
  retentionMs?: number;
  /** Most Pods held (`limits.maxPods`); default its declared default. */
  maxPods?: number;
  /** Most bytes of one Pod's labels (`limits.maxPodLabelBytes`); default its declared default. */
  maxLabelBytes?: number;
}

const TERMINATED = new Set(["Succeeded", "Failed"]);

function putOf(e: PodEntry): PodChange {
  return { t: "put", uid: e.uid, info: e.info, ips: e.ips, created: e.created, deleted: e.deleted };
}

/** Most IPs indexed for one Pod (Kubernetes gives a Pod one per family). */
export const MAX_IPS_PER_POD = 16;

/**
 * The Pod's IPs in canonical text (as flows are looked up: `FD00:0:0:0::5` is `fd00::5`), each
 * once, at most {@linkcode MAX_IPS_PER_POD}; `dropped` counts the rest and text that is no IP.
 */
function podIps(pod: PodObject): { ips: string[]; dropped: number } {
  // Each IP once (a Pod listing one twice would be indexed twice and unindexed once), in a Set:
  // a list of 195k IPs took 45 s with a linear search per IP. An entry that is not an object
  // with a string `ip` is skipped.
  const ips = new Set<string>();
  let dropped = 0;
  const add = (text: string): void => {
    const ip = canonicalAnyAddress(text);
    if (ip === undefined || (!ips.has(ip) && ips.size >= MAX_IPS_PER_POD)) dropped++;
    else ips.add(ip);
  };
  for (const p of pod.status?.podIPs ?? []) {
    const ip = (p as { ip?: unknown } | null)?.ip;
    if (typeof ip === "string" && ip !== "") add(ip);
  }
  if (ips.size === 0 && typeof pod.status?.podIP === "string" && pod.status.podIP !== "") {
    add(pod.status.podIP);
  }
  return { ips: [...ips], dropped };
}

/** Pod metadata by IP and time, fed by a Kubernetes informer (or by {@linkcode apply}). */
export class PodStore {
  readonly #clock: Clock;
  readonly #opts: PodStoreOptions;
  readonly #byUid = new Map<string, PodEntry>();
  /** One Pod on the IP, or the Pods that shared it (IP reuse): a Set, removed from in O(1). */
  readonly #byIp = new Map<string, PodEntry | Set<PodEntry>>();
  /** Namespaces and Node names are shared by many Pods: one string each. */
  readonly #names = new Map<string, string>();
  /**
   * Deleted Pods in deletion order (the retention is constant), removed when due (or early, to
   * make room): a queue whose first live element is at `#removalsHead`.
   */
  #removals: { entry: PodEntry; dueMs: number }[] = [];
  #removalsHead = 0;
  #removalTimer: ClockTimer | undefined;
  #abort: AbortController | undefined;
  #watch: WatchHandle | undefined;
  #running: Promise<void> = Promise.resolve();
  readonly #synced = Promise.withResolvers<void>();
  #isSynced = false;
  /** When the informer last heard from the API server (monotonic ms), once started. */
  #lastHeardMs: number | undefined;
  readonly #listeners: ((c: PodChange) => void)[] = [];
  readonly #malformedLog = new RateLimitedLog(10_000, () => this.#clock.nowMs());
  readonly #limitLog = new RateLimitedLog(10_000, () => this.#clock.nowMs());
  /** The informer's own outcomes that can repeat at every round (restarts, short watches). */
  readonly #informerLog: RateLimitedLog;
  /** Pods asked for per page of a list: {@linkcode LIST_PAGE_SIZE}, halved past the bound. */
  #pageSize = LIST_PAGE_SIZE;
  readonly #maxPods: number;
  readonly #maxLabelBytes: number;
  readonly #stats = {
    lists: 0,
    listPages: 0,
    listsTruncated: 0,
    listPagesHalved: 0,
    relistsGone: 0,
    relistsWatchFailed: 0,
    watches: 0,
    watchesBackedOff: 0,
    events: 0,
    failures: 0,
    hostNetworkSkipped: 0,
    malformed: 0,
    podsRefused: 0,
    deletedForgottenEarly: 0,
    labelsDropped: 0,
    deletesUnknown: 0,
    ipsDropped: 0,
  };

  /** Creates an empty store; {@linkcode start} runs the informer. */
  constructor(options: PodStoreOptions) {
    this.#clock = options.clock;
    this.#opts = options;
    this.#maxPods = options.maxPods ?? LIMIT_KEYS.maxPods.default;
    this.#maxLabelBytes = options.maxLabelBytes ?? LIMIT_KEYS.maxPodLabelBytes.default;
    this.#informerLog = new RateLimitedLog(10_000, () => this.#clock.nowMs());
  }

  /**
   * The Pod that owned `ip` when a flow started at `flowStartSeconds` (Unix seconds), or
   * undefined. O(1): one map access, and a scan of the few Pods that shared the IP.
   */
  lookup(ip: string, flowStartSeconds: number): PodInfo | undefined {
    const e = this.#byIp.get(ip);
    if (e === undefined) return undefined;
    if (!(e instanceof Set)) return e.info;
    let best: PodEntry | undefined;
    for (const p of e) {
      if (p.created > flowStartSeconds) continue;
      if (p.deleted !== 0 && flowStartSeconds >= p.deleted) continue;
      if (best === undefined || p.created > best.created) best = p;
    }
    return best?.info;
  }

  /**
   * Sends every change of the index to `listener` from now on, and returns the entries held
   * now as changes, to seed a replica: seed plus changes keep the replica's look-ups the same.
   */
  replicate(listener: (c: PodChange) => void): PodChange[] {
    this.#listeners.push(listener);
    return this.snapshot();
  }

  /** The entries held now, as changes (the seed of a replica that starts later). */
  snapshot(): PodChange[] {
    return [...this.#byUid.values()].map(putOf);
  }

  /**
   * Applies a change made by the store being replicated (see {@linkcode replicate}). A replica
   * runs no informer and no retention timer: removals come as changes.
   */
  applyChange(c: PodChange): void {
    const old = this.#byUid.get(c.uid);
    if (old !== undefined) {
      this.#unindex(old);
      this.#byUid.delete(c.uid);
    }
    if (c.t === "remove") return;
    const entry: PodEntry = {
      uid: c.uid,
      info: {
        ...c.info,
        namespace: this.#name(c.info.namespace),
        nodeName: this.#name(c.info.nodeName),
      },
      ips: c.ips,
      created: c.created,
      deleted: c.deleted,
    };
    this.#byUid.set(c.uid, entry);
    this.#index(entry);
  }

  #changed(e: PodEntry): void {
    if (this.#listeners.length === 0) return;
    const c = putOf(e);
    for (const l of this.#listeners) l(c);
  }

  /** Counters and sizes. */
  stats(): PodStoreStats {
    return {
      pods: this.#byUid.size,
      ips: this.#byIp.size,
      names: this.#names.size,
      lastEventAgeSeconds: this.#lastHeardMs === undefined
        ? 0
        : Math.max(0, Math.floor((this.#clock.nowMs() - this.#lastHeardMs) / 1000)),
      ...this.#stats,
    };
  }

  /** True once the first list was applied. */
  get synced(): boolean {
    return this.#isSynced;
  }

  /** Resolves once the first list was applied. */
  whenSynced(): Promise<void> {
    return this.#synced.promise;
  }

  /**
   * {@linkcode apply}, for an object from the API server: one that is no Pod (null, fields of
   * the wrong type) is counted in `malformed`, logged (rate-limited) and skipped, instead of
   * ending the list or the watch it came in. False when skipped.
   */
  #applyChecked(type: string, pod: unknown): boolean {
    try {
      if (pod === null || typeof pod !== "object") {
        throw new TypeError(`not an object: ${pod === null ? "null" : typeof pod}`);
      }
      const problem = podProblem(type, pod as PodObject);
      if (problem !== undefined) throw new TypeError(problem);
      this.apply(type, pod as PodObject);
      return true;
    } catch (err) {
      this.#stats.malformed++;
      if (this.#malformedLog.allow("malformed") >= 0) {
        log.warn("Kubernetes API sent an object that is no Pod: skipped", { type, err });
      }
      return false;
    }
  }

  /** Counts and logs (rate-limited) a Pod held without a field of the wrong type. */
  #malformedField(field: string, held: string): void {
    this.#stats.malformed++;
    const suppressed = this.#malformedLog.allow(`field|${field}`);
    if (suppressed >= 0) {
      log.warn(`Kubernetes API sent a Pod whose ${field} is unusable: held ${held}`, {
        suppressed,
      });
    }
  }

  /** Applies one watch event (ADDED, MODIFIED or DELETED). */
  apply(type: string, pod: PodObject): void {
    const uid = pod.metadata?.uid;
    if (uid === undefined) return;
    if (type === "DELETED") {
      // A Pod never held by design (host network, first seen terminated) is no surprise.
      if (
        !this.#byUid.has(uid) && pod.spec?.hostNetwork !== true &&
        !TERMINATED.has(pod.status?.phase ?? "")
      ) {
        this.#stats.deletesUnknown++;
        const suppressed = this.#informerLog.allow("deleted-unknown");
        if (suppressed >= 0) {
          log.error("Pod store: DELETED for a Pod not held", {
            namespace: pod.metadata?.namespace,
            name: pod.metadata?.name,
            uid,
            suppressed,
          });
        }
      }
      this.#markDeleted(uid);
      return;
    }
    if (pod.spec?.hostNetwork === true) {
      this.#stats.hostNetworkSkipped++;
      return;
    }
    if (TERMINATED.has(pod.status?.phase ?? "")) {
      this.#markDeleted(uid);
      return;
    }
    const existing = this.#byUid.get(uid);
    if (existing !== undefined && existing.deleted !== 0) return; // no way back from deletion
    const info = this.#infoOf(pod);
    const { ips, dropped } = podIps(pod);
    if (dropped > 0) {
      this.#stats.ipsDropped += dropped;
      if (this.#limitLog.allow("ips") >= 0) {
        log.warn("Pod store: a Pod with more IPs than indexed: the rest skipped", {
          maxIpsPerPod: MAX_IPS_PER_POD,
          dropped,
        });
      }
    }
    if (existing !== undefined) {
      existing.info = info;
      if (ips.join() !== existing.ips.join()) {
        this.#unindex(existing);
        existing.ips = ips;
        this.#index(existing);
      }
      this.#changed(existing);
      return;
    }
    if (this.#byUid.size >= this.#maxPods && !this.#makeRoom()) {
      this.#stats.podsRefused++;
      this.#limitReached("maxPods", "a new Pod is not held: its flows get no Pod fields");
      return;
    }
    const nowSec = Math.floor(this.#clock.wallMs() / 1000);
    // v1.13: a Pending Pod counts from when we saw it, others from their creation time.
    const ts = pod.metadata?.creationTimestamp;
    let created = nowSec;
    if (pod.status?.phase !== "Pending" && ts !== undefined && ts !== null) {
      const ms = typeof ts === "string" || ts instanceof Date ? new Date(ts).getTime() : NaN;
      // NaN would make the Pod win or lose every look-up on a shared IP: the time it was seen.
      if (Number.isNaN(ms)) this.#malformedField("creationTimestamp", "as created now");
      else created = Math.floor(ms / 1000);
    }
    const entry: PodEntry = { uid, info, ips, created, deleted: 0 };
    this.#byUid.set(uid, entry);
    this.#index(entry);
    this.#changed(entry);
  }

  /**
   * Applies a full list: every Pod in it is added or updated, every live Pod missing from it
   * (deleted while no watch was open) is marked deleted.
   */
  replace(pods: readonly PodObject[]): void {
    const seen = new Set<string>();
    this.#applyItems(pods, seen);
    this.#reconcile(seen);
  }

  /** Applies list items, adding the uid of each to `seen`. */
  #applyItems(pods: readonly PodObject[], seen: Set<string>): void {
    for (const p of pods) {
      if (!this.#applyChecked("MODIFIED", p)) continue;
      if (p.metadata?.uid !== undefined) seen.add(p.metadata.uid);
    }
  }

  /** Marks deleted every live Pod that a full list did not have. */
  #reconcile(seen: Set<string>): void {
    for (const [uid, e] of this.#byUid) {
      if (e.deleted === 0 && !seen.has(uid)) this.#markDeleted(uid);
    }
  }

  /**
   * Lists the Pods page by page, applying each, yielding to the event loop and checking for a
   * stop between pages; then marks deleted the live Pods the list did not have. A continue token
   * that expired (410) starts the list again. Returns the list's resourceVersion.
   */
  async #list(api: KubeApi, retry: RetryOptions, signal: AbortSignal): Promise<string> {
    let seen = new Set<string>();
    let rv = "";
    let cont: string | undefined;
    let pages = 0;
    let restarts = 0;
    let pause = this.#opts.initialMs ?? 500;
    for (;;) {
      const from = cont;
      const page = await retrying("listing Pods", async (s) => {
        for (;;) {
          try {
            return await api.listPods(s, { limit: this.#pageSize, continue: from });
          } catch (err) {
            if (from !== undefined && statusOf(err) === 410) return undefined; // token expired
            // A page over the client's bound: the same size would be refused again on every
            // retry and the store would never sync. Fewer Pods per page (a continue token
            // does not depend on the limit), down to one.
            if (err instanceof AnswerTooLarge && this.#pageSize > 1) {
              this.#pageSize = Math.ceil(this.#pageSize / 2);
              this.#stats.listPagesHalved++;
              log.warn("a page of the Pod list was over the client's bound: fewer Pods per page", {
                limit: this.#pageSize,
                maxBytes: MAX_LIST_PAGE_BYTES,
              });
              continue;
            }
            throw err;
          }
        }
      }, retry);
      if (page === undefined) {
        this.#stats.relistsGone++;
        const suppressed = this.#informerLog.allow("continue-expired");
        if (suppressed >= 0) {
          log.info("Pod list's continue token expired (410): listing again", {
            pages,
            retryInMs: restarts === 0 ? 0 : pause,
            suppressed,
          });
        }
        // The first restart is at once (a token expires when a list takes longer than the
        // event window); the next ones back off: a server whose tokens always expire made
        // 3,826 lists in 20 s.
        if (restarts++ > 0) {
          await sleep(this.#clock, pause, signal);
          pause = nextBackoff(pause, this.#opts);
        }
        [seen, rv, cont, pages] = [new Set(), "", undefined, 0];
        continue;
      }
      this.#stats.listPages++;
      this.#lastHeardMs = this.#clock.nowMs();
      if (pages++ === 0) rv = page.resourceVersion;
      this.#applyItems(page.items as PodObject[], seen);
      cont = page.continue;
      if (cont === undefined) break;
      // Twice `maxPods` in pages of the size in use (a server sending pages without end).
      if (pages >= Math.ceil((2 * this.#maxPods) / this.#pageSize) + 1) {
        this.#stats.listsTruncated++;
        this.#limitReached("maxPods", "a list cut at its page bound (no deletions inferred)", {
          pages,
        });
        return rv;
      }
      // The event loop runs between pages (flows, the API, a stop).
      await new Promise((r) => setTimeout(r, 0));
      if (signal.aborted) throw new RetryAborted();
    }
    this.#reconcile(seen);
    return rv;
  }

  /** Runs the informer on `api` in the background until {@linkcode stop}. */
  start(api: KubeApi): void {
    const abort = new AbortController();
    this.#abort = abort;
    this.#lastHeardMs = this.#clock.nowMs();
    this.#running = this.#run(api, abort.signal).catch((err) => {
      if (!(err instanceof RetryAborted)) log.error("Pod informer stopped", { err });
    });
  }

  /** Stops the informer and the retention timer. */
  async stop(): Promise<void> {
    this.#abort?.abort();
    this.#watch?.abort();
    // A Kubernetes call that ignores the abort must not hold the process's stop.
    if (await within(Promise.resolve(this.#running), STOP_WAIT_MS) === "timeout") {
      log.warn("a Kubernetes call did not end at stop; not waited for", { waitMs: STOP_WAIT_MS });
    }
    this.#removalTimer?.cancel();
  }

  /**
   * Logs, rate-limited per outcome (`what`: a flood of one does not hide another), that
   * `limits.<key>` was reached (the caller counts it).
   */
  #limitReached(key: string, what: string, fields: Record<string, unknown> = {}): void {
    const suppressed = this.#limitLog.allow(`${key}|${what}`);
    if (suppressed < 0) return;
    log.warn(`Pod store: limits.${key} reached, ${what}`, {
      maxPods: this.#maxPods,
      maxPodLabelBytes: this.#maxLabelBytes,
      ...fields,
      suppressed,
    });
  }

  /**
   * Forgets the oldest deleted Pod still kept, before its retention ends, to make room for a
   * live one (a Pod that runs matters more than one kept for late records). False when none.
   */
  #makeRoom(): boolean {
    const first = this.#removals[this.#removalsHead];
    if (first === undefined) return false;
    this.#removalsHead++;
    // The queue lets go of the entries forgotten early (a flood of deletions would otherwise
    // keep them all until the retention ends), in O(1) amortised.
    if (this.#removalsHead >= 1024 && this.#removalsHead * 2 >= this.#removals.length) {
      this.#removals = this.#removals.slice(this.#removalsHead);
      this.#removalsHead = 0;
    }
    this.#forget(first.entry);
    this.#stats.deletedForgottenEarly++;
    this.#limitReached("maxPods", "deleted Pods are forgotten before their retention ends");
    return true;
  }

  #infoOf(pod: PodObject): PodInfo {
    let labels = pod.metadata?.labels as Record<string, unknown> | null | undefined;
    if (labels === null || labels === undefined) labels = undefined;
    else if (typeof labels !== "object" || Array.isArray(labels)) {
      // `"abc"` exported as {"0":"a",...}: held without labels rather than with wrong ones.
      labels = undefined;
      this.#malformedField("labels", "without labels");
    } else {
      let n = 0;
      let bytes = 0;
      let wrong = false;
      // Label keys and values are ASCII (API server validation): characters are bytes.
      for (const k of Object.keys(labels)) {
        const v = labels[k];
        // A value that is no string (an object, a number, null) was exported as text, and an
        // object's text (15 bytes) passed the bound whatever its size.
        if (typeof v !== "string") {
          wrong = true;
          break;
        }
        n++;
        bytes += k.length + v.length;
        if (bytes > this.#maxLabelBytes) break;
      }
      if (wrong) {
        labels = undefined;
        this.#malformedField("labels", "without labels");
      } else if (n === 0) labels = undefined;
      else if (bytes > this.#maxLabelBytes) {
        labels = undefined;
        this.#stats.labelsDropped++;
        this.#limitReached("maxPodLabelBytes", "a Pod is held without its labels");
      }
    }
    return {
      name: pod.metadata?.name ?? "",
      namespace: this.#name(pod.metadata?.namespace ?? ""),
      nodeName: this.#name(pod.spec?.nodeName ?? ""),
      labels: labels as Record<string, string> | undefined,
    };
  }

  #name(s: string): string {
    let v = this.#names.get(s);
    if (v === undefined) {
      v = s;
      // Namespaces and Nodes come and go (test namespaces, autoscaled Nodes): past twice what
      // the Pods held use, the table keeps only theirs, so it never grows with the churn.
      if (this.#names.size >= 2 * this.#byUid.size + NAMES_SLACK) this.#pruneNames();
      this.#names.set(s, s);
    }
    return v;
  }

  /** Keeps in the name table only the names the held Pods use. */
  #pruneNames(): void {
    const kept = new Map<string, string>();
    for (const e of this.#byUid.values()) {
      kept.set(e.info.namespace, e.info.namespace);
      kept.set(e.info.nodeName, e.info.nodeName);
    }
    this.#names.clear();
    for (const [k, v] of kept) this.#names.set(k, v);
  }

  #index(e: PodEntry): void {
    for (const ip of e.ips) {
      const cur = this.#byIp.get(ip);
      if (cur === undefined) this.#byIp.set(ip, e);
      else if (cur instanceof Set) cur.add(e);
      else this.#byIp.set(ip, new Set([cur, e]));
    }
  }

  #unindex(e: PodEntry): void {
    for (const ip of e.ips) {
      const cur = this.#byIp.get(ip);
      if (cur === e) this.#byIp.delete(ip);
      else if (cur instanceof Set) {
        // O(1) (a filter over the Pods sharing the IP made 30k of them a 3.7 s sweep).
        cur.delete(e);
        if (cur.size === 1) this.#byIp.set(ip, cur.values().next().value!);
        else if (cur.size === 0) this.#byIp.delete(ip);
      }
    }
  }

  #markDeleted(uid: string): void {
    const e = this.#byUid.get(uid);
    if (e === undefined || e.deleted !== 0) return;
    e.deleted = Math.floor(this.#clock.wallMs() / 1000);
    this.#changed(e);
    const dueMs = this.#clock.nowMs() + (this.#opts.retentionMs ?? DELETED_POD_RETENTION_MS);
    this.#removals.push({ entry: e, dueMs });
    if (this.#removalTimer === undefined) this.#armRemoval();
  }

  #armRemoval(): void {
    const first = this.#removals[this.#removalsHead];
    if (first === undefined) {
      this.#removalTimer = undefined;
      return;
    }
    this.#removalTimer = this.#clock.setTimer(
      first.dueMs - this.#clock.nowMs(),
      () => this.#removeDue(),
      { unref: true },
    );
  }

  #removeDue(): void {
    const now = this.#clock.nowMs();
    let n = this.#removalsHead;
    while (n < this.#removals.length && this.#removals[n].dueMs <= now) {
      this.#forget(this.#removals[n++].entry);
    }
    this.#removals = this.#removals.slice(n);
    this.#removalsHead = 0;
    this.#armRemoval();
  }

  /** Removes a deleted Pod from the store (its retention ended, or room was needed). */
  #forget(entry: PodEntry): void {
    this.#unindex(entry);
    this.#byUid.delete(entry.uid);
    for (const l of this.#listeners) l({ t: "remove", uid: entry.uid });
  }

  async #run(api: KubeApi, signal: AbortSignal): Promise<void> {
    const retry = {
      ...this.#opts,
      log,
      signal,
      onFailure: () => this.#stats.failures++,
    };
    let rv = "";
    let pause = this.#opts.initialMs ?? 500;
    let emptyWatches = 0;
    let failedWatches = 0;
    while (!signal.aborted) {
      try {
        if (rv === "") {
          // A page can still be large (big Pods): a longer bound than the other calls.
          rv = await this.#list(api, { attemptTimeoutMs: 120_000, ...retry }, signal);
          this.#stats.lists++;
          if (!this.#isSynced) {
            this.#isSynced = true;
            this.#synced.resolve();
            log.info("Pod store synced", { pods: this.#byUid.size, resourceVersion: rv });
          }
        }
        const from = rv;
        const began = this.#clock.nowMs();
        const r = await this.#watchOnce(api, rv, signal);
        rv = r.resourceVersion;
        // Progress is a watch that advanced the resourceVersion and stayed open a moment, or
        // stayed open a while: events alone are not (a server sending the same event and
        // closing made ~500 watches/s), nor a version moved by a watch that closed at once (a
        // bookmark each, then the end: 2,995 watches in 10 s).
        const lasted = this.#clock.nowMs() - began;
        const progressed = (rv !== from && lasted >= WATCH_MIN_PROGRESS_MS) ||
          lasted >= WATCH_PROGRESS_MS;
        if (r.gone) {
          this.#stats.relistsGone++;
          log.info("Pod watch expired (410 Gone): re-listing", { resourceVersion: rv });
          rv = "";
          failedWatches = 0;
        } else if (r.error !== undefined) {
          this.#stats.failures++;
          // As client-go's reflector: an ERROR event other than 410 (504 "Too large resource
          // version", 500) ends the watch for a list, and so do failures in a row (a server that
          // fails every watch from this version): resuming from it forever left the store stale.
          // A refused connection or 429 (the server down or shedding load) resumes the watch.
          if (progressed) failedWatches = 0; // a watch that ran a while and then broke
          const resumable = !r.errorEvent && resumableWatchFailure(r.error);
          const relist = r.errorEvent || (!resumable && ++failedWatches >= WATCH_FAILURES_RELIST);
          if (relist) {
            this.#stats.relistsWatchFailed++;
            rv = "";
            failedWatches = 0;
          }
          const wait = pauseAfter(r.error, pause, this.#opts);
          log.warn(`Pod watch failed, ${relist ? "re-listing" : "retrying"}`, {
            err: describe(r.error),
            retryInMs: wait,
          });
          await sleep(this.#clock, wait, signal);
          pause = nextBackoff(pause, this.#opts);
          continue;
        }
        if (progressed) {
          pause = this.#opts.initialMs ?? 500;
          emptyWatches = 0;
          failedWatches = 0;
        } else if (++emptyWatches > 2) {
          // Watches in a row that brought nothing new (each ended at once, or 410 Gone again
          // after its re-list): back off before the next one, or a server (or a proxy) answering so
          // would get a list or a watch per round trip, thousands a second. A drop, and the
          // 410 Gone that may follow it, resume at once.
          this.#stats.watchesBackedOff++;
          const suppressed = this.#informerLog.allow("no-progress");
          if (suppressed >= 0) {
            log.info("Pod watches end without progress: backing off", {
              inARow: emptyWatches,
              lastedMs: lasted,
              retryInMs: pause,
              suppressed,
            });
          }
          await sleep(this.#clock, pause, signal);
          pause = nextBackoff(pause, this.#opts);
        }
      } catch (err) {
        if (err instanceof RetryAborted) throw err;
        // A list that is no list, or anything else the API server can make us trip on: the
        // informer goes on (re-listing after a pause) rather than stop for good.
        this.#stats.failures++;
        log.warn("Pod informer failed, re-listing", { err: describe(err), retryInMs: pause });
        rv = "";
        failedWatches = 0;
        await sleep(this.#clock, pause, signal);
        pause = nextBackoff(pause, this.#opts);
      }
    }
  }

  /** One watch stream until it ends; the last resourceVersion seen and why it ended. */
  #watchOnce(
    api: KubeApi,
    from: string,
    signal: AbortSignal,
  ): Promise<
    { resourceVersion: string; gone: boolean; error?: unknown; errorEvent: boolean; events: number }
  > {
    const result = {
      resourceVersion: from,
      gone: false,
      error: undefined as unknown,
      errorEvent: false,
      events: 0,
    };
    const done = Promise.withResolvers<typeof result>();
    const onEvent = (ev: WatchEvent): void => {
      const rv = ev.object?.metadata?.resourceVersion;
      switch (ev.type) {
        case "ADDED":
        case "MODIFIED":
        case "DELETED":
          if (!this.#applyChecked(ev.type, ev.object)) break;
          this.#stats.events++;
          result.events++;
          this.#lastHeardMs = this.#clock.nowMs();
          if (rv) result.resourceVersion = rv;
          break;
        case "BOOKMARK":
          this.#lastHeardMs = this.#clock.nowMs();
          if (rv) result.resourceVersion = rv;
          break;
        case "ERROR":
          if (ev.object?.code === 410) result.gone = true;
          else {
            result.error = new Error(
              `watch error: ${ev.object?.code ?? "no code"}: ${
                String(ev.object?.message ?? "unknown").slice(0, 300)
              }`,
            );
            result.errorEvent = true;
          }
          // The stream is over; close it now rather than wait for the server to.
          handle?.abort();
          done.resolve(result);
          break;
        default:
          // A type this client does not know (a newer server's, or garbage): counted, skipped.
          this.#stats.malformed++;
          if (this.#malformedLog.allow("event-type") >= 0) {
            log.warn("Kubernetes API sent a watch event of an unknown type: skipped", {
              type: ev.type.slice(0, 64),
            });
          }
          break;
      }
    };
    const onDone = (err: unknown): void => {
      // Some API servers answer a too-old resourceVersion with HTTP 410 rather than an event.
      if (statusOf(err) === 410) result.gone = true;
      // An abort we asked for (410, stop) is not an error.
      if (err && !result.gone && !signal.aborted && result.error === undefined) {
        result.error = err;
      }
      done.resolve(result);
    };
    this.#stats.watches++;
    let handle: WatchHandle | undefined;
    const onMalformed = (detail: string): void => {
      this.#stats.malformed++;
      if (this.#malformedLog.allow("malformed") >= 0) {
        log.warn("Kubernetes API sent a watch line that is no event: skipped", { detail });
      }
    };
    api.watchPods(from, { onEvent, onDone, onMalformed }).then(
      (h) => {
        handle = h;
        this.#watch = h;
        if (signal.aborted || result.gone || result.error !== undefined) h.abort();
      },
      (err) => onDone(err ?? new Error("watch failed")),
    );
    const onAbort = (): void => done.resolve(result);
    signal.addEventListener("abort", onAbort, { once: true });
    return done.promise.finally(() => signal.removeEventListener("abort", onAbort));
  }
}
