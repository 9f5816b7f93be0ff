import assert from "node:assert/strict";
import { apiHandler, type ApiSource, recordsJson } from "../../src/api/mod.ts";
import { MAX_QUERIES_IN_FLIGHT } from "../../src/api/handler.ts";
import { prometheusText } from "../../src/api/prometheus.ts";
import parsePrometheus from "parse-prometheus-text-format";
import { type FlowAggregatorStats, statsFields } from "../../src/flow_aggregator.ts";
import { logSettings, setLogLevel } from "../../src/log.ts";
import { processStats } from "../../src/process_stats.ts";
import { newCore, s1 } from "../aggregation/fixtures.ts";
import { zeroStats as stats } from "../_helpers/stats.ts";

const TOKEN = "test-token";

function setup(s: FlowAggregatorStats = stats()) {
  const { core } = newCore();
  assert.equal(core.addRecord(s1({ octetTotalCount: 2n ** 63n + 7n })), true);
  assert.equal(
    core.addRecord(s1({ sourceIPv4Address: "10.0.0.9", sourceTransportPort: 999 })),
    true,
  );
  let ready = true;
  const source: ApiSource = {
    records: (f, limit) => recordsJson(core.query(f, limit)),
    stats: () => s,
    ready: () => ready,
  };
  const h = apiHandler(source, { token: TOKEN, version: "0.1.0", recordLimit: 5 });
  const get = (path: string, token: string | null = TOKEN) =>
    h(
      new Request(`https://127.0.0.1:10348${path}`, {
        headers: token === null ? {} : { authorization: `Bearer ${token}` },
      }),
    );
  return { get, h, setReady: (r: boolean) => (ready = r) };
}

Deno.test("api: health checks are anonymous; everything else needs the loopback token", async () => {
  const { get, h, setReady } = setup();
  for (const p of ["/healthz", "/livez", "/readyz"]) {
    const r = await get(p, null);
    assert.equal(r.status, 200);
    assert.equal(await r.text(), "ok");
  }
  setReady(false);
  assert.equal((await get("/readyz", null)).status, 503);
  const anon = await get("/recordmetrics", null);
  assert.equal(anon.status, 403);
  const body = await anon.json();
  assert.equal(body.kind, "Status");
  assert.equal(body.reason, "Forbidden");
  const bad = await get("/recordmetrics", "wrong");
  assert.equal(bad.status, 401);
  const text = await bad.text();
  assert.ok(!text.includes(TOKEN) && !text.includes("wrong"), "no token in a response");
  assert.equal((await get("/nope")).status, 404);
  // The scheme in any case, as the Kubernetes API server takes it (lowercase was refused, 401).
  const lower = await h(
    new Request("https://127.0.0.1:10348/recordmetrics", {
      headers: { authorization: `bearer ${TOKEN}` },
    }),
  );
  assert.equal(lower.status, 200);
});

Deno.test("api: /flowrecords filters by the 5-tuple, keeps u64 exact, answers null when empty", async () => {
  const { get } = setup();
  const all = await (await get("/flowrecords")).text();
  assert.equal(JSON.parse(all).length, 2);
  const one = await (await get("/flowrecords?srcip=10.0.0.9&srcport=999&proto=6")).text();
  const recs = JSON.parse(one);
  assert.equal(recs.length, 1);
  assert.equal(recs[0].sourceIPv4Address, "10.0.0.9");
  // The other record's 2^63 + 7 is written as digits, exactly.
  assert.match(all, /"octetTotalCount":9223372036854775815/);
  assert.equal(await (await get("/flowrecords?srcip=10.9.9.9")).text(), "null\n");
  const bad = await get("/flowrecords?proto=300");
  assert.equal(bad.status, 400);
  assert.equal(
    await bad.text(),
    'Error when parsing protocol: strconv.ParseUint: parsing "300": value out of range',
  );
  const bad2 = await get("/flowrecords?srcport=abc");
  assert.match(await bad2.text(), /^Error when parsing source port: .*invalid syntax$/);
  assert.equal(JSON.parse(await (await get("/flowrecords?limit=1")).text()).length, 1);
  assert.equal((await get("/flowrecords?limit=0")).status, 400);
  for (const bad of ["0x2", "2e0", "%20%202", "-1", "1.5"]) {
    assert.equal((await get(`/flowrecords?limit=${bad}`)).status, 400, bad);
  }
});

Deno.test("api: /recordmetrics omits zeros and says which sinks run", async () => {
  const { get: empty } = setup();
  assert.equal(await (await empty("/recordmetrics")).text(), "{}\n");
  const { get } = setup(stats({
    numRecordsReceived: 10,
    numRecordsExported: 4,
    numFlows: 2,
    exporters: {
      flowLogger: { exported: 4, dropped: 1, errors: 0 },
    } as unknown as FlowAggregatorStats["exporters"],
  }));
  assert.deepEqual(await (await get("/recordmetrics")).json(), {
    numRecordsExported: 4,
    numRecordsReceived: 10,
    numFlows: 2,
    numRecordsDropped: 1,
    withLogExporter: true,
  });
});

Deno.test("api: /loglevel reads and sets the verbosity; /version is antctl's shape", async () => {
  const { get } = setup();
  const before = logSettings().level;
  try {
    setLogLevel("info");
    assert.equal(await (await get("/loglevel")).text(), "0\n");
    assert.equal((await get("/loglevel?level=4")).status, 200);
    assert.equal(logSettings().level, "debug");
    assert.equal(await (await get("/loglevel")).text(), "4\n");
    const bad = await get("/loglevel?level=-1");
    assert.equal(bad.status, 400);
    assert.equal(await bad.text(), "log level must be a positive integer");
    // The number set is read back (was 4 for any level above 0); debug lines from 4 on.
    assert.equal((await get("/loglevel?level=2")).status, 200);
    assert.equal(await (await get("/loglevel")).text(), "2\n");
    assert.equal(logSettings().level, "info");
    assert.equal((await get("/loglevel?level=7")).status, 200);
    assert.equal(await (await get("/loglevel")).text(), "7\n");
    assert.equal(logSettings().level, "debug");
    // klog's verbosity is an int32 (was taken, and logged as 1e+23).
    assert.equal((await get("/loglevel?level=99999999999999999999999")).status, 400);
    assert.equal(await (await get("/loglevel")).text(), "7\n");
  } finally {
    setLogLevel(before);
  }
  const v = await (await get("/version")).json();
  assert.equal(v.gitVersion, "0.1.0");
  assert.equal(v.major, "0");
  assert.equal(v.minor, "1");
});

Deno.test("api: /metrics is Prometheus text with the ledger identity and per-sink labels", async () => {
  const s = stats({
    numRecordsReceived: 14,
    nonFlowRecords: 1,
    optionsRecordsIgnored: 1,
    recordsInFlight: 2,
    exporters: {
      flowLogger: { received: 9, exported: 7, dropped: 1, buffered: 1, errors: 0 },
    } as unknown as FlowAggregatorStats["exporters"],
    process: processStats(),
  });
  s.aggregation.recordsAccepted = 9;
  s.aggregation.recordsRejected.maxFlows = 1;
  const text = prometheusText(s);
  const { get } = setup(s);
  assert.equal(await (await get("/metrics")).text(), text);
  // Read back by a real Prometheus text parser.
  const families = parsePrometheus(text) as {
    name: string;
    metrics: { value: string; labels?: Record<string, string> }[];
  }[];
  const names = families.map((f) => f.name);
  assert.equal(new Set(names).size, names.length, "each metric family once");
  const value = (name: string, labels: Record<string, string> = {}) => {
    const m = families.find((f) => f.name === name)?.metrics.find((x) =>
      Object.entries(labels).every(([k, v]) => x.labels?.[k] === v)
    );
    assert.ok(m, `${name} ${JSON.stringify(labels)}`);
    return Number(m.value);
  };
  const stage = (s: string) => value("flow_aggregator_ledger_records", { stage: s });
  assert.equal(stage("received"), 14);
  assert.equal(stage("in_flight"), 2);
  assert.equal(
    stage("received"),
    stage("aggregated") + stage("rejected") + stage("non_flow") + stage("options") +
      stage("in_flight"),
  );
  const sink = (k: string) => value(`flow_aggregator_sink_${k}`, { sink: "flowLogger" });
  assert.equal(sink("received"), sink("exported") + sink("dropped") + sink("buffered"));
  assert.equal(value("flow_aggregator_aggregation_records_accepted"), 9); // The process's resource use under the standard names.
  assert.equal(value("process_resident_memory_bytes"), s.process!.residentMemoryBytes);
  assert.equal(value("process_cpu_seconds_total"), s.process!.cpuSecondsTotal);
  assert.equal(value("process_start_time_seconds"), s.process!.startTimeSeconds);
  assert.equal(value("process_max_resident_memory_bytes"), s.process!.maxResidentMemoryBytes);
  assert.ok(!names.some((n) => n.startsWith("flow_aggregator_process")), names.join(","));
});

Deno.test("api: /metrics has each thread's V8 memory, labelled by thread; the metrics line their sums", () => {
  const m = (used: number) => ({
    heapUsedBytes: used,
    heapTotalBytes: used * 2,
    externalMemoryBytes: used + 1,
  });
  const s = stats({ threads: { main: m(100), shard0: m(20), flowLogger: m(3) } });
  const families = parsePrometheus(prometheusText(s)) as {
    name: string;
    metrics: { value: string; labels?: Record<string, string> }[];
  }[];
  const family = (name: string) =>
    (families.find((f) => f.name === name)?.metrics ?? []).map((x) => [
      x.labels?.thread,
      Number(x.value),
    ]);
  assert.deepEqual(family("flow_aggregator_thread_heap_used_bytes"), [
    ["main", 100],
    ["shard0", 20],
    ["flowLogger", 3],
  ]);
  assert.deepEqual(family("flow_aggregator_thread_heap_total_bytes").map(([, v]) => v), [
    200,
    40,
    6,
  ]);
  assert.deepEqual(family("flow_aggregator_thread_external_memory_bytes").map(([, v]) => v), [
    101,
    21,
    4,
  ]);
  // The sums are the log line's only: no unlabelled twin of the same figures here.
  assert.ok(!families.some((f) => f.name.startsWith("flow_aggregator_threads")));
  const fields = statsFields(s);
  assert.equal(fields["threads.heapUsedBytes"], 123);
  assert.equal(fields["threads.heapTotalBytes"], 246);
  assert.equal(fields["threads.externalMemoryBytes"], 126);
});

Deno.test("api: /metrics has the UDP receive path's sockets and their datagrams", () => {
  const udpReceiver = {
    mode: "ffi",
    kernelDrops: 3,
    kernelDropsKnown: true,
    queueDrops: 0,
    oversized: 0,
    recvBufferBytes: 212992,
    sockets: 2,
    socketDatagrams: [40, 2],
  };
  const s = stats({
    collector: { exporters: {}, udpReceiver } as unknown as FlowAggregatorStats["collector"],
  });
  const families = parsePrometheus(prometheusText(s)) as {
    name: string;
    metrics: { value: string; labels?: Record<string, string> }[];
  }[];
  const family = (name: string) => families.find((f) => f.name === name)?.metrics ?? [];
  assert.deepEqual(family("flow_aggregator_udp_sockets").map((m) => m.value), ["2"]);
  assert.deepEqual(family("flow_aggregator_udp_kernel_drops").map((m) => m.value), ["3"]);
  assert.deepEqual(
    family("flow_aggregator_udp_socket_datagrams").map((m) => [m.labels?.socket, m.value]),
    [["0", "40"], ["1", "2"]],
  );
  assert.deepEqual(family("flow_aggregator_udp_kernel_drops_known").map((m) => m.value), ["1"]);
  // Drops that cannot be read (the socket path without /proc): no false 0, and a gauge says so.
  const blind = parsePrometheus(prometheusText(stats({
    collector: {
      exporters: {},
      udpReceiver: { ...udpReceiver, kernelDrops: 0, kernelDropsKnown: false },
    } as unknown as FlowAggregatorStats["collector"],
  }))) as { name: string; metrics: { value: string }[] }[];
  const blindFamily = (name: string) => blind.find((f) => f.name === name)?.metrics ?? [];
  assert.deepEqual(blindFamily("flow_aggregator_udp_kernel_drops"), []);
  assert.deepEqual(blindFamily("flow_aggregator_udp_kernel_drops_known").map((m) => m.value), [
    "0",
  ]);
  // Without a UDP collector, no socket series.
  assert.equal(prometheusText(stats()).includes("udp_socket_datagrams"), false);
  assert.equal(prometheusText(stats()).includes("kernel_drops_known"), false);
});

Deno.test("api: recordsJson writes bigint digits and null for no records", () => {
  assert.equal(recordsJson([]), "null");
  assert.equal(
    recordsJson([{ octetTotalCount: 2n ** 64n - 1n } as never]),
    '[{"octetTotalCount":18446744073709551615}]',
  );
});

// Concurrent /flowrecords answered by the shards had no cap: each gathers up to `limit` records
// from every shard (found by review: 64 such requests, 4 GB of RSS and ingest stalled).
Deno.test("api: flow record queries answered by the shards are capped in flight, refusals reported", async () => {
  const pending: (() => void)[] = [];
  const source: ApiSource = {
    records: () => new Promise((resolve) => pending.push(() => resolve("null"))),
    stats: () => stats(),
    ready: () => true,
  };
  const busy: string[] = [];
  const h = apiHandler(source, {
    token: TOKEN,
    version: "0.1.0",
    onBusy: (reason) => busy.push(reason),
  });
  const get = () =>
    Promise.resolve(h(
      new Request("https://127.0.0.1:10348/flowrecords", {
        headers: { authorization: `Bearer ${TOKEN}` },
      }),
    ));
  const first = [];
  for (let i = 0; i < MAX_QUERIES_IN_FLIGHT; i++) first.push(get());
  const refused = await get();
  assert.equal(refused.status, 503);
  assert.deepEqual(busy, ["queries"]);
  for (const done of pending.splice(0)) done();
  for (const r of await Promise.all(first)) assert.equal(r.status, 200);
  // Answered: their places are free again.
  const again = get();
  pending.splice(0).forEach((done) => done());
  assert.equal((await again).status, 200);
  assert.deepEqual(busy, ["queries"]);
});
