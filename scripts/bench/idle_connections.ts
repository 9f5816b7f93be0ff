/**
 * Resident memory of idle collector connections (`tls_idle_connection_bytes`, and its same-run
 * reference `tcp_idle_connection_bytes`): the real process (the bench configuration, flow log
 * on) with N established, idle connections, minus the same process before they were opened,
 * divided by N. One process per transport: `aggregatorTransportProtocol: TLS` (mutual TLS, the
 * client certificate the process writes with `--cert-dir`) and `TCP`.
 *
 * The connections are opened from this process (its own memory does not count: only the
 * collector's /proc/<pid>/status is read), 32 at a time, below `limits.maxTlsHandshakes`. A
 * connection counts as established once the collector logged `session opened` for it: over TLS
 * only after the handshake, client certificate verified. Every one of the N must be, with no
 * refusal, no failed handshake and none closed by the time the samples are taken. Nothing is
 * sent on them (no templates): the figure is a connection's own cost, what an Agent's session
 * holds besides its templates. All come from 127.0.0.1, so `limits.maxConnectionsPerAddress`
 * (default 16, one Agent per Node address) is raised to N + 16 for the run.
 *
 * VmRSS before: the lowest of a few samples 0.5 s apart once the started process settled. After:
 * the lowest of the samples taken every 0.5 s for {@linkcode IDLE_WINDOW_SEC} from the moment
 * the last connection was established, so the figure is what an idle connection keeps once V8
 * has collected the handshakes' garbage (its idle-time GC comes 5-20 s after: 3 s after the
 * connections opened, TLS was ~60 KB per connection, against ~28 KiB after the GC).
 *
 *   deno run --allow-all scripts/bench/idle_connections.ts [--quick] [--connections N]
 */

import { openTransport, type Transport, type TransportKind } from "../../src/net/transport.ts";
import { LIMIT_KEYS } from "../../src/config/limits.ts";
import {
  benchConfig,
  CERT_DIR,
  type E2eTransport,
  FLOW_LOG_FILE,
  writtenCertFiles,
} from "./e2e.ts";
import { countEvents, rssBytes, startFlowAggregator } from "./process.ts";

/** Options of {@linkcode benchIdleConnections}. */
export interface IdleConnectionsOptions {
  /** Smoke version: 50 connections, 1 s of settling. */
  quick: boolean;
  /** Connections per process; default 1,000 (quick: 50). */
  connections?: number;
}

/** What one process with N idle connections measured. */
export interface IdleConnectionsTrial {
  /** The collector's transport. */
  transport: E2eTransport;
  /** Connections opened and established. */
  connections: number;
  /** VmRSS samples before the connections were opened, bytes. */
  rssBeforeSamples: number[];
  /** VmRSS samples with the N connections open and idle, bytes. */
  rssAfterSamples: number[];
  /** (lowest after − lowest before) / N, bytes; NaN when the trial failed. */
  bytesPerConnection: number;
  /** Descriptors the process gained with the connections (/proc/<pid>/fd): N when all held. */
  fdsGained: number;
  /** Milliseconds from the first connect to the N-th `session opened`. */
  openMs: number;
  /** What went wrong (empty when the figure is good). */
  failures: string[];
}

/** Result of {@linkcode benchIdleConnections}. */
export interface IdleConnectionsResult {
  /** RSS per idle mutual-TLS connection, bytes. */
  tls_idle_connection_bytes: number | null;
  /** The reference: RSS per idle plain TCP connection, same run, bytes. */
  tcp_idle_connection_bytes: number | null;
  /** Both trials and the parameters. */
  detail: {
    connections: number;
    settleSec: number;
    /** Samples before the connections. */
    samples: number;
    /** Seconds the idle connections were sampled for. */
    idleWindowSec: number;
    /** `limits.maxConnectionsPerAddress` of both processes (raised from its default, 16). */
    maxConnectionsPerAddress: number;
    trials: IdleConnectionsTrial[];
    note: string;
  };
}

/** Connects in flight at once: well below `limits.maxTlsHandshakes` (128). */
const CONCURRENCY = 32;
/** VmRSS samples before the connections, and the spacing of every sample. */
const SAMPLES = 5;
const SAMPLE_EVERY_MS = 500;
/** Seconds the idle connections are sampled for (quick: 2): V8's idle-time GC comes within. */
const IDLE_WINDOW_SEC = 30;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The lowest of `count` VmRSS readings of `pid` {@linkcode SAMPLE_EVERY_MS} apart, and the readings. */
async function sampleRss(
  pid: number,
  count: number,
): Promise<{ lowest: number; samples: number[] }> {
  const samples: number[] = [];
  for (let i = 0; i < count; i++) {
    if (i > 0) await sleep(SAMPLE_EVERY_MS);
    samples.push(await rssBytes(pid));
  }
  return { lowest: Math.min(...samples), samples };
}

/** Open descriptors of `pid`. */
async function fdCount(pid: number): Promise<number> {
  let n = 0;
  for await (const _ of Deno.readDir(`/proc/${pid}/fd`)) n++;
  return n;
}

/**
 * The per-address cap of a run with `n` connections from one address: `n` plus the default's
 * worth of room (the readiness probe's session, say).
 */
export function perAddressCap(n: number): number {
  return n + LIMIT_KEYS.maxConnectionsPerAddress.default;
}

/**
 * The `limits:` section of the bench configuration for `n` connections from one address: the
 * per-address cap raised ({@linkcode perAddressCap}), and the total cap too were its default
 * below that.
 */
export function connectionLimits(n: number): string {
  const perAddress = perAddressCap(n);
  return `limits:\n  maxConnectionsPerAddress: ${perAddress}\n` +
    (perAddress > LIMIT_KEYS.maxConnections.default ? `  maxConnections: ${perAddress}\n` : "");
}

/**
 * Opens `n` connections of `kind` to `port` into `into`, {@linkcode CONCURRENCY} at a time;
 * after a failure no new one is started, and it rejects once those in flight have settled.
 */
async function openMany(
  n: number,
  port: number,
  kind: TransportKind,
  tls: { ca: string; cert: string; key: string } | undefined,
  into: Transport[],
): Promise<void> {
  let next = 0;
  // Each of CONCURRENCY openers takes the next connection until none is left; a failure stops
  // the others from starting more.
  const opener = async (): Promise<void> => {
    try {
      while (next < n) {
        next++;
        // settleMs 0: acceptance is read from the collector's own log instead.
        into.push(
          await openTransport({
            host: "127.0.0.1",
            port,
            kind,
            tls: tls && { ...tls, settleMs: 0 },
            tlsEngine: "deno",
            connectTimeoutMs: 30_000,
          }),
        );
      }
    } catch (e) {
      next = n;
      throw e;
    }
  };
  const done = await Promise.allSettled(Array.from({ length: Math.min(CONCURRENCY, n) }, opener));
  const failed = done.find((d) => d.status === "rejected");
  if (failed !== undefined) throw (failed as PromiseRejectedResult).reason;
}

/** One process on `transport` with `n` idle connections. */
async function trial(
  transport: E2eTransport,
  n: number,
  settleSec: number,
  idleWindowSec: number,
): Promise<IdleConnectionsTrial> {
  const t: IdleConnectionsTrial = {
    transport,
    connections: n,
    rssBeforeSamples: [],
    rssAfterSamples: [],
    bytesPerConnection: NaN,
    fdsGained: NaN,
    openMs: NaN,
    failures: [],
  };
  const dir = await Deno.makeTempDir({ prefix: "fa-bench-conns-" });
  const certDir = `${dir}/${CERT_DIR}`;
  await Deno.writeTextFile(
    `${dir}/fa.conf`,
    benchConfig(`${dir}/${FLOW_LOG_FILE}`, transport) + connectionLimits(n),
  );
  const tlsOn = transport === "TLS";
  const fa = await startFlowAggregator({
    config: `${dir}/fa.conf`,
    cwd: dir,
    // Debug: the per-session `session opened` lines are how establishment is seen.
    logLevel: "debug",
    args: tlsOn ? ["--cert-dir", certDir] : [],
    tls: tlsOn,
  });
  const conns: Transport[] = [];
  try {
    let tls: { ca: string; cert: string; key: string } | undefined;
    if (tlsOn) {
      const files = await writtenCertFiles(fa, certDir);
      const read = (f: string): Promise<string> => Deno.readTextFile(f);
      tls = { ca: await read(files.ca), cert: await read(files.cert), key: await read(files.key) };
    }
    await sleep(settleSec * 1000);
    const fds0 = await fdCount(fa.pid);
    const before = await sampleRss(fa.pid, SAMPLES);
    t.rssBeforeSamples = before.samples;
    const from = fa.events.length;
    const t0 = performance.now();
    await openMany(n, fa.port, tlsOn ? "tls" : "tcp", tls, conns);
    await fa.waitFor(() => countEvents(fa, from, "session opened") >= n, 60_000, from);
    t.openMs = performance.now() - t0;
    const after = await sampleRss(fa.pid, (idleWindowSec * 1000) / SAMPLE_EVERY_MS);
    t.rssAfterSamples = after.samples;
    t.fdsGained = (await fdCount(fa.pid)) - fds0;
    // Every connection must still be there, and nothing refused or failed on the way.
    const opened = countEvents(fa, from, "session opened");
    if (opened !== n) t.failures.push(`${opened} sessions opened, want ${n}`);
    const closed = countEvents(fa, from, "session closed");
    if (closed > 0) t.failures.push(`${closed} sessions closed before the samples`);
    for (const msg of ["connection refused: limit reached", "TLS handshake failed"]) {
      const k = countEvents(fa, from, msg);
      if (k > 0) t.failures.push(`${k} × ${msg}`);
    }
    const gone = conns.filter((c) => !c.open).length;
    if (gone > 0) t.failures.push(`${gone} connections closed on the client side`);
    if (t.failures.length === 0) t.bytesPerConnection = (after.lowest - before.lowest) / n;
  } catch (e) {
    t.failures.push(e instanceof Error ? e.message.split("\n")[0] : String(e));
  } finally {
    for (const c of conns) c.close();
    await fa.stop(10_000);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
  return t;
}

/** Measures both transports, TCP first, each in a fresh process. */
export async function benchIdleConnections(
  opts: IdleConnectionsOptions,
): Promise<IdleConnectionsResult> {
  const n = opts.connections ?? (opts.quick ? 50 : 1_000);
  const settleSec = opts.quick ? 1 : 3;
  const idleWindowSec = opts.quick ? 2 : IDLE_WINDOW_SEC;
  const trials: IdleConnectionsTrial[] = [];
  for (const transport of ["TCP", "TLS"] as const) {
    const t = await trial(transport, n, settleSec, idleWindowSec);
    console.error(
      `idle connections ${transport}: ${n} in ${t.openMs.toFixed(0)} ms, ${
        t.bytesPerConnection.toFixed(0)
      } B each, ${t.fdsGained} fds gained${t.failures.length ? ` (${t.failures.join("; ")})` : ""}`,
    );
    trials.push(t);
  }
  const fig = (k: E2eTransport): number | null => {
    const v = trials.find((t) => t.transport === k)?.bytesPerConnection;
    return v !== undefined && Number.isFinite(v) ? v : null;
  };
  return {
    tls_idle_connection_bytes: fig("TLS"),
    tcp_idle_connection_bytes: fig("TCP"),
    detail: {
      connections: n,
      settleSec,
      samples: SAMPLES,
      idleWindowSec,
      maxConnectionsPerAddress: perAddressCap(n),
      trials,
      note: `(VmRSS with ${n} idle connections − VmRSS before) / ${n}: before, the lowest of ` +
        `${SAMPLES} samples ${SAMPLE_EVERY_MS} ms apart after ${settleSec} s of settling; after, ` +
        `the lowest of samples every ${SAMPLE_EVERY_MS} ms for ${idleWindowSec} s from the last ` +
        "connection's establishment (V8's idle-time GC of the handshakes' garbage within); one " +
        "process per transport (the bench configuration, flow log on), connections opened " +
        `${CONCURRENCY} at a time from the bench process, each established when the collector ` +
        "logged `session opened` (TLS: after the handshake and the client certificate check), " +
        "nothing sent on them; limits.maxConnectionsPerAddress raised from its default " +
        `${LIMIT_KEYS.maxConnectionsPerAddress.default} to ${perAddressCap(n)} (all from ` +
        "127.0.0.1)",
    },
  };
}

if (import.meta.main) {
  const i = Deno.args.findIndex((a) => a.startsWith("--connections"));
  const a = Deno.args[i];
  const connections = i < 0
    ? undefined
    : Number(a.includes("=") ? a.split("=")[1] : Deno.args[i + 1]);
  console.log(
    JSON.stringify(
      await benchIdleConnections({ quick: Deno.args.includes("--quick"), connections }),
      null,
      2,
    ),
  );
}
