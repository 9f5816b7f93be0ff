/**
 * Benchmark harness: `deno task bench` runs the full suite (under 10 minutes on 2 cores),
 * `deno task bench --quick` a smoke version in seconds for CI. Prints a table and writes
 * `bench/latest.json` with one number per key (null when a part is not implemented yet or could
 * not run, with the reason in `notes`) plus the raw trials under `details`.
 *
 * Flags: --quick, --only=udp,decode,aggregate,e2e,heap,rss (comma list), --out=<path>.
 *
 * Each measurement is a separate function: UDP ingest (scripts/bench/udp.ts), codec and
 * aggregation core (scripts/bench/core.ts), and the process-level parts by the process
 * benchmark author (scripts/bench/e2e.ts, memory.ts, process.ts). Rates measured on a shared
 * machine are noisy: compare a figure only with the baseline measured in the same run.
 */

import {
  BIG_RCVBUF,
  buildUdpTools,
  measureReceiver,
  nfcapdAvailable,
  nfcapdTrial,
  type ReceiverResult,
  receiverSpecs,
  searchLosslessRate,
  type SearchResult,
} from "./bench/udp.ts";
import { benchAggregateRate, benchDecodeRates } from "./bench/core.ts";
import { benchE2eTcp as runE2e } from "./bench/e2e.ts";
import { benchHeapPerFlow } from "./bench/memory.ts";
import { benchRssIdle as measureRssIdle } from "./bench/process.ts";

/** Keys of bench/latest.json; null = not measured (see notes). */
export interface BenchResults {
  /** Single-record messages decoded per second (codec, template known). */
  decode_records_per_s: number | null;
  /** Records per second decoded from multi-record messages. */
  decode_batch_records_per_s: number | null;
  /** Decoded records aggregated (correlated) per second by the core. */
  aggregate_records_per_s: number | null;
  /** Records per second through the real process over TCP (send, decode, aggregate). */
  e2e_tcp_records_per_s: number | null;
  /** Highest lossless UDP rate of src/collector/udp_fast.ts (default settings). */
  udp_lossless_records_per_s: number | null;
  /** Highest lossless rate of the C recv() baseline in the same run, same socket buffer. */
  udp_c_baseline_per_s: number | null;
  /** Highest lossless rate of Debian nfcapd (records stored) in the same run. */
  udp_nfcapd_per_s: number | null;
  /** Heap bytes per aggregated flow with 100k flows. */
  heap_bytes_per_flow_100k: number | null;
  /** Heap bytes per aggregated flow with 1M flows. */
  heap_bytes_per_flow_1m: number | null;
  /** Resident set size of the idle process. */
  rss_bytes_idle: number | null;
}

/** A benchmark run's full output. */
export interface BenchReport {
  /** ISO time of the run. */
  time: string;
  /** Smoke mode. */
  quick: boolean;
  /** Deno and machine facts. */
  env: Record<string, unknown>;
  /** The headline figures. */
  results: BenchResults;
  /** Why a figure is null, how it was measured. */
  notes: Record<string, string>;
  /** Raw measurements (trials per receiver...). */
  details: Record<string, unknown>;
}

/** Context handed to each benchmark part. */
export interface BenchContext {
  /** Smoke mode: tiny sizes, short trials. */
  quick: boolean;
  /** Results to fill. */
  results: BenchResults;
  /** Notes per key. */
  notes: Record<string, string>;
  /** Raw data per part. */
  details: Record<string, unknown>;
  /** performance.now() at the start of the run. */
  startedMs: number;
}

/** Wall-time budget of a full run (the e2e search adapts to what is left). */
const FULL_BUDGET_SEC = 570;

function emptyResults(): BenchResults {
  return {
    decode_records_per_s: null,
    decode_batch_records_per_s: null,
    aggregate_records_per_s: null,
    e2e_tcp_records_per_s: null,
    udp_lossless_records_per_s: null,
    udp_c_baseline_per_s: null,
    udp_nfcapd_per_s: null,
    heap_bytes_per_flow_100k: null,
    heap_bytes_per_flow_1m: null,
    rss_bytes_idle: null,
  };
}

// ---------------------------------------------------------------------------------------------
// UDP ingest (owner: udp_fast). Rate search per receive path; see docs/udp-ingest.md.

/** Measures udp_lossless_records_per_s, udp_c_baseline_per_s and udp_nfcapd_per_s. */
export async function benchUdp(ctx: BenchContext): Promise<void> {
  const tools = await buildUdpTools();
  try {
    const search = ctx.quick
      ? { start: 20_000, max: 40_000, min: 5_000, refine: 0, seconds: 0.3, sources: 4 }
      : { start: 10_000, max: 640_000, min: 2_500, refine: 2, seconds: 1.5, sources: 4 };
    const names = ctx.quick ? ["c_recv", "udp_fast"] : [
      "c_recv",
      "udp_fast",
      "udp_fast_2w",
      "deno_listenDatagram",
      "node_dgram",
      "c_recv_defbuf",
      "udp_fast_defbuf",
    ];
    const cpuRates = ctx.quick ? [10_000] : [5_000, 20_000, 100_000];
    const per: Record<string, ReceiverResult | (SearchResult & { rcvbuf: number })> = {};
    for (const spec of receiverSpecs(tools, names)) {
      progress(`udp: rate search ${spec.name}`);
      const r = await measureReceiver(tools, spec, { ...search, cpuRates });
      per[spec.name] = r;
      progress(
        `udp: ${spec.name} lossless ${r.lossless}/s${r.senderLimited ? " (sender-limited)" : ""}` +
          `; CPU us/datagram ${
            r.cpu.map((c) => `${c.microsPerDatagram} at ${c.rate}/s`).join(", ")
          }`,
      );
    }
    ctx.results.udp_c_baseline_per_s = per.c_recv?.lossless ?? null;
    ctx.results.udp_lossless_records_per_s = per.udp_fast?.lossless ?? null;
    if (await nfcapdAvailable()) {
      const bufs = ctx.quick ? [BIG_RCVBUF] : [BIG_RCVBUF, 0];
      for (const buf of bufs) {
        const name = buf === 0 ? "nfcapd_defbuf" : "nfcapd";
        progress(`udp: rate search ${name}`);
        const r = await searchLosslessRate(
          (rate) => nfcapdTrial(tools, rate, search.seconds, buf),
          { ...search, max: ctx.quick ? 20_000 : search.max },
        );
        per[name] = { ...r, rcvbuf: buf };
        progress(
          `udp: ${name} lossless ${r.lossless}/s${r.senderLimited ? " (sender-limited)" : ""}`,
        );
      }
      ctx.results.udp_nfcapd_per_s = per.nfcapd.lossless;
    } else {
      ctx.notes.udp_nfcapd_per_s = "nfcapd/nfdump not installed";
    }
    const c = ctx.results.udp_c_baseline_per_s;
    const f = ctx.results.udp_lossless_records_per_s;
    const limited = (n: string): string => per[n]?.senderLimited ? " >= (sender-limited)" : "";
    ctx.notes.udp_lossless_records_per_s = `udp_fast defaults (recvmmsg worker, 4 MiB rcvbuf)` +
      limited("udp_fast") +
      (c && f !== null ? `; ${(100 * f / c).toFixed(0)} % of the C baseline of this run` : "");
    ctx.notes.udp_c_baseline_per_s = `C recv() loop, 4 MiB rcvbuf${limited("c_recv")}`;
    if (per.nfcapd) {
      ctx.notes.udp_nfcapd_per_s = `nfcapd -B 4 MiB, records stored${limited("nfcapd")}`;
    }
    ctx.details.udp = {
      method: `${search.sources} sender sockets, 175-byte golden IPFIX data message, ` +
        `${search.seconds} s trials, lossless = loss < 0.1 % (a rate fails after 2 lossy trials)`,
      receivers: per,
    };
    if (ctx.quick) ctx.notes.udp_c_baseline_per_s += "; quick mode: capped search, smoke only";
  } finally {
    await Deno.remove(tools.dir, { recursive: true }).catch(() => {});
  }
}

// ---------------------------------------------------------------------------------------------
// Codec, aggregation, end to end, memory: owned by their modules' authors.

/** Measures decode_records_per_s and decode_batch_records_per_s (codec, one core). */
export function benchDecode(ctx: BenchContext): Promise<void> {
  progress("decode");
  const r = benchDecodeRates(ctx.quick ? 0.2 : 2);
  ctx.results.decode_records_per_s = r.single;
  ctx.results.decode_batch_records_per_s = r.batch;
  ctx.notes.decode_records_per_s = "decodeMessage, golden 1-record Agent message (39 IEs)";
  ctx.notes.decode_batch_records_per_s = "decodeMessage, 50 golden records per message";
  return Promise.resolve();
}

/** Measures aggregate_records_per_s (aggregation core, one core). */
export function benchAggregate(ctx: BenchContext): Promise<void> {
  progress("aggregate");
  const flows = ctx.quick ? 1_000 : 10_000;
  const rounds = ctx.quick ? 3 : 5;
  ctx.results.aggregate_records_per_s = benchAggregateRate(flows, rounds, ctx.quick ? 0.2 : 2);
  ctx.notes.aggregate_records_per_s = `addRecord, ${flows} InterNode flows x 2 halves x ` +
    `${rounds} rounds (create, correlate, update; expiry not included)`;
  return Promise.resolve();
}

/** Measures e2e_tcp_records_per_s with the real process (scripts/bench/e2e.ts). */
export async function benchE2eTcp(ctx: BenchContext): Promise<void> {
  progress("e2e: TCP rate search against main.ts");
  // The e2e search takes what is left of the 10-minute budget, at most its own default.
  const left = Math.floor(FULL_BUDGET_SEC - (performance.now() - ctx.startedMs) / 1000);
  const r = await runE2e({ quick: ctx.quick, budgetSec: Math.max(60, Math.min(240, left)) });
  ctx.results.e2e_tcp_records_per_s = r.e2e_tcp_records_per_s;
  ctx.notes.e2e_tcp_records_per_s = r.detail.note;
  ctx.details.e2e = r.detail;
}

/** Measures heap_bytes_per_flow_100k / _1m (scripts/bench/memory.ts). */
export async function benchHeap(ctx: BenchContext): Promise<void> {
  progress("heap per flow");
  const r = await benchHeapPerFlow({ quick: ctx.quick });
  ctx.results.heap_bytes_per_flow_100k = r.heap_bytes_per_flow_100k;
  ctx.results.heap_bytes_per_flow_1m = r.heap_bytes_per_flow_1m;
  const q = ctx.quick ? "quick mode: 10k/20k flows; " : "";
  ctx.notes.heap_bytes_per_flow_100k = `${q}JS heap only; heap+external ` +
    `${Math.round(r.detail.at100k.totalBytesPerFlow)} B (details.heap)`;
  ctx.notes.heap_bytes_per_flow_1m = `${q}JS heap only; heap+external ` +
    `${Math.round(r.detail.at1m.totalBytesPerFlow)} B (details.heap)`;
  ctx.details.heap = r.detail;
}

/** Measures rss_bytes_idle of the real process (scripts/bench/process.ts). */
export async function benchRssIdle(ctx: BenchContext): Promise<void> {
  progress("rss idle");
  const r = await measureRssIdle({ quick: ctx.quick });
  ctx.results.rss_bytes_idle = r.rss_bytes_idle;
  ctx.notes.rss_bytes_idle = r.detail.note;
  ctx.details.rss = r.detail;
}

// ---------------------------------------------------------------------------------------------

const PARTS: Record<string, (ctx: BenchContext) => Promise<void>> = {
  decode: benchDecode,
  aggregate: benchAggregate,
  udp: benchUdp,
  heap: benchHeap,
  rss: benchRssIdle,
  // Last: its rate search takes whatever is left of the budget.
  e2e: benchE2eTcp,
};

const UNITS: Record<keyof BenchResults, string> = {
  decode_records_per_s: "records/s",
  decode_batch_records_per_s: "records/s",
  aggregate_records_per_s: "records/s",
  e2e_tcp_records_per_s: "records/s",
  udp_lossless_records_per_s: "datagrams/s",
  udp_c_baseline_per_s: "datagrams/s",
  udp_nfcapd_per_s: "records/s",
  heap_bytes_per_flow_100k: "bytes",
  heap_bytes_per_flow_1m: "bytes",
  rss_bytes_idle: "bytes",
};

function progress(msg: string): void {
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);
}

/** Renders the results as an aligned text table. */
export function formatTable(report: BenchReport): string {
  const rows: string[][] = [["metric", "value", "unit", "note"]];
  for (const k of Object.keys(report.results) as (keyof BenchResults)[]) {
    const v = report.results[k];
    rows.push([
      k,
      v === null ? "-" : Math.round(v).toLocaleString("en-US"),
      UNITS[k],
      report.notes[k] ?? "",
    ]);
  }
  const w = [0, 1, 2].map((i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) =>
    [r[0].padEnd(w[0]), r[1].padStart(w[1]), r[2].padEnd(w[2]), r[3]].join("  ").trimEnd()
  ).join("\n");
}

/** Runs the selected parts and returns the report. */
export async function runBench(quick: boolean, only: string[]): Promise<BenchReport> {
  const ctx: BenchContext = {
    quick,
    results: emptyResults(),
    notes: {},
    details: {},
    startedMs: performance.now(),
  };
  const t0 = performance.now();
  for (const name of only) {
    const part = PARTS[name];
    if (part === undefined) throw new Error(`bench: unknown part ${JSON.stringify(name)}`);
    try {
      await part(ctx);
    } catch (e) {
      // One broken part must not hide the others' figures.
      ctx.details[`${name}_error`] = e instanceof Error ? e.message : String(e);
      progress(`${name} failed: ${e instanceof Error ? e.message : e}`);
    }
  }
  return {
    time: new Date().toISOString(),
    quick,
    env: {
      deno: Deno.version.deno,
      v8: Deno.version.v8,
      os: Deno.build.os,
      arch: Deno.build.arch,
      cpus: navigator.hardwareConcurrency,
      loadavg: Deno.loadavg(),
      seconds: Math.round((performance.now() - t0) / 100) / 10,
    },
    results: ctx.results,
    notes: ctx.notes,
    details: ctx.details,
  };
}

if (import.meta.main) {
  const quick = Deno.args.includes("--quick");
  const onlyArg = Deno.args.find((a) => a.startsWith("--only="));
  const only = onlyArg ? onlyArg.slice(7).split(",") : Object.keys(PARTS);
  const outArg = Deno.args.find((a) => a.startsWith("--out="));
  const out = outArg ? outArg.slice(6) : new URL("../bench/latest.json", import.meta.url);
  const report = await runBench(quick, only);
  console.log(formatTable(report));
  await Deno.writeTextFile(out, JSON.stringify(report, null, 2) + "\n");
  console.error(`wrote ${out instanceof URL ? out.pathname : out}`);
}
