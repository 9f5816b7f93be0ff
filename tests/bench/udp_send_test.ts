/**
 * udp_send.c's stream mode with `-e`/`-E` (what udp_e2e sends the process): every round of the
 * Agents' messages is a newer export of the same flows, flowEndSeconds and the export time one
 * second later than the last round's, starting BASE seconds on; `passes` says how many rounds
 * it started again, so that the next trial carries on.
 */

import assert from "node:assert/strict";
import { blast, buildUdpTools } from "../../scripts/bench/udp.ts";
import { agentFlowEndOffset, interleaveMessages } from "../../scripts/bench/udp_e2e.ts";
import { ReplayStream } from "../../src/flowgen/replay.ts";
import { decodeMessage, TemplateStore } from "../../src/ipfix/mod.ts";

Deno.test("udp_send -e: each round's flow ends and export times one second on, from BASE", async () => {
  const tools = await buildUdpTools();
  const rx = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: 0 });
  try {
    const now = 1_700_000_000;
    const stream = new ReplayStream({ agents: 2, flows: 12, seed: 3, startSeconds: now - 60 });
    const perAgent = stream.rounds.map((r) => {
      r.patch(0, r.messages, 0, now);
      return r.views.map((v) => v.slice());
    });
    const perRound = Math.min(...perAgent.map((m) => m.length));
    assert.ok(perRound >= 3, `${perRound} messages per Agent`);
    const templates = stream.rounds.flatMap((_, i) => stream.templateMessages(i, now));
    const files = {
      messages: `${tools.dir}/stream.bin`,
      templates: `${tools.dir}/stream_templates.bin`,
      passOffset: agentFlowEndOffset(),
      passBase: 5,
    };
    await Deno.writeFile(files.messages, interleaveMessages(perAgent));
    await Deno.writeFile(files.templates, interleaveMessages(templates.map((m) => [m])));
    const rounds = 3;
    const port = (rx.addr as Deno.NetAddr).port;
    const sent = await blast(tools, port, {
      count: 2 * perRound * rounds,
      rate: 20_000,
      sources: 2,
      stream: files,
    });
    assert.equal(sent.sent, 2 * perRound * rounds);
    // Sources are paced together, not in lockstep: one may finish its rounds before the other.
    assert.ok(sent.passes! >= rounds - 1 && sent.passes! <= rounds + 1, `passes ${sent.passes}`);
    const store = new TemplateStore({ wireNumbers: true });
    const endsOf = new Map<string, number[]>();
    let data = 0;
    let latest = 0;
    while (data < 2 * perRound * rounds) {
      const [d] = await rx.receive();
      const m = decodeMessage(d, store);
      for (const ds of m.dataSets) {
        for (const r of ds.records) {
          const end = r.flowEndSeconds as number;
          // The export time moves with the flow end.
          assert.equal(m.header.exportTime, end);
          const key = JSON.stringify([
            m.header.observationDomainId,
            r.sourceIPv4Address ?? r.sourceIPv6Address,
            r.destinationIPv4Address ?? r.destinationIPv6Address,
            r.sourceTransportPort,
            r.destinationTransportPort,
          ]);
          endsOf.set(key, [...endsOf.get(key) ?? [], end]);
          latest = Math.max(latest, end);
          data++;
        }
      }
    }
    // Each message, round after round: now + BASE, then one second more each time.
    assert.equal(endsOf.size, 2 * perRound);
    for (const [key, ends] of endsOf) {
      assert.deepEqual(ends, ends.map((_, k) => now + 5 + k), key);
    }
    // The busiest source's last round: its completed rounds, or the one it had started.
    assert.ok(latest === now + 4 + sent.passes! || latest === now + 5 + sent.passes!, `${latest}`);
  } finally {
    rx.close();
    await Deno.remove(tools.dir, { recursive: true });
  }
});
