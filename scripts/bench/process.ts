/**
 * Starts and stops the real flow-aggregator process (`main.ts`) for the process-level
 * benchmarks (e2e TCP throughput, idle RSS), and reads what it says about itself: the JSON log
 * lines on stderr, the final `record metrics` line written on SIGTERM, and VmRSS from /proc.
 * The process always listens on 127.0.0.1 only and runs in a scratch directory it can litter.
 */

import { bundleAll, cacheWarmCommands } from "../bundle.ts";
import { generateApiCertificate } from "../../src/pki/mod.ts";
import { RUN_FLAGS, V8_FLAGS } from "../../src/permissions.ts";

/** Root of the repository (ends with `/`). */
export const REPO: string = new URL("../../", import.meta.url).pathname;
/** `main.ts` of the repository. */
export const MAIN_TS: string = `${REPO}main.ts`;
/** `deno.json` of the repository (import map, `unstable: ["net"]`). */
export const DENO_JSON: string = `${REPO}deno.json`;
/** The flow generator CLI. */
export const FLOWGEN_TS: string = `${REPO}scripts/flowgen.ts`;
/** The replay sender CLI (pre-encoded Agent stream, patched headers). */
export const REPLAY_TS: string = `${REPO}scripts/replay.ts`;

/** One JSON log event of the process (fields as written; numbers may come as strings). */
export type LogEvent = Readonly<Record<string, unknown>>;

/**
 * Whether the `main.ts` of the checkout at `root` takes the API flags (`--api-listen`,
 * `--api-token-file`): a checkout older than the HTTPS API (e.g. `ba8743a`) rejects them as
 * unknown flags and exits, and has no API port to keep apart. Its usage text is the test.
 */
export async function acceptsApiFlags(root: string = REPO): Promise<boolean> {
  return (await Deno.readTextFile(`${root}/main.ts`)).includes("--api-listen");
}

/** Options of {@linkcode startFlowAggregator}. */
export interface StartOptions {
  /**
   * Checkout whose `main.ts` runs, with its own `deno.json` (another revision, e.g. a
   * `git worktree add --detach /tmp/base REV` with its node_modules linked to this one's);
   * default this repository. Everything else (config file, cwd, flags) is the caller's.
   */
  root?: string;
  /** Configuration file (`--config`); absent = the embedded default configuration. */
  config?: string;
  /** Working directory; default: a fresh temporary directory, removed by `stop()`. */
  cwd?: string;
  /** `--log-level`; default `debug` (for the per-session `session closed` events). */
  logLevel?: "error" | "warn" | "info" | "debug";
  /** Extra Deno flags before the script, e.g. `--cpu-prof`. */
  denoFlags?: readonly string[];
  /**
   * A build to run instead of a checkout's `main.ts` (`scripts/bundle.ts`): without
   * any `deno.json`, its unstable APIs as flags, as the image runs it.
   */
  program?: string;
  /** Environment of the process besides ours (e.g. `DENO_DIR`). */
  env?: Record<string, string>;
  /** Extra flags of main.ts after the script, e.g. `--exporters-in-process`. */
  args?: readonly string[];
  /** How long to wait for the collector to listen; default 30 s. */
  startTimeoutMs?: number;
  /**
   * The configuration's collector is UDP: readiness is its `collector listening` log line
   * (nothing to connect to), and there is no probe session to wait for.
   */
  udp?: boolean;
  /**
   * The configuration's collector is TLS: readiness is its `collector listening` log line too
   * (a bare TCP probe would be a failed handshake, counted and logged as one).
   */
  tls?: boolean;
}

/** How the process ended. */
export interface ExitInfo {
  /** Exit code (143 / 137 when killed by a signal it did not handle). */
  code: number;
  /** True if SIGTERM was not enough and SIGKILL was sent. */
  killed: boolean;
  /** Milliseconds from SIGTERM to exit (the shutdown flush). */
  stopMs: number;
  /**
   * Peak RSS (VmHWM) of the process's whole life, stop included: polled every 20 ms from
   * SIGTERM until it exits (the last reading; NaN when none was read).
   */
  peakRssBytes: number;
}

/** The counters of the final `record metrics` line (see src/flow_aggregator.ts). */
export interface RecordMetricsLine {
  /** Data records the collector decoded. */
  numRecordsReceived: number;
  /** Aggregated records handed to the exporters. */
  numRecordsExported: number;
  /** Flows still held (0 after the shutdown flush). */
  numFlows: number;
  /** Records the aggregation core accepted. */
  recordsAggregated: number;
  /** Records the core rejected, all reasons. */
  rejected: number;
  /** Collector decode errors. */
  decodeErrors: number;
  /** Data sets whose template was unknown. */
  templateMisses: number;
  /** Exporter `addRecord` failures. */
  exporterErrors: number;
}

/** A running flow-aggregator process. */
export interface FaProcess {
  /** Its pid. */
  readonly pid: number;
  /** Collector TCP port. */
  readonly port: number;
  /** Working directory of the process. */
  readonly cwd: string;
  /** Every JSON log event so far. */
  readonly events: readonly LogEvent[];
  /** Resolves with the first event (from index `from`) for which `pred` holds. */
  waitFor(pred: (e: LogEvent) => boolean, timeoutMs: number, from?: number): Promise<LogEvent>;
  /** The last `record metrics` event, parsed; undefined if none was logged. */
  lastMetrics(): RecordMetricsLine | undefined;
  /** Last stderr lines, for error messages. */
  tail(): string;
  /** SIGTERM, SIGKILL after `graceMs` (default 60 s); removes a scratch cwd. */
  stop(graceMs?: number): Promise<ExitInfo>;
}

/** The process's log events from index `from` on whose message is `msg`. */
export function countEvents(fa: FaProcess, from: number, msg: string): number {
  let n = 0;
  for (let i = from; i < fa.events.length; i++) if (fa.events[i].msg === msg) n++;
  return n;
}

/** A free TCP port on 127.0.0.1 (released before return: a tiny race, fine for benchmarks). */
export function freeTcpPort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

function num(v: unknown): number {
  const n = typeof v === "number" ? v : Number(v);
  return Number.isFinite(n) ? n : NaN;
}

/** Parses a `record metrics` event into numbers (NaN for a missing field). */
export function parseRecordMetrics(e: LogEvent): RecordMetricsLine {
  return {
    numRecordsReceived: num(e.numRecordsReceived),
    numRecordsExported: num(e.numRecordsExported),
    numFlows: num(e.numFlows),
    recordsAggregated: num(e.recordsAggregated),
    rejected: num(e.rejected),
    decodeErrors: num(e.decodeErrors),
    templateMisses: num(e.templateMisses),
    exporterErrors: num(e.exporterErrors),
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** How the build runs outside the repository: no config file, unstable APIs as flags. */
const BUNDLE_RUN_FLAGS = ["--no-config", ...RUN_FLAGS];

/**
 * Starts `deno run --allow-all --config deno.json <V8_FLAGS> main.ts --listen 127.0.0.1:<port>` with JSON
 * logs and waits until the collector accepts connections.
 */
export async function startFlowAggregator(opts: StartOptions = {}): Promise<FaProcess> {
  const scratch = opts.cwd === undefined;
  // Absolute: the process runs in `cwd`, not in ours.
  const root = opts.root === undefined ? undefined : await Deno.realPath(opts.root);
  // A checkout without the API (see acceptsApiFlags) gets no default --api-listen.
  const api = root === undefined || await acceptsApiFlags(root);
  const cwd = opts.cwd ?? await Deno.makeTempDir({ prefix: "fa-bench-proc-" });
  const port = freeTcpPort();
  const args = [
    "run",
    "--allow-all",
    ...(opts.program !== undefined
      ? [...BUNDLE_RUN_FLAGS, ...(opts.denoFlags ?? []), opts.program]
      : [
        "--config",
        root === undefined ? DENO_JSON : `${root}/deno.json`,
        // As shipped (deno.json carries the unstable APIs, not V8's settings).
        ...V8_FLAGS,
        ...(opts.denoFlags ?? []),
        root === undefined ? MAIN_TS : `${root}/main.ts`,
      ]),
    ...(opts.config !== undefined ? ["--config", opts.config] : []),
    "--listen",
    `127.0.0.1:${port}`,
    "--log-format",
    "json",
    "--log-level",
    opts.logLevel ?? "debug",
    // The API on a free port unless the caller picks one: two bench processes (or a bench and
    // a running collector) must not collide on the default 10348.
    ...(!api || opts.args?.some((a) => a.startsWith("--api-listen"))
      ? []
      : ["--api-listen", "127.0.0.1:0"]),
    ...(opts.args ?? []),
  ];
  const child = new Deno.Command(Deno.execPath(), {
    args,
    cwd,
    env: { NO_COLOR: "1", ...opts.env },
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();

  const events: LogEvent[] = [];
  const lastLines: string[] = [];
  let wake: (() => void)[] = [];
  let exited = false;
  const pump = (async () => {
    let buf = "";
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
      buf += chunk;
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        lastLines.push(line);
        if (lastLines.length > 30) lastLines.shift();
        if (line.startsWith("{")) {
          try {
            events.push(JSON.parse(line) as LogEvent);
          } catch {
            // a non-JSON line (Deno's own warnings): kept in the tail only
          }
        }
      }
      const w = wake;
      wake = [];
      for (const f of w) f();
    }
  })().catch(() => {});
  const status = child.status.then(async (s) => {
    await pump;
    exited = true;
    for (const f of wake) f();
    wake = [];
    return s;
  });
  const tail = (): string => lastLines.join("\n");

  const waitFor = async (
    pred: (e: LogEvent) => boolean,
    timeoutMs: number,
    from = 0,
  ): Promise<LogEvent> => {
    const deadline = Date.now() + timeoutMs;
    let i = from;
    for (;;) {
      for (; i < events.length; i++) if (pred(events[i])) return events[i];
      if (exited) throw new Error(`flow-aggregator exited before the awaited event:\n${tail()}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`awaited event not logged within ${timeoutMs} ms:\n${tail()}`);
      let t: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        wake.push(resolve);
        t = setTimeout(resolve, Math.min(left, 250));
      });
      clearTimeout(t);
    }
  };

  const lastMetrics = (): RecordMetricsLine | undefined => {
    for (let i = events.length - 1; i >= 0; i--) {
      if (events[i].msg === "record metrics") return parseRecordMetrics(events[i]);
    }
    return undefined;
  };

  let stopped: Promise<ExitInfo> | undefined;
  const stop = (graceMs = 60_000): Promise<ExitInfo> => {
    stopped ??= (async () => {
      const t0 = performance.now();
      let killed = false;
      try {
        child.kill("SIGTERM");
      } catch { /* already exited */ }
      const t = setTimeout(() => {
        killed = true;
        try {
          child.kill("SIGKILL");
        } catch { /* exited meanwhile */ }
      }, graceMs);
      // VmHWM until the process is gone: the shutdown's own peak (it flushes every held flow).
      let peak = NaN;
      let done = false;
      const poll = (async () => {
        while (!done) {
          try {
            peak = await peakRssBytes(child.pid);
          } catch { /* exited */ }
          await sleep(20);
        }
      })();
      const s = await status;
      done = true;
      await poll;
      clearTimeout(t);
      const stopMs = performance.now() - t0;
      if (scratch) await Deno.remove(cwd, { recursive: true }).catch(() => {});
      return { code: s.code, killed, stopMs, peakRssBytes: peak };
    })();
    return stopped;
  };

  const timeoutMs = opts.startTimeoutMs ?? 30_000;
  if (opts.udp || opts.tls) {
    try {
      await waitFor((e) => e.msg === "collector listening", timeoutMs);
    } catch (e) {
      await stop(1000);
      throw new Error(
        `flow-aggregator did not listen on ${opts.udp ? "UDP" : "TLS"} ${port}: ${
          (e as Error).message
        }`,
      );
    }
  } else {
    // Poll the port rather than wait for a log line: it is the readiness that matters.
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      try {
        (await Deno.connect({ hostname: "127.0.0.1", port })).close();
        break;
      } catch {
        if (exited || Date.now() > deadline) {
          await stop(1000);
          throw new Error(`flow-aggregator did not listen on ${port}:\n${tail()}`);
        }
        await sleep(50);
      }
    }
    // The readiness probe itself is a session; let it close before anyone counts sessions.
    if ((opts.logLevel ?? "debug") === "debug") {
      await waitFor((e) => e.msg === "session closed", 5000).catch(() => {});
    }
  }
  return {
    pid: child.pid,
    port,
    cwd,
    events,
    waitFor,
    lastMetrics,
    tail,
    stop,
  };
}

/** VmRSS of `pid` in bytes, from /proc/<pid>/status. */
export async function rssBytes(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(status);
  if (m === null) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]) * 1024;
}

/** Result of {@linkcode benchRssIdle}. */
export interface RssIdleResult {
  /** VmRSS of the idle process, bytes. */
  rss_bytes_idle: number;
  /** The reference: VmRSS of `deno run` of a script that only waits (the runtime alone). */
  rss_bytes_idle_runtime: number;
  /**
   * The reference: VmRSS of `deno run` of a script holding as many idle workers (empty module)
   * as the process has worker threads: the runtime's floor for the process's threads.
   */
  rss_bytes_idle_runtime_workers: number;
  /**
   * The reference: VmRSS of `deno run` of a script that only listens on a TCP port and a TLS
   * port, without worker threads and without any of the product's code: the floor under the
   * smallest process that could collect and serve the API on this runtime.
   */
  rss_bytes_idle_runtime_listeners: number;
  /**
   * VmRSS of the build as the image runs it (`scripts/bundle.ts`), idle on the same
   * configuration, Deno's cache filled first as the image build fills it
   * (`cacheWarmCommands`).
   */
  rss_bytes_idle_bundle: number;
  /** How it was taken. */
  detail: {
    /** The same build started on an empty Deno cache (`DENO_DIR`), bytes. */
    bundleColdCacheRssBytes: number;
    /** Seconds between "listening" and the sample. */
    idleSec: number;
    /** Peak RSS (VmHWM) at the same moment, bytes. */
    peakRssBytes: number;
    /** Milliseconds from spawn until the collector accepted a connection. */
    startMs: number;
    /** JS worker threads of the idle process (aggregation shards, sink workers). */
    workerThreads: number;
    /** What was measured. */
    note: string;
  };
}

/** CPU of one thread, seconds. */
export interface ThreadTimes {
  /** Its name (`comm`): `deno` for the main thread, `worker-<n>`, `V8 DefaultWorke`... */
  name: string;
  /** User time, in clock ticks of `/proc/.../stat` (10 ms). */
  user: number;
  /** System time, the same way. */
  sys: number;
  /** Exact run time from `/proc/.../schedstat`. */
  run: number;
}

/**
 * Every thread of `pid` (or of this process) by thread id, with its CPU. A thread that ends
 * between the listing and the reads is left out; a process that is gone gives an empty map.
 */
export async function threadTimes(pid: number | "self"): Promise<Map<number, ThreadTimes>> {
  const out = new Map<number, ThreadTimes>();
  try {
    for await (const e of Deno.readDir(`/proc/${pid}/task`)) {
      try {
        const dir = `/proc/${pid}/task/${e.name}`;
        const stat = await Deno.readTextFile(`${dir}/stat`);
        const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
        // Fields after the parenthesised name; utime and stime are 14 and 15.
        const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
        const run = Number((await Deno.readTextFile(`${dir}/schedstat`)).split(" ")[0]) / 1e9;
        out.set(Number(e.name), {
          name,
          user: Number(rest[11]) / 100, // USER_HZ is 100 on Linux
          sys: Number(rest[12]) / 100,
          run,
        });
      } catch {
        // The thread ended between the listing and the reads.
      }
    }
  } catch {
    // The process is gone.
  }
  return out;
}

/** JS worker threads of process `pid`: Deno names them `worker-<n>`. */
export async function workerThreadCount(pid: number): Promise<number> {
  let n = 0;
  for await (const e of Deno.readDir(`/proc/${pid}/task`)) {
    const comm = await Deno.readTextFile(`/proc/${pid}/task/${e.name}/comm`).catch(() => "");
    if (/^worker-\d+$/.test(comm.trim())) n++;
  }
  return n;
}

/**
 * VmRSS of the Deno runtime alone, sampled like the process's: `deno run` of a script that
 * starts `workers` module workers (an empty module each), waits until each has run, then
 * idles for `idleSec`. The floor under any Deno program with that many worker threads. With
 * `listeners`, the script first listens on a free 127.0.0.1 TCP port and a TLS port (an
 * ECDSA certificate, as the API's) and accepts on both: the floor under any collector with
 * an API, whatever its code.
 */
export async function runtimeRssBytes(
  workers: number,
  idleSec: number,
  opts: { listeners?: boolean } = {},
): Promise<number> {
  const dir = await Deno.makeTempDir({ prefix: "fa-bench-runtime-rss-" });
  try {
    await Deno.writeTextFile(`${dir}/worker.js`, 'postMessage("up");\n');
    let listen = "";
    if (opts.listeners === true) {
      const c = await generateApiCertificate();
      await Deno.writeTextFile(`${dir}/cert.pem`, c.chainPem);
      await Deno.writeTextFile(`${dir}/key.pem`, c.keyPem);
      listen = `const dir = new URL(".", import.meta.url).pathname;
const tcp = Deno.listen({ hostname: "127.0.0.1", port: 0 });
const tls = Deno.listenTls({
  hostname: "127.0.0.1",
  port: 0,
  cert: Deno.readTextFileSync(dir + "cert.pem"),
  key: Deno.readTextFileSync(dir + "key.pem"),
});
for (const l of [tcp, tls]) (async () => { for await (const c of l) c.close(); })();
`;
    }
    await Deno.writeTextFile(
      `${dir}/main.js`,
      `${listen}const n = ${workers};
const held = [];
await Promise.all(Array.from({ length: n }, () => new Promise((up) => {
  const w = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
  w.onmessage = up;
  held.push(w);
})));
console.log("ready");
setInterval(() => {}, 60_000);
`,
    );
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        `--allow-read=${dir}`,
        ...(opts.listeners === true ? ["--allow-net=127.0.0.1"] : []),
        "--no-config",
        `${dir}/main.js`,
      ],
      stdin: "null",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    try {
      const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
      let out = "";
      while (!out.includes("ready")) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`runtime reference exited before it was ready: ${out}`);
        out += value;
      }
      reader.releaseLock();
      await sleep(idleSec * 1000);
      return await rssBytes(child.pid);
    } finally {
      child.kill("SIGKILL");
      await child.status;
      await child.stdout.cancel().catch(() => {});
    }
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** VmHWM (peak resident set) of `pid` in bytes. */
export async function peakRssBytes(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  const m = /^VmHWM:\s+(\d+) kB$/m.exec(status);
  if (m === null) throw new Error(`no VmHWM for pid ${pid}`);
  return Number(m[1]) * 1024;
}

/**
 * Resident memory of the idle real process: the embedded default configuration (TCP collector,
 * flow log in a scratch directory) on a free 127.0.0.1 port, info-level logging, sampled ~2 s
 * after it listens (quick mode: 1 s).
 */
export async function benchRssIdle(opts: { quick: boolean }): Promise<RssIdleResult> {
  const idleSec = opts.quick ? 1 : 2;
  const idle = await idleProcess({ logLevel: "info" }, idleSec);
  const bundle = await bundleRss(idleSec);
  return {
    rss_bytes_idle: idle.rss,
    rss_bytes_idle_runtime: await runtimeRssBytes(0, idleSec),
    rss_bytes_idle_runtime_workers: await runtimeRssBytes(idle.workerThreads, idleSec),
    rss_bytes_idle_runtime_listeners: await runtimeRssBytes(0, idleSec, { listeners: true }),
    rss_bytes_idle_bundle: bundle.warm,
    detail: {
      bundleColdCacheRssBytes: bundle.cold,
      idleSec,
      peakRssBytes: idle.peak,
      startMs: idle.startMs,
      workerThreads: idle.workerThreads,
      note: "VmRSS of `deno run main.ts` (embedded default config, no --config file), " +
        `includes the Deno runtime and V8 and ${idle.workerThreads} worker threads; ` +
        "nothing sent to it",
    },
  };
}

/** What {@linkcode idleProcess} read from the idle process. */
export interface IdleSample {
  /** VmRSS, bytes. */
  rss: number;
  /** VmHWM at the same moment, bytes. */
  peak: number;
  /** JS worker threads ({@linkcode workerThreadCount}). */
  workerThreads: number;
  /** Milliseconds from spawn until the collector accepted a connection. */
  startMs: number;
}

/** Starts the process with `opts`, leaves it idle for `idleSec`, reads its memory, stops it. */
export async function idleProcess(opts: StartOptions, idleSec: number): Promise<IdleSample> {
  const t0 = performance.now();
  const fa = await startFlowAggregator(opts);
  const startMs = performance.now() - t0;
  try {
    await sleep(idleSec * 1000);
    return {
      rss: await rssBytes(fa.pid),
      peak: await peakRssBytes(fa.pid),
      workerThreads: await workerThreadCount(fa.pid),
      startMs,
    };
  } finally {
    await fa.stop(10_000);
  }
}

/**
 * Idle VmRSS of the build (built here into a scratch directory) on the embedded
 * default configuration: `warm`, its Deno cache filled first by `cacheWarmCommands` (as the
 * image build does), and `cold`, from an empty cache (the image before it did).
 */
export async function bundleRss(idleSec: number): Promise<{ warm: number; cold: number }> {
  const dir = await Deno.makeTempDir({ prefix: "fa-bench-bundle-" });
  try {
    const app = `${dir}/app`;
    const program = (await bundleAll(app))[0];
    const idle = async (denoDir: string): Promise<number> =>
      (await idleProcess({ program, env: { DENO_DIR: denoDir }, logLevel: "info" }, idleSec)).rss;
    for (const args of cacheWarmCommands(app, ["--allow-all", ...BUNDLE_RUN_FLAGS])) {
      const out = await new Deno.Command(Deno.execPath(), {
        args,
        env: { DENO_DIR: `${dir}/warm` },
        stdout: "null",
        stderr: "piped",
      }).output();
      if (!out.success) {
        throw new Error(`deno ${args[0]} failed: ${new TextDecoder().decode(out.stderr)}`);
      }
    }
    return { warm: await idle(`${dir}/warm`), cold: await idle(`${dir}/cold`) };
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) {
  console.log(JSON.stringify(await benchRssIdle({ quick: Deno.args.includes("--quick") })));
}
