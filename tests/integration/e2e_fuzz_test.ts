/**
 * End to end: the real process under hostile input. Seeded random garbage and byte-mutated
 * Agent messages (valid headers, corrupted records: odd lengths, commas and newlines in strings,
 * absurd counters and times) are sent over UDP and TCP. The process must keep running, count
 * what it rejects, keep every flow log line at exactly 28 fields, still collect a good flow sent
 * afterwards, and exit 0 on SIGTERM.
 */

import assert from "node:assert/strict";
import { agentDataMessage } from "../../src/flowgen/mod.ts";
import { SimAgent } from "./helpers/agent.ts";
import { byKey, readFlowLog, waitForKeys } from "./helpers/flow_log.ts";
import { FaProcess, flowLogConfig } from "../_helpers/process.ts";
import { intraNodeKey, intraNodeRecord, NODES, scenarioFlows } from "./helpers/scenarios.ts";
import { prng } from "../_helpers/prng.ts";

/** Seeded hostile messages for one Agent: garbage and mutated copies of its valid records. */
function hostile(odid: number, seed: number, count: number): Uint8Array[] {
  const rand = prng(seed);
  const int = (n: number): number => Math.floor(rand() * n);
  const bases = scenarioFlows(60_000).flatMap((f) => f.sends.map((s) => s.record));
  const special = [0x2c, 0x0a, 0x0d, 0x00, 0xff]; // , \n \r NUL 0xff
  const out: Uint8Array[] = [];
  for (let i = 0; i < count; i++) {
    if (i % 5 === 0) {
      const g = new Uint8Array(1 + int(300));
      for (let j = 0; j < g.length; j++) g[j] = int(256);
      out.push(g);
      continue;
    }
    const base = bases[int(bases.length)];
    const m = agentDataMessage(base.sourceIPv6Address ? 257 : 256, base, odid, 1_700_000_000, i);
    // Keep the 20 header bytes (message + set header) intact so the record itself gets decoded.
    const flips = 1 + int(6);
    for (let k = 0; k < flips; k++) {
      const at = 20 + int(m.length - 20);
      m[at] = rand() < 0.5 ? special[int(special.length)] : int(256);
    }
    out.push(m);
  }
  return out;
}

for (const transport of ["udp", "tcp"] as const) {
  Deno.test(`e2e fuzz (${transport}): hostile messages never crash the process or break a log line`, async () => {
    const dir = await Deno.makeTempDir({ prefix: `fa-e2e-fuzz-${transport}-` });
    const logPath = `${dir}/flows.log`;
    const fa = await FaProcess.startWithConfig(
      dir,
      flowLogConfig(logPath, { transport: transport === "udp" ? "UDP" : "TCP", prettyPrint: true }),
    );
    const agents: SimAgent[] = [];
    try {
      const port = await fa.collectorPort();
      let sent = 0;
      // Each hostile batch gets its own session: on TCP the first broken message closes it.
      for (let batch = 0; batch < 8; batch++) {
        const a = await SimAgent.connect(NODES[batch % 2], port, transport);
        agents.push(a);
        await a.sendTemplates();
        for (const m of hostile(a.odid, 1000 + batch, transport === "udp" ? 150 : 40)) {
          try {
            await a.sendRaw(m);
            sent++;
            // Pace UDP so the kernel receive buffer never overflows: a lost datagram (the good
            // Agent's template) would make the outcome depend on the machine's load.
            if (transport === "udp" && sent % 25 === 0) await new Promise((r) => setTimeout(r, 5));
          } catch {
            break; // the collector closed this TCP session: expected
          }
        }
        if (transport === "tcp") a.close();
      }
      const good = await SimAgent.connect(NODES[0], port, transport);
      agents.push(good);
      await good.sendTemplates();
      const ports = Array.from({ length: 40 }, (_, i) => 61_000 + i);
      for (const p of ports) await good.sendRecord(intraNodeRecord(p));

      // readFlowLog throws on any line that is not exactly 28 fields.
      await waitForKeys(logPath, ports.map((p) => intraNodeKey(p)), 15_000);
      assert.equal(fa.exited, false);
      const status = await fa.stop("SIGTERM");
      assert.equal(status.code, 0, fa.stderr);
      const lines = await readFlowLog(logPath);
      const groups = byKey(lines);
      for (const p of ports) {
        assert.equal(groups.get(intraNodeKey(p))?.[0].sourcePodName, "worker");
      }
      const metrics = fa.find({ msg: "record metrics" }).at(-1)!;
      assert.ok(Number(metrics.fields.decodeErrors) > 0, "hostile input counted");
      assert.equal(Number(metrics.fields.numRecordsExported), lines.length);
      assert.ok(sent > 0);
    } finally {
      for (const a of agents) a.close();
      await fa.dispose();
      await Deno.remove(dir, { recursive: true });
    }
  });
}
