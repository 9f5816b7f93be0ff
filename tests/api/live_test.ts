import assert from "node:assert/strict";
import {
  HISTORY_SECONDS,
  LiveHub,
  LiveView,
  MAX_STREAMS,
  ROWS_PER_SECOND,
} from "../../src/api/live.ts";
import type { ExportedFlow } from "../../src/aggregation/record.ts";
import { fixtureFlow } from "../exporters/fixtures.ts";
import { BatchWriter, openBatch } from "../../src/exporters/batch.ts";
import { waitFor } from "../_helpers/wait.ts";
import { ManualClock } from "../../src/clock.ts";
import { WallStepClock } from "../_helpers/wall_step_clock.ts";

function flow(i: number, over: Record<string, unknown> = {}): ExportedFlow {
  const f = fixtureFlow(false);
  return {
    ...f,
    key: { ...f.key, sourcePort: i },
    record: {
      ...f.record,
      sourcePodName: `pod-${i % 3}`,
      octetDeltaCount: 100n,
      reverseOctetDeltaCount: 0n,
      ingressNetworkPolicyRuleAction: 1,
      egressNetworkPolicyRuleAction: 0,
      ...over,
    } as ExportedFlow["record"],
  };
}

Deno.test("live view: rows are sampled to a bounded number per second; throughput counts all", () => {
  const clock = new ManualClock(1_000_000);
  const v = new LiveView(clock);
  for (let i = 0; i < 1000; i++) v.observe(flow(i));
  const s = v.summary({ received: 1 });
  assert.equal(s.rows.length, ROWS_PER_SECOND);
  assert.equal(s.seen, 1000);
  assert.deepEqual(s.throughput, [[1000, 100_000, 1000]]);
  assert.equal(v.summary({}).rows.length, 0, "rows are handed out once");
  clock.advance(1000);
  v.observe(flow(1));
  assert.equal(v.summary({}).rows.length, 1, "a new second samples again");
  // Top talkers by bytes over the window: pod-0 got 334 flows of 1000.
  const top = v.summary({}).top.sourcePod;
  assert.deepEqual(top[0][0].endsWith("/pod-0") || top[0][0].endsWith("/pod-1"), true);
  assert.equal(top.reduce((n, [, b]) => n + b, 0), 100_100);
});

Deno.test("live view: denied flows are kept (newest first) even beyond the row sample", () => {
  const v = new LiveView(new ManualClock(5_000));
  for (let i = 0; i < 200; i++) v.observe(flow(i));
  v.observe(flow(999, { egressNetworkPolicyRuleAction: 2 }));
  v.observe(flow(998, { ingressNetworkPolicyRuleAction: 3 }));
  const s = v.summary({});
  assert.deepEqual(s.denied.map((r) => [r.sport, r.action]), [[998, "reject"], [999, "drop"]]);
  // A malformed record never throws into the export loop.
  v.observe({ key: undefined } as unknown as ExportedFlow);
});

Deno.test("live view: a flow exported without address text shows the addresses of its words", () => {
  const v = new LiveView(new ManualClock(7_000));
  const words = new Uint32Array([9, 9, 0x0a000001, 0, 0, 0, 0x0a090807, 0, 0, 0]);
  const f = flow(1);
  v.observe({
    ...f,
    key: { ...f.key, sourceAddress: "", destinationAddress: "" },
    addressWords: words,
    addressAt: 2,
  });
  const six = new Uint32Array([0x20010db8, 0, 0, 1, 0, 0, 0xffff, 0x0a000002]);
  v.observe({
    ...f,
    key: { ...f.key, sourceAddress: "", destinationAddress: "" },
    isIPv6: true,
    addressWords: six,
    addressAt: 0,
  });
  const rows = v.summary({}).rows;
  assert.deepEqual(rows.map((r) => [r.src, r.dst]), [
    ["10.0.0.1", "10.9.8.7"],
    ["2001:db8::1", "10.0.0.2"],
  ]);
});

Deno.test("live hub: one summary per period to every page; at most MAX_STREAMS pages", async () => {
  const v = new LiveView();
  v.observe(flow(1));
  const hub = new LiveHub(v, () => ({ received: 7 }), 20);
  const streams = Array.from({ length: MAX_STREAMS }, () => hub.open());
  assert.ok(streams.every((s) => s !== undefined));
  assert.equal(hub.open(), undefined, "one page too many");
  const reader = streams[0]!.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("data: ")) text += (await reader.read()).value ?? "";
  while (!/data: .*\n\n/.test(text)) text += (await reader.read()).value ?? "";
  const data = JSON.parse(/data: (.*)\n\n/.exec(text)![1]);
  assert.deepEqual(data.ledger, { received: 7 });
  await reader.cancel();
  for (const s of streams.slice(1)) await s!.cancel();
  assert.equal(hub.streams, 0);
  hub.close();
});

Deno.test("live view: a batch read in place gives the summary its flows give one by one", () => {
  const flows = [
    // Names that repeat across rows in different combinations: the batch counts them by index.
    ...Array.from({ length: 120 }, (_, i) =>
      flow(i, {
        sourcePodNamespace: `ns-${i % 2}`,
        destinationPodName: `dst-${i % 5}`,
        destinationServicePortName: i % 7 === 0 ? "" : `ns/svc-${i % 3}:http`,
      })),
    flow(999, { egressNetworkPolicyRuleAction: 2, destinationServicePortName: "ns/svc:http" }),
    flow(998, { ingressNetworkPolicyRuleAction: 3, sourcePodName: "", sourceNodeName: "" }),
    fixtureFlow(true),
  ];
  const w = new BatchWriter(flows.length);
  for (const f of flows) w.add(f);
  const batch = openBatch(w.finish());
  const one = new LiveView(new ManualClock(9_000));
  const all = new LiveView(new ManualClock(9_000));
  for (const f of flows) one.observe(f);
  all.observeBatch(batch);
  const a = one.summary({});
  const b = all.summary({});
  assert.equal(b.seen, flows.length);
  assert.ok(b.denied.length >= 2, "the denied flows are kept");
  assert.equal(b.rows.length, ROWS_PER_SECOND);
  assert.deepEqual(b, a);
  // 6 namespace/name pairs, the IPv6 fixture's and flow 999's (the fixture's namespace).
  assert.equal(b.top.sourcePod.length, 8);
  assert.deepEqual(b.top.sourcePod.slice(1, 7).map(([, n]) => n), Array(6).fill(2000));
  // 3 Services, the fixture's and flow 999's.
  assert.equal(b.top.service.length, 5);
});

Deno.test("live view: names beyond the per-window limit are counted as (other)", () => {
  const v = new LiveView(new ManualClock(11_000));
  // 10,000 Pods of one namespace get a name each; the next 5 share "(other)".
  for (let i = 0; i < 10_005; i++) v.observe(flow(i, { sourcePodName: `p-${i}` }));
  const top = v.summary({}).top.sourcePod;
  assert.deepEqual(top[0], ["(other)", 500]);
  assert.deepEqual(top[1], ["antrea-test/p-0", 100]);
});

Deno.test("live view: a batch of many denied flows lists the newest as flows one by one do", () => {
  const flows = Array.from(
    { length: 300 },
    (_, i) => flow(i, { ingressNetworkPolicyRuleAction: i % 3 === 0 ? 2 : 1 }),
  );
  const w = new BatchWriter(flows.length);
  for (const f of flows) w.add(f);
  const one = new LiveView(new ManualClock(13_000));
  const all = new LiveView(new ManualClock(13_000));
  for (const f of flows) one.observe(f);
  all.observeBatch(openBatch(w.finish()));
  const b = all.summary({});
  assert.equal(b.denied[0].sport, 297, "newest first");
  assert.equal(b.denied.length, 50);
  assert.deepEqual(b, one.summary({}));
});

Deno.test("live view: batch after batch, hundreds of names, the in-place tally matches one by one", () => {
  // More names than the tally's first arrays (256), a Pod name in two namespaces, and a second
  // batch whose string table numbers the same names differently: nothing is left over between
  // batches, nothing is lost growing.
  const make = (n: number, shift: number) =>
    Array.from({ length: n }, (_, i) =>
      flow(i + shift, {
        sourcePodNamespace: `ns-${(i + shift) % 2}`,
        sourcePodName: `p-${(i * 7 + shift) % 400}`,
        destinationPodName: `d-${i % 300}`,
        octetDeltaCount: BigInt(1 + (i % 13)),
      }));
  // And one Pod name in 300 namespaces: entries that differ by their namespace alone.
  const samePod = Array.from(
    { length: 300 },
    (_, i) => flow(2000 + i, { sourcePodNamespace: `team-${i}`, sourcePodName: "api-0" }),
  );
  const batches = [make(700, 0), make(500, 3), samePod];
  const one = new LiveView(new ManualClock(15_000));
  const all = new LiveView(new ManualClock(15_000));
  for (const flows of batches) {
    for (const f of flows) one.observe(f);
    const w = new BatchWriter(flows.length);
    for (const f of flows) w.add(f);
    all.observeBatch(openBatch(w.finish()));
  }
  const a = one.summary({});
  const b = all.summary({});
  assert.equal(b.seen, 1500);
  assert.deepEqual(b, a);
  assert.equal(b.top.sourcePod.length, 10, "the top 10 of several hundred");
});

// A dropped page was neither counted nor logged (found by review).
Deno.test("live hub: a page that does not read is dropped, its place freed, and its opener told", async () => {
  const hub = new LiveHub(new LiveView(), () => ({ received: 7 }), 5);
  let dropped = 0;
  const stream = hub.open(() => dropped++);
  assert.ok(stream !== undefined);
  // Never read: its queue grows one summary per period until the hub gives up on it.
  await waitFor(() => dropped === 1, { what: "the page dropped" });
  assert.equal(hub.streams, 0, "its place freed");
  const next = hub.open(() => dropped++);
  assert.ok(next !== undefined);
  await next.cancel();
  assert.equal(dropped, 1, "a page that leaves is not counted as dropped");
  hub.close();
});

/** A flow of 100 bytes a second for `seconds` seconds of `clock`. */
function flowPerSecond(view: LiveView, clock: WallStepClock, seconds: number): void {
  for (let s = 0; s < seconds; s++) {
    view.observe(flow(s));
    clock.advance(1000);
  }
}

// On the wall clock, a step back stopped the trimming (measured: 2,100 points 30 min later).
Deno.test("live view: after the wall clock steps back, the history keeps its length, labelled by the wall clock", () => {
  const clock = new WallStepClock(1_700_000_000_000);
  const v = new LiveView(clock);
  flowPerSecond(v, clock, 600);
  clock.stepWall(-3_600_000);
  flowPerSecond(v, clock, 1800);
  const tp = v.summary({}).throughput;
  assert.equal(tp.length, HISTORY_SECONDS);
  // The seconds count up one by one and end at the wall clock's second of the last flow.
  const lastFlowSecond = Math.floor((clock.wallMs() - 1000) / 1000);
  assert.deepEqual(
    tp.map(([s]) => s),
    Array.from({ length: HISTORY_SECONDS }, (_, i) => lastFlowSecond - HISTORY_SECONDS + 1 + i),
  );
  assert.ok(tp.every(([, bytes, flows]) => bytes === 100 && flows === 1));
});

Deno.test("live view: a step of the wall clock moves the labels of the history as a whole", () => {
  const clock = new WallStepClock(1_700_000_000_000);
  const v = new LiveView(clock);
  flowPerSecond(v, clock, 10);
  assert.deepEqual(v.summary({}).throughput.map(([s]) => s - 1_700_000_000), [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
  ]);
  clock.stepWall(-3_600_000);
  assert.deepEqual(v.summary({}).throughput.map(([s]) => s - 1_700_000_000 + 3600), [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    9,
  ]);
});

// On the wall clock, a step back froze the window (measured: 30 min of bytes in "the last minute").
Deno.test("live view: after the wall clock steps back, the top talkers still cover one to two minutes", () => {
  const clock = new WallStepClock(1_700_000_000_000);
  const v = new LiveView(clock);
  flowPerSecond(v, clock, 600);
  clock.stepWall(-3_600_000);
  flowPerSecond(v, clock, 1800);
  // Three Pods share the flows (pod-0, pod-1, pod-2), 100 bytes a second in all.
  const total = v.summary({}).top.sourcePod.reduce((n, [, b]) => n + b, 0);
  assert.ok(total >= 60 * 100 && total <= 120 * 100, `${total} bytes`);
});
