/**
 * End-to-end TCP throughput of the real process (issue 5, `e2e_tcp_records_per_s`): main.ts
 * with a TCP collector and the flow log exporter writing to a file, fed by the flow generator
 * (scripts/flowgen.ts, a separate process so each side has its own core) from 4 simulated
 * Agents. A trial at a target rate passes when flowgen sustained >= 95 % of it (TCP
 * back-pressure shows up as flowgen falling behind) and, after SIGTERM, the process's final
 * counters account for every record: received == sent, aggregated == received, nothing
 * rejected, no decode error, no template miss, the flow log exporter dropped nothing, exit 0.
 * A rate search (double from 20k/s while passing, then bisect) finds the highest passing rate.
 *
 *   deno run --allow-all scripts/bench/e2e.ts [--quick] [--rate R] [--duration S] [--cpu-prof]
 */

import {
  DENO_JSON,
  type ExitInfo,
  type FaProcess,
  FLOWGEN_TS,
  type RecordMetricsLine,
  startFlowAggregator,
} from "./process.ts";

/** Options of {@linkcode benchE2eTcp}. */
export interface E2eOptions {
  /** Smoke version: one short low-rate trial (a few seconds). */
  quick: boolean;
  /** Seconds per trial; default 20 (quick: 2). */
  durationSec?: number;
  /** First target rate of the search; default 20,000 records/s (quick: 5,000). */
  startRate?: number;
  /** Wall-time budget of the whole search in seconds; default 240. */
  budgetSec?: number;
  /** Concurrent flows simulated by flowgen; default 10,000 (quick: 1,000). */
  flows?: number;
  /** Write a V8 CPU profile of the aggregator of each trial into this directory. */
  cpuProfDir?: string;
}

/** What flowgen's `--json` report says (the fields used here). */
export interface FlowgenSummary {
  /** Data records sent. */
  records: number;
  /** Achieved records/s over the data phase. */
  rate: number;
  /** Data phase in seconds. */
  elapsedSec: number;
  /** Send errors. */
  errors: number;
  /** Bytes of IPFIX messages sent. */
  bytes: number;
}

/** One trial at one target rate. */
export interface E2eTrial {
  /** Target records/s. */
  targetRate: number;
  /** Passed every check. */
  pass: boolean;
  /** Why it failed (each failed check), empty when it passed. */
  failures: string[];
  /** flowgen's report (undefined if flowgen failed to run). */
  flowgen?: FlowgenSummary;
  /** achieved / target. */
  achievedRatio: number;
  /** Final counters of the process (undefined if no metrics line was logged). */
  metrics?: RecordMetricsLine;
  /** Flow log exporter counters from its `exporter stopped` line. */
  flowLog?: { received: number; exported: number; dropped: number; errors: number };
  /** Aggregator CPU seconds (user + system) during the whole trial, shutdown excluded. */
  aggregatorCpuSec: number;
  /** Aggregator CPU microseconds per received record. */
  aggregatorCpuUsPerRecord: number;
  /**
   * flowgen CPU microseconds per record sent (its whole run, start-up included): the load
   * generator competes with the aggregator for the same two cores.
   */
  flowgenCpuUsPerRecord: number;
  /** Peak resident memory of the aggregator (VmHWM) before shutdown. */
  aggregatorPeakRssBytes: number;
  /** Milliseconds from flowgen's exit until every session was read to its end. */
  drainMs: number;
  /** Flows the shutdown flush exported (held, not yet expired, at SIGTERM). */
  flushedAtShutdown?: number;
  /** Error lines the process logged (rate-limited by the process; the first few kept). */
  errorLines: string[];
  /** Process exit. */
  exit?: ExitInfo;
}

/** Result of {@linkcode benchE2eTcp}. */
export interface E2eResult {
  /** flowgen's achieved rate in the highest passing trial (0 if none passed). */
  e2e_tcp_records_per_s: number;
  /** How it was measured, and every trial. */
  detail: {
    /** Target rate of the best passing trial (0 if none). */
    bestTargetRate: number;
    /** Lowest target rate that failed (undefined if none failed). */
    firstFailRate?: number;
    /** Seconds per trial. */
    durationSec: number;
    /** Simulated Agents. */
    agents: number;
    /** Concurrent flows simulated. */
    flows: number;
    /** Active / inactive flow record timeouts of the process. */
    timeouts: string;
    /**
     * CPU microseconds per record of the aggregator and of flowgen in the fastest trial, and the
     * rate two fully free cores could carry at that cost (aggregator + generator): the ceiling
     * of this benchmark on this machine, whatever the aggregator does.
     */
    cpu: { aggregatorUsPerRecord: number; flowgenUsPerRecord: number; twoCoreCeiling: number };
    /** Every trial, in order. */
    trials: E2eTrial[];
    /** Wall time of the search in seconds. */
    totalSec: number;
    /** Caveats of this figure. */
    note: string;
  };
}

const AGENTS = 4;
const ACTIVE = "5s";
const INACTIVE = "10s";

function benchConfig(logPath: string): string {
  // The flow log is never rotated or compressed during a trial: gzip of rotated files is not
  // the ingest path being measured and would make the figure depend on the disk budget.
  return `activeFlowRecordTimeout: ${ACTIVE}
inactiveFlowRecordTimeout: ${INACTIVE}
aggregatorTransportProtocol: TCP
flowCollector:
  enable: false
clickHouse:
  enable: false
s3Uploader:
  enable: false
flowLogger:
  enable: true
  path: ${logPath}
  maxSize: 100000
  maxBackups: 1
  compress: false
  prettyPrint: true
`;
}

/**
 * CPU seconds of `pid` from /proc/<pid>/stat: utime + stime, or with `children` the CPU of its
 * children that were waited for (cutime + cstime); NaN if unreadable.
 */
async function cpuSeconds(pid: number | "self", children = false): Promise<number> {
  try {
    const stat = await Deno.readTextFile(`/proc/${pid}/stat`);
    // Fields after the parenthesised command name; utime, stime, cutime, cstime are 14-17.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const at = children ? 13 : 11;
    const ticks = Number(rest[at]) + Number(rest[at + 1]);
    return ticks / 100; // USER_HZ is 100 on Linux
  } catch {
    return NaN;
  }
}

async function peakRss(pid: number): Promise<number> {
  try {
    const status = await Deno.readTextFile(`/proc/${pid}/status`);
    const m = /^VmHWM:\s+(\d+) kB$/m.exec(status);
    return m ? Number(m[1]) * 1024 : NaN;
  } catch {
    return NaN;
  }
}

async function runFlowgenProcess(
  port: number,
  rate: number,
  durationSec: number,
  flows: number,
): Promise<FlowgenSummary> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-net",
      "--allow-read",
      "--config",
      DENO_JSON,
      FLOWGEN_TS,
      "--target",
      `127.0.0.1:${port}`,
      "--proto",
      "tcp",
      "--agents",
      String(AGENTS),
      "--flows",
      String(flows),
      "--rate",
      String(rate),
      "--duration",
      String(durationSec),
      "--json",
    ],
    env: { NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout).trim();
  if (!out.success || text === "") {
    throw new Error(
      `flowgen exited ${out.code}: ${new TextDecoder().decode(out.stderr).slice(-500)}`,
    );
  }
  const r = JSON.parse(text.slice(text.lastIndexOf("\n") + 1)) as FlowgenSummary;
  return {
    records: r.records,
    rate: r.rate,
    elapsedSec: r.elapsedSec,
    errors: r.errors,
    bytes: r.bytes,
  };
}

function sessionsClosed(fa: FaProcess, from: number): number {
  let n = 0;
  for (let i = from; i < fa.events.length; i++) if (fa.events[i].msg === "session closed") n++;
  return n;
}

/** Runs one trial: a fresh process, flowgen at `targetRate` for `durationSec`, SIGTERM. */
export async function runE2eTrial(
  targetRate: number,
  opts: { durationSec: number; flows: number; cpuProfDir?: string },
): Promise<E2eTrial> {
  const dir = await Deno.makeTempDir({ prefix: "fa-bench-e2e-" });
  const confPath = `${dir}/fa.conf`;
  await Deno.writeTextFile(confPath, benchConfig(`${dir}/flows.log`));
  const trial: E2eTrial = {
    targetRate,
    pass: false,
    failures: [],
    achievedRatio: 0,
    aggregatorCpuSec: NaN,
    aggregatorCpuUsPerRecord: NaN,
    flowgenCpuUsPerRecord: NaN,
    aggregatorPeakRssBytes: NaN,
    drainMs: NaN,
    errorLines: [],
  };
  const fa = await startFlowAggregator({
    config: confPath,
    cwd: dir,
    denoFlags: opts.cpuProfDir !== undefined
      ? ["--cpu-prof", `--cpu-prof-dir=${opts.cpuProfDir}`]
      : [],
  });
  try {
    const from = fa.events.length;
    const cpu0 = await cpuSeconds(fa.pid);
    // flowgen is the only child waited for meanwhile: its CPU lands in our cutime/cstime.
    const gen0 = await cpuSeconds("self", true);
    try {
      trial.flowgen = await runFlowgenProcess(fa.port, targetRate, opts.durationSec, opts.flows);
      trial.flowgenCpuUsPerRecord = ((await cpuSeconds("self", true)) - gen0) * 1e6 /
        trial.flowgen.records;
    } catch (e) {
      trial.failures.push(`flowgen: ${e instanceof Error ? e.message : e}`);
    }
    // Every Agent connection closed by flowgen is "session closed" once the process has read,
    // decoded and aggregated every byte before its EOF: only then are the counters final.
    const t0 = performance.now();
    try {
      await fa.waitFor(() => sessionsClosed(fa, from) >= AGENTS, 120_000, from);
    } catch (e) {
      trial.failures.push(`sessions not drained: ${e instanceof Error ? e.message : e}`);
    }
    trial.drainMs = performance.now() - t0;
    trial.aggregatorCpuSec = (await cpuSeconds(fa.pid)) - cpu0;
    trial.aggregatorPeakRssBytes = await peakRss(fa.pid);
  } finally {
    trial.exit = await fa.stop();
  }
  trial.metrics = fa.lastMetrics();
  const stopped = fa.events.findLast((e) =>
    e.msg === "exporter stopped" && e.section === "flowLogger"
  );
  if (stopped !== undefined) {
    trial.flowLog = {
      received: Number(stopped.received),
      exported: Number(stopped.exported),
      dropped: Number(stopped.dropped),
      errors: Number(stopped.errors),
    };
  }
  const flushed = fa.events.findLast((e) => e.msg === "flushed flows held at shutdown");
  if (flushed !== undefined) trial.flushedAtShutdown = Number(flushed.flows);
  trial.errorLines = fa.events.filter((e) => e.level === "error" || e.level === "warn")
    .slice(0, 5).map((e) => JSON.stringify(e));
  await Deno.remove(dir, { recursive: true }).catch(() => {});
  judgeTrial(trial);
  return trial;
}

/**
 * Fills `pass`, `failures` and the ratios of a finished trial from its flowgen report, final
 * metrics, flow log counters and exit (failures already recorded are kept).
 */
export function judgeTrial(t: E2eTrial): void {
  const f = t.failures;
  const g = t.flowgen;
  const m = t.metrics;
  if (g !== undefined) {
    t.achievedRatio = g.rate / t.targetRate;
    if (t.achievedRatio < 0.95) {
      f.push(`flowgen achieved ${g.rate.toFixed(0)}/s < 95% of ${t.targetRate}/s`);
    }
    if (g.errors !== 0) f.push(`flowgen send errors ${g.errors}`);
  }
  if (m === undefined) {
    f.push("no final record metrics line");
  } else {
    if (g !== undefined && m.numRecordsReceived !== g.records) {
      f.push(`received ${m.numRecordsReceived} != sent ${g.records}`);
    }
    if (m.recordsAggregated !== m.numRecordsReceived) {
      f.push(`aggregated ${m.recordsAggregated} != received ${m.numRecordsReceived}`);
    }
    if (m.rejected !== 0) f.push(`rejected ${m.rejected}`);
    if (m.decodeErrors !== 0) f.push(`decodeErrors ${m.decodeErrors}`);
    if (m.templateMisses !== 0) f.push(`templateMisses ${m.templateMisses}`);
    if (m.exporterErrors !== 0) f.push(`exporterErrors ${m.exporterErrors}`);
    if (m.numFlows !== 0) f.push(`${m.numFlows} flows still held after the shutdown flush`);
    const l = t.flowLog;
    if (l === undefined) {
      f.push("no flow log exporter stats");
    } else if (l.dropped !== 0 || l.errors !== 0 || l.exported !== m.numRecordsExported) {
      f.push(
        `flow log exported ${l.exported} of ${m.numRecordsExported}, dropped ${l.dropped}, ` +
          `errors ${l.errors}`,
      );
    }
    if (m.numRecordsReceived > 0) {
      t.aggregatorCpuUsPerRecord = (t.aggregatorCpuSec * 1e6) / m.numRecordsReceived;
    }
  }
  if (t.exit !== undefined && (t.exit.code !== 0 || t.exit.killed)) {
    f.push(`exit code ${t.exit.code}${t.exit.killed ? " (SIGKILL)" : ""}`);
  }
  t.pass = f.length === 0;
}

/**
 * Highest TCP rate the real process sustains with every record accounted for. Full mode:
 * 20 s trials from 20k/s, doubling while they pass, then two bisection steps, within ~4
 * minutes; a trial that fails only by falling short of the rate is retried once (the cores are
 * shared). Quick mode: one 2 s trial at 5k/s (a smoke check of the whole path).
 */
export async function benchE2eTcp(opts: E2eOptions): Promise<E2eResult> {
  const durationSec = opts.durationSec ?? (opts.quick ? 2 : 20);
  const flows = opts.flows ?? (opts.quick ? 1_000 : 10_000);
  const budgetMs = (opts.budgetSec ?? (opts.quick ? 30 : 240)) * 1000;
  const start = performance.now();
  const trials: E2eTrial[] = [];
  let pass = 0;
  let fail = Infinity;
  let lastTrialMs = (durationSec + 3) * 1000;
  const fits = (): boolean => performance.now() - start + lastTrialMs <= budgetMs;
  const once = async (rate: number): Promise<E2eTrial> => {
    const t0 = performance.now();
    const t = await runE2eTrial(Math.round(rate), {
      durationSec,
      flows,
      cpuProfDir: opts.cpuProfDir,
    });
    lastTrialMs = performance.now() - t0;
    trials.push(t);
    progress(t);
    return t;
  };
  const run = async (rate: number): Promise<boolean> => {
    let t = await once(rate);
    // A rate shortfall alone can be a neighbour's burst on the shared cores: one retry. A
    // record not accounted for is never retried: that is a real failure.
    if (
      !t.pass && !opts.quick && fits() && t.failures.every((f) => f.startsWith("flowgen achieved"))
    ) {
      t = await once(rate);
    }
    if (t.pass) pass = Math.max(pass, t.targetRate);
    else fail = Math.min(fail, t.targetRate);
    return t.pass;
  };

  let rate = opts.startRate ?? (opts.quick ? 5_000 : 20_000);
  if (opts.quick) {
    await run(rate);
  } else {
    // Up while passing; down (halving) if even the first rate fails.
    if (await run(rate)) {
      while (fits() && await run(rate * 2)) rate *= 2;
    } else {
      for (let i = 0; i < 3 && fits() && !(await run(rate / 2)); i++) rate /= 2;
    }
    for (let i = 0; i < 2 && fits() && pass > 0 && Number.isFinite(fail); i++) {
      if (fail - pass < pass * 0.05) break; // closer than the noise: stop
      await run((pass + fail) / 2);
    }
  }

  const best = trials.filter((t) => t.pass).sort((a, b) => b.targetRate - a.targetRate)[0];
  const fastest = trials.filter((t) => Number.isFinite(t.aggregatorCpuUsPerRecord))
    .sort((a, b) => (b.flowgen?.rate ?? 0) - (a.flowgen?.rate ?? 0))[0];
  const aggUs = fastest?.aggregatorCpuUsPerRecord ?? NaN;
  const genUs = fastest?.flowgenCpuUsPerRecord ?? NaN;
  return {
    e2e_tcp_records_per_s: best?.flowgen?.rate ?? 0,
    detail: {
      bestTargetRate: best?.targetRate ?? 0,
      firstFailRate: Number.isFinite(fail) ? fail : undefined,
      durationSec,
      agents: AGENTS,
      flows,
      timeouts: `active ${ACTIVE} / inactive ${INACTIVE}`,
      cpu: {
        aggregatorUsPerRecord: aggUs,
        flowgenUsPerRecord: genUs,
        twoCoreCeiling: 2e6 / (aggUs + genUs),
      },
      trials,
      totalSec: (performance.now() - start) / 1000,
      note: "2 shared cores (other jobs running): the aggregator and flowgen each want one, so " +
        "the figure is noisy and bounded by whichever side gets less CPU; a trial fails when " +
        "flowgen falls below 95 % of the target (TCP back-pressure) or any record is unaccounted",
    },
  };
}

function progress(t: E2eTrial): void {
  const g = t.flowgen;
  console.error(
    `e2e tcp ${t.targetRate}/s: ${t.pass ? "pass" : "FAIL"} achieved ${
      g ? g.rate.toFixed(0) : "-"
    }/s sent ${g?.records ?? "-"} received ${t.metrics?.numRecordsReceived ?? "-"} cpu ${
      t.aggregatorCpuUsPerRecord.toFixed(2)
    } us/record (flowgen ${t.flowgenCpuUsPerRecord.toFixed(2)}) drain ${
      t.drainMs.toFixed(0)
    } ms flushed at stop ${t.flushedAtShutdown ?? "-"}${
      t.failures.length ? " (" + t.failures.join("; ") + ")" : ""
    }`,
  );
}

/** Reads `--name value` or `--name=value` from the command line. */
function flag(name: string): string | undefined {
  const args = Deno.args;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === `--${name}`) return args[i + 1];
    if (args[i].startsWith(`--${name}=`)) return args[i].slice(name.length + 3);
  }
  return undefined;
}

if (import.meta.main) {
  const quick = Deno.args.includes("--quick");
  const fixed = flag("rate");
  const durationSec = flag("duration") !== undefined ? Number(flag("duration")) : undefined;
  const cpuProfDir = Deno.args.includes("--cpu-prof")
    ? await Deno.makeTempDir({ prefix: "fa-bench-prof-" })
    : undefined;
  if (fixed !== undefined) {
    // One trial at a given rate (profiling, investigation).
    const t = await runE2eTrial(Number(fixed), {
      durationSec: durationSec ?? (quick ? 2 : 20),
      flows: Number(flag("flows") ?? 10_000),
      cpuProfDir,
    });
    progress(t);
    console.log(JSON.stringify({ trial: t, cpuProfDir }, null, 2));
  } else {
    const r = await benchE2eTcp({ quick, durationSec, cpuProfDir });
    console.log(JSON.stringify({ ...r, cpuProfDir }, null, 2));
  }
}
