import assert from "node:assert/strict";
import type { FlowInput } from "../../src/aggregation/mod.ts";
import { FLOW_FIXED_BYTES } from "../../src/aggregation/layout.ts";
import { at, collector, counters, csd, intraNode, K4, newCore, one, s1 } from "./fixtures.ts";

/** The intra-node record of these tests: 10 s, 100 packets and 10,000 octets each way. */
function intra(over: Partial<FlowInput> = {}): FlowInput {
  return intraNode({ flowEndSeconds: 10, ...counters(100n, 100n, 10_000n, 10_000n), ...over });
}

Deno.test("improved (L8): a total that goes down gives throughput 0, not a u64 wrap", () => {
  const { core } = newCore();
  core.addRecord(intra());
  core.addRecord(intra({ flowEndSeconds: 20, ...counters(50n, 5n, 5_000n, 500n) }));
  const r = one(core);
  assert.deepEqual(csd(r, "throughput"), [0n, 0n, 0n]);
  assert.deepEqual(csd(r, "reverseThroughput"), [0n, 0n, 0n]);
  assert.equal(r.octetTotalCount, 10_000n); // common total only rises
  assert.equal(r.octetTotalCountFromSourceNode, 5_000n);
  assert.equal(core.stats().negativeDiffsClamped, 2);
});

Deno.test("u64 counters above 2^53 stay exact through aggregation and snapshot", () => {
  const { core } = newCore();
  const big = 2n ** 60n + 7n;
  core.addRecord(intra({ ...counters(big, big, big, big) }));
  core.addRecord(intra({ flowEndSeconds: 11, ...counters(big + 1n, 1n, big + 8n, 1n) }));
  const r = one(core);
  assert.equal(r.octetTotalCount, big + 8n);
  assert.equal(r.octetDeltaCount, big + 1n);
  assert.equal(r.throughput, 64n);
});

Deno.test("improved (L12): maxFlows rejects new keys, existing flows still update", () => {
  const { core } = newCore({ maxFlows: 2 });
  assert.equal(core.addRecord(intra({ sourceTransportPort: 1 })), true);
  assert.equal(core.addRecord(intra({ sourceTransportPort: 2 })), true);
  assert.equal(core.addRecord(intra({ sourceTransportPort: 3 })), false);
  assert.equal(core.addRecord(intra({ sourceTransportPort: 1, flowEndSeconds: 11 })), true);
  const s = core.stats();
  assert.equal(s.droppedMaxFlows, 1);
  assert.equal(s.recordsRejected.maxFlows, 1);
  assert.equal(core.flowCount, 2);
});

Deno.test("bad input is rejected and counted, never thrown", () => {
  const { core } = newCore();
  const noEnd = intra();
  delete noEnd.flowEndSeconds;
  assert.equal(core.addRecord(noEnd), false);
  assert.equal(
    // A counter is a bigint or, in wire-number mode, a safe non-negative integer.
    core.addRecord(intra({ octetTotalCount: 5.5 })),
    false,
  );
  assert.equal(core.addRecord(intra()), true);
  // Updates need all NonStats and Stats IEs (§3.3), and then do not refresh the queue.
  const noState = intra({ flowEndSeconds: 11 });
  delete noState.tcpState;
  const noDelta = intra({ flowEndSeconds: 11 });
  delete noDelta.packetDeltaCount;
  assert.equal(core.addRecord(noState), false);
  assert.equal(core.addRecord(noDelta), false);
  assert.equal(core.addRecord({} as FlowInput), false);
  const s = core.stats();
  assert.equal(s.recordsRejected.missingField, 3);
  assert.equal(s.recordsRejected.badFieldType, 1);
  assert.equal(s.recordsRejected.missingKeyField, 1);
  assert.equal(s.recordsAccepted, 1);
  assert.equal(one(core).flowEndSeconds, 10);
});

Deno.test("snapshots are own copies: later updates and resets do not change them", () => {
  const { core, clock } = newCore();
  core.addRecord(intra());
  const q = one(core);
  at(clock, 60_100);
  const c = collector();
  core.expire(c.emit);
  core.addRecord(intra({ flowEndSeconds: 20, ...counters(200n, 100n, 20_000n, 10_000n) }));
  assert.equal(q.octetDeltaCount, 10_000n);
  assert.equal(c.out[0].record.throughput, 8000n);
  assert.equal(one(core).octetDeltaCount, 10_000n);
  assert.equal(one(core).octetTotalCount, 20_000n);
});

Deno.test("reset zeroes exactly the 12 deltas and 6 throughputs (§3.6)", () => {
  const { core, clock } = newCore();
  core.addRecord(intra());
  at(clock, 60_100);
  core.expire(() => {});
  const r = one(core) as unknown as Record<string, unknown>;
  const zero = Object.keys(r).filter((k) => r[k] === 0n).sort();
  assert.equal(zero.length, 18);
  for (const k of zero) assert.match(k, /Delta|[tT]hroughput/);
  assert.equal(r.packetTotalCount, 100n);
  assert.equal(r.flowEndSecondsFromSourceNode, 10);
});

Deno.test("flushAll emits every flow (not-ready ones as uncorrelated) and empties the core", () => {
  const { core } = newCore();
  core.addRecord(intra());
  core.addRecord(s1({ sourceTransportPort: 7 }));
  const c = collector();
  assert.equal(core.flushAll(c.emit), 2);
  assert.deepEqual(c.out.map((f) => f.uncorrelated).sort(), [false, true]);
  assert.equal(core.flowCount, 0);
  assert.equal(core.queueLength, 0);
  assert.equal(core.expire(c.emit), 0);
  // The core is reusable afterwards.
  assert.equal(core.addRecord(intra()), true);
  assert.equal(one(core).octetTotalCount, 10_000n);
});

Deno.test("deleted flows free their slot; a reused slot starts from zero", () => {
  const { core, clock } = newCore();
  core.addRecord(intra({ sourceTransportPort: 1, ...counters(9n, 9n, 999n, 999n) }));
  at(clock, 90_100);
  core.expire(() => {});
  core.expire(() => {});
  assert.equal(core.flowCount, 0);
  const r = s1({ sourceTransportPort: 2 });
  core.addRecord(r);
  const got = one(core, { ...K4, sourcePort: 2 });
  assert.equal(got.octetTotalCountFromDestinationNode, 0n);
  assert.equal(got.flowEndSecondsFromDestinationNode, 0);
  assert.equal(got.octetTotalCount, 1000n);
});

Deno.test("counters: exports without new data (L9) and records/flows totals", () => {
  const { core, clock } = newCore();
  core.addRecord(intra());
  at(clock, 60_100);
  core.expire(() => {});
  at(clock, 90_100);
  core.expire(() => {});
  const s = core.stats();
  assert.equal(s.exported, 2);
  assert.equal(s.exportedWithoutNewData, 1);
  assert.equal(s.flowsCreated, 1);
  assert.equal(s.flowsDeleted, 1);
  assert.equal(s.flows, 0);
  assert.equal(s.recordsIn, 1);
});

Deno.test("improved: a throwing emit during flushAll is counted and the flush completes", () => {
  const { core } = newCore();
  core.addRecord(intra({ sourceTransportPort: 1 }));
  core.addRecord(intra({ sourceTransportPort: 2 }));
  const c = collector((f) => f.key.sourcePort === 1);
  assert.equal(core.flushAll(c.emit), 1);
  assert.equal(core.stats().emitErrors, 1);
  assert.equal(core.flowCount, 0);
});

Deno.test("setIncludePodLabels switches labels on for flows exported afterwards", () => {
  const { core, clock } = newCore();
  core.addRecord(intra({ sourcePodNamespace: "ns", destinationPodNamespace: "ns" }));
  const hooks = {
    lookupPod: (ip: string) =>
      ip === "10.0.0.1"
        ? { name: "pod1", namespace: "ns", nodeName: "n", labels: { a: "<b>" } }
        : undefined,
  };
  at(clock, 60_100);
  const c = collector();
  core.expire(c.emit, hooks);
  assert.equal(c.out[0].record.sourcePodLabels, undefined);
  core.setIncludePodLabels(true);
  at(clock, 90_100);
  core.expire(c.emit, hooks);
  // Go's json.Marshal escapes < and > (HTML-safe).
  assert.equal(c.out[1].record.sourcePodLabels, '{"a":"\\u003cb\\u003e"}');
});

Deno.test("wrongly typed fields never throw: rejected or read as 0, all counted", () => {
  const { core } = newCore();
  const asAny = (o: unknown): FlowInput => o as FlowInput;
  assert.equal(core.addRecord(asAny(null)), false);
  assert.equal(core.addRecord(asAny("x")), false);
  assert.equal(core.addRecord(intra({ sourceTransportPort: 70_000 })), false);
  assert.equal(core.addRecord(intra({ protocolIdentifier: -1 })), false);
  assert.equal(core.addRecord(intra({ flowEndSeconds: asAny(5n) as unknown as number })), false);
  // An IPv4 IE is dotted-quad text or, in wire-number mode, a u32.
  assert.equal(core.addRecord(asAny({ ...intra(), sourceIPv4Address: 2 ** 32 })), false);
  assert.equal(
    core.addRecord(asAny({ ...intra(), flowEndReason: 3n, destinationServicePort: "80" })),
    true,
  );
  assert.equal(one(core).flowEndReason, 0);
  assert.equal(one(core).destinationServicePort, 0);
  const s = core.stats();
  assert.equal(s.recordsIn, 7);
  assert.equal(s.recordsAccepted, 1);
  const rejected = Object.values(s.recordsRejected).reduce((a, b) => a + b, 0);
  assert.equal(rejected, 6);
});

Deno.test("E3: an InterNode record with both Pod names empty correlates with the next record", () => {
  const { core } = newCore();
  core.addRecord(s1({ sourcePodName: "" }));
  assert.equal(core.entryState(K4)!.readyToSend, false);
  // The next record from the same (source) Node still triggers correlation.
  core.addRecord(s1({ flowEndSeconds: 2 }));
  assert.equal(core.entryState(K4)!.readyToSend, true);
  assert.equal(one(core).sourcePodName, "pod1");
  assert.equal(core.stats().correlated, 1);
});

Deno.test("E4: a ready entry hit by a no-correlation record aggregates both sides, stays ready", () => {
  const { core } = newCore();
  core.addRecord(s1());
  core.addRecord(s1({ destinationPodName: "pod2", sourcePodName: "", flowEndSeconds: 1 }));
  assert.equal(core.entryState(K4)!.readyToSend, true);
  core.addRecord(
    s1({
      egressNetworkPolicyRuleAction: 2,
      flowEndSeconds: 5,
      ...counters(700n, 200n, 1800n, 800n),
    }),
  );
  const r = one(core);
  assert.equal(r.octetTotalCountFromSourceNode, 1800n);
  assert.equal(r.octetTotalCountFromDestinationNode, 1800n);
  assert.equal(r.egressNetworkPolicyRuleAction, 0); // correlated fields are never updated again
  assert.equal(core.entryState(K4)!.correlatedFieldsFilled, true);
});

Deno.test("earliestExpiryMs follows the queue top", () => {
  const { core, clock } = newCore();
  assert.equal(core.earliestExpiryMs, Infinity);
  at(clock, 500);
  core.addRecord(intra());
  assert.equal(core.earliestExpiryMs, 60_500);
});

Deno.test("fuzz: random records and sweeps keep the books balanced and never throw", () => {
  let seed = 12345;
  const rnd = (n: number): number => {
    seed = (seed * 1664525 + 1013904223) >>> 0;
    return seed % n;
  };
  // Room for 50 flows of short names, not for many long Node names: both limits are hit.
  const maxFlowBytes = 50 * FLOW_FIXED_BYTES + 4_000;
  const { core, clock } = newCore({
    maxFlows: 50,
    maxFlowBytes,
    activeTimeoutMs: 5000,
    inactiveTimeoutMs: 8000,
  });
  const pick = <T>(xs: T[]): T => xs[rnd(xs.length)];
  let emitted = 0;
  for (let i = 0; i < 5000; i++) {
    const r: Record<string, unknown> = {
      ...s1(),
      sourceTransportPort: rnd(80),
      flowType: pick([0, 1, 2, 2, 3, undefined]),
      sourcePodName: pick(["pod1", "", "pod1"]),
      destinationPodName: pick(["pod2", "", ""]),
      ingressNetworkPolicyRuleAction: pick([0, 2, 3]),
      egressNetworkPolicyRuleAction: pick([0, 0, 2]),
      flowEndSeconds: rnd(40),
      octetTotalCount: BigInt(rnd(5000)),
      octetDeltaCount: BigInt(rnd(100)),
    };
    if (rnd(20) === 0) delete r[pick(["protocolIdentifier", "tcpState", "flowEndSeconds"])];
    if (rnd(50) === 0) r.sourceIPv4Address = pick(["", "1.2.3", "::1", 7]);
    if (rnd(50) === 0) r.destinationIPv6Address = "2001:db8::1";
    if (rnd(40) === 0) r.sourceNodeName = pick([7, "node-" + "n".repeat(rnd(3000)), 12n]);
    core.addRecord(r as unknown as FlowInput);
    assert.ok(core.flowBytes <= maxFlowBytes);
    if (rnd(10) === 0) {
      clock.advance(rnd(3000));
      core.expire(() => {
        emitted++;
        if (rnd(7) === 0) throw new Error("sink down");
      }, { lookupPod: (ip) => rnd(2) ? { name: "p", namespace: "n", nodeName: ip } : undefined });
    }
    assert.equal(core.flowCount, core.queueLength);
  }
  // Every flow expired and deleted one by one gives back every string byte it was charged.
  for (let i = 0; i < 10 && core.flowCount > 0; i++) {
    clock.advance(10_000);
    core.expire(() => emitted++);
  }
  assert.equal(core.flowCount, 0);
  assert.equal(core.flowBytes, 0);
  core.flushAll(() => emitted++);
  const s = core.stats();
  const rejected = Object.values(s.recordsRejected).reduce((a, b) => a + b, 0);
  assert.equal(s.recordsIn, 5000);
  assert.equal(s.recordsAccepted + rejected, 5000);
  assert.equal(s.flowsCreated, s.flowsDeleted);
  assert.equal(s.exported + s.emitErrors, emitted);
  assert.equal(core.flowCount, 0);
  assert.ok(s.recordsRejected.maxFlows > 0 && s.correlated > 0 && s.exported > 0);
  assert.ok(s.recordsRejected.maxFlowBytes > 0);
  // No record needed the last-resort catch: every bad field was caught by a named check.
  assert.equal(s.recordsRejected.invalidRecord, 0);
});

Deno.test("expire with a limit handles at most that many due flows; the rest stay due", () => {
  const { core, clock } = newCore();
  for (let p = 1; p <= 25; p++) core.addRecord(intra({ sourceTransportPort: p }));
  assert.equal(core.hasExpired(), false);
  at(clock, 60_000);
  assert.equal(core.hasExpired(), true);
  const ports: number[] = [];
  const emit = (f: { key: { sourcePort: number } }): void => {
    ports.push(f.key.sourcePort);
  };
  assert.equal(core.expire(emit, { limit: 10 }), 10);
  assert.equal(core.hasExpired(), true);
  assert.equal(core.expire(emit, { limit: 10 }), 10);
  assert.equal(core.expire(emit, { limit: 10 }), 5);
  assert.equal(core.hasExpired(), false);
  assert.deepEqual([...ports].sort((a, b) => a - b), Array.from({ length: 25 }, (_, i) => i + 1));
  assert.equal(core.flowCount, 25, "active expiry re-queues, nothing deleted");
});
