/**
 * End to end: the drain at SIGTERM under load (issue 10). Simulated Agents send one record per
 * message as fast as they can over TCP; a record counts as sent once its whole message was
 * handed to the kernel. After the exit, the process's final ledger must account for every one:
 * records in = processed (`numRecordsReceived`) + counted lost (`bytesLostAtStop`,
 * `connectionsCutAtStop`, truncated messages), and nothing is lost when the senders stopped
 * before the signal, or stop when the collector half-closes their connections (as the Agents'
 * transport does: it watches for the collector's EOF).
 */

import assert from "node:assert/strict";
import { agentDataMessage, agentTemplateMessage } from "../../src/flowgen/mod.ts";
import { openTransport, type Transport } from "../../src/net/transport.ts";
import { FaProcess, flowLogConfig } from "../_helpers/process.ts";
import { intraNodeRecord, NODES } from "./helpers/scenarios.ts";
import { nowSeconds } from "./helpers/agent.ts";
import { waitFor } from "../_helpers/wait.ts";
import { ConfigMapDir } from "./helpers/configmap.ts";

/** Simulated Agents sending until told to stop or until their transport closes. */
class Load {
  /** Records whose message was completely written. */
  sent = 0;
  readonly #stop = new AbortController();
  readonly #loops: Promise<void>[];

  private constructor(transports: Transport[]) {
    this.#loops = transports.map((t, i) => this.#pump(t, i));
  }

  /** Connects `agents` Agents to `port` and starts sending. */
  static async start(port: number, agents: number): Promise<Load> {
    const ts: Transport[] = [];
    for (let i = 0; i < agents; i++) {
      ts.push(await openTransport({ host: "127.0.0.1", port, kind: "tcp" }));
    }
    return new Load(ts);
  }

  /** Stops sending (the connections stay open) and waits for the loops. */
  async stop(): Promise<void> {
    this.#stop.abort();
    await Promise.all(this.#loops);
  }

  /** Waits until every loop ended by itself (its transport closed). */
  async ended(): Promise<void> {
    await Promise.all(this.#loops);
  }

  async #pump(t: Transport, agent: number): Promise<void> {
    const odid = 1000 + agent;
    await t.send([agentTemplateMessage(256, odid, nowSeconds(), 0)]);
    // Different flows, so aggregation does real work; one record per message, as Agents send.
    const messages = Array.from(
      { length: 64 },
      (_, i) => agentDataMessage(256, intraNodeRecord(20_000 + i, 0), odid, nowSeconds(), i + 1),
    );
    for (let i = 0; !this.#stop.signal.aborted && t.open; i++) {
      try {
        await t.send([messages[i & 63]]);
      } catch {
        break; // closed by the collector: this message may be torn, it is not counted as sent
      }
      this.sent++;
    }
  }
}

/** Starts the process on TCP with only the flow log; returns it and its port. */
async function startProcess(dir: string): Promise<{ fa: FaProcess; port: number }> {
  const fa = await FaProcess.startWithConfig(
    dir,
    flowLogConfig(`${dir}/flows.log`, { activeTimeout: "1h", inactiveTimeout: "1h" }),
  );
  return { fa, port: await fa.collectorPort(30_000) };
}

/** The final metrics line's counter `k`. */
function counter(fa: FaProcess, k: string): number {
  const m = fa.find({ msg: "record metrics" }).at(-1);
  assert.ok(m, "final record metrics line");
  assert.ok(k in m.fields, `${k} in the metrics line`);
  return Number(m.fields[k]);
}

for (const when of ["after the senders stopped", "while the senders are sending"] as const) {
  Deno.test(`e2e drain: SIGTERM ${when}: every record sent is processed or counted`, async () => {
    const dir = await Deno.makeTempDir({ prefix: "fa-e2e-drain-" });
    const { fa, port } = await startProcess(dir);
    let load: Load | undefined;
    try {
      load = await Load.start(port, NODES.length + 2);
      await waitFor(() => load!.sent >= 20_000, { timeoutMs: 15_000, what: "load" });
      if (when === "after the senders stopped") await load.stop();
      const sentAtSignal = load.sent;
      fa.kill("SIGTERM");
      // The collector's half-close tells the senders to stop; their transports see its EOF.
      await load.ended();
      const status = await fa.waitExit(20_000);
      assert.equal(status.code, 0, fa.stderr);
      const sent = load.sent;
      const received = counter(fa, "numRecordsReceived");
      const lostBytes = counter(fa, "bytesLostAtStop");
      const cut = counter(fa, "connectionsCutAtStop");
      const truncated = counter(fa, "decodeErrors");
      console.log(
        `sent ${sent} (${sentAtSignal} at SIGTERM), received ${received}, ` +
          `bytesLostAtStop ${lostBytes}, cut ${cut}, truncated ${truncated}`,
      );
      assert.equal(cut, 0, "every sender stopped at the half-close, within the deadline");
      assert.equal(lostBytes, 0);
      assert.equal(received, sent, "records in = processed: nothing acknowledged was dropped");
      // A message torn by a sender closing mid-write is not sent, and counted when it arrives.
      assert.ok(truncated <= NODES.length + 2, `${truncated} truncated`);
      if (when === "after the senders stopped") assert.equal(truncated, 0);
    } finally {
      await load?.stop();
      await fa.dispose();
      await Deno.remove(dir, { recursive: true });
    }
  });
}

Deno.test("e2e drain: a transport switch under load drains the old collector: every record sent is processed", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-drain-switch-" });
  const volume = `${dir}/config`;
  await Deno.mkdir(volume);
  const text = (proto: string): string =>
    flowLogConfig(`${dir}/flows.log`, { activeTimeout: "1h", inactiveTimeout: "1h" })
      .replace("aggregatorTransportProtocol: TCP", `aggregatorTransportProtocol: ${proto}`);
  const cm = await ConfigMapDir.create(volume, text("TCP"));
  const fa = FaProcess.start({ args: ["--config", cm.path, "--listen", "127.0.0.1:0"], cwd: dir });
  let load: Load | undefined;
  try {
    load = await Load.start(await fa.collectorPort(30_000), NODES.length + 2);
    await waitFor(() => load!.sent >= 10_000, { timeoutMs: 15_000, what: "load" });
    const mark = fa.events.length;
    await cm.update(text("UDP"));
    // The old collector half-closes: the senders stop as its drain reads what they sent.
    await load.ended();
    const stopped = await fa.waitFor({ msg: "collector stopped", protocol: "tcp" }, 15_000, mark);
    await fa.waitFor({ msg: "Started UDP collecting process" }, 15_000, mark);
    assert.equal(Number(stopped.fields.connectionsCutAtStop), 0);
    assert.equal(Number(stopped.fields.bytesLostAtStop), 0);
    assert.equal(Number(stopped.fields.dataRecords), load.sent);
    const status = await fa.stop("SIGTERM");
    assert.equal(status.code, 0, fa.stderr);
    assert.equal(counter(fa, "numRecordsReceived"), load.sent);
  } finally {
    await load?.stop();
    await fa.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});
