/**
 * End-to-end TCP on the real process driven by the replay sender (issue 15): main.ts with the
 * flow log on (the e2e part's configuration), 4 Agent connections from scripts/replay.ts sending
 * a pre-encoded realistic stream as fast as the process reads it (no pacing: TCP back-pressure
 * sets the rate). The replay sender costs a fraction of what flowgen does per record, so the
 * process, not the generator, is what saturates. Each trial is judged like the e2e part's
 * (every record received, aggregated and accounted for by the flow log sink, exit 0) and
 * reports records/s (received / (send time + drain)), the process's CPU per record over all its
 * threads (/proc/<pid>/stat utime + stime), the cores it used (CPU seconds / wall seconds) and
 * its peak RSS (VmHWM). One more trial at 100,000 flows also reports the peak RSS of the
 * process's stop, which exports every flow it still holds, next to its peak before the stop. One
 * more, paced at {@linkcode PACED_RATE} records/s with upstream's default timeouts (60 s / 90 s),
 * reports the CPU per record at that pace, where fixed costs (thread wake-ups, timers) weigh
 * more than at full speed.
 *
 * The process runs as shipped (`--workers` at its default: one aggregation shard per core); its
 * same-run reference is the same process with `--workers 1` (the core in the main thread),
 * trials of the two alternated.
 *
 * Mutual TLS: as many trials again of the process as shipped with `aggregatorTransportProtocol:
 * TLS` (`--cert-dir`: the sender presents the Agent certificate the process wrote), judged
 * alike; each round runs TCP, TLS, one shard, the next round the reverse, so a TLS trial always
 * sits next to a TCP trial of the same round, and the same run's TCP figure is its reference.
 *
 *   deno run --allow-all scripts/bench/e2e_replay.ts [--quick] [--flows N] [--duration S]
 */

import { type E2eTrial, runE2eTrial } from "./e2e.ts";
import { REPLAY_UNIQUE_NAMES } from "./core.ts";
import { DEFAULTS } from "../../src/config/defaults.ts";

/**
 * Records/s of the paced trial: what a cluster's Agents send at a steady pace (20,000 flows each
 * re-exported every 2 s or so), where the flat-out trials measure the ceiling.
 */
export const PACED_RATE = 10_000;

/** Options of {@linkcode benchE2eReplay}. */
export interface E2eReplayOptions {
  /** Smoke version: one 2 s trial with 1,000 flows. */
  quick: boolean;
  /** Flows of the headline trials; default 20,000 (quick: 1,000). */
  flows?: number;
  /** Seconds of sending per trial; default 20 (quick: 2). */
  durationSec?: number;
  /**
   * Rounds of trials at `flows`, each one TCP, one TLS and one `--workers 1` trial (the best
   * passing one of each kind is its figure); default 2 (quick: 1).
   */
  trials?: number;
  /**
   * Flows of the extra trials reported in the details only (as many as `trials`, the best
   * passing one reported as at `flows`); default 100,000 (quick: none).
   */
  largeFlows?: number;
}

/** Result of {@linkcode benchE2eReplay}: the figures of the best passing trial. */
export interface E2eReplayResult {
  /** Records/s received, send time plus drain. */
  e2e_replay_tcp_records_per_s: number | null;
  /** Aggregator CPU (all threads) per received record, microseconds. */
  e2e_replay_cpu_us_per_record: number | null;
  /** Aggregator CPU seconds per wall second. */
  e2e_replay_cores: number | null;
  /** Peak resident memory (VmHWM) of the aggregator, bytes. */
  e2e_replay_peak_rss_bytes: number | null;
  /**
   * Peak RSS of the 100k-flow trial's process over its whole life, its stop included (SIGTERM:
   * every flow still held is exported then), bytes (`--quick`: of the headline trial).
   */
  e2e_replay_stop_peak_rss_bytes: number | null;
  /** The reference: the same process's peak RSS before the stop, bytes. */
  e2e_replay_large_peak_rss_bytes: number | null;
  /**
   * Aggregator CPU (all threads) per record at PACED_RATE records/s, 20,000 flows, upstream's
   * default timeouts, microseconds (`--quick`: 2,000/s, 1,000 flows).
   */
  e2e_replay_paced_cpu_us_per_record: number | null;
  /** The replay sender's CPU per record sent (its whole run), microseconds. */
  replay_sender_cpu_us_per_record: number | null;
  /** Records of the slowest Agent connection / of the fastest (fairness; goal ≥ 0.5). */
  e2e_replay_agent_spread: number | null;
  /** The reference: records/s of the same process with `--workers 1`. */
  e2e_replay_one_shard_records_per_s: number | null;
  /** The reference: CPU per record with `--workers 1`, microseconds. */
  e2e_replay_one_shard_cpu_us_per_record: number | null;
  /**
   * Records/s received over mutual TLS (`aggregatorTransportProtocol: TLS`), 4 Agent
   * connections flat out, `flows` flows, shipped defaults, send time plus drain; the TCP figure
   * of the same run is its reference.
   */
  e2e_replay_tls_records_per_s: number | null;
  /** Aggregator CPU (all threads) per received record over mutual TLS, microseconds. */
  e2e_replay_tls_cpu_us_per_record: number | null;
  /** Every trial and the parameters. */
  detail: {
    flows: number;
    durationSec: number;
    uniqueNames: number;
    /** Aggregation shards of the process as shipped (its `--workers` default). */
    shards: number;
    trials: E2eTrial[];
    oneShardTrials: E2eTrial[];
    /** The mutual-TLS trials, each next to a TCP trial of {@linkcode trials}. */
    tlsTrials: E2eTrial[];
    /** The best of {@linkcode largeTrials} (the first when none passed). */
    large?: E2eTrial;
    largeTrials: E2eTrial[];
    paced?: E2eTrial;
  };
}

/**
 * Slowest / fastest of the records each Agent connection got through in a trial (all send flat
 * out, so TCP back-pressure makes what was sent what the collector read, give or take the
 * socket buffers); null without per-Agent figures.
 */
export function agentSpread(perAgent: readonly number[] | undefined): number | null {
  if (perAgent === undefined || perAgent.length === 0) return null;
  const max = Math.max(...perAgent);
  return max > 0 ? Math.min(...perAgent) / max : null;
}

/** `v` when a finite number, else null. */
function finite(v: number | undefined): number | null {
  return v !== undefined && Number.isFinite(v) ? v : null;
}

/** The best passing trial (highest records/s), or undefined. */
export function bestTrial(trials: readonly E2eTrial[]): E2eTrial | undefined {
  return trials.filter((t) => t.pass && t.recordsPerSec !== undefined)
    .sort((a, b) => b.recordsPerSec! - a.recordsPerSec!)[0];
}

function progress(t: E2eTrial, flows: string): void {
  console.error(
    `e2e replay ${flows} flows: ${t.pass ? "pass" : "FAIL"} ${
      (t.recordsPerSec ?? NaN).toFixed(0)
    } records/s, ${t.aggregatorCpuUsPerRecord.toFixed(2)} us/record, ${
      (t.coresUsed ?? NaN).toFixed(2)
    } cores, per Agent ${t.flowgen?.perAgent?.join("/") ?? "?"}, peak RSS ${
      (t.aggregatorPeakRssBytes / 2 ** 20).toFixed(0)
    } MiB, sender ${t.flowgenCpuUsPerRecord.toFixed(3)} us/record, threads us/record ${
      JSON.stringify(t.aggregatorThreadsUsPerRecord ?? null)
    }${t.failures.length ? ` (${t.failures.join("; ")})` : ""}`,
  );
}

/** Runs the trials and returns the figures of the best passing one (nulls if none passed). */
export async function benchE2eReplay(opts: E2eReplayOptions): Promise<E2eReplayResult> {
  const flows = opts.flows ?? (opts.quick ? 1_000 : 20_000);
  const durationSec = opts.durationSec ?? (opts.quick ? 2 : 20);
  const n = opts.trials ?? (opts.quick ? 1 : 2);
  const trialOpts = { durationSec, sender: "replay" as const, uniqueNames: REPLAY_UNIQUE_NAMES };
  const kinds = {
    tcp: { opts: { ...trialOpts, flows }, label: `${flows}`, into: [] as E2eTrial[] },
    tls: {
      opts: { ...trialOpts, flows, transport: "TLS" as const },
      label: `${flows}, mutual TLS,`,
      into: [] as E2eTrial[],
    },
    one: {
      opts: { ...trialOpts, flows, args: ["--workers", "1"] },
      label: `${flows}, one shard`,
      into: [] as E2eTrial[],
    },
  };
  const order = ["tcp", "tls", "one"] as const;
  for (let i = 0; i < n; i++) {
    // Alternated, the order reversed every round: a neighbour's burst hits each kind alike, and
    // TLS always runs next to a TCP trial.
    for (const k of i % 2 === 0 ? order : order.toReversed()) {
      const t = await runE2eTrial(0, kinds[k].opts);
      progress(t, kinds[k].label);
      kinds[k].into.push(t);
    }
  }
  const trials = kinds.tcp.into;
  const oneShardTrials = kinds.one.into;
  const tlsTrials = kinds.tls.into;
  const largeFlows = opts.largeFlows ?? (opts.quick ? 0 : 100_000);
  const largeTrials: E2eTrial[] = [];
  for (let i = 0; largeFlows > 0 && i < n; i++) {
    const t = await runE2eTrial(0, { ...trialOpts, flows: largeFlows });
    progress(t, `${largeFlows}`);
    largeTrials.push(t);
  }
  const large = bestTrial(largeTrials) ?? largeTrials[0];
  // Paced like a cluster's Agents, with upstream's timeouts: flows are not re-exported within the
  // trial, every one is at the stop.
  const pacedRate = opts.quick ? 2_000 : PACED_RATE;
  const paced = await runE2eTrial(pacedRate, {
    ...trialOpts,
    flows,
    timeouts: {
      active: DEFAULTS.activeFlowRecordTimeout,
      inactive: DEFAULTS.inactiveFlowRecordTimeout,
    },
  });
  progress(paced, `${flows}, paced at ${pacedRate}/s,`);
  const best = bestTrial(trials);
  const bestOne = bestTrial(oneShardTrials);
  const bestTls = bestTrial(tlsTrials);
  return {
    e2e_replay_tcp_records_per_s: best?.recordsPerSec ?? null,
    e2e_replay_cpu_us_per_record: best?.aggregatorCpuUsPerRecord ?? null,
    e2e_replay_cores: best?.coresUsed ?? null,
    e2e_replay_peak_rss_bytes: best?.aggregatorPeakRssBytes ?? null,
    // Without the large trial (--quick), the best headline trial's.
    e2e_replay_stop_peak_rss_bytes: finite((large ?? best)?.exit?.peakRssBytes),
    e2e_replay_large_peak_rss_bytes: finite((large ?? best)?.aggregatorPeakRssBytes),
    e2e_replay_paced_cpu_us_per_record: paced.pass ? finite(paced.aggregatorCpuUsPerRecord) : null,
    replay_sender_cpu_us_per_record: best?.flowgenCpuUsPerRecord ?? null,
    e2e_replay_agent_spread: agentSpread(best?.flowgen?.perAgent),
    e2e_replay_one_shard_records_per_s: bestOne?.recordsPerSec ?? null,
    e2e_replay_one_shard_cpu_us_per_record: bestOne?.aggregatorCpuUsPerRecord ?? null,
    e2e_replay_tls_records_per_s: bestTls?.recordsPerSec ?? null,
    e2e_replay_tls_cpu_us_per_record: bestTls?.aggregatorCpuUsPerRecord ?? null,
    detail: {
      flows,
      durationSec,
      uniqueNames: REPLAY_UNIQUE_NAMES,
      shards: Math.min(8, navigator.hardwareConcurrency),
      trials,
      oneShardTrials,
      tlsTrials,
      large,
      largeTrials,
      paced,
    },
  };
}

/** Reads `--name value` or `--name=value` from the command line. */
function flag(name: string): number | undefined {
  const i = Deno.args.findIndex((a) => a === `--${name}` || a.startsWith(`--${name}=`));
  if (i < 0) return undefined;
  const a = Deno.args[i];
  return Number(a.includes("=") ? a.slice(a.indexOf("=") + 1) : Deno.args[i + 1]);
}

if (import.meta.main) {
  const r = await benchE2eReplay({
    quick: Deno.args.includes("--quick"),
    flows: flag("flows"),
    durationSec: flag("duration"),
    trials: flag("trials"),
    largeFlows: flag("large-flows"),
  });
  console.log(JSON.stringify(r, null, 2));
}
