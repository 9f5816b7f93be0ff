/**
 * End to end: the TCP/TLS connection bounds of the `limits:` section against the real process
 * on loopback (issue 10). The attackers run in their own process (`helpers/conn_flood.ts`) so
 * their sockets do not share this runner's file descriptors, and connect over `::1` while a
 * legitimate Agent on 127.0.0.1 (another source address) is served during every attack. Memory is the
 * process's RSS from `/proc/<pid>/status`; the counters come from the final `record metrics`
 * line (counts by reason are summed there).
 */

import assert from "node:assert/strict";
import { SimAgent } from "./helpers/agent.ts";
import { intraNodeRecord, NODES } from "./helpers/scenarios.ts";
import { FaProcess, flowLogConfig, type LogEvent } from "../_helpers/process.ts";
import { pollUntil, waitFor } from "../_helpers/wait.ts";

const FLOOD = new URL("./helpers/conn_flood.ts", import.meta.url).pathname;

/** A running `conn_flood.ts`: what it opened and how many the collector closed so far. */
class Flood {
  opened = -1;
  closed = 0;
  /** When the attacker was started (`performance.now()`): no connection is older. */
  readonly startedAt = performance.now();
  readonly #child: Deno.ChildProcess;
  readonly #pump: Promise<void>;

  /** Starts `count` connections to `[::1]:port` in `mode` (`idle` or `slowloris`). */
  constructor(port: number, count: number, mode = "idle") {
    const args = ["--port", String(port), "--count", String(count), "--mode", mode];
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "--allow-net", FLOOD, ...args],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    this.#child = child;
    this.#pump = (async () => {
      let buf = "";
      for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
        buf += chunk;
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const o = JSON.parse(buf.slice(0, nl)) as { opened: number; closed?: number };
          buf = buf.slice(nl + 1);
          this.opened = o.opened;
          this.closed = o.closed ?? this.closed;
        }
      }
    })();
  }

  /** Waits until every connection was attempted. */
  async whenOpened(timeoutMs = 15_000): Promise<void> {
    await waitFor(() => this.opened >= 0, { timeoutMs, intervalMs: 50, what: "flood opened" });
  }

  /** Waits until the collector closed `n` of them. */
  async whenClosed(n: number, timeoutMs: number): Promise<void> {
    await waitFor(() => this.closed >= n, {
      timeoutMs,
      intervalMs: 50,
      what: `the collector closing ${n} connections (closed ${this.closed})`,
    });
  }

  /**
   * Waits until the collector closed `n` connections and returns how long after the start
   * that was seen (a close is seen after it happened, never before: a lower bound holds).
   */
  async msUntilClosed(n: number, timeoutMs: number): Promise<number> {
    await this.whenClosed(n, timeoutMs);
    return performance.now() - this.startedAt;
  }

  /** Ends the attacker process. */
  async stop(): Promise<void> {
    await this.#child.stdin.close().catch(() => {});
    await this.#child.status;
    await this.#pump;
  }
}

/** Resident memory of a process in KiB. */
async function rssKiB(pid: number): Promise<number> {
  const status = await Deno.readTextFile(`/proc/${pid}/status`);
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]);
}

/** The process's configuration: the flow log only, and the given `limits:` keys. */
function config(dir: string, limits: Record<string, string | number>, transport = "TCP"): string {
  return flowLogConfig(`${dir}/flows.log`, {
    transport: transport as "TCP" | "TLS",
    activeTimeout: "1h",
    inactiveTimeout: "1h",
  }) + "limits:\n" + Object.entries(limits).map(([k, v]) => `  ${k}: ${v}\n`).join("");
}

/** Sends `n` records from `agent` (ports from `base`). */
async function sendRecords(agent: SimAgent, base: number, n: number): Promise<void> {
  for (let i = 0; i < n; i++) await agent.sendRecord(intraNodeRecord(base + i, 0));
}

/** Stops the process with SIGTERM (exit 0) and returns its final metrics line. */
async function stopAndMetrics(fa: FaProcess): Promise<LogEvent["fields"]> {
  const status = await fa.stop("SIGTERM", 20_000);
  assert.equal(status.code, 0, fa.stderr);
  const m = fa.find({ msg: "record metrics" }).at(-1);
  assert.ok(m, "final record metrics line");
  return m.fields;
}

/** Runs `body` with a process started on `conf` in a temporary directory; cleans up. */
async function withProcess(
  conf: (dir: string) => string,
  body: (fa: FaProcess, port: number, dir: string) => Promise<void>,
  args: string[] = [],
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-conn-" });
  const fa = await FaProcess.startWithConfig(dir, conf(dir), { args, listen: "[::]:0" });
  try {
    await body(fa, await fa.collectorPort(30_000), dir);
  } finally {
    await fa.dispose();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("e2e connections: 10k idle connections cost < 20 KB each, are closed at the idle timeout; the total cap refuses and counts", async () => {
  const n = 10_000;
  const attempts = n + 50;
  await withProcess(
    (dir) =>
      config(dir, {
        maxConnections: n + 10, // the Agent holds one: n + 9 for the flood, 41 refused
        maxConnectionsPerAddress: n + 100,
        // Long enough that the Agent, silent while the flood opens (seconds on a loaded
        // machine), is not timed out before it is served again below.
        idleTimeout: "20s",
      }),
    async (fa, port) => {
      const agent = await SimAgent.connect(NODES[0], port, "tcp");
      await agent.sendTemplates();
      await sendRecords(agent, 10_000, 20);
      const before = await rssKiB(fa.pid);
      const flood = new Flood(port, attempts);
      try {
        await flood.whenOpened();
        const refused = attempts - (n + 9);
        await flood.whenClosed(refused, 5_000);
        const after = await rssKiB(fa.pid);
        const perConnection = ((after - before) * 1024) / (n + 9);
        console.log(`idle connections: ${(perConnection / 1024).toFixed(1)} KiB each`);
        assert.ok(perConnection < 20 * 1024, `${perConnection} bytes per idle connection`);
        // The Agent is served during the attack.
        await sendRecords(agent, 20_000, 20);
        // Past the refused ones, nothing is closed before the idle timeout.
        const firstIdleClose = await flood.msUntilClosed(refused + 1, 30_000);
        assert.ok(firstIdleClose >= 20_000, `an idle connection closed after ${firstIdleClose} ms`);
        await flood.whenClosed(attempts, 30_000);
        // The Agent, silent since its last record, is timed out too (its records were sent
        // after the flood opened, so it may still be open when the flood's last one closes).
        await agent.whenClosedByCollector(30_000);
      } finally {
        await flood.stop();
      }
      agent.close();
      const m = await stopAndMetrics(fa);
      assert.equal(Number(m.numRecordsReceived), 40);
      assert.equal(Number(m.connectionsRefused), attempts - (n + 9));
      // The flood's connections, and the Agent's.
      assert.equal(Number(m.connectionsTimedOut), n + 9 + 1);
      const refusedLines = fa.find({ msg: "connection refused: limit reached" });
      assert.ok(refusedLines.length >= 1 && refusedLines.length <= 2, "logged rate-limited");
      assert.equal(refusedLines[0].fields.limit, "maxConnections");
      assert.equal(fa.find({ msg: "connection closed: timeout" })[0].fields.limit, "idleTimeout");
    },
  );
});

Deno.test("e2e connections: 2,000 slowloris connections are closed at the read timeout and counted; the Agent is served", async () => {
  const n = 2000;
  await withProcess(
    (dir) => config(dir, { maxConnectionsPerAddress: n, readTimeout: "6s", idleTimeout: "1h" }),
    async (fa, port) => {
      const agent = await SimAgent.connect(NODES[0], port, "tcp");
      await agent.sendTemplates();
      const flood = new Flood(port, n, "slowloris");
      try {
        await flood.whenOpened();
        await sendRecords(agent, 10_000, 20);
        const firstClose = await flood.msUntilClosed(1, 15_000);
        assert.ok(firstClose >= 6000, `held until the read timeout, closed after ${firstClose} ms`);
        await flood.whenClosed(n, 15_000);
        await sendRecords(agent, 20_000, 20);
      } finally {
        await flood.stop();
      }
      agent.close();
      const m = await stopAndMetrics(fa);
      assert.equal(Number(m.numRecordsReceived), 40);
      assert.equal(Number(m.connectionsTimedOut), n);
      assert.equal(Number(m.bytesDiscarded), n * 116, "each started message counted");
      assert.equal(fa.find({ msg: "connection closed: timeout" })[0].fields.limit, "readTimeout");
    },
  );
});

Deno.test("e2e connections: half-open TLS handshakes are capped per address and time out; a TLS Agent is served", async () => {
  const attempts = 300;
  const cap = 100;
  await withProcess(
    (dir) =>
      config(dir, {
        maxConnectionsPerAddress: cap,
        maxTlsHandshakes: 128,
        tlsHandshakeTimeout: "4s",
      }, "TLS"),
    async (fa, port, dir) => {
      const flood = new Flood(port, attempts);
      try {
        await flood.whenOpened();
        await flood.whenClosed(attempts - cap, 5_000);
        const read = (f: string): Promise<string> => Deno.readTextFile(`${dir}/certs/${f}`);
        const tls = {
          ca: await read("ca.crt"),
          cert: await read("tls.crt"),
          key: await read("tls.key"),
        };
        const agent = await SimAgent.connect(NODES[0], port, "tls", { tls });
        await agent.sendTemplates();
        await sendRecords(agent, 10_000, 20);
        const firstTimeout = await flood.msUntilClosed(attempts - cap + 1, 15_000);
        assert.ok(firstTimeout >= 4000, `handshakes held until the timeout: ${firstTimeout} ms`);
        await flood.whenClosed(attempts, 15_000);
        agent.close();
      } finally {
        await flood.stop();
      }
      await pollUntil(() => fa.find({ msg: "connection closed: timeout" })[0], {
        what: "timeout logged",
      });
      const m = await stopAndMetrics(fa);
      assert.equal(Number(m.numRecordsReceived), 20);
      assert.equal(Number(m.connectionsRefused), attempts - cap);
      assert.equal(Number(m.connectionsTimedOut), cap);
      assert.equal(Number(m.tlsHandshakeFailures), 0, "closed by the collector, not failed");
      assert.equal(
        fa.find({ msg: "connection closed: timeout" })[0].fields.limit,
        "tlsHandshakeTimeout",
      );
      assert.equal(
        fa.find({ msg: "connection refused: limit reached" })[0].fields.limit,
        "maxConnectionsPerAddress",
      );
    },
    ["--cert-dir", "certs"],
  );
});
