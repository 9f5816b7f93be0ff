/**
 * The live flow view's data (`/ui`, `/ui/events`): the export loop hands every exported flow to
 * {@linkcode LiveView.observe} (O(1), bounded memory), and each connected page receives one
 * summary per second over Server-Sent Events: throughput per second over the last minutes, top
 * talkers (source and destination Pod, namespace, Node, Service) over the last minute, the
 * latest denied flows, a sample of recent flows (at most {@linkcode ROWS_PER_SECOND} per second
 * whatever the export rate) and the loss ledger. The server samples and aggregates; the page
 * never receives more than a bounded number of rows.
 *
 * @module
 */

import type { ExportedFlow } from "../aggregation/record.ts";
import { exportedAddress } from "../aggregation/flow_key.ts";
import {
  type BatchField,
  batchField,
  batchNumber,
  batchRowBase,
  batchString,
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
  /** Per second: [unix second, bytes, flows], oldest first. */
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
  readonly #now: () => number;
  readonly #seconds = new Map<number, [number, number]>();
  #windows: Map<string, number>[][] = [
    CATEGORIES.map(() => new Map()),
    CATEGORIES.map(() => new Map()),
  ];
  #windowStart: number;
  #denied: LiveRow[] = [];
  #pending: LiveRow[] = [];
  #rowSecond = 0;
  #rowsThisSecond = 0;
  #seen = 0;
  readonly #names: string[] = CATEGORIES.map(() => "");

  /** A view on the wall clock `now` (injected in tests). */
  constructor(now: () => number = Date.now) {
    this.#now = now;
    this.#windowStart = now();
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
   * the fields the view needs from the rows; a flow is decoded only to become a row of the page
   * (sampled or denied). The same as {@linkcode observe} for each flow. Never throws.
   */
  observeBatch(batch: FlowBatch): void {
    const n = batchNumber;
    const t = batchString;
    for (let r = 0; r < batch.count; r++) {
      try {
        const b = batchRowBase(r);
        this.#take(
          n(batch, b, F.octetDeltaCount) + n(batch, b, F.reverseOctetDeltaCount),
          t(batch, b, F.sourcePodNamespace),
          t(batch, b, F.sourcePodName),
          t(batch, b, F.destinationPodNamespace),
          t(batch, b, F.destinationPodName),
          t(batch, b, F.sourceNodeName) || t(batch, b, F.destinationNodeName),
          t(batch, b, F.destinationServicePortName),
          n(batch, b, F.ingressNetworkPolicyRuleAction),
          n(batch, b, F.egressNetworkPolicyRuleAction),
          batch,
          r,
        );
      } catch {
        // As observe: a malformed row is missed, not fatal.
      }
    }
  }

  #observe(flow: ExportedFlow): void {
    const r = flow.record as unknown as Record<string, unknown>;
    this.#take(
      num(r.octetDeltaCount) + num(r.reverseOctetDeltaCount),
      str(r.sourcePodNamespace),
      str(r.sourcePodName),
      str(r.destinationPodNamespace),
      str(r.destinationPodName),
      str(r.sourceNodeName) || str(r.destinationNodeName),
      str(r.destinationServicePortName),
      num(r.ingressNetworkPolicyRuleAction),
      num(r.egressNetworkPolicyRuleAction),
      flow,
      -1,
    );
  }

  /**
   * One flow by the fields the view keeps (positional: this runs for every exported flow);
   * the whole flow, needed when it becomes a row, is `from` itself (`at` < 0) or row `at` of batch `from`.
   */
  #take(
    bytes: number,
    srcNs: string,
    srcPod: string,
    dstNs: string,
    dstPod: string,
    node: string,
    service: string,
    ingress: number,
    egress: number,
    from: ExportedFlow | FlowBatch,
    at: number,
  ): void {
    const now = this.#now();
    const sec = Math.floor(now / 1000);
    this.#seen++;
    const s = this.#seconds.get(sec);
    if (s === undefined) {
      this.#seconds.set(sec, [bytes, 1]);
      for (const k of this.#seconds.keys()) {
        if (k > sec - HISTORY_SECONDS) break;
        this.#seconds.delete(k);
      }
    } else {
      s[0] += bytes;
      s[1]++;
    }
    if (now - this.#windowStart >= 60_000) {
      this.#windows = [this.#windows[1], CATEGORIES.map(() => new Map())];
      this.#windowStart = now;
    }
    const cur = this.#windows[1];
    // Per exported flow: one scratch array (in CATEGORIES order) and a closure-free loop.
    const names = this.#names;
    names[0] = podName(srcNs, srcPod);
    names[1] = podName(dstNs, dstPod);
    names[2] = srcNs || dstNs;
    names[3] = node;
    names[4] = service;
    for (let i = 0; i < names.length; i++) {
      const name = names[i];
      if (name === "") continue;
      const m = cur[i];
      const key = m.has(name) || m.size < MAX_KEYS ? name : "(other)";
      m.set(key, (m.get(key) ?? 0) + bytes);
    }
    // Drop (2) and Reject (3) deny; other actions (Allow, Pass, Redirect) do not.
    const denies = (a: number) => a === 2 || a === 3;
    const deniedBy = denies(ingress) ? ingress : denies(egress) ? egress : 0;
    const sampled = sec === this.#rowSecond ? this.#rowsThisSecond < ROWS_PER_SECOND : true;
    if (!sampled && deniedBy === 0) return;
    const f = at < 0 ? from as ExportedFlow : readFlowAt(from as FlowBatch, at);
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
      const merged = new Map(this.#windows[0][i]);
      for (const [k, v] of this.#windows[1][i]) merged.set(k, (merged.get(k) ?? 0) + v);
      top[c] = [...merged].sort((a, b) => b[1] - a[1]).slice(0, 10);
    });
    const rows = this.#pending;
    this.#pending = [];
    return {
      time: this.#now(),
      throughput: [...this.#seconds].map(([s, [b, f]]) => [s, b, f]),
      top,
      denied: [...this.#denied],
      rows,
      seen: this.#seen,
      ledger,
    };
  }
}

function podName(ns: string, name: string): string {
  return name === "" ? "" : `${ns}/${name}`;
}

/**
 * The event streams of the connected pages: one summary per second, computed once and sent to
 * every page (at most {@linkcode MAX_STREAMS}); the timer runs only while a page is connected.
 */
export class LiveHub {
  readonly view: LiveView;
  readonly #ledger: () => Record<string, number>;
  readonly #streams = new Set<ReadableStreamDefaultController<Uint8Array>>();
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

  /** A new event stream, or undefined when {@linkcode MAX_STREAMS} pages are connected. */
  open(): ReadableStream<Uint8Array> | undefined {
    if (this.#streams.size >= MAX_STREAMS) return undefined;
    let me: ReadableStreamDefaultController<Uint8Array> | undefined;
    return new ReadableStream<Uint8Array>({
      start: (c) => {
        me = c;
        this.#streams.add(c);
        // A comment line at once, so the page knows the stream is open.
        c.enqueue(new TextEncoder().encode(": connected\n\n"));
        this.#timer ??= setInterval(() => this.#tick(), this.#periodMs);
      },
      cancel: () => this.#drop(me),
    });
  }

  #drop(c: ReadableStreamDefaultController<Uint8Array> | undefined): void {
    if (c !== undefined) this.#streams.delete(c);
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
      // A page that reads too slowly is dropped rather than buffered without bound.
      if ((c.desiredSize ?? 0) < -16) {
        c.close();
        this.#drop(c);
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
