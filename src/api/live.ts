/**
 * The live flow view's data (`/ui`, `/ui/events`): the export loop hands every exported flow to
 * {@linkcode LiveView.observe} (O(1), bounded memory), and each connected page receives one
 * summary per second over Server-Sent Events: throughput per second over the last minutes, top
 * talkers (source and destination Pod, namespace, Node, Service) over the last minute, the
 * latest denied flows, a sample of recent flows (at most {@linkcode ROWS_PER_SECOND} per second
 * whatever the export rate) and the loss ledger. The server samples and aggregates; the page
 * never receives more than a bounded number of rows.
 *
 * The seconds of the history and the top-talker windows are counted on monotonic time: on the
 * wall clock, a step back (NTP, a VM resumed) stopped both (measured, a −1 h step: 2,100
 * per-second points 30 minutes later where 300 is the cap, and a "last minute" of top talkers
 * summing 30 minutes). The page still sees wall-clock seconds: each point is labelled, when a
 * summary is made, with the wall clock's current second minus the point's age, so the labels
 * follow a step as a whole and always count up.
 *
 * @module
 */

import type { ExportedFlow } from "../aggregation/record.ts";
import { type Clock, systemClock } from "../clock.ts";
import { exportedAddress } from "../aggregation/flow_key.ts";
import {
  type BatchField,
  batchField,
  batchNumber,
  batchRowBase,
  batchStringIndex,
  type FlowBatch,
  readFlowAt,
} from "../exporters/batch.ts";

/** The fields the view reads from a batch's rows (every exported IE is carried). */
const F = Object.fromEntries(
  [
    "octetDeltaCount",
    "reverseOctetDeltaCount",
    "sourcePodNamespace",
    "sourcePodName",
    "destinationPodNamespace",
    "destinationPodName",
    "sourceNodeName",
    "destinationNodeName",
    "destinationServicePortName",
    "ingressNetworkPolicyRuleAction",
    "egressNetworkPolicyRuleAction",
  ].map((ie) => {
    const f = batchField(ie);
    if (f === undefined) throw new Error(`live view: ${ie} is not carried by batches`);
    return [ie, f];
  }),
) as Record<string, BatchField>;

/** Rows of recent flows a page receives per second at most. */
export const ROWS_PER_SECOND = 50;
/** Seconds of throughput history. */
export const HISTORY_SECONDS = 300;
/** Distinct names tracked per top-talker category per window (more are counted as "other"). */
const MAX_KEYS = 10_000;
/** Denied flows kept. */
const DENIED_KEPT = 50;
/** Concurrent event streams (pages) served. */
export const MAX_STREAMS = 16;

/** One recent flow as the page shows it. */
export interface LiveRow {
  t: number;
  src: string;
  dst: string;
  sport: number;
  dport: number;
  proto: number;
  srcPod: string;
  dstPod: string;
  srcNs: string;
  dstNs: string;
  service: string;
  bytes: number;
  action: string;
}

/** Top-talker categories. */
const CATEGORIES = ["sourcePod", "destinationPod", "namespace", "node", "service"] as const;
type Category = typeof CATEGORIES[number];

/** One summary sent to the page. */
export interface LiveSummary {
  /** Wall-clock ms of the summary. */
  time: number;
  /**
   * Per second: [unix second, bytes, flows], oldest first; the seconds are counted on monotonic
   * time and labelled by the wall clock now (its second minus their age).
   */
  throughput: [number, number, number][];
  /** Per category, the 10 largest by bytes over the last one to two minutes. */
  top: Record<Category, [string, number][]>;
  /** Latest denied flows, newest first. */
  denied: LiveRow[];
  /** Flows sampled since the previous summary. */
  rows: LiveRow[];
  /** Flows seen / sampled into rows since start. */
  seen: number;
  /** The process's ledger counters. */
  ledger: Record<string, number>;
}

const ACTIONS: Record<number, string> = { 1: "allow", 2: "drop", 3: "reject" };

function num(v: unknown): number {
  return typeof v === "bigint" ? Number(v) : typeof v === "number" ? v : 0;
}

function str(v: unknown): string {
  return typeof v === "string" ? v : "";
}

/** Aggregates exported flows for the live view. */
export class LiveView {
  readonly #clock: Clock;
  /**
   * Wall minus monotonic time at start: a monotonic time plus it is the wall time as long as the
   * wall clock is not stepped, so seconds are counted in step with the wall clock's.
   */
  readonly #offset: number;
  /** Per second of monotonic time (plus {@linkcode #offset}): bytes and flows, oldest first. */
  readonly #seconds = new Map<number, [number, number]>();
  #windows: Talkers[][] = [newWindow(), newWindow()];
  /** Monotonic time the current top-talker window started. */
  #windowStart: number;
  #denied: LiveRow[] = [];
  #pending: LiveRow[] = [];
  #rowSecond = 0;
  #rowsThisSecond = 0;
  #seen = 0;
  /**
   * Per category, the bytes of the batch being read per distinct name, by string-table index
   * (a Pod by its namespace's and name's): the window's string maps are touched once per name
   * and batch, not once per flow. Emptied after each batch.
   */
  readonly #batchBytes: BatchTally[] = CATEGORIES.map(() => new BatchTally());

  /** A view on `clock` (default the system clock): monotonic windows, wall-clock labels. */
  constructor(clock: Clock = systemClock) {
    this.#clock = clock;
    const mono = clock.nowMs();
    this.#offset = clock.wallMs() - mono;
    this.#windowStart = mono;
  }

  /** Takes one exported flow. Never throws. */
  observe(flow: ExportedFlow): void {
    try {
      this.#observe(flow);
    } catch {
      // A malformed record must not disturb the export loop; the view just misses it.
    }
  }

  /**
   * Takes every flow of a batch in the sinks' row format (an aggregation shard's), reading only
   * the fields the view needs from the rows: names are counted by their index in the batch's
   * string table and resolved once per batch; a flow is decoded only to become a row of the
   * page (sampled or denied). The same as {@linkcode observe} for each flow. Never throws.
   */
  observeBatch(batch: FlowBatch): void {
    const mono = this.#clock.nowMs();
    const sec = this.#second(mono);
    const now = this.#clock.wallMs();
    const strings = batch.strings;
    const acc = this.#batchBytes;
    const n = batchNumber;
    const ix = batchStringIndex;
    let total = 0;
    let flows = 0;
    // Only the batch's newest DENIED_KEPT denied flows can stay in the list: the older ones are
    // decoded into rows only when sampled (a denied-heavy batch is not decoded whole).
    let unlisted = this.#deniedIn(batch) - DENIED_KEPT;
    for (let r = 0; r < batch.count; r++) {
      try {
        const b = batchRowBase(r);
        const bytes = n(batch, b, F.octetDeltaCount) + n(batch, b, F.reverseOctetDeltaCount);
        const srcNs = ix(batch, b, F.sourcePodNamespace);
        const srcPod = ix(batch, b, F.sourcePodName);
        const dstNs = ix(batch, b, F.destinationPodNamespace);
        const dstPod = ix(batch, b, F.destinationPodName);
        const node = ix(batch, b, F.sourceNodeName) || ix(batch, b, F.destinationNodeName);
        const service = ix(batch, b, F.destinationServicePortName);
        const ingress = n(batch, b, F.ingressNetworkPolicyRuleAction);
        const egress = n(batch, b, F.egressNetworkPolicyRuleAction);
        total += bytes;
        flows++;
        // Indices in CATEGORIES order; 0 is "no name".
        if (srcPod !== 0) acc[0].add(srcNs, srcPod, bytes);
        if (dstPod !== 0) acc[1].add(dstNs, dstPod, bytes);
        if ((srcNs || dstNs) !== 0) acc[2].add(0, srcNs || dstNs, bytes);
        if (node !== 0) acc[3].add(0, node, bytes);
        if (service !== 0) acc[4].add(0, service, bytes);
        const deniedBy = deniedOf(ingress, egress);
        const listed = deniedBy !== 0 && unlisted-- <= 0;
        if (listed || this.#sampling(sec)) {
          const t = (i: number) => strings[i] ?? "";
          this.#keep(now, sec, bytes, t(srcNs), t(srcPod), t(dstNs), t(dstPod), t(service), {
            ingress,
            egress,
            deniedBy,
          }, readFlowAt(batch, r));
        }
      } catch {
        // As observe: a malformed row is missed, not fatal.
      }
    }
    this.#count(mono, total, flows);
    for (let i = 0; i < acc.length; i++) {
      // The Pod categories carry the namespace; the others name alone (ns 0: "").
      acc[i].drain((ns, name, bytes) =>
        this.#tally(i, i < 2 ? strings[ns] ?? "" : "", strings[name] ?? "", bytes)
      );
    }
  }

  #observe(flow: ExportedFlow): void {
    const r = flow.record as unknown as Record<string, unknown>;
    const mono = this.#clock.nowMs();
    const bytes = num(r.octetDeltaCount) + num(r.reverseOctetDeltaCount);
    const sec = this.#count(mono, bytes, 1);
    const srcNs = str(r.sourcePodNamespace);
    const srcPod = str(r.sourcePodName);
    const dstNs = str(r.destinationPodNamespace);
    const dstPod = str(r.destinationPodName);
    const service = str(r.destinationServicePortName);
    // In CATEGORIES order.
    this.#tally(0, srcNs, srcPod, bytes);
    this.#tally(1, dstNs, dstPod, bytes);
    this.#tally(2, "", srcNs || dstNs, bytes);
    this.#tally(3, "", str(r.sourceNodeName) || str(r.destinationNodeName), bytes);
    this.#tally(4, "", service, bytes);
    const ingress = num(r.ingressNetworkPolicyRuleAction);
    const egress = num(r.egressNetworkPolicyRuleAction);
    const deniedBy = deniedOf(ingress, egress);
    if (deniedBy !== 0 || this.#sampling(sec)) {
      this.#keep(this.#clock.wallMs(), sec, bytes, srcNs, srcPod, dstNs, dstPod, service, {
        ingress,
        egress,
        deniedBy,
      }, flow);
    }
  }

  /**
   * Counts `flows` flows of `bytes` in the second of monotonic time `mono` and starts a new
   * top-talker window when the current one is a minute old; returns the second.
   */
  #count(mono: number, bytes: number, flows: number): number {
    const sec = this.#second(mono);
    this.#seen += flows;
    const s = this.#seconds.get(sec);
    if (s === undefined) {
      this.#seconds.set(sec, [bytes, flows]);
      for (const k of this.#seconds.keys()) {
        if (k > sec - HISTORY_SECONDS) break;
        this.#seconds.delete(k);
      }
    } else {
      s[0] += bytes;
      s[1] += flows;
    }
    if (mono - this.#windowStart >= 60_000) {
      this.#windows = [this.#windows[1], newWindow()];
      this.#windowStart = mono;
    }
    return sec;
  }

  /** The second of monotonic time `mono`: the wall clock's, until the wall clock is stepped. */
  #second(mono: number): number {
    return Math.floor((mono + this.#offset) / 1000);
  }

  /**
   * Adds `bytes` to a name in category `i` of the current window: Pod `name` of namespace `ns`
   * (shown `ns/name`) for the Pod categories, `name` alone (`ns` "") for the others; "" is no
   * name.
   */
  #tally(i: number, ns: string, name: string, bytes: number): void {
    if (name !== "") this.#windows[1][i].add(ns, name, bytes);
  }

  /** Whether a flow of second `sec` is within the second's sample of rows. */
  #sampling(sec: number): boolean {
    return sec !== this.#rowSecond || this.#rowsThisSecond < ROWS_PER_SECOND;
  }

  /** The denied flows of a batch (malformed rows not counted). */
  #deniedIn(batch: FlowBatch): number {
    let denied = 0;
    for (let r = 0; r < batch.count; r++) {
      try {
        const b = batchRowBase(r);
        const ingress = batchNumber(batch, b, F.ingressNetworkPolicyRuleAction);
        if (deniedOf(ingress, batchNumber(batch, b, F.egressNetworkPolicyRuleAction)) !== 0) {
          denied++;
        }
      } catch {
        // Counted as not denied; the main pass misses it the same way.
      }
    }
    return denied;
  }

  /**
   * Keeps flow `f` as a row stamped `now` (wall time): in the denied list if denied, in the
   * sample if it fits.
   */
  #keep(
    now: number,
    sec: number,
    bytes: number,
    srcNs: string,
    srcPod: string,
    dstNs: string,
    dstPod: string,
    service: string,
    actions: { ingress: number; egress: number; deniedBy: number },
    f: ExportedFlow,
  ): void {
    const { ingress, egress, deniedBy } = actions;
    const sampled = this.#sampling(sec);
    const row: LiveRow = {
      t: now,
      src: exportedAddress(f, false),
      dst: exportedAddress(f, true),
      sport: f.key.sourcePort,
      dport: f.key.destinationPort,
      proto: f.key.protocol,
      srcPod,
      dstPod,
      srcNs,
      dstNs,
      service,
      bytes,
      action: ACTIONS[deniedBy || Math.max(ingress, egress)] ?? "",
    };
    if (deniedBy !== 0) {
      this.#denied.unshift(row);
      if (this.#denied.length > DENIED_KEPT) this.#denied.length = DENIED_KEPT;
    }
    if (sampled) {
      if (sec !== this.#rowSecond) {
        this.#rowSecond = sec;
        this.#rowsThisSecond = 0;
      }
      this.#rowsThisSecond++;
      this.#pending.push(row);
      // A page that stopped reading never makes this grow: one second's worth is kept.
      if (this.#pending.length > ROWS_PER_SECOND) this.#pending.shift();
    }
  }

  /** The summary for the pages; the sampled rows are handed out once. */
  summary(ledger: Record<string, number>): LiveSummary {
    const top = {} as Record<Category, [string, number][]>;
    CATEGORIES.forEach((c, i) => {
      const merged = new Map<string, number>();
      for (const w of this.#windows) {
        w[i].forEach((name, bytes) => merged.set(name, (merged.get(name) ?? 0) + bytes), i < 2);
      }
      top[c] = [...merged].sort((a, b) => b[1] - a[1]).slice(0, 10);
    });
    const rows = this.#pending;
    this.#pending = [];
    const wall = this.#clock.wallMs();
    // The wall clock's lead over the seconds counted (0 unless it was stepped): whole seconds,
    // so a point keeps its label while the clock is not stepped.
    const shift = Math.round((wall - (this.#clock.nowMs() + this.#offset)) / 1000);
    return {
      time: wall,
      throughput: [...this.#seconds].map(([s, [b, f]]) => [s + shift, b, f]),
      top,
      denied: [...this.#denied],
      rows,
      seen: this.#seen,
      ledger,
    };
  }
}

/**
 * Bytes per name of one batch, keyed by the name's string-table index and its namespace's (0
 * outside the Pod categories), in an open-addressing table of typed arrays reused from batch to
 * batch, with its slots listed in the order first seen. A Map per category, cleared after each
 * batch and grown again, allocated its tables for every batch: the largest part of the garbage
 * the main thread promoted to its old space at 10,000 exports/s (docs/udp-ingest.md).
 */
class BatchTally {
  /** Name index per slot; 0: empty (0 is "no name", never added). */
  #name = new Int32Array(512);
  #ns = new Int32Array(512);
  #bytes = new Float64Array(512);
  /** Slots in use, first seen first. */
  #used = new Int32Array(256);
  #count = 0;
  /** 32 minus log2 of the table's size. */
  #shift = 32 - 9;

  /** Adds `bytes` to name index `name` (> 0) of namespace index `ns`. */
  add(ns: number, name: number, bytes: number): void {
    if (2 * (this.#count + 1) > this.#name.length) this.#grow();
    const slot = this.#find(ns, name);
    if (this.#name[slot] === 0) {
      this.#name[slot] = name;
      this.#ns[slot] = ns;
      this.#bytes[slot] = bytes;
      this.#used[this.#count++] = slot;
    } else this.#bytes[slot] += bytes;
  }

  /** Hands every name's bytes to `fn` (first seen first) and empties the tally. */
  drain(fn: (ns: number, name: number, bytes: number) => void): void {
    for (let i = 0; i < this.#count; i++) {
      const slot = this.#used[i];
      fn(this.#ns[slot], this.#name[slot], this.#bytes[slot]);
      this.#name[slot] = 0;
    }
    this.#count = 0;
  }

  /** The slot of (ns, name), or the empty slot where it goes (linear probing). */
  #find(ns: number, name: number): number {
    const mask = this.#name.length - 1;
    // Fibonacci hashing: the top bits of the product (the low ones of consecutive indices,
    // which is what string-table indices are, would just count up).
    let slot = Math.imul(name ^ Math.imul(ns + 1, 0x85ebca6b), 0x9e3779b1) >>> this.#shift;
    for (;;) {
      const n = this.#name[slot];
      if (n === 0 || (n === name && this.#ns[slot] === ns)) return slot;
      slot = (slot + 1) & mask;
    }
  }

  /** Doubles the table, keeping the entries of the batch being read and their order. */
  #grow(): void {
    const name = this.#name, ns = this.#ns, bytes = this.#bytes, used = this.#used;
    const size = name.length * 2;
    this.#name = new Int32Array(size);
    this.#ns = new Int32Array(size);
    this.#bytes = new Float64Array(size);
    this.#used = new Int32Array(size / 2);
    this.#shift--;
    for (let i = 0; i < this.#count; i++) {
      const from = used[i];
      const to = this.#find(ns[from], name[from]);
      this.#name[to] = name[from];
      this.#ns[to] = ns[from];
      this.#bytes[to] = bytes[from];
      this.#used[i] = to;
    }
  }
}

/** Whether a rule action denies: Drop (2) and Reject (3); Allow, Pass, Redirect do not. */
function denies(action: number): boolean {
  return action === 2 || action === 3;
}

/** The denying action of a flow (ingress first), or 0. */
function deniedOf(ingress: number, egress: number): number {
  return denies(ingress) ? ingress : denies(egress) ? egress : 0;
}

/** Bytes by name, mutable in place: one map lookup per update. */
interface Tally {
  bytes: number;
}

/**
 * Bytes per name of one top-talker category over one window, keyed by namespace then name (a
 * Pod's name is shown `namespace/name`, never built per flow; other categories use namespace
 * ""). At most {@linkcode MAX_KEYS} names; the bytes of later ones are counted as "(other)".
 */
class Talkers {
  readonly #byNs = new Map<string, Map<string, Tally>>();
  #size = 0;
  #other: Tally | undefined;

  add(ns: string, name: string, bytes: number): void {
    let names = this.#byNs.get(ns);
    let t = names?.get(name);
    if (t === undefined) {
      if (this.#size >= MAX_KEYS) {
        (this.#other ??= { bytes: 0 }).bytes += bytes;
        return;
      }
      if (names === undefined) this.#byNs.set(ns, names = new Map());
      names.set(name, t = { bytes: 0 });
      this.#size++;
    }
    t.bytes += bytes;
  }

  /** Calls `f` with each name (`ns/name` when `pods`) and its bytes, "(other)" last. */
  forEach(f: (name: string, bytes: number) => void, pods: boolean): void {
    for (const [ns, names] of this.#byNs) {
      for (const [name, t] of names) f(pods ? `${ns}/${name}` : name, t.bytes);
    }
    if (this.#other !== undefined) f("(other)", this.#other.bytes);
  }
}

/** One window: a {@linkcode Talkers} per category, in CATEGORIES order. */
function newWindow(): Talkers[] {
  return CATEGORIES.map(() => new Talkers());
}

/**
 * The event streams of the connected pages: one summary per second, computed once and sent to
 * every page (at most {@linkcode MAX_STREAMS}); the timer runs only while a page is connected.
 */
export class LiveHub {
  readonly view: LiveView;
  readonly #ledger: () => Record<string, number>;
  readonly #streams = new Set<ReadableStreamDefaultController<Uint8Array>>();
  /** Each stream's `onSlow` (see {@linkcode open}). */
  readonly #onSlow = new Map<ReadableStreamDefaultController<Uint8Array>, () => void>();
  readonly #periodMs: number;
  #timer: ReturnType<typeof setInterval> | undefined;

  /** A hub over `view`; `ledger` reads the process's counters; `periodMs` default 1000. */
  constructor(view: LiveView, ledger: () => Record<string, number>, periodMs = 1000) {
    this.view = view;
    this.#ledger = ledger;
    this.#periodMs = periodMs;
  }

  /** Connected pages. */
  get streams(): number {
    return this.#streams.size;
  }

  /**
   * A new event stream, or undefined when {@linkcode MAX_STREAMS} pages are connected;
   * `onSlow` is called if it is dropped for not reading its events.
   */
  open(onSlow: () => void = () => {}): ReadableStream<Uint8Array> | undefined {
    if (this.#streams.size >= MAX_STREAMS) return undefined;
    let me: ReadableStreamDefaultController<Uint8Array> | undefined;
    return new ReadableStream<Uint8Array>({
      start: (c) => {
        me = c;
        this.#streams.add(c);
        this.#onSlow.set(c, onSlow);
        // A comment line at once, so the page knows the stream is open.
        c.enqueue(new TextEncoder().encode(": connected\n\n"));
        this.#timer ??= setInterval(() => this.#tick(), this.#periodMs);
      },
      cancel: () => this.#drop(me),
    });
  }

  #drop(c: ReadableStreamDefaultController<Uint8Array> | undefined): void {
    if (c !== undefined) {
      this.#streams.delete(c);
      this.#onSlow.delete(c);
    }
    if (this.#streams.size === 0 && this.#timer !== undefined) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }

  #tick(): void {
    const data = new TextEncoder().encode(
      `data: ${JSON.stringify(this.view.summary(this.#ledger()))}\n\n`,
    );
    for (const c of this.#streams) {
      // A page that reads too slowly is dropped rather than buffered without bound (counted
      // and logged by whoever opened it: dropped silently before).
      if ((c.desiredSize ?? 0) < -16) {
        const onSlow = this.#onSlow.get(c);
        c.close();
        this.#drop(c);
        onSlow?.();
        continue;
      }
      try {
        c.enqueue(data);
      } catch {
        this.#drop(c);
      }
    }
  }

  /** Closes every stream and stops the timer. */
  close(): void {
    for (const c of this.#streams) {
      try {
        c.close();
      } catch {
        // already closed
      }
    }
    this.#streams.clear();
    this.#drop(undefined);
  }
}
