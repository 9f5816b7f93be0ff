/**
 * End to end: graceful shutdown of the real process (control-plane.md §6.3, our improvement
 * L22). With timeouts of one hour nothing expires on its own, so every line in the flow log after
 * SIGTERM/SIGINT comes from the shutdown flush; the process must exit 0. A second signal while
 * the shutdown is stuck forces exit code 1.
 */

import assert from "node:assert/strict";
import { sendScenarioFlows } from "./helpers/agent.ts";
import { byKey, type FlowLogLine, readFlowLog } from "./helpers/flow_log.ts";
import { FaProcess, flowLogConfig } from "../_helpers/process.ts";
import { unmatchedSourceHalf } from "./helpers/scenarios.ts";

/** Starts the process, sends every scenario plus a lone inter-node half, waits until ingested. */
async function startAndFeed(
  dir: string,
  logPath: string,
  portBase: number,
): Promise<{ fa: FaProcess; expected: Map<string, FlowLogLine> }> {
  // Debug level, for the "session closed" events that tell all sent data was read.
  const fa = await FaProcess.startWithConfig(
    dir,
    flowLogConfig(logPath, { activeTimeout: "1h", inactiveTimeout: "1h" }),
    { args: ["--log-level", "debug"] },
  );
  const port = await fa.collectorPort();
  const { agents, flows } = await sendScenarioFlows(port, portBase);
  // An inter-node source half whose destination half never comes: held (not ready) until the
  // shutdown, then exported un-correlated rather than lost.
  const lone = unmatchedSourceHalf("lonely", {
    sourceIP: "10.10.0.91",
    destinationIP: "10.10.1.92",
    sourcePort: portBase + 90,
    destinationPort: 9090,
    pod: "lonely",
    namespace: "ns-l",
  });
  await agents[0].sendRecord(lone.sends[0].record);
  for (const a of agents) a.close();
  // A session is closed only after everything before the EOF was decoded and aggregated.
  await fa.waitFor(() => fa.find({ msg: "session closed" }).length >= 2, 10_000);
  const expected = new Map(flows.map((f) => [f.key, f.expected]));
  expected.set(lone.key, lone.expected);
  return { fa, expected };
}

for (const signal of ["SIGTERM", "SIGINT", "SIGQUIT"] as const) {
  Deno.test(`e2e shutdown: flows held at ${signal} are in the flow log after exit 0`, async () => {
    const dir = await Deno.makeTempDir({ prefix: "fa-e2e-stop-" });
    const logPath = `${dir}/flows.log`;
    let fa: FaProcess | undefined;
    try {
      const base = { SIGTERM: 43_000, SIGINT: 44_000, SIGQUIT: 46_000 }[signal];
      const fed = await startAndFeed(dir, logPath, base);
      fa = fed.fa;
      assert.deepEqual(await readFlowLog(logPath), [], "nothing expired before the signal");
      const status = await fa.stop(signal);
      assert.equal(status.code, 0, fa.stderr);
      assert.equal(fa.find({ msg: "Stopping flow aggregator", signal }).length, 1);
      const flushed = fa.find({ msg: "flushed flows held at shutdown" });
      assert.equal(flushed.length, 1);
      assert.equal(Number(flushed[0].fields.flows), fed.expected.size);

      const groups = byKey(await readFlowLog(logPath));
      assert.deepEqual([...groups.keys()].sort(), [...fed.expected.keys()].sort());
      for (const [key, want] of fed.expected) {
        const got = groups.get(key)!;
        assert.equal(got.length, 1, `${key}: exactly one line (the shutdown flush)`);
        assert.deepEqual(got[0], want, key);
      }
    } finally {
      await fa?.dispose();
      await Deno.remove(dir, { recursive: true });
    }
  });
}

Deno.test("e2e shutdown: a second SIGTERM while the shutdown is stuck exits 1", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-stop2-" });
  // The flow log is a FIFO nobody reads: opening it for the final flush blocks, so the
  // shutdown is still running when the second signal arrives.
  const fifo = `${dir}/flows.fifo`;
  const mk = await new Deno.Command("mkfifo", { args: [fifo] }).output();
  assert.equal(mk.code, 0, "mkfifo");
  let fa: FaProcess | undefined;
  try {
    fa = (await startAndFeed(dir, fifo, 45_000)).fa;
    const mark = fa.events.length;
    fa.kill("SIGTERM");
    // The shutdown has begun; the FIFO keeps it from finishing (for the exporter timeout, 10 s).
    await fa.waitFor({ msg: "Stopping flow aggregator" }, 10_000, mark);
    fa.kill("SIGTERM");
    const status = await fa.waitExit(10_000);
    assert.equal(status.code, 1, fa.stderr);
    const [second] = fa.find({ msg: /^Received second signal, will force exit/ });
    assert.ok(second !== undefined, fa.stderr);
    // What the exit throws away is counted: the flows held, then a metrics line.
    assert.match(second.fields.flowsHeld ?? "", /^\d+$/, second.raw);
    const at = fa.events.indexOf(second);
    assert.ok(fa.events.slice(at).some((e) => e.fields.msg === "record metrics"), fa.stderr);
    assert.equal(fa.find({ msg: "flow aggregator stopped" }).length, 0);
  } finally {
    await fa?.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

// A FIFO created in the watched configuration directory hangs Deno's watch thread in its open;
// the stop then closed the watch first, which blocked the main thread: the process stayed up
// (a second SIGTERM unhandled), and SIGKILL lost every held flow (found by review).
Deno.test("e2e shutdown: a FIFO in the configuration directory does not hold the SIGTERM stop", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-stop-fifo-" });
  const logPath = `${dir}/flows.log`;
  let fa: FaProcess | undefined;
  try {
    const fed = await startAndFeed(dir, logPath, 47_000);
    fa = fed.fa;
    // The configuration is `${dir}/fa.conf`: the FIFO is in the watched directory.
    const mk = await new Deno.Command("mkfifo", { args: [`${dir}/other.fifo`] }).output();
    assert.equal(mk.code, 0, "mkfifo");
    // Time for the watch thread to see it (and hang in its open).
    await new Promise((r) => setTimeout(r, 1000));
    assert.deepEqual(await readFlowLog(logPath), [], "nothing expired before the signal");
    fa.kill("SIGTERM");
    const status = await fa.waitExit(15_000);
    assert.equal(status.code, 0, fa.stderr);
    const flushed = fa.find({ msg: "flushed flows held at shutdown" });
    assert.equal(flushed.length, 1);
    assert.equal(Number(flushed[0].fields.flows), fed.expected.size);
    const groups = byKey(await readFlowLog(logPath));
    assert.deepEqual([...groups.keys()].sort(), [...fed.expected.keys()].sort());
  } finally {
    await fa?.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});
