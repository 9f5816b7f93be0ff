import assert from "node:assert/strict";
import {
  agentDataMessage,
  type AgentUpdate,
  agentUpdateOffsets,
  FlowModel,
  type ReplayReport,
  ReplayStream,
  runReplay,
} from "../../src/flowgen/mod.ts";
import { Collector } from "../../src/collector/mod.ts";
import { type DataRecord, decodeMessage, TemplateStore } from "../../src/ipfix/mod.ts";
import { generateCertificates } from "../../src/pki/mod.ts";
import { setLogWriter } from "../../src/log.ts";
import { waitFor } from "../_helpers/wait.ts";
import { clientTls, collectorTls } from "../_helpers/tls.ts";
import { replayCli } from "../_helpers/process.ts";

setLogWriter(() => {});

const OPTS = { agents: 4, flows: 400, seed: 5, uniqueNames: 0.3 };
const TOTALS = [
  ["packetTotalCount", "packetDeltaCount"],
  ["octetTotalCount", "octetDeltaCount"],
  ["reversePacketTotalCount", "reversePacketDeltaCount"],
  ["reverseOctetTotalCount", "reverseOctetDeltaCount"],
] as const;

function hex(b: Uint8Array): string {
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

/** The model's updates of one round (one export per flow), per Agent, in the stream's order. */
function roundUpdates(): { model: FlowModel; updates: AgentUpdate[][] } {
  const model = new FlowModel(OPTS);
  const updates: AgentUpdate[][] = model.agents.map(() => []);
  for (let f = 0; f < OPTS.flows; f++) {
    for (const u of model.nextUpdates()) updates[u.agent].push(u);
  }
  return { model, updates };
}

Deno.test("replay: a patched round is byte for byte the codec's encoding of that round's records", () => {
  const stream = new ReplayStream(OPTS);
  const { model, updates } = roundUpdates();
  for (const round of [0, 3]) {
    const exportTime = 1_800_000_000 + round;
    stream.rounds.forEach((ar, a) => {
      ar.patch(0, ar.messages, round, exportTime);
      assert.equal(ar.messages, updates[a].length);
      for (let i = 0; i < ar.messages; i++) {
        const u = updates[a][i];
        const rec = model.recordOf({
          ...u,
          last: false,
          flowEndReason: 2,
          tcpState: u.tcpState === "" ? "" : "ESTABLISHED",
        });
        rec.flowEndSeconds = exportTime;
        for (const [t, d] of TOTALS) {
          rec[t] = (rec[t] as bigint) + BigInt(round) * (rec[d] as bigint);
        }
        const odid = ar.agent.observationDomainId;
        const want = agentDataMessage(
          u.templateId,
          rec,
          odid,
          exportTime,
          round * ar.messages + i + 1,
        );
        assert.equal(hex(ar.views[i]), hex(want), `agent ${a} message ${i} round ${round}`);
      }
    });
  }
});

Deno.test("replay: only the header's time and sequence, flowEndSeconds and the totals change", () => {
  const stream = new ReplayStream(OPTS);
  for (const ar of stream.rounds) {
    ar.patch(0, ar.messages, 0, 1_800_000_000);
    const before = ar.bytes.slice();
    ar.patch(0, ar.messages, 7, 1_800_000_099);
    const allowed = new Set<number>();
    for (let i = 0; i < ar.messages; i++) {
      const m = ar.starts[i];
      for (let k = 4; k < 12; k++) allowed.add(m + k); // export time, sequence number
      const templateId = (ar.bytes[m + 16] << 8) | ar.bytes[m + 17];
      const at = agentUpdateOffsets(templateId as 256 | 257);
      // flowEndSeconds (4 bytes) and the four totals (8 bytes each), by schema position.
      const fields: [number, number][] = [[at[0], 4], [at[2], 8], [at[3], 8], [at[6], 8], [
        at[7],
        8,
      ]];
      for (const [off, len] of fields) for (let k = 0; k < len; k++) allowed.add(m + 20 + off + k);
    }
    let changed = 0;
    for (let p = 0; p < before.length; p++) {
      if (before[p] !== ar.bytes[p]) {
        assert.ok(allowed.has(p), `byte ${p} changed outside the patched fields`);
        changed++;
      }
    }
    assert.ok(changed >= ar.messages * 3, `${changed} bytes changed`);
  }
});

Deno.test("replay: rounds decode to the stream's records, sequences consecutive, counters growing", () => {
  const stream = new ReplayStream(OPTS);
  const expected = roundUpdates().updates;
  const podNames = new Set<string>();
  let podRefs = 0;
  stream.rounds.forEach((ar, a) => {
    const store = new TemplateStore();
    for (const t of stream.templateMessages(a, 1_800_000_000)) decodeMessage(t, store);
    let prev: DataRecord[] = [];
    let seq = 0;
    for (let round = 0; round < 3; round++) {
      ar.patch(0, ar.messages, round, 1_800_000_000 + round);
      const got: DataRecord[] = [];
      for (const v of ar.views) {
        const m = decodeMessage(v, store);
        assert.equal(m.header.observationDomainId, ar.agent.observationDomainId);
        assert.equal(m.header.sequenceNumber, ++seq, "records sent including this one");
        assert.equal(m.dataSets.length, 1);
        got.push(...m.dataSets[0].records);
      }
      assert.equal(got.length, expected[a].length);
      got.forEach((r, i) => {
        const u = expected[a][i];
        assert.equal(r.flowEndSeconds, 1_800_000_000 + round);
        assert.equal(r.flowEndReason, 2, "kept alive: active timeout");
        assert.ok(r.tcpState === "" || r.tcpState === "ESTABLISHED");
        assert.equal(r.packetDeltaCount, u.packetDeltaCount);
        if (round > 0) {
          for (const [t, d] of TOTALS) {
            assert.equal(r[t], (prev[i][t] as bigint) + (r[d] as bigint), `${t} grows by ${d}`);
          }
          for (const k of ["sourceTransportPort", "sourcePodName", "destinationPodName"]) {
            assert.equal(r[k], prev[i][k]);
          }
        } else {
          assert.equal(r.packetTotalCount, u.packetTotalCount);
          for (const k of ["sourcePodName", "destinationPodName"] as const) {
            if (r[k] !== "") {
              podNames.add(r[k] as string);
              podRefs++;
            }
          }
        }
      });
      prev = got;
    }
  });
  // A unique-name ratio of 0.3: Pod names repeat across flows.
  assert.ok(podNames.size < podRefs * 0.6, `${podNames.size} names for ${podRefs} Pod fields`);
  assert.equal(stream.recordsPerRound, expected.flat().length);
  assert.ok(stream.clusterIpRecords > 0 && (stream.perScenario.interNode ?? 0) > 0);
});

/** Certificates of the TLS tests: the Collector's server side, the Agents' client side. */
const CERTS = generateCertificates({ address: "127.0.0.1" });

/** A Collector on `proto` (TLS: mutual, with {@linkcode CERTS}) counting what it decodes. */
async function collect(proto: "tcp" | "udp" | "tls") {
  const domains = new Map<number, number>();
  /** Records by flowEndSeconds. */
  const ends = new Map<number, number>();
  let records = 0;
  const tls = proto === "tls" ? collectorTls(CERTS) : undefined;
  const c = new Collector({ address: "127.0.0.1:0", protocol: proto, tls }, (recs, ctx) => {
    records += recs.length;
    for (const r of recs) {
      const end = Number((r as Record<string, unknown>).flowEndSeconds);
      ends.set(end, (ends.get(end) ?? 0) + 1);
    }
    domains.set(ctx.observationDomainId, (domains.get(ctx.observationDomainId) ?? 0) + recs.length);
  });
  await c.start();
  return { c, domains, ends, records: () => records };
}

for (const proto of ["tcp", "udp", "tls"] as const) {
  Deno.test(`replay over ${proto}: two rounds reach the Collector, one domain per Agent`, async () => {
    const { c, domains, ends, records } = await collect(proto);
    try {
      const before = Math.floor(Date.now() / 1000);
      const r = await runReplay({
        ...OPTS,
        target: `127.0.0.1:${c.port}`,
        proto,
        tls: proto === "tls" ? clientTls(CERTS) : undefined,
        rounds: 2,
        // UDP: one record a datagram and the Collector in this thread, reading between the
        // sender's bursts (50 ms worth after a stall): at 4,000/s a burst of 200 filled the
        // default buffer on a busy machine (kernel drops seen); 50 leave it 4 times the room.
        rate: proto === "udp" ? 1_000 : 0,
      });
      assert.equal(r.records, 2 * r.recordsPerRound);
      assert.equal(r.errors, 0);
      await waitFor(() => records() >= r.records, { timeoutMs: 10_000, what: "the records" });
      assert.equal(records(), r.records);
      const perRound = new ReplayStream(OPTS).rounds;
      assert.deepEqual(
        [...domains].sort((a, b) => a[0] - b[0]),
        perRound.map((ar) => [ar.agent.observationDomainId, 2 * ar.messages])
          .sort((a, b) => a[0] - b[0]),
      );
      // Each round is a newer export of every flow: flowEndSeconds one second later than the
      // round before, whatever the wall clock did (an unpaced run sends many rounds a second).
      const [first, second] = [...ends.keys()].sort((a, b) => a - b);
      assert.deepEqual([...ends.entries()].sort((a, b) => a[0] - b[0]), [
        [first, r.recordsPerRound],
        [first + 1, r.recordsPerRound],
      ]);
      assert.equal(second, first + 1);
      assert.ok(first >= before && first <= Math.floor(Date.now() / 1000), `${first}`);
      assert.equal(c.stats().decodeErrorsTotal, 0);
    } finally {
      await c.stop();
    }
  });
}

Deno.test("replay CLI over mutual TLS: --ca/--cert/--key files, every record sent reaches the Collector", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-replay-tls-" });
  const { c, domains, records } = await collect("tls");
  try {
    const tls = clientTls(CERTS);
    await Deno.writeTextFile(`${dir}/ca.crt`, tls.ca!);
    await Deno.writeTextFile(`${dir}/tls.crt`, tls.cert!);
    await Deno.writeTextFile(`${dir}/tls.key`, tls.key!);
    const r = await replayCli<ReplayReport>([
      "--target",
      `127.0.0.1:${c.port}`,
      "--proto",
      "tls",
      ...["--ca", `${dir}/ca.crt`, "--cert", `${dir}/tls.crt`, "--key", `${dir}/tls.key`],
      ...["--agents", "4", "--flows", "2000", "--duration", "1"],
    ]);
    assert.equal(r.proto, "tls");
    assert.ok(r.records > r.recordsPerRound, `${r.records} records: more than one round`);
    assert.equal(r.perAgent.length, 4);
    // The sender has exited: what it counted as sent is all in the Collector's hands.
    await waitFor(() => records() >= r.records, { timeoutMs: 10_000, what: "the records" });
    assert.equal(records(), r.records);
    assert.equal(domains.size, 4, "one session per Agent");
    const s = c.stats();
    assert.equal(s.decodeErrorsTotal, 0);
    assert.equal(s.tlsHandshakeFailures, 0);
  } finally {
    await c.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
