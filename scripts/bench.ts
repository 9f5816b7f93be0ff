/**
 * Benchmark harness: `deno task bench` runs the full suite (about 18 minutes on 2 cores),
 * `deno task bench --quick` a smoke version in seconds for CI. Prints a table and writes
 * `bench/latest.json` with one number per key (null when a part is not implemented yet or could
 * not run, with the reason in `notes`) plus the raw trials under `details`.
 *
 * Flags: --quick,
 * --only=udp,decode,aggregate,e2e,replay,heap,podstore,rss,connections,clickhouse,s3,api,udp_e2e
 * (comma list), --out=<path>, --baseline=<rev>, --baseline-rounds=<n>.
 *
 * A run without --quick and without --out (full, or partial with --only) also appends one line
 * `{commit, date, only?, results}` to `bench/history.jsonl`: the smoke run's figures are not
 * measurements, and --out is how the --baseline part processes write theirs. A part run
 * (--only) without --out leaves `bench/latest.json` as it is: that file is the last full run,
 * the README table's source; the rows it lacks come from the history (bench:readme).
 *
 * `--baseline=REV` (any git revision: `HEAD~1`, a tag, a hash) measures that revision in the same
 * run: it is checked out into a temporary git worktree (removed at the end, also on failure or
 * Ctrl-C), and for each selected part both revisions have among decode, aggregate, e2e and replay, the
 * current and the baseline `scripts/bench.ts --only=<part>` run alternately, each as a fresh
 * process (current decode, baseline decode, baseline decode, current decode, ... current e2e,
 * baseline e2e): decode and aggregate `--baseline-rounds` times each (default 3; each side's
 * figure is the median of its runs), e2e and replay once. `--quick` is passed on. For every key both report, the JSON gets
 * `baseline.<key>` and `ratio.<key>` (current / baseline) and the table two more columns. The
 * other parts run as usual, unpaired. A full run with a baseline adds the baseline's own
 * decode, aggregate and e2e (about 5 more minutes); `--only=decode,aggregate,e2e` skips the rest.
 *
 * Each measurement is a separate function: UDP ingest (scripts/bench/udp.ts), codec and
 * aggregation core (scripts/bench/core.ts), and the process-level parts by the process
 * benchmark author (scripts/bench/e2e.ts, memory.ts, process.ts). Rates measured on a shared
 * machine are noisy: compare a figure only with the baseline measured in the same run.
 */

import { cpuProbeMs } from "./bench/machine.ts";
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
import {
  benchAggregateRate,
  benchDecodeRates,
  benchDecodeRealistic,
  benchPipelineRealistic,
  benchRouteRealistic,
  benchShardRealistic,
  REPLAY_UNIQUE_NAMES,
} from "./bench/core.ts";
import { benchE2eTcp as runE2e, type E2eTrial, runE2eTrial } from "./bench/e2e.ts";
import { benchE2eReplay, type E2eReplayResult } from "./bench/e2e_replay.ts";
import { benchUdpE2e, LOW_RATE_KEYS, LOW_RATES, type UdpE2eSearch } from "./bench/udp_e2e.ts";
import { benchHeapPerFlow } from "./bench/memory.ts";
import { benchPodStore } from "./bench/podstore.ts";
import { benchClickHouse } from "./bench/clickhouse.ts";
import { benchRssIdle as measureRssIdle } from "./bench/process.ts";
import { benchIdleConnections, type IdleConnectionsResult } from "./bench/idle_connections.ts";
import { benchS3 as measureS3 } from "./bench/s3.ts";
import { S3_DEFAULTS } from "../src/exporters/s3/config.ts";
import {
  addWorktree,
  alternationOrder,
  benchPartsOf,
  compareResults,
  median,
  type PartReport,
  runBenchPart,
  sharedParts,
  type Side,
  signalRunningParts,
  type Worktree,
} from "./bench/baseline.ts";

/** Root of this checkout (no trailing slash). */
const REPO_ROOT: string = new URL("..", import.meta.url).pathname.replace(/\/$/, "");

/**
 * Keys of bench/latest.json; null = not measured (see notes). The replay e2e keys are those of
 * {@linkcode E2eReplayResult}, the idle connection keys those of
 * {@linkcode IdleConnectionsResult} (documented there).
 */
export interface BenchResults
  extends Omit<E2eReplayResult, "detail">, Omit<IdleConnectionsResult, "detail"> {
  /** Single-record messages decoded per second (codec, template known). */
  decode_records_per_s: number | null;
  /** Records per second decoded from multi-record messages. */
  decode_batch_records_per_s: number | null;
  /**
   * Records per second decoded from the replay sender's realistic stream (4 Agents' sessions,
   * every message a different flow, the default scenario mix), one record per message.
   */
  decode_realistic_records_per_s: number | null;
  /**
   * The same in wire-number mode, the collector's (u64 counters below 2^53 and IPv4 addresses
   * as numbers): what a shard decodes per record.
   */
  decode_realistic_wire_records_per_s: number | null;
  /**
   * Records per second of the main thread's share of a sharded process on the same stream
   * (walked undecoded, routed by key, copied to a shard ring).
   */
  route_realistic_records_per_s: number | null;
  shard_realistic_records_per_s: number | null;
  /**
   * Records per second decoded (wire-number mode, as the collector does) and aggregated on one
   * thread from the replay stream, 20k flows, 3 rounds.
   */
  pipeline_realistic_records_per_s: number | null;
  /** The same with the decoder's default mode (text addresses, bigint counters), same run. */
  pipeline_realistic_text_records_per_s: number | null;
  /** Decoded records aggregated (correlated) per second by the core. */
  aggregate_records_per_s: number | null;
  /**
   * Records per second through the real process over TCP (send, decode, aggregate, flow log),
   * the flow log sink in its worker (the default).
   */
  e2e_tcp_records_per_s: number | null;
  /** The same with `--exporters-in-process` (the sink on the main thread), same run. */
  e2e_tcp_inprocess_records_per_s: number | null;
  /** e2e_tcp_records_per_s / e2e_tcp_inprocess_records_per_s. */
  e2e_worker_vs_inprocess_ratio: number | null;
  /** Highest lossless UDP rate of src/collector/udp_fast.ts (default settings). */
  udp_lossless_records_per_s: number | null;
  /** Highest lossless rate of the C recv() baseline in the same run, same socket buffer. */
  udp_c_baseline_per_s: number | null;
  /** Highest lossless rate of Debian nfcapd (records stored) in the same run. */
  udp_nfcapd_per_s: number | null;
  /**
   * UDP on the real process (decode, aggregation, flow log on), fast path, kernel default receive
   * buffer: highest paced rate of the replay sender with < 0.1 % of the records lost.
   */
  udp_e2e_lossless_records_per_s: number | null;
  /** The C recv() loop counting the same replay stream's datagrams, same buffer, same run. */
  udp_e2e_c_baseline_per_s: number | null;
  /** udp_e2e_lossless_records_per_s with a 4 MiB receive buffer. */
  udp_e2e_4mib_lossless_records_per_s: number | null;
  /** udp_e2e_c_baseline_per_s with a 4 MiB receive buffer. */
  udp_e2e_4mib_c_baseline_per_s: number | null;
  /** udp_e2e_lossless_records_per_s on the plain socket path (no --allow-ffi). */
  udp_e2e_socket_lossless_records_per_s: number | null;
  /**
   * The reference: udp_e2e_lossless_records_per_s with one receive socket (`--udp-workers 1`)
   * instead of one per shard.
   */
  udp_e2e_one_socket_lossless_records_per_s: number | null;
  /**
   * Σ |records lost as the process counts them − Udp RcvbufErrors of /proc/net/snmp| over every
   * process trial of the udp_e2e searches: 0 when the two loss counts agree.
   */
  udp_e2e_loss_count_difference: number | null;
  /**
   * CPU (all threads) per record of the warm process paced at LOW_RATES[0] (2,000 records/s),
   * fast path, kernel default buffer (udp_e2e.ts `lowRateCpu`).
   */
  udp_e2e_cpu_us_per_record_2k: number | null;
  /** The C recv() loop's CPU per datagram at the same rate, same run (the reference). */
  udp_e2e_c_cpu_us_per_record_2k: number | null;
  /** udp_e2e_cpu_us_per_record_2k at LOW_RATES[1] (10,000 records/s). */
  udp_e2e_cpu_us_per_record_10k: number | null;
  /** udp_e2e_c_cpu_us_per_record_2k at LOW_RATES[1]. */
  udp_e2e_c_cpu_us_per_record_10k: number | null;
  /** Heap bytes per aggregated flow with 100k flows. */
  heap_bytes_per_flow_100k: number | null;
  /** Heap bytes per aggregated flow with 1M flows. */
  heap_bytes_per_flow_1m: number | null;
  /** JS heap + external (typed arrays) bytes per live flow at 1M flows (issue 15 goal ≤ 400). */
  memory_bytes_per_flow_1m: number | null;
  /** Resident set growth per live flow at 1M flows (allocator slack included). */
  rss_bytes_per_flow_1m: number | null;
  /** Resident set size of the idle process. */
  rss_bytes_idle: number | null;
  /** Reference for rss_bytes_idle: the Deno runtime alone (a script that only waits). */
  rss_bytes_idle_runtime: number | null;
  /** Reference for rss_bytes_idle: the runtime with as many idle workers as the process has. */
  rss_bytes_idle_runtime_workers: number | null;
  /** Reference for rss_bytes_idle: the runtime listening on a TCP and a TLS port, no worker. */
  rss_bytes_idle_runtime_listeners: number | null;
  /** Idle RSS of the build (scripts/bundle.ts) as the image runs it (Deno's cache filled at build). */
  rss_bytes_idle_bundle: number | null;
  /** JS heap bytes per Pod held by the Pod store at 100k Pods (goal: at most 1 KB). */
  podstore_bytes_per_pod: number | null;
  /** Pod store lookups per second (by IP and flow start time) at 100k Pods. */
  podstore_lookups_per_s: number | null;
  /**
   * e2e TCP records/s achieved while `/flowrecords` is queried 5 times a second, over the same
   * without queries, same offered rate, same run (goal: at least 0.9).
   */
  api_query_ingest_ratio: number | null;
  /** The aggregator's CPU per record with those queries over without (all threads). */
  api_query_cpu_ratio: number | null;
  /** Rows/s the ClickHouse sink inserts into a local server from a burst. */
  clickhouse_rows_per_s: number | null;
  /** Rows/s of `clickhouse-client` inserting the same rows, same run. */
  clickhouse_client_rows_per_s: number | null;
  /** clickhouse_rows_per_s / clickhouse_client_rows_per_s (goal ≥ 0.5). */
  clickhouse_vs_client_ratio: number | null;
  /** MB/s of batches appended to the spool. */
  spool_write_mb_per_s: number | null;
  /** Rows/s read back and acknowledged from the spool. */
  spool_replay_rows_per_s: number | null;
  /** Records/s the S3 sink alone formats as CSV and gzips into finished objects (one core). */
  s3_records_per_s: number | null;
  /** MiB/s of gzip objects uploaded by the S3 sink's client to a local s3rver. */
  s3_upload_mib_per_s: number | null;
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
  /** The commit measured (`+dirty` with uncommitted changes); absent in smoke and part runs. */
  commit?: string;
  /** With `--baseline`: the revision measured in the same run. */
  baselineRev?: { rev: string; commit: string };
  /** With `--baseline`: the baseline revision's figure per compared key. */
  baseline?: Record<string, number | null>;
  /** With `--baseline`: current / baseline per compared key. */
  ratio?: Record<string, number | null>;
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

/** Every key of a report, with no figure yet. */
export function emptyResults(): BenchResults {
  return {
    decode_records_per_s: null,
    decode_batch_records_per_s: null,
    decode_realistic_records_per_s: null,
    decode_realistic_wire_records_per_s: null,
    route_realistic_records_per_s: null,
    shard_realistic_records_per_s: null,
    pipeline_realistic_records_per_s: null,
    pipeline_realistic_text_records_per_s: null,
    aggregate_records_per_s: null,
    e2e_tcp_records_per_s: null,
    e2e_tcp_inprocess_records_per_s: null,
    e2e_worker_vs_inprocess_ratio: null,
    e2e_replay_tcp_records_per_s: null,
    e2e_replay_cpu_us_per_record: null,
    e2e_replay_cores: null,
    e2e_replay_peak_rss_bytes: null,
    e2e_replay_stop_peak_rss_bytes: null,
    e2e_replay_large_peak_rss_bytes: null,
    e2e_replay_paced_cpu_us_per_record: null,
    replay_sender_cpu_us_per_record: null,
    e2e_replay_agent_spread: null,
    e2e_replay_one_shard_records_per_s: null,
    e2e_replay_one_shard_cpu_us_per_record: null,
    e2e_replay_tls_records_per_s: null,
    e2e_replay_tls_cpu_us_per_record: null,
    udp_lossless_records_per_s: null,
    udp_c_baseline_per_s: null,
    udp_nfcapd_per_s: null,
    udp_e2e_lossless_records_per_s: null,
    udp_e2e_c_baseline_per_s: null,
    udp_e2e_4mib_lossless_records_per_s: null,
    udp_e2e_4mib_c_baseline_per_s: null,
    udp_e2e_socket_lossless_records_per_s: null,
    udp_e2e_one_socket_lossless_records_per_s: null,
    udp_e2e_loss_count_difference: null,
    udp_e2e_cpu_us_per_record_2k: null,
    udp_e2e_c_cpu_us_per_record_2k: null,
    udp_e2e_cpu_us_per_record_10k: null,
    udp_e2e_c_cpu_us_per_record_10k: null,
    heap_bytes_per_flow_100k: null,
    heap_bytes_per_flow_1m: null,
    memory_bytes_per_flow_1m: null,
    rss_bytes_per_flow_1m: null,
    rss_bytes_idle: null,
    rss_bytes_idle_runtime: null,
    rss_bytes_idle_runtime_workers: null,
    rss_bytes_idle_runtime_listeners: null,
    rss_bytes_idle_bundle: null,
    tls_idle_connection_bytes: null,
    tcp_idle_connection_bytes: null,
    podstore_bytes_per_pod: null,
    podstore_lookups_per_s: null,
    api_query_ingest_ratio: null,
    api_query_cpu_ratio: null,
    clickhouse_rows_per_s: null,
    clickhouse_client_rows_per_s: null,
    clickhouse_vs_client_ratio: null,
    spool_write_mb_per_s: null,
    spool_replay_rows_per_s: null,
    s3_records_per_s: null,
    s3_upload_mib_per_s: null,
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
          // One retry of a trial that failed to run (not of a lossy one: the search repeats
          // those): a start of nfcapd on a busy machine is no measurement.
          (rate) =>
            nfcapdTrial(tools, rate, search.seconds, buf).catch((e) => {
              progress(`udp: ${name} trial at ${rate}/s failed, once more: ${e?.message ?? e}`);
              return nfcapdTrial(tools, rate, search.seconds, buf);
            }),
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

/**
 * Measures the udp_e2e_* keys: UDP on the real process (decode, aggregation, flow log on) fed the
 * replay stream by udp_send.c (paced), beside the C recv() loop on the same stream, at the default
 * receive buffer and at 4 MiB, loss counted by the process and by the kernel
 * (scripts/bench/udp_e2e.ts).
 */
export async function benchUdpOnProcess(ctx: BenchContext): Promise<void> {
  progress("udp e2e: real process over UDP (flow log on) and the C loop, the replay stream");
  const r = await benchUdpE2e({ quick: ctx.quick }, progress);
  const s = r.searches;
  const fig = (x: UdpE2eSearch | undefined): number | null => x?.lossless ?? null;
  const res = ctx.results;
  res.udp_e2e_lossless_records_per_s = fig(s.fast_defbuf);
  res.udp_e2e_c_baseline_per_s = fig(s.c_recv_defbuf);
  res.udp_e2e_4mib_lossless_records_per_s = fig(s.fast_4mib);
  res.udp_e2e_4mib_c_baseline_per_s = fig(s.c_recv_4mib);
  res.udp_e2e_socket_lossless_records_per_s = fig(s.socket_defbuf);
  res.udp_e2e_one_socket_lossless_records_per_s = fig(s.fast1_defbuf);
  res.udp_e2e_loss_count_difference = r.processAgreement.absDifference;
  const low = (i: number) => r.lowRate?.rates.find((f) => f.rate === LOW_RATES[i]);
  const finiteOrNull = (v: number | undefined) => Number.isFinite(v) ? v! : null;
  for (const [i, key] of LOW_RATE_KEYS.entries()) {
    res[key.process] = finiteOrNull(low(i)?.processUs);
    res[key.c] = finiteOrNull(low(i)?.cUs);
  }
  const q = ctx.quick ? "quick mode: one 1 s trial at 5k/s, smoke only; " : "";
  const note = (x: UdpE2eSearch | undefined, what: string, c?: UdpE2eSearch): string => {
    const pct = c !== undefined && x !== undefined && c.lossless > 0
      ? `; ${(100 * x.lossless / c.lossless).toFixed(0)} % of the C loop of this run`
      : "";
    const rcvbuf = x?.fastPath?.recvBufferBytes;
    const problems = x?.problems.length ? `; PROBLEMS: ${x.problems.join(", ")}` : "";
    return `${q}${what}${x?.senderLimited ? " >= (sender-limited)" : ""}` +
      `${rcvbuf !== undefined ? `, SO_RCVBUF reads ${rcvbuf}` : ""}${pct}${problems}`;
  };
  const n = ctx.notes;
  n.udp_e2e_lossless_records_per_s = note(
    s.fast_defbuf,
    `fast path as shipped (${
      s.fast_defbuf?.fastPath?.sockets ?? "?"
    } sockets, one per shard), rmem_default buffer each, flow log on, < 0.1 % of records lost`,
    s.c_recv_defbuf,
  );
  n.udp_e2e_c_baseline_per_s = note(
    s.c_recv_defbuf,
    `C recv() loop, rmem_default, same stream (${r.search.flows} flows, 4 Agents, sent by ` +
      `${
        r.search.sender === "c"
          ? `udp_send.c, catch-up after a stall ${
            r.search.catchup > 0 ? `<= ${r.search.catchup}x the rate` : "back to back"
          }`
          : "scripts/replay.ts"
      }), ${r.search.seconds} s trials interleaved with the process's`,
  );
  n.udp_e2e_4mib_lossless_records_per_s = note(
    s.fast_4mib,
    "fast path, --udp-recv-buffer 4194304 (SO_RCVBUFFORCE)",
    s.c_recv_4mib,
  );
  n.udp_e2e_one_socket_lossless_records_per_s = note(
    s.fast1_defbuf,
    "fast path with one socket (--udp-workers 1), rmem_default",
    s.c_recv_defbuf,
  );
  n.udp_e2e_4mib_c_baseline_per_s = note(s.c_recv_4mib, "C recv() loop, SO_RCVBUF 4 MiB");
  n.udp_e2e_socket_lossless_records_per_s = note(
    s.socket_defbuf,
    "plain Deno socket (--udp-receiver socket), rmem_default",
    s.c_recv_defbuf,
  );
  const a = r.processAgreement;
  const c = r.cAgreement;
  n.udp_e2e_loss_count_difference = `process trials: ${a.processLoss} lost by the process's ` +
    `count, ${a.kernelDrops} by RcvbufErrors (system-wide), ${a.disagreeing} of ${a.trials} ` +
    `trials differ; C loop: ${c.processLoss} vs ${c.kernelDrops}, ${c.disagreeing} of ` +
    `${c.trials} differ`;
  for (const [i, key] of LOW_RATE_KEYS.entries()) {
    const f = low(i);
    if (f === undefined) continue;
    n[key.process] = `${q}warm process (after ${r.lowRate!.warmupSeconds} ` +
      `s of traffic), fast path, rmem_default, paced at ${f.rate}/s, utime + stime of every ` +
      `thread per record; trials ${f.processTrials.join(", ")}; ${f.processLost} records lost`;
    n[key.c] = `${q}C recv() loop, same rate and buffer, ` +
      `trials interleaved with the process's: ${f.cTrials.join(", ")}`;
  }
  ctx.details.udp_e2e = r;
}

// ---------------------------------------------------------------------------------------------
// Codec, aggregation, end to end, memory: owned by their modules' authors.

/**
 * Measures decode_records_per_s, decode_batch_records_per_s (one golden message in a loop) and
 * decode_realistic_records_per_s (the replay sender's stream), in the default mode and in the
 * collector's wire-number mode (codec, one core).
 */
export function benchDecode(ctx: BenchContext): Promise<void> {
  progress("decode");
  const seconds = ctx.quick ? 0.2 : 2;
  const r = benchDecodeRates(seconds);
  ctx.results.decode_records_per_s = r.single;
  ctx.results.decode_batch_records_per_s = r.batch;
  ctx.notes.decode_records_per_s = "decodeMessage, golden 1-record Agent message (39 IEs)";
  ctx.notes.decode_batch_records_per_s = "decodeMessage, 50 golden records per message";
  const flows = ctx.quick ? 2_000 : 20_000;
  const real = benchDecodeRealistic(seconds, { flows });
  ctx.results.decode_realistic_records_per_s = real.recordsPerSec;
  ctx.notes.decode_realistic_records_per_s = `decodeMessage, replay stream: 4 Agents, ${flows} ` +
    `flows (${real.messages} one-record messages per round, default mix), ` +
    `${REPLAY_UNIQUE_NAMES * 100} % unique Pod names`;
  const wire = benchDecodeRealistic(seconds, { flows, wireNumbers: true });
  ctx.results.decode_realistic_wire_records_per_s = wire.recordsPerSec;
  ctx.notes.decode_realistic_wire_records_per_s = "the same messages in wire-number mode (the " +
    "collector's: u64 below 2^53 and IPv4 as numbers), what a shard decodes";
  ctx.results.route_realistic_records_per_s = benchRouteRealistic(seconds, { flows, shards: 2 });
  ctx.notes.route_realistic_records_per_s = "the main thread's share of a sharded process, same " +
    "messages: walked undecoded (raw mode), key read from the bytes, record copied to one of 2 " +
    "shard rings (released in the same thread)";
  return Promise.resolve();
}

/**
 * Measures aggregate_records_per_s (aggregation core, one core) and the decode + aggregate
 * pipeline on the replay stream in both decoder modes (pipeline_realistic_*).
 */
export function benchAggregate(ctx: BenchContext): Promise<void> {
  progress("aggregate");
  const flows = ctx.quick ? 1_000 : 10_000;
  const rounds = ctx.quick ? 3 : 5;
  ctx.results.aggregate_records_per_s = benchAggregateRate(flows, rounds, ctx.quick ? 0.2 : 2);
  ctx.notes.aggregate_records_per_s = `addRecord, ${flows} InterNode flows x 2 halves x ` +
    `${rounds} rounds (create, correlate, update; expiry not included), records in ` +
    `wire-number mode as the collector hands them (numbers for counters and IPv4)`;
  const pFlows = ctx.quick ? 2_000 : 20_000;
  const p = benchPipelineRealistic({ flows: pFlows, pairs: ctx.quick ? 2 : 10 });
  ctx.results.pipeline_realistic_records_per_s = p.wire;
  ctx.results.pipeline_realistic_text_records_per_s = p.text;
  ctx.notes.pipeline_realistic_records_per_s = `decodeMessage (wire-number mode) + addRecord, ` +
    `replay stream: 4 Agents, ${pFlows} flows, 3 rounds, one thread; median of ` +
    `${ctx.quick ? 2 : 10} runs alternated with the default decoder mode (the _text_ key)`;
  const sFlows = ctx.quick ? 2_000 : 10_000;
  ctx.results.shard_realistic_records_per_s = benchShardRealistic({
    flows: sFlows,
    rounds: 8,
    runs: ctx.quick ? 2 : 7,
  });
  ctx.notes.shard_realistic_records_per_s = `one shard's share of a sharded process: the ` +
    `replay stream's frames for one shard (${sFlows} flows, 8 rounds: the first creates the ` +
    `flows, the others update them) read as a shard worker does (views, addRecordView), ` +
    `expiry not included; median of ${ctx.quick ? 2 : 7} runs`;
  return Promise.resolve();
}

/**
 * Measures e2e_tcp_records_per_s (sink in its worker) and e2e_tcp_inprocess_records_per_s
 * (`--exporters-in-process`) with the real process, their trials interleaved
 * (scripts/bench/e2e.ts), and their ratio.
 */
export async function benchE2eTcp(ctx: BenchContext): Promise<void> {
  progress("e2e: TCP rate search against main.ts, sink in its worker / in process, interleaved");
  // The two searches take what is left of the 10-minute budget, at most their own default.
  const left = Math.floor(FULL_BUDGET_SEC - (performance.now() - ctx.startedMs) / 1000);
  const r = await runE2e({ quick: ctx.quick, budgetSec: Math.max(120, Math.min(480, left)) });
  ctx.results.e2e_tcp_records_per_s = r.e2e_tcp_records_per_s;
  ctx.results.e2e_tcp_inprocess_records_per_s = r.e2e_tcp_inprocess_records_per_s;
  ctx.results.e2e_worker_vs_inprocess_ratio = r.e2e_worker_vs_inprocess_ratio;
  const q = ctx.quick ? "quick mode: one 2 s trial at 5k/s; " : "";
  ctx.notes.e2e_tcp_records_per_s = `${q}flow log sink in its worker (default); ${r.detail.note}`;
  ctx.notes.e2e_tcp_inprocess_records_per_s =
    `${q}--exporters-in-process, trials alternating with the worker mode's`;
  const cpu = r.detail.pairedCpu;
  const cpuRatio = cpu.length === 0 ? "" : "; aggregator CPU per record, worker / in-process: " +
    cpu.map((c) =>
      `${(c.workerUsPerRecord / c.inprocessUsPerRecord).toFixed(2)} at ${c.targetRate}/s`
    ).join(", ");
  ctx.notes.e2e_worker_vs_inprocess_ratio =
    `best passing rates of the search grid (steps of 12-25 %)${cpuRatio}`;
  ctx.details.e2e = r.detail;
}

/**
 * Measures the e2e_replay_* keys and replay_sender_cpu_us_per_record: the real process over TCP
 * (and over mutual TLS, its trials alternated with TCP's) fed by the replay sender as fast as it
 * reads (scripts/bench/e2e_replay.ts).
 */
export async function benchReplay(ctx: BenchContext): Promise<void> {
  progress("e2e replay: TCP and mutual TLS, 4 connections, flow log on, unpaced replay sender");
  const r = await benchE2eReplay({ quick: ctx.quick });
  const d = r.detail;
  for (const k of Object.keys(r) as (keyof typeof r)[]) {
    if (k !== "detail") ctx.results[k] = r[k];
  }
  const q = ctx.quick ? "quick mode: one 2 s trial, 1k flows; " : "";
  const large = d.large === undefined ? "" : `; ${d.large.pass ? "" : "FAILED "}` +
    `${d.large.recordsPerSec?.toFixed(0)}/s at 100k flows (` +
    `${d.large.aggregatorCpuUsPerRecord.toFixed(2)} µs, ${d.large.coresUsed?.toFixed(2)} cores, ` +
    `peak ${(d.large.aggregatorPeakRssBytes / 2 ** 20).toFixed(0)} MiB)`;
  const failed = d.trials.filter((t) => !t.pass).map((t) => t.failures.join("; "));
  ctx.notes.e2e_replay_one_shard_records_per_s = `the same process with --workers 1 (the ` +
    `core in the main thread), trials alternated with the shipped default's ${d.shards} shards`;
  ctx.notes.e2e_replay_tcp_records_per_s = `${q}best of ${d.trials.length} trial(s) of ` +
    `${d.durationSec} s, ${d.shards} aggregation shards (--workers default), ${d.flows} flows, ${
      d.uniqueNames * 100
    } % unique Pod names, active 5 s` +
    `${large}${failed.length ? `; failed: ${failed.join(" | ")}` : ""}`;
  ctx.notes.e2e_replay_cpu_us_per_record = "utime + stime of every thread of the process";
  ctx.notes.e2e_replay_cores = "CPU seconds / (send time + drain)";
  ctx.notes.replay_sender_cpu_us_per_record = "the sender process's CPU, start-up included";
  ctx.notes.e2e_replay_agent_spread = "slowest / fastest Agent connection's records, all flat " +
    "out; one sender process for the four, so its own scheduling counts too";
  const tlsFailed = d.tlsTrials.filter((t) => !t.pass).map((t) => t.failures.join("; "));
  const tcp = ctx.results.e2e_replay_tcp_records_per_s;
  const tls = ctx.results.e2e_replay_tls_records_per_s;
  ctx.notes.e2e_replay_tls_records_per_s = `${q}best of ${d.tlsTrials.length} trial(s) like ` +
    "the TCP ones (4 Agent connections flat out, shipped defaults, every record accounted " +
    "for) over mutual TLS: aggregatorTransportProtocol TLS, the sender presenting the Agent " +
    "certificate the process wrote (--cert-dir); each round runs TCP, TLS, one shard and the " +
    "next the reverse" +
    (tcp !== null && tls !== null ? `; ${(100 * tls / tcp).toFixed(0)} % of TCP` : "") +
    (tlsFailed.length ? `; failed: ${tlsFailed.join(" | ")}` : "");
  ctx.notes.e2e_replay_tls_cpu_us_per_record = "utime + stime of every thread, TLS trials; " +
    "reference: e2e_replay_cpu_us_per_record (TCP, same run)";
  ctx.details.e2e_replay = d;
}

/**
 * Measures tls_idle_connection_bytes and its reference tcp_idle_connection_bytes: the real
 * process's VmRSS per idle established connection (scripts/bench/idle_connections.ts).
 */
export async function benchConnections(ctx: BenchContext): Promise<void> {
  progress("idle connections: RSS per established idle TLS / TCP connection");
  const r = await benchIdleConnections({ quick: ctx.quick });
  ctx.results.tls_idle_connection_bytes = r.tls_idle_connection_bytes;
  ctx.results.tcp_idle_connection_bytes = r.tcp_idle_connection_bytes;
  const q = ctx.quick ? "quick mode, smoke only: " : "";
  const failed = (k: "TLS" | "TCP"): string => {
    const f = r.detail.trials.find((t) => t.transport === k)?.failures ?? [];
    return f.length ? `; FAILED: ${f.join("; ")}` : "";
  };
  ctx.notes.tls_idle_connection_bytes = `${q}${r.detail.note}${failed("TLS")}`;
  ctx.notes.tcp_idle_connection_bytes = `${q}the same with aggregatorTransportProtocol TCP, ` +
    `plain connections, in a second process${failed("TCP")}`;
  ctx.details.idle_connections = r.detail;
}

/** Measures heap_bytes_per_flow_100k / _1m (scripts/bench/memory.ts). */
export async function benchHeap(ctx: BenchContext): Promise<void> {
  progress("heap per flow");
  const r = await benchHeapPerFlow({ quick: ctx.quick });
  ctx.results.heap_bytes_per_flow_100k = r.heap_bytes_per_flow_100k;
  ctx.results.heap_bytes_per_flow_1m = r.heap_bytes_per_flow_1m;
  ctx.results.memory_bytes_per_flow_1m = r.detail.at1m.totalBytesPerFlow;
  ctx.results.rss_bytes_per_flow_1m = r.detail.at1m.rssBytesPerFlow;
  const q = ctx.quick ? "quick mode: 10k/20k flows; " : "";
  ctx.notes.heap_bytes_per_flow_100k = `${q}JS heap only; heap+external ` +
    `${Math.round(r.detail.at100k.totalBytesPerFlow)} B (details.heap)`;
  ctx.notes.heap_bytes_per_flow_1m = `${q}JS heap only; heap+external ` +
    `${Math.round(r.detail.at1m.totalBytesPerFlow)} B (details.heap)`;
  ctx.notes.memory_bytes_per_flow_1m = `${q}JS heap + external growth after GC, per live flow`;
  ctx.notes.rss_bytes_per_flow_1m = `${q}VmRSS growth per live flow (pages touched, slack)`;
  ctx.details.heap = r.detail;
}

/** Measures podstore_bytes_per_pod and podstore_lookups_per_s (scripts/bench/podstore.ts). */
export async function benchPodStoreMemory(ctx: BenchContext): Promise<void> {
  progress("pod store");
  const r = await benchPodStore({ quick: ctx.quick });
  ctx.results.podstore_bytes_per_pod = r.bytesPerPod;
  ctx.results.podstore_lookups_per_s = r.lookupsPerSec;
  const q = ctx.quick ? "quick mode: 10k Pods; " : "";
  ctx.notes.podstore_bytes_per_pod = `${q}${r.pods} Pods held (1 % host-network skipped), JS heap`;
  ctx.details.podstore = r;
}

/**
 * Measures rss_bytes_idle of the real process and its references, the Deno runtime alone and with
 * as many idle workers (scripts/bench/process.ts).
 */
export async function benchRssIdle(ctx: BenchContext): Promise<void> {
  progress("rss idle");
  const r = await measureRssIdle({ quick: ctx.quick });
  ctx.results.rss_bytes_idle = r.rss_bytes_idle;
  ctx.notes.rss_bytes_idle = r.detail.note;
  ctx.results.rss_bytes_idle_runtime = r.rss_bytes_idle_runtime;
  ctx.notes.rss_bytes_idle_runtime = "VmRSS of `deno run` of a script that only waits, " +
    "sampled as the process is: the runtime's own floor";
  ctx.results.rss_bytes_idle_runtime_workers = r.rss_bytes_idle_runtime_workers;
  ctx.notes.rss_bytes_idle_runtime_workers = `the same with ${r.detail.workerThreads} idle ` +
    "workers of an empty module (as many as the process's worker threads)";
  ctx.results.rss_bytes_idle_runtime_listeners = r.rss_bytes_idle_runtime_listeners;
  ctx.notes.rss_bytes_idle_runtime_listeners = "the runtime listening on a 127.0.0.1 TCP port " +
    "and a TLS port (an ECDSA certificate, as the API's), accepting on both, no worker and " +
    "none of the product's code: the floor under the smallest process that could collect " +
    "and serve the API";
  ctx.results.rss_bytes_idle_bundle = r.rss_bytes_idle_bundle;
  ctx.notes.rss_bytes_idle_bundle = "the build (scripts/bundle.ts) as the image " +
    "runs it, same configuration, Deno's cache filled first as the image build does; from an " +
    `empty cache: ${(r.detail.bundleColdCacheRssBytes / 1e6).toFixed(1)} MB`;
  ctx.details.rss = r.detail;
}

/**
 * Measures api_query_ingest_ratio and api_query_cpu_ratio: e2e TCP trials at one offered rate,
 * alternately without and with a client querying `/flowrecords` (up to 10,000 records) every
 * 200 ms; the medians of each side compared.
 */
export async function benchApiQueries(ctx: BenchContext): Promise<void> {
  progress("api: e2e ingest with and without /flowrecords queries");
  const rate = ctx.quick ? 5_000 : 60_000;
  const rounds = ctx.quick ? 1 : 3;
  const opts = { durationSec: ctx.quick ? 3 : 15, flows: ctx.quick ? 1_000 : 10_000 };
  const sides: Record<"plain" | "queried", E2eTrial[]> = { plain: [], queried: [] };
  for (let i = 0; i < rounds; i++) {
    sides.plain.push(await runE2eTrial(rate, opts));
    sides.queried.push(await runE2eTrial(rate, { ...opts, queryEveryMs: 200 }));
  }
  const achieved = (ts: E2eTrial[]) => median(ts.map((t) => t.achievedRatio)) ?? NaN;
  const cpu = (ts: E2eTrial[]) => median(ts.map((t) => t.aggregatorCpuUsPerRecord)) ?? NaN;
  ctx.results.api_query_ingest_ratio = achieved(sides.queried) / achieved(sides.plain);
  ctx.results.api_query_cpu_ratio = cpu(sides.queried) / cpu(sides.plain);
  const q = sides.queried.map((t) => t.queries);
  ctx.notes.api_query_ingest_ratio = `${ctx.quick ? "quick: " : ""}${rate} records/s offered, ` +
    `${rounds} trial(s) per side; queries per trial: ${q.map((x) => x?.queries).join(",")}, ` +
    `slowest ${Math.max(...q.map((x) => x?.maxMs ?? 0)).toFixed(0)} ms`;
  ctx.details.api = sides;
}

/** Measures the ClickHouse sink against clickhouse-client, and the spool (scripts/bench/clickhouse.ts). */
export async function benchClickHouseSink(ctx: BenchContext): Promise<void> {
  progress("clickhouse: sink vs clickhouse-client, spool");
  const r = await benchClickHouse({ quick: ctx.quick });
  ctx.results.clickhouse_rows_per_s = r.clickhouse_rows_per_s;
  ctx.results.clickhouse_client_rows_per_s = r.clickhouse_client_rows_per_s;
  ctx.results.clickhouse_vs_client_ratio = r.clickhouse_vs_client_ratio;
  ctx.results.spool_write_mb_per_s = r.spool_write_mb_per_s;
  ctx.results.spool_replay_rows_per_s = r.spool_replay_rows_per_s;
  const rows = `${r.detail.rows} rows, Debian clickhouse-server ${r.detail.server}`;
  ctx.notes.clickhouse_rows_per_s =
    `sink in process over HTTP (RowBinary, gzip level 1, 20k-row inserts), ${rows}`;
  ctx.notes.clickhouse_client_rows_per_s = `clickhouse-client, native protocol, same rows, ${rows}`;
  ctx.notes.clickhouse_vs_client_ratio = "goal >= 0.5";
  ctx.notes.spool_write_mb_per_s = "1,000-row RowBinary frames appended (no fsync)";
  ctx.notes.spool_replay_rows_per_s = "peek + ack with the in-flight mark, no insert";
  ctx.details.clickhouse = r.detail;
}

// ---------------------------------------------------------------------------------------------
// S3 sink (owner: s3). See scripts/bench/s3.ts.

/**
 * Measures s3_records_per_s (at the sink's default gzip level) and s3_upload_mib_per_s; the
 * details add the encoding rate at level 6 (upstream's, `s3Uploader.gzipLevel: 6`).
 */
export async function benchS3(ctx: BenchContext): Promise<void> {
  const seconds = ctx.quick ? 0.5 : 5;
  const r = await measureS3(seconds, { gzipLevel: S3_DEFAULTS.gzipLevel });
  const l6 = await measureS3(seconds, { gzipLevel: 6, upload: false });
  ctx.results.s3_records_per_s = r.recordsPerS;
  ctx.results.s3_upload_mib_per_s = r.uploadMiBPerS;
  ctx.notes.s3_records_per_s = `CSV + gzip level ${r.gzipLevel} (default), 100k-record ` +
    `objects, gzip/CSV bytes ${r.compressionRatio.toFixed(4)}, ${
      Math.round(r.recordsPerCpuS)
    } per CPU second; level 6: ${Math.round(l6.recordsPerS)}/s, ${
      Math.round(l6.recordsPerCpuS)
    } per CPU second, gzip/CSV ${l6.compressionRatio.toFixed(4)}; goal >= 300k`;
  ctx.notes.s3_upload_mib_per_s = "PutObject/multipart to s3rver in this process";
  ctx.details.s3 = { ...r, level6: l6 };
}

// ---------------------------------------------------------------------------------------------

const PARTS: Record<string, (ctx: BenchContext) => Promise<void>> = {
  decode: benchDecode,
  aggregate: benchAggregate,
  udp: benchUdp,
  heap: benchHeap,
  podstore: benchPodStoreMemory,
  rss: benchRssIdle,
  connections: benchConnections,
  api: benchApiQueries,
  clickhouse: benchClickHouseSink,
  s3: benchS3,
  replay: benchReplay,
  // Its rate search takes whatever is left of the budget.
  e2e: benchE2eTcp,
  // After e2e so as not to shorten its search: adds ~5 minutes to a full run.
  udp_e2e: benchUdpOnProcess,
};

export const UNITS: Record<keyof BenchResults, string> = {
  decode_records_per_s: "records/s",
  decode_batch_records_per_s: "records/s",
  decode_realistic_records_per_s: "records/s",
  decode_realistic_wire_records_per_s: "records/s",
  route_realistic_records_per_s: "records/s",
  shard_realistic_records_per_s: "records/s",
  pipeline_realistic_records_per_s: "records/s",
  pipeline_realistic_text_records_per_s: "records/s",
  aggregate_records_per_s: "records/s",
  e2e_tcp_records_per_s: "records/s",
  e2e_tcp_inprocess_records_per_s: "records/s",
  e2e_worker_vs_inprocess_ratio: "ratio",
  e2e_replay_tcp_records_per_s: "records/s",
  e2e_replay_cpu_us_per_record: "µs",
  e2e_replay_cores: "cores",
  e2e_replay_peak_rss_bytes: "bytes",
  e2e_replay_stop_peak_rss_bytes: "bytes",
  e2e_replay_large_peak_rss_bytes: "bytes",
  e2e_replay_paced_cpu_us_per_record: "µs",
  replay_sender_cpu_us_per_record: "µs",
  e2e_replay_agent_spread: "ratio",
  e2e_replay_one_shard_records_per_s: "records/s",
  e2e_replay_one_shard_cpu_us_per_record: "µs",
  e2e_replay_tls_records_per_s: "records/s",
  e2e_replay_tls_cpu_us_per_record: "µs",
  udp_lossless_records_per_s: "datagrams/s",
  udp_c_baseline_per_s: "datagrams/s",
  udp_nfcapd_per_s: "records/s",
  udp_e2e_lossless_records_per_s: "records/s",
  udp_e2e_c_baseline_per_s: "datagrams/s",
  udp_e2e_4mib_lossless_records_per_s: "records/s",
  udp_e2e_4mib_c_baseline_per_s: "datagrams/s",
  udp_e2e_socket_lossless_records_per_s: "records/s",
  udp_e2e_one_socket_lossless_records_per_s: "records/s",
  udp_e2e_loss_count_difference: "records",
  udp_e2e_cpu_us_per_record_2k: "µs",
  udp_e2e_c_cpu_us_per_record_2k: "µs",
  udp_e2e_cpu_us_per_record_10k: "µs",
  udp_e2e_c_cpu_us_per_record_10k: "µs",
  heap_bytes_per_flow_100k: "bytes",
  heap_bytes_per_flow_1m: "bytes",
  memory_bytes_per_flow_1m: "bytes",
  rss_bytes_per_flow_1m: "bytes",
  rss_bytes_idle: "bytes",
  rss_bytes_idle_runtime: "bytes",
  rss_bytes_idle_runtime_workers: "bytes",
  rss_bytes_idle_runtime_listeners: "bytes",
  rss_bytes_idle_bundle: "bytes",
  tls_idle_connection_bytes: "bytes",
  tcp_idle_connection_bytes: "bytes",
  podstore_bytes_per_pod: "bytes",
  podstore_lookups_per_s: "lookups/s",
  api_query_ingest_ratio: "ratio",
  api_query_cpu_ratio: "ratio",
  clickhouse_rows_per_s: "rows/s",
  clickhouse_client_rows_per_s: "rows/s",
  clickhouse_vs_client_ratio: "ratio",
  spool_write_mb_per_s: "MB/s",
  spool_replay_rows_per_s: "rows/s",
  s3_records_per_s: "records/s",
  s3_upload_mib_per_s: "MiB/s",
};

function progress(msg: string): void {
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${msg}`);
}

/**
 * A figure for the table: ratios with 3 decimals, µs and cores with 2, others rounded with
 * thousands separators.
 */
export function formatValue(v: number | null | undefined, unit: string): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return "-";
  if (unit === "ratio") return v.toFixed(3);
  if (unit === "µs" || unit === "cores") return v.toFixed(2);
  return Math.round(v).toLocaleString("en-US");
}

/**
 * Renders the results as an aligned text table; with a baseline, each compared key also shows
 * the baseline's figure and current / baseline.
 */
export function formatTable(report: BenchReport): string {
  const cmp = report.baseline !== undefined;
  const head = cmp
    ? ["metric", "value", "unit", `baseline ${report.baselineRev?.rev ?? ""}`.trim(), "ratio"]
    : ["metric", "value", "unit"];
  const rows: string[][] = [[...head, "note"]];
  for (const k of Object.keys(report.results) as (keyof BenchResults)[]) {
    const row = [k, formatValue(report.results[k], UNITS[k]), UNITS[k]];
    if (cmp) {
      const compared = k in report.baseline!;
      row.push(
        compared ? formatValue(report.baseline![k], UNITS[k]) : "",
        compared ? formatValue(report.ratio?.[k], "ratio") : "",
      );
    }
    rows.push([...row, report.notes[k] ?? ""]);
  }
  const cols = head.length;
  const w = head.map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  // Text columns (metric, unit) left-aligned, figures right-aligned.
  const left = new Set([0, 2]);
  return rows.map((r) =>
    [
      ...r.slice(0, cols).map((c, i) => left.has(i) ? c.padEnd(w[i]) : c.padStart(w[i])),
      r[cols],
    ].join("  ").trimEnd()
  ).join("\n");
}

/** The keys each part comparable with a baseline fills. */
const PART_KEYS: Record<string, readonly (keyof BenchResults)[]> = {
  decode: [
    "decode_records_per_s",
    "decode_batch_records_per_s",
    "decode_realistic_records_per_s",
    "decode_realistic_wire_records_per_s",
    "route_realistic_records_per_s",
  ],
  aggregate: [
    "aggregate_records_per_s",
    "pipeline_realistic_records_per_s",
    "pipeline_realistic_text_records_per_s",
    "shard_realistic_records_per_s",
  ],
  e2e: [
    "e2e_tcp_records_per_s",
    "e2e_tcp_inprocess_records_per_s",
    "e2e_worker_vs_inprocess_ratio",
  ],
  // The product's end-to-end figures (the replay sender takes flowgen's CPU out of the way).
  replay: [
    "e2e_replay_tcp_records_per_s",
    "e2e_replay_cpu_us_per_record",
    "e2e_replay_cores",
    "e2e_replay_peak_rss_bytes",
    "e2e_replay_stop_peak_rss_bytes",
    "e2e_replay_large_peak_rss_bytes",
    "e2e_replay_paced_cpu_us_per_record",
    "e2e_replay_agent_spread",
    "replay_sender_cpu_us_per_record",
    "e2e_replay_one_shard_records_per_s",
    "e2e_replay_one_shard_cpu_us_per_record",
    "e2e_replay_tls_records_per_s",
    "e2e_replay_tls_cpu_us_per_record",
  ],
};

/** A checked-out baseline revision for {@linkcode runBench}. */
export interface BaselineCheckout {
  /** The revision as given (`HEAD~1`). */
  rev: string;
  /** Its full commit hash. */
  commit: string;
  /** Root of its checkout. */
  root: string;
  /** The parts its bench.ts accepts in `--only`. */
  parts: readonly string[];
}

/** Options of {@linkcode runBench}. */
export interface RunBenchOptions {
  /** Measure this revision's shared parts in the same run, alternating with ours. */
  baseline?: BaselineCheckout;
  /**
   * With a baseline: pairs of runs of decode and aggregate (each side's figure is the median of
   * its runs); default 3. The e2e part runs once per side (its search is long and already
   * interleaves its own trials).
   */
  baselineRounds?: number;
}

/** Runs one part in a fresh process of the given checkout and returns its report. */
async function runPartProcess(root: string, part: string, quick: boolean): Promise<PartReport> {
  const outPath = await Deno.makeTempFile({ prefix: "fa-bench-part-", suffix: ".json" });
  try {
    return await runBenchPart(part, { root, quick, outPath });
  } finally {
    await Deno.remove(outPath).catch(() => {});
  }
}

/** Runs the selected parts and returns the report. */
export async function runBench(
  quick: boolean,
  only: string[],
  opts: RunBenchOptions = {},
): Promise<BenchReport> {
  const ctx: BenchContext = {
    quick,
    results: emptyResults(),
    notes: {},
    details: {},
    startedMs: performance.now(),
  };
  const t0 = performance.now();
  const probeStart = cpuProbeMs();
  for (const name of only) {
    if (PARTS[name] === undefined) throw new Error(`bench: unknown part ${JSON.stringify(name)}`);
  }
  const base = opts.baseline;
  const shared = base === undefined ? [] : sharedParts(only, base.parts);
  if (base !== undefined && shared.length === 0) {
    progress(`baseline ${base.rev}: no part to compare among ${only.join(",")}`);
  }
  const rounds = Math.max(1, Math.floor(opts.baselineRounds ?? 3));
  // The process-level parts run once per side: each already alternates or repeats its trials.
  const order = alternationOrder(shared, {
    rounds: (p) => p === "e2e" || p === "replay" ? 1 : rounds,
  });
  // Every run's figure per key and side; each side's result is the median of its runs.
  const runs: Record<Side, Record<string, unknown[]>> = { current: {}, baseline: {} };
  const baseReports: Record<string, unknown> = {};

  // One side of a shared part, as a fresh process of its checkout.
  const runSide = async (name: string, side: Side): Promise<void> => {
    const root = side === "current" ? REPO_ROOT : base!.root;
    progress(`${name}: ${side === "current" ? "current revision" : `baseline ${base!.rev}`}`);
    try {
      const r = await runPartProcess(root, name, quick);
      // A key an older bench.ts does not know stays absent: it is not compared.
      for (const k of PART_KEYS[name]) {
        if (k in r.results) (runs[side][k] ??= []).push(r.results[k]);
      }
      if (side === "current") {
        for (const k of PART_KEYS[name]) {
          if (r.notes?.[k] !== undefined) ctx.notes[k] = r.notes[k];
        }
        // Keys of the part that are not compared are kept as the current side measured them
        // (the last run's), so a key missing from PART_KEYS is not lost from the report.
        for (const [k, v] of Object.entries(r.results) as [keyof BenchResults, number | null][]) {
          if (v === null || PART_KEYS[name].includes(k)) continue;
          ctx.results[k] = v;
          if (r.notes?.[k] !== undefined) ctx.notes[k] = r.notes[k];
        }
        Object.assign(ctx.details, r.details ?? {});
      } else {
        baseReports[name] = { notes: r.notes, details: r.details };
      }
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      if (side === "current") ctx.details[`${name}_error`] = msg;
      else baseReports[name] = { error: msg };
      for (const k of PART_KEYS[name]) (runs[side][k] ??= []).push(null);
      progress(`${name} (${side}) failed: ${msg}`);
    }
  };

  for (const name of only) {
    if (shared.includes(name)) {
      for (const step of order) if (step.part === name) await runSide(name, step.side);
      for (const k of PART_KEYS[name]) ctx.results[k] = median(runs.current[k] ?? []);
      continue;
    }
    try {
      await PARTS[name](ctx);
    } catch (e) {
      // One broken part must not hide the others' figures.
      ctx.details[`${name}_error`] = e instanceof Error ? e.message : String(e);
      progress(`${name} failed: ${e instanceof Error ? e.message : e}`);
    }
  }
  const report: BenchReport = {
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
      cpuProbeMs: { start: probeStart, end: cpuProbeMs() },
    },
    results: ctx.results,
    notes: ctx.notes,
    details: ctx.details,
  };
  if (base !== undefined) {
    const keys = shared.flatMap((p) => PART_KEYS[p]);
    const baseResults: Record<string, number | null> = {};
    for (const [k, v] of Object.entries(runs.baseline)) baseResults[k] = median(v);
    const c = compareResults(
      ctx.results as unknown as Record<string, number | null>,
      baseResults,
      keys,
    );
    report.baselineRev = { rev: base.rev, commit: base.commit };
    report.baseline = c.baseline;
    report.ratio = c.ratio;
    ctx.details.baseline = {
      rev: base.rev,
      commit: base.commit,
      order: order.map((s) => `${s.part}:${s.side}`),
      runs,
      reports: baseReports,
    };
  }
  return report;
}

/** One line of `bench/history.jsonl`: a run's figures and the commit they were measured on. */
export interface HistoryEntry {
  /** `git rev-parse HEAD`, with `+dirty` when the checkout had uncommitted changes. */
  commit: string;
  /** ISO time of the run. */
  date: string;
  /** The parts run, when not all of them (`--only`). */
  only?: string[];
  /** The run's figures (the keys of bench/latest.json's `results`). */
  results: BenchResults;
  /** How fast the machine was, at the start and the end of the run (scripts/bench/machine.ts). */
  cpuProbeMs?: unknown;
}

/** The history line of `report`, measured on `commit`. */
export function historyEntry(report: BenchReport, commit: string, only?: string[]): HistoryEntry {
  const probe = report.env.cpuProbeMs;
  return {
    commit,
    date: report.time,
    ...(only ? { only } : {}),
    results: report.results,
    ...(probe !== undefined ? { cpuProbeMs: probe } : {}),
  };
}

/** HEAD of this checkout, `+dirty` when it has uncommitted changes ("unknown" without git). */
async function headCommit(): Promise<string> {
  const git = async (...args: string[]): Promise<string> => {
    const o = await new Deno.Command("git", { args, cwd: REPO_ROOT, stderr: "null" }).output();
    if (!o.success) throw new Error(`git ${args[0]} failed`);
    return new TextDecoder().decode(o.stdout).trim();
  };
  try {
    const head = await git("rev-parse", "HEAD");
    return (await git("status", "--porcelain", "--untracked-files=no")) === ""
      ? head
      : `${head}+dirty`;
  } catch {
    return "unknown";
  }
}

/** Reads `--name=value` from the command line. */
function arg(name: string): string | undefined {
  return Deno.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
}

if (import.meta.main) {
  const quick = Deno.args.includes("--quick");
  const onlyArg = arg("only");
  const only = onlyArg !== undefined ? onlyArg.split(",") : Object.keys(PARTS);
  const outArg = arg("out");
  // bench/latest.json is the last full run (a part run's figures go to the history only).
  const out = outArg ??
    (onlyArg === undefined ? new URL("../bench/latest.json", import.meta.url) : undefined);
  const rev = arg("baseline");
  let wt: Worktree | undefined;
  // Ctrl-C or a kill must not leave a worktree behind, nor a part process running in it.
  const onSignal = (signal: Deno.Signal, code: number) => async (): Promise<void> => {
    await signalRunningParts(signal);
    await wt?.remove();
    Deno.exit(code);
  };
  const onInt = onSignal("SIGINT", 130);
  const onTerm = onSignal("SIGTERM", 143);
  let report: BenchReport;
  let commit = "unknown";
  try {
    let baseline: BaselineCheckout | undefined;
    if (rev !== undefined) {
      if (rev === "") throw new Error("bench: --baseline needs a revision (--baseline=HEAD~1)");
      Deno.addSignalListener("SIGINT", onInt);
      Deno.addSignalListener("SIGTERM", onTerm);
      wt = await addWorktree(REPO_ROOT, rev);
      progress(`baseline ${rev} = ${wt.commit.slice(0, 12)} checked out in ${wt.dir}`);
      const src = await Deno.readTextFile(`${wt.dir}/scripts/bench.ts`).catch(() => "");
      const parts = benchPartsOf(src);
      if (parts === null) {
        throw new Error(
          `bench: ${rev}'s scripts/bench.ts is missing or does not take --only= and --out=`,
        );
      }
      baseline = { rev, commit: wt.commit, root: wt.dir, parts };
    }
    const roundsArg = arg("baseline-rounds");
    const baselineRounds = roundsArg === undefined ? undefined : Number(roundsArg);
    if (baselineRounds !== undefined && !(Number.isInteger(baselineRounds) && baselineRounds > 0)) {
      throw new Error(`bench: --baseline-rounds=${roundsArg}: want a positive integer`);
    }
    // The code measured is the code at the start: a checkout edited during the run stays clean.
    if (!quick && outArg === undefined) commit = await headCommit();
    report = await runBench(quick, only, { baseline, baselineRounds });
  } finally {
    await wt?.remove();
    if (wt !== undefined) {
      Deno.removeSignalListener("SIGINT", onInt);
      Deno.removeSignalListener("SIGTERM", onTerm);
    }
  }
  if (commit !== "unknown") report.commit = commit;
  console.log(formatTable(report));
  if (out !== undefined) {
    await Deno.writeTextFile(out, JSON.stringify(report, null, 2) + "\n");
    console.error(`wrote ${out instanceof URL ? out.pathname : out}`);
  } else console.error("a part run: bench/latest.json (the last full run) left as it is");
  // The history keeps real measurements only: not the CI smoke run (--quick), nor a part run
  // into another file (--out, as --baseline does for each part process).
  if (!quick && outArg === undefined) {
    const entry = historyEntry(
      report,
      commit,
      onlyArg !== undefined ? only : undefined,
    );
    const history = new URL("../bench/history.jsonl", import.meta.url);
    await Deno.writeTextFile(history, JSON.stringify(entry) + "\n", { append: true });
    console.error(`appended to ${history.pathname}`);
  }
}
