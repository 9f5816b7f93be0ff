/**
 * The real process on the fast UDP receive path (recvmmsg worker threads, opt-in with
 * `--allow-ffi`): every record flowgen sends at a modest rate is received and aggregated, the
 * kernel and queue drop counters are reported, and asking for the fast path without the FFI
 * permission is a clear start-up error rather than a silent fallback.
 */

import assert from "node:assert/strict";
import { type FlowgenOptions, runFlowgen } from "../../src/flowgen/mod.ts";
import { DENO_JSON, FaProcess, flowLogConfig, type LogEvent } from "../_helpers/process.ts";

const CONFIG = flowLogConfig("./flows.log", { transport: "UDP" });

async function withProcess(
  args: string[],
  denoFlags: string[] | undefined,
  body: (fa: FaProcess, dir: string) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "fa-udp-fast-" });
  const fa = await FaProcess.startWithConfig(dir, CONFIG, { args, denoFlags });
  try {
    await body(fa, dir);
  } finally {
    await fa.dispose();
    await Deno.remove(dir, { recursive: true });
  }
}

/** What flowgen sends in one test: Agents, distinct flows, records per second, records, seed. */
type Traffic = Required<Pick<FlowgenOptions, "agents" | "flows" | "rate" | "records" | "seed">>;

/**
 * Sends `traffic` over UDP to the process, checks flowgen sent every record, stops the process
 * (exit code 0) and returns its final `record metrics` event.
 */
async function sendAndStop(fa: FaProcess, traffic: Traffic): Promise<LogEvent> {
  const port = await fa.collectorPort();
  const report = await runFlowgen({ target: `127.0.0.1:${port}`, proto: "udp", ...traffic });
  assert.equal(report.records, traffic.records);
  const status = await fa.stop("SIGTERM");
  assert.equal(status.code, 0, fa.stderr);
  const m = fa.find({ msg: "record metrics" }).at(-1);
  assert.ok(m, "final metrics");
  return m;
}

Deno.test("udp fast path: every record of 40,000 at 20k/s is received and aggregated", async () => {
  await withProcess(["--udp-receiver", "fast"], undefined, async (fa) => {
    // Logged at start-up: the same deadline as the collector port in sendAndStop.
    const path = await fa.waitFor({ msg: "UDP receive path" }, 15_000);
    assert.equal(path.fields.mode, "ffi");
    const m = await sendAndStop(fa, {
      agents: 4,
      flows: 2000,
      rate: 20_000,
      records: 40_000,
      seed: 7,
    });
    assert.equal(Number(m.fields.numRecordsReceived), 40_000, fa.stderr);
    assert.equal(Number(m.fields.recordsAggregated), 40_000);
    assert.equal(Number(m.fields.udpKernelDrops), 0);
    assert.equal(Number(m.fields.udpQueueDrops), 0);
  });
});

Deno.test("udp socket path: --udp-receiver socket uses one Deno socket and still works", async () => {
  await withProcess(["--udp-receiver", "socket"], undefined, async (fa) => {
    const m = await sendAndStop(fa, { agents: 2, flows: 50, rate: 1000, records: 500, seed: 3 });
    assert.equal(fa.find({ msg: "UDP receive path" }).length, 0, "fast path not started");
    // Loopback at 1k/s: the plain socket keeps up (it only loses beyond ~10-15k/s).
    assert.equal(Number(m.fields.numRecordsReceived), 500, fa.stderr);
    // Read from /proc/net/udp6 (the process runs with --allow-all; without it: "unknown").
    assert.equal(Number(m.fields.udpKernelDrops), 0);
  });
});

Deno.test("udp fast path without --allow-ffi is a start-up error naming the permission", async () => {
  const flags = ["--allow-net", "--allow-read", "--allow-write", "--allow-env", "--allow-sys"];
  await withProcess(
    ["--udp-receiver", "fast"],
    [...flags, "--config", DENO_JSON],
    async (fa) => {
      const status = await fa.waitExit();
      assert.equal(status.code, 255);
      assert.match(fa.stderr, /--udp-receiver fast needs .*--allow-ffi/);
    },
  );
});
