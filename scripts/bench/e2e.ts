/**
 * End-to-end TCP throughput of the real process (issue 5, `e2e_tcp_records_per_s`): main.ts
 * with a TCP collector and the flow log exporter writing to a file, fed by the flow generator
 * (scripts/flowgen.ts, a separate process so each side has its own core) from 4 simulated
 * Agents. A trial at a target rate passes when flowgen sustained >= 95 % of it (TCP
 * back-pressure shows up as flowgen falling behind) and, after SIGTERM, the process's final
 * counters account for every record: received == sent, aggregated == received, nothing
 * rejected, no decode error, no template miss, the flow log exporter dropped nothing and (in
 * its worker) holds nothing and lost nothing, exit 0. A rate search (double from the start
 * rate while passing, then bisect) finds the highest passing rate.
 *
 * Two modes are measured in the same run: the default, the flow log sink in its own worker
 * (`e2e_tcp_records_per_s`), and `--exporters-in-process` (`e2e_tcp_inprocess_records_per_s`).
 * Their searches are interleaved one trial at a time (worker, in-process, worker, ...) so a
 * neighbour's load burst hits both, and their ratio is `e2e_worker_vs_inprocess_ratio`.
 *
 *   deno run --allow-all scripts/bench/e2e.ts [--quick] [--mode worker|inprocess|both]
 *     [--rate R] [--duration S] [--cpu-prof]
 */

import {
  acceptsApiFlags,
  countEvents,
  DENO_JSON,
  type ExitInfo,
  type FaProcess,
  FLOWGEN_TS,
  peakRssBytes,
  type RecordMetricsLine,
  REPLAY_TS,
  startFlowAggregator,
  type ThreadTimes,
  threadTimes,
} from "./process.ts";
import { REPLAY_UNIQUE_NAMES } from "./core.ts";
import { caFileOf } from "../../src/api/server.ts";

/**
 * Where the process runs its sinks: `worker` is the default (each sink in its permission-scoped
 * Deno Worker), `inprocess` is main.ts `--exporters-in-process` (the sinks on the main thread).
 */
export type E2eMode = "worker" | "inprocess";

/** Every mode, in the order their trials alternate. */
export const E2E_MODES: readonly E2eMode[] = ["worker", "inprocess"];

/** Options of {@linkcode benchE2eTcp}. */
export interface E2eOptions {
  /** Smoke version: one short low-rate trial per mode (a few seconds each). */
  quick: boolean;
  /** Modes to measure, their trials interleaved; default both ({@linkcode E2E_MODES}). */
  modes?: readonly E2eMode[];
  /** Seconds per trial; default 20 (quick: 2). */
  durationSec?: number;
  /** First target rate of each search; default 40,000 records/s (quick: 5,000). */
  startRate?: number;
  /** Wall-time budget of all the searches together in seconds; default 480 (quick: 30). */
  budgetSec?: number;
  /** Concurrent flows simulated by flowgen; default 10,000 (quick: 1,000). */
  flows?: number;
  /** Write a V8 CPU profile of the aggregator of each trial into this directory. */
  cpuProfDir?: string;
}

/** What the sender's (flowgen's or replay's) `--json` report says (the fields used here). */
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
  /** Records sent per Agent connection (the replay sender only). */
  perAgent?: number[];
}

/** Flow log exporter counters from its `exporter stopped` line. */
export interface FlowLogStats {
  /** Records handed to the exporter. */
  received: number;
  /** Records written. */
  exported: number;
  /** Records dropped (all causes). */
  dropped: number;
  /** Write errors. */
  errors: number;
  /** Worker mode only: records taken and not yet exported, dropped or filtered at exit. */
  buffered?: number;
  /** Worker mode only: records the sink's filters skipped. */
  filtered?: number;
  /** Worker mode only: operations the sink attempted outside its permissions. */
  permissionDenied?: number;
  /** Worker mode only: records held by a worker that died. */
  lostInWorker?: number;
  /** Worker mode only: records dropped because too many were outstanding. */
  overflowDropped?: number;
  /** Worker mode only: errors that escaped the sink inside its worker. */
  uncaught?: number;
  /** Worker mode only: workers restarted after a death or hang. */
  workerRestarts?: number;
}

/** The worker ledger fields of {@linkcode FlowLogStats} that must all be 0 at exit. */
const WORKER_ZERO_FIELDS = [
  "buffered",
  "lostInWorker",
  "overflowDropped",
  "permissionDenied",
  "uncaught",
] as const;

/** One trial at one target rate. */
export interface E2eTrial {
  /** Where the process ran its sinks. */
  mode: E2eMode;
  /** The collector's transport (`aggregatorTransportProtocol`); absent = TCP. */
  transport?: E2eTransport;
  /** Load generator: flowgen (default) or the replay sender. */
  sender?: E2eSender;
  /** With `queryEveryMs`: the `/flowrecords` queries made during the trial. */
  queries?: { queries: number; bytes: number; maxMs: number };
  /** Target records/s; 0 = the sender sends as fast as the process reads. */
  targetRate: number;
  /** Passed every check. */
  pass: boolean;
  /** Why it failed (each failed check), empty when it passed. */
  failures: string[];
  /** The sender's report, flowgen's or replay's (undefined if it failed to run). */
  flowgen?: FlowgenSummary;
  /** achieved / target. */
  achievedRatio: number;
  /** Final counters of the process (undefined if no metrics line was logged). */
  metrics?: RecordMetricsLine;
  /** Flow log exporter counters from its `exporter stopped` line. */
  flowLog?: FlowLogStats;
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
  /** {@linkcode E2eTrial.aggregatorCpuSec} by thread (see {@linkcode ThreadCpu}), seconds. */
  aggregatorThreadsCpuSec?: ThreadCpu;
  /** The same per received record, microseconds. */
  aggregatorThreadsUsPerRecord?: ThreadCpu;
  /** Milliseconds from flowgen's exit until every session was read to its end. */
  drainMs: number;
  /** Seconds of the sender's data phase plus the drain: the wall time the records took. */
  wallSec?: number;
  /** Records received by the process / {@linkcode E2eTrial.wallSec}. */
  recordsPerSec?: number;
  /** Aggregator CPU seconds (all threads) / {@linkcode E2eTrial.wallSec}: cores used. */
  coresUsed?: number;
  /** Flows the shutdown flush exported (held, not yet expired, at SIGTERM). */
  flushedAtShutdown?: number;
  /** Error lines the process logged (rate-limited by the process; the first few kept). */
  errorLines: string[];
  /** Process exit. */
  exit?: ExitInfo;
}

/** What one mode's search found. */
export interface E2eModeResult {
  /** flowgen's achieved rate in the highest passing trial (0 if none passed). */
  recordsPerSec: number;
  /** Target rate of the best passing trial (0 if none). */
  bestTargetRate: number;
  /** Lowest target rate that failed (undefined if none failed). */
  firstFailRate?: number;
  /** Trials of this mode. */
  trials: number;
  /**
   * CPU microseconds per record of the aggregator (every thread, the sink worker included) and
   * of flowgen in this mode's fastest trial, and the rate two fully free cores could carry at
   * that cost (aggregator + generator): the ceiling of this benchmark on this machine.
   */
  cpu: { aggregatorUsPerRecord: number; flowgenUsPerRecord: number; twoCoreCeiling: number };
}

/** Aggregator CPU per record of both modes at one target rate where both passed. */
export interface E2ePairedCpu {
  /** Target records/s. */
  targetRate: number;
  /** Worker mode, microseconds per record (mean of its passing trials at this rate). */
  workerUsPerRecord: number;
  /** In-process mode, microseconds per record (same). */
  inprocessUsPerRecord: number;
}

/** Result of {@linkcode benchE2eTcp}. */
export interface E2eResult {
  /** Worker mode (the default): flowgen's achieved rate in its highest passing trial. */
  e2e_tcp_records_per_s: number | null;
  /** `--exporters-in-process`: the same figure. */
  e2e_tcp_inprocess_records_per_s: number | null;
  /** Worker figure / in-process figure (null unless both measured and in-process > 0). */
  e2e_worker_vs_inprocess_ratio: number | null;
  /** How it was measured, and every trial. */
  detail: {
    /** Per mode measured. */
    modes: Partial<Record<E2eMode, E2eModeResult>>;
    /**
     * At each target rate both modes passed: the aggregator's CPU per record in each, a finer
     * comparison of the two modes than the rate search's grid.
     */
    pairedCpu: E2ePairedCpu[];
    /** Seconds per trial. */
    durationSec: number;
    /** Simulated Agents. */
    agents: number;
    /** Concurrent flows simulated. */
    flows: number;
    /** Active / inactive flow record timeouts of the process. */
    timeouts: string;
    /** Every trial, in order. */
    trials: E2eTrial[];
    /** Wall time of the search in seconds. */
    totalSec: number;
    /** Caveats of this figure. */
    note: string;
  };
}

/** Simulated Agents (connections or UDP sockets) of a sender. */
export const AGENTS = 4;
/** The flow timeouts of a bench configuration (duration strings, as in the config file). */
export interface BenchTimeouts {
  readonly active: string;
  readonly inactive: string;
}

const ACTIVE = "5s";
const INACTIVE = "10s";

/**
 * Where a trial's flow log goes, relative to its directory (which holds the configuration file):
 * a subdirectory, as in a deployment, where the configuration has a directory of its own (a
 * ConfigMap volume). The configuration watcher watches that directory; a flow log written
 * next to the file wakes it on every write (Deno's watcher thread cost ~4 % of the process's CPU
 * at 400k records/s when it was).
 */
export const FLOW_LOG_FILE = "log/flows.log";

/** A collector transport of a stream trial: plain TCP, or mutual TLS. */
export type E2eTransport = "TCP" | "TLS";

/** The certificate directory of a TLS trial (`--cert-dir`), relative to its directory. */
export const CERT_DIR = "certs";

/** PEM files of a process started with `--cert-dir`: the CA, the Agent certificate and key. */
export interface CertFiles {
  ca: string;
  cert: string;
  key: string;
}

/** Waits until `fa` logged writing its certificates into `certDir` (`--cert-dir`); their files. */
export async function writtenCertFiles(fa: FaProcess, certDir: string): Promise<CertFiles> {
  await fa.waitFor((e) => e.msg === "wrote the CA and Agent client certificate", 30_000);
  return { ca: `${certDir}/ca.crt`, cert: `${certDir}/tls.crt`, key: `${certDir}/tls.key` };
}

/**
 * The benchmark configuration of the real process: the given collector transport (default
 * TCP), the flow log on (writing `logPath`), every other sink off. TLS: the server certificate
 * is issued for 127.0.0.1 (`flowAggregatorAddress`), where the bench's Agents connect.
 */
export function benchConfig(
  logPath: string,
  transport: "TCP" | "UDP" | "TLS" = "TCP",
  timeouts: BenchTimeouts = { active: ACTIVE, inactive: INACTIVE },
): string {
  // The flow log is never rotated or compressed during a trial: gzip of rotated files is not
  // the ingest path being measured and would make the figure depend on the disk budget.
  return `activeFlowRecordTimeout: ${timeouts.active}
inactiveFlowRecordTimeout: ${timeouts.inactive}
aggregatorTransportProtocol: ${transport}
${transport === "TLS" ? "flowAggregatorAddress: 127.0.0.1\n" : ""}flowCollector:
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
 * CPU of a process's threads by kind: `main` (the JS main thread: sockets, decode or routing),
 * `workers` (each JS worker thread that used CPU: aggregation shards and sinks, heaviest
 * first), `v8` (V8's helper threads: parallel and concurrent GC, background compilation) and
 * `other` (Deno's I/O threads). Threads that ended in between are left out.
 */
export interface ThreadCpu {
  main: number;
  workers: number[];
  v8: number;
  other: number;
}

/** The CPU seconds (utime + stime) each thread of `pid` used between two samples, by kind. */
function threadBreakdown(
  pid: number,
  before: Map<number, ThreadTimes>,
  after: Map<number, ThreadTimes>,
): ThreadCpu {
  const t: ThreadCpu = { main: 0, workers: [], v8: 0, other: 0 };
  for (const [tid, a] of after) {
    const b = before.get(tid);
    const sec = a.user + a.sys - (b === undefined ? 0 : b.user + b.sys);
    if (tid === pid) t.main += sec;
    else if (/^worker-\d+$/.test(a.name)) {
      if (sec > 0) t.workers.push(sec);
    } else if (a.name.startsWith("V8 ")) t.v8 += sec;
    else t.other += sec;
  }
  t.workers.sort((x, y) => y - x);
  return t;
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

/** {@linkcode peakRssBytes}, NaN when it cannot be read (the process is gone). */
function peakRss(pid: number): Promise<number> {
  return peakRssBytes(pid).catch(() => NaN);
}

/** The load generator of a trial. */
export type E2eSender = "flowgen" | "replay";

/**
 * Runs a sender CLI (flowgen or replay) over TCP (or `opts.proto`) to `port` from `AGENTS`
 * Agents and returns its `--json` report; `extra` are its own flags (TLS: `--ca`, `--cert`,
 * `--key`).
 */
export async function runSenderProcess(
  sender: E2eSender,
  port: number,
  opts: {
    rate: number;
    durationSec: number;
    flows: number;
    extra?: string[];
    proto?: "tcp" | "udp" | "tls";
  },
): Promise<FlowgenSummary> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-net",
      "--allow-read",
      "--config",
      DENO_JSON,
      sender === "replay" ? REPLAY_TS : FLOWGEN_TS,
      "--target",
      `127.0.0.1:${port}`,
      "--proto",
      opts.proto ?? "tcp",
      "--agents",
      String(AGENTS),
      "--flows",
      String(opts.flows),
      "--rate",
      String(opts.rate),
      "--duration",
      String(opts.durationSec),
      ...(opts.extra ?? []),
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
      `${sender} exited ${out.code}: ${new TextDecoder().decode(out.stderr).slice(-500)}`,
    );
  }
  const r = JSON.parse(text.slice(text.lastIndexOf("\n") + 1)) as FlowgenSummary;
  return {
    records: r.records,
    rate: r.rate,
    elapsedSec: r.elapsedSec,
    errors: r.errors,
    bytes: r.bytes,
    ...(r.perAgent !== undefined ? { perAgent: r.perAgent } : {}),
  };
}

/** Options of {@linkcode runE2eTrial}. */
export interface E2eTrialOptions {
  /** Seconds of traffic. */
  durationSec: number;
  /** Concurrent flows simulated by flowgen. */
  flows: number;
  /** Where the process runs its sinks; default `worker`. */
  mode?: E2eMode;
  /** Load generator; default flowgen. The replay sender takes a target rate of 0 (unpaced). */
  sender?: E2eSender;
  /** Replay only: share of Pods with a name of their own (default REPLAY_UNIQUE_NAMES). */
  uniqueNames?: number;
  /** Write a V8 CPU profile of the aggregator into this directory. */
  cpuProfDir?: string;
  /** More `deno run` flags for the aggregator, e.g. `--v8-flags=--perf-basic-prof` for perf. */
  denoFlags?: readonly string[];
  /**
   * Query the API's `/flowrecords` (the default limit) every this many ms while flowgen sends
   * (the `api` part: ingest with and without queries); the queries made land in the trial.
   */
  queryEveryMs?: number;
  /**
   * Checkout whose `main.ts` the trial runs (with its own `deno.json`), for an A/B of two
   * revisions (scripts/bench/ab_e2e.ts); default this repository. The sender, the
   * configuration and the judging stay this checkout's.
   */
  root?: string;
  /** More arguments of the aggregator (`main.ts`), e.g. `--workers 2`. */
  args?: readonly string[];
  /**
   * The collector's transport; default TCP. TLS: mutual TLS, the process writing its generated
   * CA and an Agent client certificate with `--cert-dir <trial dir>/certs`, which the sender
   * presents.
   */
  transport?: E2eTransport;
  /** The configuration's flow timeouts; default the bench's (active 5 s, inactive 10 s). */
  timeouts?: BenchTimeouts;
}

/** Polls `/flowrecords` of the process's API until stopped; resolves with the queries made. */
function pollFlowRecords(
  fa: FaProcess,
  tokenFile: string,
  everyMs: number,
): { stop(): Promise<{ queries: number; bytes: number; maxMs: number }> } {
  let running = true;
  const done = (async () => {
    const e = await fa.waitFor((x) => x.msg === "API server listening", 30_000);
    const token = (await Deno.readTextFile(tokenFile)).trim();
    const ca = await Deno.readTextFile(caFileOf(tokenFile));
    const client = Deno.createHttpClient({ caCerts: [ca] });
    let queries = 0;
    let bytes = 0;
    let maxMs = 0;
    try {
      while (running) {
        const t = performance.now();
        const res = await fetch(`https://127.0.0.1:${e.port}/flowrecords`, {
          headers: { authorization: `Bearer ${token}` },
          client,
        });
        bytes += (await res.arrayBuffer()).byteLength;
        queries++;
        maxMs = Math.max(maxMs, performance.now() - t);
        await new Promise((r) => setTimeout(r, everyMs));
      }
    } finally {
      client.close();
    }
    return { queries, bytes, maxMs };
  })();
  return {
    stop: () => {
      running = false;
      return done;
    },
  };
}

/** Runs one trial: a fresh process, flowgen at `targetRate` for `durationSec`, SIGTERM. */
export async function runE2eTrial(
  targetRate: number,
  opts: E2eTrialOptions,
): Promise<E2eTrial> {
  const mode = opts.mode ?? "worker";
  // A checkout older than the HTTPS API (ba8743a) exits on the API flags as unknown: it gets
  // none (it has no API port to collide on), so there is nothing to query either. The bench
  // configuration itself is accepted as is by ba8743a's main.ts.
  const api = await acceptsApiFlags(opts.root);
  if (!api && opts.queryEveryMs !== undefined) {
    throw new Error(`queryEveryMs: ${opts.root}/main.ts has no API to query`);
  }
  const dir = await Deno.makeTempDir({ prefix: "fa-bench-e2e-" });
  const confPath = `${dir}/fa.conf`;
  const transport = opts.transport ?? "TCP";
  const certDir = `${dir}/${CERT_DIR}`;
  await Deno.writeTextFile(
    confPath,
    benchConfig(`${dir}/${FLOW_LOG_FILE}`, transport, opts.timeouts),
  );
  const sender = opts.sender ?? "flowgen";
  const trial: E2eTrial = {
    mode,
    ...(transport === "TCP" ? {} : { transport }),
    sender,
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
    root: opts.root,
    config: confPath,
    cwd: dir,
    denoFlags: [
      ...(opts.cpuProfDir !== undefined ? ["--cpu-prof", `--cpu-prof-dir=${opts.cpuProfDir}`] : []),
      ...(opts.denoFlags ?? []),
    ],
    args: [
      ...(mode === "inprocess" ? ["--exporters-in-process"] : []),
      ...(api ? ["--api-listen", "127.0.0.1:0", "--api-token-file", `${dir}/api/token`] : []),
      ...(transport === "TLS" ? ["--cert-dir", certDir] : []),
      ...(opts.args ?? []),
    ],
    tls: transport === "TLS",
  });
  const poller = opts.queryEveryMs === undefined
    ? undefined
    : pollFlowRecords(fa, `${dir}/api/token`, opts.queryEveryMs);
  try {
    // The certificates are written in the background of the start: wait for them.
    const certs = transport !== "TLS" ? undefined : await writtenCertFiles(fa, certDir).catch(
      (e) => {
        trial.failures.push(`certificates not written: ${e instanceof Error ? e.message : e}`);
        return null;
      },
    );
    const from = fa.events.length;
    const cpu0 = await cpuSeconds(fa.pid);
    const threads0 = await threadTimes(fa.pid);
    // flowgen is the only child waited for meanwhile: its CPU lands in our cutime/cstime.
    const gen0 = await cpuSeconds("self", true);
    try {
      if (certs === null) throw new Error("no certificates to present");
      trial.flowgen = await runSenderProcess(sender, fa.port, {
        rate: targetRate,
        durationSec: opts.durationSec,
        flows: opts.flows,
        proto: transport === "TLS" ? "tls" : "tcp",
        extra: [
          ...(sender === "replay"
            ? ["--unique-names", String(opts.uniqueNames ?? REPLAY_UNIQUE_NAMES)]
            : []),
          ...(certs ? ["--ca", certs.ca, "--cert", certs.cert, "--key", certs.key] : []),
        ],
      });
      trial.flowgenCpuUsPerRecord = ((await cpuSeconds("self", true)) - gen0) * 1e6 /
        trial.flowgen.records;
    } catch (e) {
      trial.failures.push(`${sender}: ${e instanceof Error ? e.message : e}`);
    }
    if (poller !== undefined) trial.queries = await poller.stop();
    // Every Agent connection closed by flowgen is "session closed" once the process has read,
    // decoded and aggregated every byte before its EOF: only then are the counters final.
    const t0 = performance.now();
    try {
      await fa.waitFor(() => countEvents(fa, from, "session closed") >= AGENTS, 120_000, from);
    } catch (e) {
      trial.failures.push(`sessions not drained: ${e instanceof Error ? e.message : e}`);
    }
    trial.drainMs = performance.now() - t0;
    trial.aggregatorCpuSec = (await cpuSeconds(fa.pid)) - cpu0;
    trial.aggregatorThreadsCpuSec = threadBreakdown(
      fa.pid,
      threads0,
      await threadTimes(fa.pid),
    );
    if (trial.flowgen !== undefined) {
      trial.wallSec = trial.flowgen.elapsedSec + trial.drainMs / 1000;
      trial.coresUsed = trial.aggregatorCpuSec / trial.wallSec;
    }
    trial.aggregatorPeakRssBytes = await peakRss(fa.pid);
  } finally {
    trial.exit = await fa.stop();
  }
  trial.metrics = fa.lastMetrics();
  if (trial.metrics !== undefined && trial.wallSec !== undefined) {
    trial.recordsPerSec = trial.metrics.numRecordsReceived / trial.wallSec;
  }
  const stopped = fa.events.findLast((e) =>
    e.msg === "exporter stopped" && e.section === "flowLogger"
  );
  if (stopped !== undefined) trial.flowLog = parseFlowLogStats(stopped);
  const flushed = fa.events.findLast((e) => e.msg === "flushed flows held at shutdown");
  if (flushed !== undefined) trial.flushedAtShutdown = Number(flushed.flows);
  trial.errorLines = fa.events.filter((e) => e.level === "error" || e.level === "warn")
    .slice(0, 5).map((e) => JSON.stringify(e));
  await Deno.remove(dir, { recursive: true }).catch(() => {});
  judgeTrial(trial);
  return trial;
}

/** The flow log's `exporter stopped` event as numbers; worker fields only when logged. */
export function parseFlowLogStats(e: Readonly<Record<string, unknown>>): FlowLogStats {
  const s: FlowLogStats = {
    received: Number(e.received),
    exported: Number(e.exported),
    dropped: Number(e.dropped),
    errors: Number(e.errors),
  };
  const optional = [...WORKER_ZERO_FIELDS, "filtered", "workerRestarts"] as const;
  for (const k of optional) if (e[k] !== undefined) s[k] = Number(e[k]);
  return s;
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
    // Unpaced (target 0): nothing to fall short of.
    t.achievedRatio = t.targetRate > 0 ? g.rate / t.targetRate : 1;
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
    } else {
      if (l.dropped !== 0 || l.errors !== 0 || l.exported !== m.numRecordsExported) {
        f.push(
          `flow log exported ${l.exported} of ${m.numRecordsExported}, dropped ${l.dropped}, ` +
            `errors ${l.errors}`,
        );
      }
      if (t.mode === "worker") {
        // The worker's ledger: at exit nothing may still be held or lost on the way.
        const missing = WORKER_ZERO_FIELDS.filter((k) => l[k] === undefined);
        if (missing.length > 0) {
          f.push(`flow log worker ledger missing ${missing.join(", ")} (not in its worker?)`);
        }
        const bad = WORKER_ZERO_FIELDS.filter((k) => l[k] !== undefined && l[k] !== 0);
        if (bad.length > 0) {
          f.push(`flow log worker ${bad.map((k) => `${k} ${l[k]}`).join(", ")} at exit`);
        }
      } else if (l.lostInWorker !== undefined) {
        // Otherwise the comparison of the two modes would compare the worker with itself.
        f.push("flow log ran in a worker despite --exporters-in-process");
      }
    }
    if (m.numRecordsReceived > 0) {
      t.aggregatorCpuUsPerRecord = (t.aggregatorCpuSec * 1e6) / m.numRecordsReceived;
      const th = t.aggregatorThreadsCpuSec;
      if (th !== undefined) {
        const us = (sec: number): number => Number((sec * 1e6 / m.numRecordsReceived).toFixed(3));
        t.aggregatorThreadsUsPerRecord = {
          main: us(th.main),
          workers: th.workers.map(us),
          v8: us(th.v8),
          other: us(th.other),
        };
      }
    }
  }
  if (t.exit !== undefined && (t.exit.code !== 0 || t.exit.killed)) {
    f.push(`exit code ${t.exit.code}${t.exit.killed ? " (SIGKILL)" : ""}`);
  }
  t.pass = f.length === 0;
}

/** What a rate search is told after each trial it asked for. */
export interface SearchOutcome {
  /** The trial passed every check. */
  pass: boolean;
  /** It failed only because flowgen fell short of the target rate (no record unaccounted). */
  shortfallOnly: boolean;
}

/** Options of {@linkcode rateSearch}. */
export interface RateSearchOptions {
  /** First target rate. */
  startRate: number;
  /** One trial at `startRate` and stop (quick mode). */
  single?: boolean;
  /** No doubling beyond this rate; default 5,000,000. */
  maxRate?: number;
}

/**
 * The e2e rate search as a generator, so that several can be interleaved: it yields each target
 * rate to try and is resumed with that trial's outcome. From `startRate` it doubles while
 * trials pass (halves up to three times if even the first fails), then bisects twice between
 * the highest pass and the lowest fail unless they are within 5 % (closer than the noise). A
 * trial that failed only by a rate shortfall can be a neighbour's burst on the shared cores and
 * is retried once; a record not accounted for is never retried. It never stops on its own
 * while doubling below `maxRate`: the caller's time budget ends it.
 */
export function* rateSearch(
  opts: RateSearchOptions,
): Generator<number, void, SearchOutcome> {
  const maxRate = opts.maxRate ?? 5_000_000;
  let pass = 0;
  let fail = Infinity;
  function* run(target: number): Generator<number, boolean, SearchOutcome> {
    const rate = Math.round(target);
    let o = yield rate;
    if (!o.pass && !opts.single && o.shortfallOnly) o = yield rate;
    if (o.pass) pass = Math.max(pass, rate);
    else fail = Math.min(fail, rate);
    return o.pass;
  }
  let rate = opts.startRate;
  if (opts.single) {
    yield* run(rate);
    return;
  }
  if (yield* run(rate)) {
    while (rate * 2 <= maxRate && (yield* run(rate * 2))) rate *= 2;
  } else {
    for (let i = 0; i < 3 && !(yield* run(rate / 2)); i++) rate /= 2;
  }
  for (let i = 0; i < 2 && pass > 0 && Number.isFinite(fail); i++) {
    if (fail - pass < pass * 0.05) break;
    yield* run((pass + fail) / 2);
  }
}

/** Options of {@linkcode interleaveSearches}. */
export interface InterleaveOptions {
  /** Whether one more trial fits the time budget (asked before every trial but the first ones). */
  fits: () => boolean;
}

/**
 * Runs several rate searches one trial at a time in turn (A, B, A, B, ...; a search that has
 * ended drops out), so a change of load on the shared cores hits every search alike. Each
 * search's first trial always runs, so every mode gets a figure; later ones only while
 * `opts.fits()`.
 */
export async function interleaveSearches<K extends string>(
  searches: readonly (readonly [K, Generator<number, void, SearchOutcome>])[],
  trial: (key: K, rate: number) => Promise<SearchOutcome>,
  opts: InterleaveOptions,
): Promise<void> {
  const state = searches.map(([key, gen]) => ({ key, gen, step: gen.next(), tried: false }));
  for (;;) {
    let ran = false;
    for (const s of state) {
      if (s.step.done) continue;
      if (s.tried && !opts.fits()) continue;
      const outcome = await trial(s.key, s.step.value);
      s.tried = true;
      ran = true;
      s.step = s.gen.next(outcome);
    }
    if (!ran) return;
  }
}

/** Sums up one mode's trials: best passing rate, lowest failing rate, CPU of the fastest. */
export function summarizeMode(trials: readonly E2eTrial[]): E2eModeResult {
  const best = trials.filter((t) => t.pass).sort((a, b) => b.targetRate - a.targetRate)[0];
  const passed = new Set(trials.filter((t) => t.pass).map((t) => t.targetRate));
  // A rate that failed and then passed its retry did not fail.
  const failed = trials.filter((t) => !t.pass && !passed.has(t.targetRate)).map((t) =>
    t.targetRate
  );
  const fastest = trials.filter((t) => Number.isFinite(t.aggregatorCpuUsPerRecord))
    .sort((a, b) => (b.flowgen?.rate ?? 0) - (a.flowgen?.rate ?? 0))[0];
  const aggUs = fastest?.aggregatorCpuUsPerRecord ?? NaN;
  const genUs = fastest?.flowgenCpuUsPerRecord ?? NaN;
  return {
    recordsPerSec: best?.flowgen?.rate ?? 0,
    bestTargetRate: best?.targetRate ?? 0,
    firstFailRate: failed.length > 0 ? Math.min(...failed) : undefined,
    trials: trials.length,
    cpu: {
      aggregatorUsPerRecord: aggUs,
      flowgenUsPerRecord: genUs,
      twoCoreCeiling: 2e6 / (aggUs + genUs),
    },
  };
}

/**
 * At every target rate where both modes have passing trials, the mean aggregator CPU per record
 * of each mode (ascending rates).
 */
export function pairedCpu(trials: readonly E2eTrial[]): E2ePairedCpu[] {
  const mean = (mode: E2eMode, rate: number): number => {
    const v = trials.filter((t) =>
      t.mode === mode && t.targetRate === rate && t.pass &&
      Number.isFinite(t.aggregatorCpuUsPerRecord)
    ).map((t) => t.aggregatorCpuUsPerRecord);
    return v.length === 0 ? NaN : v.reduce((a, b) => a + b, 0) / v.length;
  };
  const rates = [...new Set(trials.map((t) => t.targetRate))].sort((a, b) => a - b);
  const out: E2ePairedCpu[] = [];
  for (const targetRate of rates) {
    const w = mean("worker", targetRate);
    const p = mean("inprocess", targetRate);
    if (Number.isFinite(w) && Number.isFinite(p)) {
      out.push({ targetRate, workerUsPerRecord: w, inprocessUsPerRecord: p });
    }
  }
  return out;
}

/** Worker figure / in-process figure; null when either is missing or in-process is 0. */
export function workerVsInprocessRatio(
  worker: number | null | undefined,
  inprocess: number | null | undefined,
): number | null {
  if (worker === null || worker === undefined) return null;
  if (inprocess === null || inprocess === undefined || !(inprocess > 0)) return null;
  return worker / inprocess;
}

/**
 * Highest TCP rate the real process sustains with every record accounted for, in each mode
 * (sink in its worker, sink in process), the two searches interleaved trial by trial. Full
 * mode: 20 s trials from 40k/s ({@linkcode rateSearch}), within ~8 minutes for both modes.
 * Quick mode: one 2 s trial at 5k/s per mode (a smoke check of the whole path).
 */
export async function benchE2eTcp(opts: E2eOptions): Promise<E2eResult> {
  const modes = opts.modes ?? E2E_MODES;
  const durationSec = opts.durationSec ?? (opts.quick ? 2 : 20);
  const flows = opts.flows ?? (opts.quick ? 1_000 : 10_000);
  const budgetMs = (opts.budgetSec ?? (opts.quick ? 30 : 480)) * 1000;
  const startRate = opts.startRate ?? (opts.quick ? 5_000 : 40_000);
  const start = performance.now();
  const trials: E2eTrial[] = [];
  let lastTrialMs = (durationSec + 3) * 1000;
  await interleaveSearches(
    modes.map((m) => [m, rateSearch({ startRate, single: opts.quick })] as const),
    async (mode, rate) => {
      const t0 = performance.now();
      const t = await runE2eTrial(rate, { durationSec, flows, mode, cpuProfDir: opts.cpuProfDir });
      lastTrialMs = performance.now() - t0;
      trials.push(t);
      progress(t);
      const shortfallOnly = !t.pass &&
        t.failures.every((f) => f.startsWith("flowgen achieved"));
      return { pass: t.pass, shortfallOnly };
    },
    { fits: () => performance.now() - start + lastTrialMs <= budgetMs },
  );

  const per: Partial<Record<E2eMode, E2eModeResult>> = {};
  for (const m of modes) per[m] = summarizeMode(trials.filter((t) => t.mode === m));
  const worker = per.worker?.recordsPerSec ?? null;
  const inprocess = per.inprocess?.recordsPerSec ?? null;
  return {
    e2e_tcp_records_per_s: worker,
    e2e_tcp_inprocess_records_per_s: inprocess,
    e2e_worker_vs_inprocess_ratio: workerVsInprocessRatio(worker, inprocess),
    detail: {
      modes: per,
      pairedCpu: pairedCpu(trials),
      durationSec,
      agents: AGENTS,
      flows,
      timeouts: `active ${ACTIVE} / inactive ${INACTIVE}`,
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
    `e2e tcp ${t.mode} ${t.targetRate}/s: ${t.pass ? "pass" : "FAIL"} achieved ${
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
  const modeArg = flag("mode") ?? "both";
  if (modeArg !== "both" && !(E2E_MODES as readonly string[]).includes(modeArg)) {
    throw new Error(`--mode ${JSON.stringify(modeArg)}: want worker, inprocess or both`);
  }
  const modes = modeArg === "both" ? E2E_MODES : [modeArg as E2eMode];
  const cpuProfDir = Deno.args.includes("--cpu-prof")
    ? await Deno.makeTempDir({ prefix: "fa-bench-prof-" })
    : undefined;
  if (fixed !== undefined) {
    // One trial at a given rate (profiling, investigation).
    const t = await runE2eTrial(Number(fixed), {
      durationSec: durationSec ?? (quick ? 2 : 20),
      flows: Number(flag("flows") ?? 10_000),
      mode: modes.length === 1 ? modes[0] : "worker",
      cpuProfDir,
    });
    progress(t);
    console.log(JSON.stringify({ trial: t, cpuProfDir }, null, 2));
  } else {
    const r = await benchE2eTcp({ quick, modes, durationSec, cpuProfDir });
    console.log(JSON.stringify({ ...r, cpuProfDir }, null, 2));
  }
}
