/**
 * Unit tests of the export loop (src/flow_aggregator.ts), in process: a ManualClock drives
 * expiry, `manualSweep` replaces the timer, and fake exporters record what they are handed.
 */

import assert from "node:assert/strict";
import { fieldsFor } from "../src/ipfix/mod.ts";
import { AGENT_IPV4_FIELDS } from "../src/record/schema.ts";
import type { ExportedFlow } from "../src/aggregation/record.ts";
import { exportedAddress } from "../src/aggregation/flow_key.ts";
import { ManualClock } from "../src/clock.ts";
import { diffConfig, type FlowAggregatorConfig, parseConfig } from "../src/components.ts";
import type { Exporter, ExporterStats } from "../src/exporters/exporter.ts";
import {
  componentExporterFactory,
  type ExporterFactory,
  type ExporterSection,
  FlowAggregator,
  QUERY_PAGE_RECORDS,
} from "../src/flow_aggregator.ts";
import { IpfixExporter } from "../src/exporters/ipfix/exporter.ts";
import { setLogLevel, setLogWriter } from "../src/log.ts";
import { SimAgent } from "./integration/helpers/agent.ts";
import { intraNodeRecord, NODES } from "./integration/helpers/scenarios.ts";
import { agentRecord } from "./_helpers/agent_record.ts";
import { pollUntil } from "./_helpers/wait.ts";
import { recordsJson } from "../src/aggregation/records_json.ts";

const logLines: string[] = [];
setLogWriter((l) => logLines.push(l));

/** A fake exporter; every call is appended to the shared `journal`. */
class FakeExporter implements Exporter {
  readonly name: string;
  readonly section: ExporterSection;
  readonly config: FlowAggregatorConfig;
  readonly records: ExportedFlow[] = [];
  /** Addresses of each record as `exportedAddress` gives them during `addRecord`. */
  readonly addresses: string[] = [];
  addressWordsOnly = false;
  throwOnAdd = false;
  failStart = false;
  starts = 0;
  stops = 0;
  readonly #journal: string[];

  constructor(section: ExporterSection, config: FlowAggregatorConfig, journal: string[]) {
    this.section = section;
    this.name = `fake-${section}`;
    this.config = config;
    this.#journal = journal;
  }
  start(): Promise<void> {
    this.starts++;
    this.#journal.push(`start ${this.section}`);
    return this.failStart ? Promise.reject(new Error("cannot start")) : Promise.resolve();
  }
  stop(): Promise<void> {
    this.stops++;
    this.#journal.push(`stop ${this.section}`);
    return Promise.resolve();
  }
  addRecord(flow: ExportedFlow): void {
    this.#journal.push(`add ${this.section} ${flow.key.sourcePort}`);
    if (this.throwOnAdd) throw new Error(`${this.section} is broken`);
    this.records.push(flow);
    this.addresses.push(`${exportedAddress(flow, false)}>${exportedAddress(flow, true)}`);
  }
  stats(): ExporterStats {
    return { received: this.records.length, exported: 0, dropped: 0, errors: 0 };
  }
}

interface Harness {
  fa: FlowAggregator;
  clock: ManualClock;
  created: FakeExporter[];
  journal: string[];
  /** The most recently created exporter of `section`. */
  latest(section: ExporterSection): FakeExporter;
}

function config(opts: {
  active?: string;
  inactive?: string;
  collector?: boolean;
  collectorAddress?: string;
  logger?: boolean;
  transport?: string;
  podLabels?: boolean;
  maxFlowBytes?: number;
  prettyPrint?: boolean;
} = {}): FlowAggregatorConfig {
  return parseConfig(`activeFlowRecordTimeout: ${opts.active ?? "10s"}
recordContents:
  podLabels: ${opts.podLabels ?? false}
inactiveFlowRecordTimeout: ${opts.inactive ?? "20s"}
aggregatorTransportProtocol: ${opts.transport ?? "TCP"}
flowCollector:
  enable: ${opts.collector ?? false}
  address: ${opts.collectorAddress ?? "127.0.0.1:4739:tcp"}
flowLogger:
  enable: ${opts.logger ?? true}
  path: /nonexistent/never-written.log
  prettyPrint: ${opts.prettyPrint ?? true}
${opts.maxFlowBytes === undefined ? "" : `limits:\n  maxFlowBytes: ${opts.maxFlowBytes}\n`}`);
}

async function harness(
  cfg: FlowAggregatorConfig,
  tweak: (e: FakeExporter) => void = () => {},
  factoryOverride?: ExporterFactory,
): Promise<Harness> {
  const clock = new ManualClock();
  const created: FakeExporter[] = [];
  const journal: string[] = [];
  const factory: ExporterFactory = factoryOverride ?? ((section, c) => {
    const e = new FakeExporter(section, c, journal);
    tweak(e);
    created.push(e);
    return e;
  });
  const fa = new FlowAggregator(cfg, {
    clock,
    manualSweep: true,
    listenAddress: "127.0.0.1:0",
    exporterFactory: factory,
    metricsLogIntervalMs: 0,
  });
  await fa.start();
  return {
    fa,
    clock,
    created,
    journal,
    latest: (s) => created.filter((e) => e.section === s).at(-1)!,
  };
}

async function update(h: Harness, next: FlowAggregatorConfig): Promise<void> {
  await h.fa.update(next, diffConfig(h.fa.config, next));
}

Deno.test("flow aggregator: a throwing exporter does not cost the other exporters the record", async () => {
  const h = await harness(config({ collector: true }), (e) => {
    e.throwOnAdd = e.section === "flowCollector";
  });
  try {
    h.fa.ingest([intraNodeRecord(1001)]);
    h.clock.advance(10_000);
    assert.equal(h.fa.sweep(), 1);
    assert.equal(h.latest("flowLogger").records.length, 1);
    assert.equal(h.latest("flowLogger").records[0].key.sourcePort, 1001);
    assert.deepEqual(h.journal.filter((j) => j.startsWith("add")), [
      "add flowCollector 1001",
      "add flowLogger 1001",
    ]);
    const s = h.fa.stats();
    assert.equal(s.exporterErrors, 1);
    assert.equal(s.numRecordsExported, 1);
    assert.ok(logLines.some((l) => l.includes("exporter rejected a record")));
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: address text is formatted only when a sink reads it", async () => {
  for (const wordsOnly of [["flowLogger"], ["flowLogger", "flowCollector"]]) {
    const h = await harness(config({ collector: true }), (e) => {
      e.addressWordsOnly = wordsOnly.includes(e.section);
    });
    const observed: string[] = [];
    h.fa.exportObserver = { observe: (f) => observed.push(exportedAddress(f, false)) };
    try {
      h.fa.ingest([intraNodeRecord(1003)]);
      h.clock.advance(10_000);
      assert.equal(h.fa.sweep(), 1);
      const text = wordsOnly.length === 1 ? "10.10.0.100" : "";
      for (const s of ["flowLogger", "flowCollector"] as const) {
        const e = h.latest(s);
        assert.equal(e.records[0].key.sourceAddress, text, `${wordsOnly}: ${s}`);
        assert.equal(e.records[0].record.sourceIPv4Address, text);
        assert.deepEqual(e.addresses, ["10.10.0.100>10.10.0.101"]);
      }
      assert.deepEqual(observed, ["10.10.0.100"]);
    } finally {
      await h.fa.stop();
    }
  }
});

Deno.test("flow aggregator: each exported record is an own copy with the deltas of its period", async () => {
  const h = await harness(config({ collector: true }));
  try {
    h.fa.ingest([intraNodeRecord(1002)]);
    h.clock.advance(10_000);
    h.fa.sweep();
    const [a, b] = [h.latest("flowCollector").records[0], h.latest("flowLogger").records[0]];
    assert.equal(a.record.octetDeltaCount, 1000n);
    assert.equal(b.record.octetDeltaCount, 1000n);
    // The reset after the export must not reach the copies the exporters hold.
    h.clock.advance(10_000);
    h.fa.sweep();
    assert.equal(a.record.octetDeltaCount, 1000n);
    assert.equal(h.latest("flowLogger").records[1].record.octetDeltaCount, 0n);
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: config updates enable, disable and replace exporters", async () => {
  const h = await harness(config({ collector: false }));
  try {
    assert.deepEqual(h.created.map((e) => e.section), ["flowLogger"]);
    const logger = h.latest("flowLogger");

    await update(h, config({ collector: true }));
    const ipfix = h.latest("flowCollector");
    assert.equal(ipfix.starts, 1);
    h.fa.ingest([intraNodeRecord(2001)]);
    h.clock.advance(10_000);
    h.fa.sweep();
    assert.equal(ipfix.records.length, 1);
    assert.equal(logger.records.length, 1);

    await update(h, config({ collector: true, logger: false }));
    assert.equal(logger.stops, 1);
    h.fa.ingest([intraNodeRecord(2002)]);
    h.clock.advance(10_000);
    h.fa.sweep();
    assert.equal(logger.records.length, 1, "a disabled exporter gets nothing");
    assert.ok(ipfix.records.some((r) => r.key.sourcePort === 2002));
    assert.deepEqual(Object.keys(h.fa.stats().exporters), ["flowCollector"]);

    // A changed address replaces the IPFIX exporter: the old one is stopped, the new one gets
    // the new configuration and the next records.
    await update(
      h,
      config({ collector: true, logger: false, collectorAddress: "127.0.0.2:4740:udp" }),
    );
    const ipfix2 = h.latest("flowCollector");
    assert.notEqual(ipfix2, ipfix);
    assert.equal(ipfix.stops, 1);
    assert.equal(ipfix2.config.flowCollector.address, "127.0.0.2:4740:udp");
    const before = ipfix.records.length;
    h.fa.ingest([intraNodeRecord(2003)]);
    h.clock.advance(10_000);
    h.fa.sweep();
    assert.equal(ipfix.records.length, before);
    assert.ok(ipfix2.records.some((r) => r.key.sourcePort === 2003));
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: records reach exporters in the fixed order IPFIX then log, also after a re-enable", async () => {
  const h = await harness(config({ collector: true }));
  try {
    await update(h, config({ collector: false }));
    await update(h, config({ collector: true }));
    h.journal.length = 0;
    h.fa.ingest([intraNodeRecord(3001)]);
    h.clock.advance(10_000);
    h.fa.sweep();
    assert.deepEqual(h.journal, ["add flowCollector 3001", "add flowLogger 3001"]);
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: new timeouts apply live", async () => {
  const h = await harness(config({ active: "60s", inactive: "90s" }));
  try {
    await update(h, config({ active: "5s", inactive: "7s" }));
    h.fa.ingest([intraNodeRecord(4001)]);
    h.clock.advance(4_999);
    assert.equal(h.fa.sweep(), 0);
    h.clock.advance(1);
    assert.equal(h.fa.sweep(), 1, "exported on the new 5 s active timeout");
    h.clock.advance(2_000);
    assert.equal(h.fa.sweep(), 1, "and on the new 7 s inactive timeout");
    assert.equal(h.fa.stats().numFlows, 0);
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: a transport change restarts the collector in process", async () => {
  const h = await harness(config({ transport: "TCP" }));
  try {
    assert.equal(h.fa.stats().collector?.transport, "tcp");
    await update(h, config({ transport: "UDP" }));
    assert.equal(h.fa.stats().collector?.transport, "udp");
    const agent = await SimAgent.connect(NODES[0], h.fa.collectorPort, "udp");
    try {
      await agent.sendTemplates();
      await agent.sendRecord(intraNodeRecord(5001));
      const deadline = Date.now() + 5000;
      while (h.fa.stats().numRecordsReceived < 1 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 20));
      }
    } finally {
      agent.close();
    }
    assert.equal(h.fa.stats().numRecordsReceived, 1);
    assert.equal(h.fa.stats().numFlows, 1);
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: stop() exports every held flow, ready or not, then stops the exporters", async () => {
  const h = await harness(config({ active: "1h", inactive: "1h" }));
  try {
    h.fa.ingest([
      intraNodeRecord(6001),
      // An inter-node source half without its partner: not ready, flushed un-correlated.
      agentRecord({
        sourceIPv4Address: "10.10.0.5",
        destinationIPv4Address: "10.10.1.6",
        sourceTransportPort: 6002,
        destinationTransportPort: 80,
        sourcePodName: "a",
        sourceNodeName: NODES[0],
        flowType: 2,
      }),
    ]);
    assert.equal(h.fa.sweep(), 0);
  } finally {
    await h.fa.stop();
  }
  const logger = h.latest("flowLogger");
  assert.deepEqual(
    logger.records.map((r) => [r.key.sourcePort, r.uncorrelated]),
    [[6001, false], [6002, true]],
  );
  assert.deepEqual(h.journal.slice(-3), [
    "add flowLogger 6001",
    "add flowLogger 6002",
    "stop flowLogger",
  ]);
  assert.equal(h.fa.stats().numFlows, 0);
  assert.equal(h.fa.stats().numRecordsExported, 2);
  await h.fa.stop(); // idempotent
  assert.equal(logger.stops, 1);
});

Deno.test("flow aggregator: records from the real collector reach the exporters", async () => {
  const h = await harness(config());
  try {
    const agent = await SimAgent.connect(NODES[0], h.fa.collectorPort, "tcp");
    await agent.sendTemplates();
    await agent.sendRecord(intraNodeRecord(7001));
    agent.close();
    const deadline = Date.now() + 5000;
    while (h.fa.stats().numRecordsReceived < 1 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    h.clock.advance(10_000);
    assert.equal(h.fa.sweep(), 1);
    const r = h.latest("flowLogger").records[0];
    assert.equal(r.key.sourcePort, 7001);
    assert.equal(r.record.sourcePodName, "worker");
    assert.equal(h.fa.stats().numRecordsReceived, 1);
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: a template without the flow key is checked once; its records are counted, not aggregated", async () => {
  const h = await harness(config());
  const mark = logLines.length;
  try {
    const keyless = { id: 300, scopeFieldCount: 0, fields: fieldsFor(["octetDeltaCount"]) };
    const agent = { id: 256, scopeFieldCount: 0, fields: fieldsFor(AGENT_IPV4_FIELDS) };
    const ctx = { options: false, exporterAddress: "10.0.0.1" };
    h.fa.ingest([intraNodeRecord(8101), intraNodeRecord(8102)], { ...ctx, template: keyless });
    h.fa.ingest([intraNodeRecord(8103)], { ...ctx, template: keyless });
    h.fa.ingest([intraNodeRecord(8104)], { ...ctx, template: agent });
    const s = h.fa.stats();
    assert.equal(s.nonFlowRecords, 3);
    assert.equal(s.aggregation.recordsAccepted, 1);
    assert.equal(s.numFlows, 1);
    const warned = logLines.slice(mark).filter((l) => l.includes("not a flow record"));
    assert.equal(warned.length, 1, "one warning per template, not per data set");
    assert.match(warned[0], /templateId=300 reason="no protocolIdentifier/);
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: a peer defining new non-flow templates at will gets one warning per interval, not one per template", async () => {
  const h = await harness(config());
  const mark = logLines.length;
  try {
    const ctx = { options: false, exporterAddress: "10.0.0.2" };
    // A template redefined with a new layout is a new template object each time.
    for (let i = 0; i < 300; i++) {
      const t = { id: 300, scopeFieldCount: 0, fields: fieldsFor(["octetDeltaCount"]) };
      h.fa.ingest([intraNodeRecord(8200 + i)], { ...ctx, template: t });
    }
    assert.equal(h.fa.stats().nonFlowRecords, 300);
    const warned = () => logLines.slice(mark).filter((l) => l.includes("not a flow record"));
    assert.equal(warned().length, 1);
    h.clock.advance(10_000);
    const t = { id: 300, scopeFieldCount: 0, fields: fieldsFor(["octetDeltaCount"]) };
    h.fa.ingest([intraNodeRecord(8600)], { ...ctx, template: t });
    assert.equal(warned().length, 2);
    assert.match(warned()[1], /suppressed=299/);
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: options records are counted and not aggregated", async () => {
  const h = await harness(config());
  try {
    h.fa.ingest([intraNodeRecord(8001), intraNodeRecord(8002)], { options: true });
    assert.equal(h.fa.stats().optionsRecordsIgnored, 2);
    assert.equal(h.fa.stats().numFlows, 0);
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: without any running exporter exported records are counted", async () => {
  const h = await harness(config(), undefined, () => undefined);
  try {
    h.fa.ingest([intraNodeRecord(9001)]);
    h.clock.advance(10_000);
    assert.equal(h.fa.sweep(), 1);
    const s = h.fa.stats();
    assert.equal(s.exportedWithoutSink, 1);
    assert.equal(s.numRecordsExported, 1);
    assert.ok(logLines.some((l) => l.includes("no exporter is running")));
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: an exporter that fails to start is left out, the others run", async () => {
  const h = await harness(config({ collector: true }), (e) => {
    e.failStart = e.section === "flowCollector";
  });
  try {
    assert.deepEqual(Object.keys(h.fa.stats().exporters), ["flowLogger"]);
    h.fa.ingest([intraNodeRecord(9101)]);
    h.clock.advance(10_000);
    h.fa.sweep();
    assert.equal(h.latest("flowLogger").records.length, 1);
    assert.equal(h.latest("flowCollector").records.length, 0);
    assert.equal(h.fa.stats().exporterErrors, 0);
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: start twice is an error", async () => {
  const h = await harness(config());
  try {
    await assert.rejects(() => h.fa.start(), /start called twice/);
  } finally {
    await h.fa.stop();
  }
});

/** An aggregator whose only sink is `sink`, with a 50 ms exporter stop timeout. */
function withStuckSink(cfg: FlowAggregatorConfig, sink: FakeExporter, clock: ManualClock) {
  return new FlowAggregator(cfg, {
    clock,
    manualSweep: true,
    listenAddress: "127.0.0.1:0",
    exporterFactory: () => sink,
    metricsLogIntervalMs: 0,
    exporterStopTimeoutMs: 50,
  });
}

Deno.test("flow aggregator: stop() gives up on an exporter whose stop never ends", async () => {
  const clock = new ManualClock();
  const journal: string[] = [];
  const stuck = new FakeExporter("flowLogger", config(), journal);
  stuck.stop = () => new Promise<void>(() => {}); // a hung disk: the final flush never returns
  const fa = withStuckSink(config(), stuck, clock);
  await fa.start();
  fa.ingest([intraNodeRecord(9201)]);
  const mark = logLines.length;
  await fa.stop();
  assert.equal(stuck.records.length, 1, "the held flow was still handed over");
  assert.ok(
    logLines.slice(mark).some((l) => l.includes("exporter did not stop in time")),
    "the give-up is logged",
  );
  // No sink runs any more; its final counters stay in the stats (and the last metrics line).
  assert.deepEqual(Object.keys(fa.stats().exporters), ["flowLogger"]);
  assert.equal(fa.stats().exporters.flowLogger.received, 1);
  const last = logLines.slice(mark).findLast((l) => l.includes("record metrics"));
  assert.match(last ?? "", /flowLogger\.received=1/);
});

Deno.test("flow aggregator: a live update an exporter never finishes holds neither the reload nor the stop", async () => {
  const stuck = new FakeExporter("flowLogger", config(), []);
  // A sink stuck in a write (a hung file system, a stdout nobody reads): its update waits
  // behind that write, like its stop.
  (stuck as Exporter).update = () => new Promise<void>(() => {});
  stuck.stop = () => new Promise<void>(() => {});
  const a = config();
  const b = parseConfig(
    `activeFlowRecordTimeout: 10s
inactiveFlowRecordTimeout: 20s
aggregatorTransportProtocol: TCP
flowLogger:
  enable: true
  path: /nonexistent/never-written.log
  prettyPrint: false
`,
  );
  const fa = withStuckSink(a, stuck, new ManualClock());
  await fa.start();
  const race = (p: Promise<void>) =>
    Promise.race([
      p.then(() => "done"),
      new Promise((r) => setTimeout(() => r("still waiting after 3 s"), 3000)),
    ]);
  const diff = diffConfig(a, b);
  assert.equal(diff.exporters.flowLogger, "live");
  const mark = logLines.length;
  assert.equal(await race(fa.update(b, diff)), "done");
  assert.ok(logLines.slice(mark).some((l) => l.includes("exporter update did not finish in time")));
  assert.equal(await race(fa.stop()), "done");
});

Deno.test("flow aggregator: a config update arriving during start() is applied once, after start", async () => {
  const clock = new ManualClock();
  const journal: string[] = [];
  const created: FakeExporter[] = [];
  const gate = Promise.withResolvers<void>();
  const fa = new FlowAggregator(config({ collector: false }), {
    clock,
    manualSweep: true,
    listenAddress: "127.0.0.1:0",
    metricsLogIntervalMs: 0,
    exporterFactory: (section, c) => {
      const e = new FakeExporter(section, c, journal);
      if (created.length === 0) {
        // The first exporter's start is slow, so the update lands while start() is running.
        e.start = async () => {
          journal.push(`start ${section}`);
          await gate.promise;
        };
      }
      created.push(e);
      return e;
    },
  });
  const started = fa.start();
  const next = config({ collector: true });
  const updated = fa.update(next, diffConfig(fa.config, next));
  await new Promise((r) => setTimeout(r, 10));
  gate.resolve();
  await started;
  await updated;
  try {
    assert.deepEqual(created.map((e) => e.section).sort(), ["flowCollector", "flowLogger"]);
    assert.deepEqual(Object.keys(fa.stats().exporters).sort(), ["flowCollector", "flowLogger"]);
  } finally {
    await fa.stop();
  }
  for (const e of created) assert.equal(e.stops, 1, `${e.section} stopped once`);
});

Deno.test("flow aggregator: a config update before start() is not lost", async () => {
  const h0 = new FlowAggregator(config({ collector: false, active: "60s" }), {
    clock: new ManualClock(),
    manualSweep: true,
    listenAddress: "127.0.0.1:0",
    metricsLogIntervalMs: 0,
    exporterFactory: (s, c) => new FakeExporter(s, c, []),
  });
  const next = config({ collector: true, active: "5s" });
  await h0.update(next, diffConfig(h0.config, next));
  await h0.start();
  try {
    assert.equal(h0.config.activeFlowRecordTimeoutMs, 5000);
    assert.deepEqual(Object.keys(h0.stats().exporters).sort(), ["flowCollector", "flowLogger"]);
    assert.equal(h0.core.nextExpiryDelayMs(), 5000, "the core runs on the new timeouts");
  } finally {
    await h0.stop();
  }
});

Deno.test("flow aggregator: a transport change that cannot bind keeps collecting on the previous transport", async () => {
  // Hold the UDP port so only the switch to UDP fails; TCP on the same number is free.
  let udp: Deno.DatagramConn | undefined;
  let port = 0;
  for (let i = 0; i < 20 && udp === undefined; i++) {
    const u = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: 0 });
    port = (u.addr as Deno.NetAddr).port;
    try {
      Deno.listen({ hostname: "127.0.0.1", port }).close();
      udp = u;
    } catch {
      u.close(); // TCP side taken by someone else: try another port
    }
  }
  assert.ok(udp, "found a port free for TCP with UDP held");
  const fa = new FlowAggregator(config({ transport: "TCP" }), {
    clock: new ManualClock(),
    manualSweep: true,
    listenAddress: `127.0.0.1:${port}`,
    exporterFactory: (s, c) => new FakeExporter(s, c, []),
    metricsLogIntervalMs: 0,
  });
  await fa.start();
  try {
    const mark = logLines.length;
    const next = config({ transport: "UDP" });
    await fa.update(next, diffConfig(fa.config, next));
    assert.ok(
      logLines.slice(mark).some((l) => l.includes("cannot start the collecting process")),
      "the failure is logged",
    );
    assert.equal(fa.stats().collector?.transport, "tcp", "back on the previous transport");
    assert.equal(fa.collectorPort, port);
    const agent = await SimAgent.connect(NODES[0], port, "tcp");
    await agent.sendTemplates();
    await agent.sendRecord(intraNodeRecord(9301));
    agent.close();
    const deadline = Date.now() + 5000;
    while (fa.stats().numRecordsReceived < 1 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(fa.stats().numRecordsReceived, 1, "still collecting");
  } finally {
    await fa.stop();
    udp.close();
  }
});

Deno.test("flow aggregator: numRecordsReceived keeps counting across a collector restart", async () => {
  const h = await harness(config({ transport: "TCP" }));
  const waitReceived = async (n: number): Promise<void> => {
    const deadline = Date.now() + 5000;
    while (h.fa.stats().numRecordsReceived < n && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  try {
    const tcp = await SimAgent.connect(NODES[0], h.fa.collectorPort, "tcp");
    await tcp.sendTemplates();
    await tcp.sendRecord(intraNodeRecord(9401));
    tcp.close();
    await waitReceived(1);
    assert.equal(h.fa.stats().numRecordsReceived, 1);
    const before = h.fa.stats().collector!;
    assert.equal(before.sessionsOpened, 1);
    await update(h, config({ transport: "UDP" }));
    assert.equal(h.fa.stats().numRecordsReceived, 1, "not reset by the restart");
    // Every counter of the collector goes on from where it was (only numRecordsReceived did:
    // sessionsOpened, decodeErrors, bytes… went back to 0 at each restart, seen in a soak).
    const after = h.fa.stats().collector!;
    assert.equal(after.transport, "udp");
    assert.equal(after.sessionsOpened, 1);
    assert.equal(after.sessionsClosed, 1);
    assert.equal(after.sessionsActive, 0);
    assert.equal(after.messages, before.messages);
    assert.equal(after.bytes, before.bytes);
    assert.deepEqual(after.exporters, before.exporters);
    const udp = await SimAgent.connect(NODES[0], h.fa.collectorPort, "udp");
    await udp.sendTemplates();
    await udp.sendRecord(intraNodeRecord(9402));
    udp.close();
    await waitReceived(2);
    assert.equal(h.fa.stats().numRecordsReceived, 2);
    const last = h.fa.stats().collector!;
    assert.equal(last.sessionsOpened, 2);
    assert.ok(last.bytes > before.bytes);
    assert.equal(last.exporters["127.0.0.1"].dataRecords, 2, "per exporter, summed");
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: stop() while start() is still running leaves no timer behind", async () => {
  const gate = Promise.withResolvers<void>();
  const fa = new FlowAggregator(config(), {
    clock: new ManualClock(),
    listenAddress: "127.0.0.1:0",
    metricsLogIntervalMs: 10,
    exporterFactory: (s, c) => {
      const e = new FakeExporter(s, c, []);
      e.start = () => gate.promise; // a slow exporter start: SIGTERM lands during start()
      return e;
    },
  });
  setLogLevel("info"); // the periodic metrics line is an info event
  try {
    const started = fa.start();
    await new Promise((r) => setTimeout(r, 10)); // start() is now waiting for the exporter
    const stopped = fa.stop();
    gate.resolve();
    await started;
    await stopped;
    const mark = logLines.length;
    await new Promise((r) => setTimeout(r, 60));
    assert.deepEqual(
      logLines.slice(mark).filter((l) => l.includes("record metrics")),
      [],
      "no metrics timer survives stop()",
    );
  } finally {
    setLogLevel("info");
  }
});

Deno.test("flow aggregator: a podLabels reload rebuilds the IPFIX exporter (its templates carry the label fields)", async () => {
  const h = await harness(config({ collector: true, podLabels: false }));
  try {
    const before = h.latest("flowCollector");
    await update(h, config({ collector: true, podLabels: true }));
    const after = h.latest("flowCollector");
    assert.notEqual(after, before, "the IPFIX exporter was replaced");
    assert.equal(before.stops, 1);
    assert.equal(after.config.recordContents.podLabels, true);
    h.fa.ingest([intraNodeRecord(9501)]);
    h.clock.advance(10_000);
    h.fa.sweep();
    assert.ok(after.records.some((r) => r.key.sourcePort === 9501));
    assert.equal(h.created.filter((e) => e.section === "flowLogger").length, 1, "log untouched");
  } finally {
    await h.fa.stop();
  }
});

// A reload whose new sink could not start (a permission the process was not given) stopped the
// running sink first: every later record went to no sink (found by review with the real process).
Deno.test("flow aggregator: a sink the reload cannot rebuild is kept running, counted", async () => {
  let refuse = false;
  const h = await harness(config({ collector: true, podLabels: false }), (e) => {
    if (e.section !== "flowCollector") return;
    e.start = () =>
      refuse ? Promise.reject(new Error("needs --allow-net=x, not given")) : Promise.resolve();
  });
  try {
    const before = h.latest("flowCollector");
    refuse = true;
    await update(h, config({ collector: true, podLabels: true }));
    assert.equal(before.stops, 0, "the running sink was not stopped");
    assert.equal(h.fa.stats().exporterRebuildsFailed, 1);
    h.fa.ingest([intraNodeRecord(9551)]);
    h.clock.advance(10_000);
    h.fa.sweep();
    assert.ok(before.records.some((r) => r.key.sourcePort === 9551), "it still gets the records");
    assert.equal(h.fa.stats().exportedWithoutSink, 0);
    // A later reload of the section that can start replaces it.
    refuse = false;
    await update(h, config({ collector: true, podLabels: false }));
    assert.equal(before.stops, 1, "replaced once its successor started");
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: a live update a sink fails is retried as a rebuild; the rest of the reload applies", async () => {
  let rebuildFails = false;
  const h = await harness(config({ active: "60s", inactive: "90s" }), (e) => {
    (e as Exporter).update = () => Promise.reject(new Error("update refused by the sink"));
    if (rebuildFails && e.section === "flowLogger") e.failStart = true;
  });
  try {
    const first = h.latest("flowLogger");
    h.fa.ingest([intraNodeRecord(9560)]); // the core is made, with the 60 s timeouts
    const mark = logLines.length;
    const next = config({ active: "5s", inactive: "7s", prettyPrint: false });
    assert.equal(diffConfig(h.fa.config, next).exporters.flowLogger, "live");
    await update(h, next);
    assert.ok(logLines.slice(mark).some((l) => l.includes("exporter update failed")));
    // The sink was rebuilt from the new configuration; the old one drained and stopped.
    const second = h.latest("flowLogger");
    assert.notEqual(second, first);
    assert.equal(second.config.flowLogger.prettyPrint, false);
    assert.equal(first.stops, 1);
    // The timeouts of the same reload applied (they were skipped after the failed update).
    h.fa.ingest([intraNodeRecord(9561)]);
    h.clock.advance(5_000);
    assert.equal(h.fa.sweep(), 1, "a new flow is exported on the new 5 s active timeout");
    assert.ok(second.records.some((r) => r.key.sourcePort === 9561));
    // When the rebuild cannot start either, the running sink is kept, counted.
    rebuildFails = true;
    await update(h, config({ active: "3s", inactive: "7s", prettyPrint: true }));
    assert.notEqual(h.latest("flowLogger"), second, "a rebuild was tried");
    assert.equal(second.stops, 0, "the running sink was kept");
    assert.equal(h.fa.stats().exporterRebuildsFailed, 1);
    h.fa.ingest([intraNodeRecord(9562)]);
    const got = () => second.records.some((r) => r.key.sourcePort === 9562);
    h.clock.advance(2_999);
    h.fa.sweep();
    assert.ok(!got());
    h.clock.advance(1);
    h.fa.sweep();
    assert.ok(got(), "exported on the new 3 s active timeout, to the running sink");
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: limits.maxFlowBytes reaches the core at start and live on reload", async () => {
  const h = await harness(config({ maxFlowBytes: 1 }));
  try {
    h.fa.ingest([intraNodeRecord(9601)]);
    assert.equal(h.fa.stats().aggregation.recordsRejected.maxFlowBytes, 1);
    assert.equal(h.fa.core.flowCount, 0);
    await update(h, config({ maxFlowBytes: 64 * 1024 * 1024 }));
    h.fa.ingest([intraNodeRecord(9602)]);
    assert.equal(h.fa.core.flowCount, 1);
    assert.equal(h.fa.stats().aggregation.recordsRejected.maxFlowBytes, 1);
    assert.ok(logLines.some((l) => l.includes("maxFlowBytes limit updated")));
  } finally {
    await h.fa.stop();
  }
});

Deno.test("flow aggregator: stop() waits for an exporter replaced by a reload to finish draining", async () => {
  const drained = Promise.withResolvers<void>();
  let oldStopDone = false;
  const h = await harness(config({ collector: true, logger: false }), (e) => {
    if (e.section !== "flowCollector") return;
    // The first IPFIX exporter drains slowly (collector far away): its stop takes a while.
    e.stop = async () => {
      await drained.promise;
      oldStopDone = true;
    };
  });
  const old = h.latest("flowCollector");
  // The tweak above applies to every exporter the harness creates; give the new one a quick stop.
  await update(h, config({ collector: true, logger: false, collectorAddress: "127.0.0.2:4740" }));
  assert.notEqual(h.latest("flowCollector"), old);
  h.latest("flowCollector").stop = () => Promise.resolve();
  const stopped = h.fa.stop().then(() => oldStopDone);
  await new Promise((r) => setTimeout(r, 20));
  drained.resolve();
  assert.equal(await stopped, true, "stop() resolved only after the replaced exporter's stop");
});

Deno.test("default IPFIX exporter: without a cluster UUID the observation domain id is stable per process", async () => {
  const cfg = config({ collector: true });
  const factory = componentExporterFactory({ inProcess: true });
  const a = await factory("flowCollector", cfg) as IpfixExporter;
  const b = await factory("flowCollector", cfg) as IpfixExporter;
  assert.ok(a instanceof IpfixExporter);
  // A reload that rebuilds the exporter must not change the id the external collector sees.
  assert.equal(a.observationDomainId, b.observationDomainId);
});

/** The fields of a logfmt line (values unquoted). */
function logfmtFields(line: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of line.matchAll(/([^\s=]+)=("(?:[^"\\]|\\.)*"|\S*)/g)) {
    out[m[1]] = m[2].startsWith('"') ? JSON.parse(m[2]) : m[2];
  }
  return out;
}

Deno.test("flow aggregator: the metrics line is info and carries every collector, UDP, core and sink counter", async () => {
  setLogLevel("info");
  const mark = logLines.length;
  const fa = new FlowAggregator(config({ transport: "UDP" }), {
    clock: new ManualClock(),
    manualSweep: true,
    listenAddress: "127.0.0.1:0",
    exporterFactory: (s, c) => new FakeExporter(s, c, []),
    metricsLogIntervalMs: 10,
  });
  await fa.start();
  const collector = fa.stats().collector!;
  // The periodic line (at stop the sinks are already stopped; each logs its own counters).
  let line: string | undefined;
  try {
    line = await pollUntil(
      () => logLines.slice(mark).find((l) => l.includes("record metrics")),
      { what: "a periodic metrics line" },
    );
  } finally {
    await fa.stop();
  }
  const f = logfmtFields(line);
  assert.equal(f.level, "info");
  // Every numeric collector counter, derived from the stats object itself.
  for (const [k, v] of Object.entries(collector)) {
    if (typeof v === "number") assert.ok(k in f, `collector counter ${k} in the metrics line`);
  }
  for (
    const k of [
      "setErrors",
      "sessionsEvicted",
      "bytesDiscarded",
      "tlsHandshakeFailures",
      "acceptErrors",
      "optionsRecordsIgnored",
      "nonFlowRecords",
      "recordsInFlight",
      "exportedWithoutSink",
      "numRecordsReceived",
      "decodeErrors",
      "templateMisses",
      "recordsAggregated",
      "rejected",
      "aggregation.recordsIn",
      "aggregation.flowsCreated",
      "udpKernelDrops",
      "udpQueueDrops",
      "udpOversized",
      "udpSockets",
      "flowLogger.received",
      "flowLogger.dropped",
    ]
  ) assert.ok(k in f, `${k} in the metrics line: ${line}`);
  assert.equal(f.decodeErrors, "0");
  assert.equal(f.udpKernelDrops, Deno.build.os === "linux" ? "0" : "unknown");
  // Per-exporter (per peer) counters stay out of the line; so does the transport string.
  assert.ok(!("exporters" in f) && !("transport" in f));
});

// One piece of 10,000 records held the ingest thread 250-340 ms (50,000 flows, measured).
Deno.test("flow aggregator: /flowrecords from the core in this thread is built a page at a time, other work running in between", async () => {
  const h = await harness(config());
  try {
    const n = 3 * QUERY_PAGE_RECORDS + 7;
    for (let i = 0; i < n; i++) h.fa.ingest([intraNodeRecord(10_000 + i)]);
    assert.equal(h.fa.core.flowCount, n);
    let ranBetween = false;
    const answer = h.fa.recordsJson(null, Infinity);
    setTimeout(() => ranBetween = true, 0);
    const body = await answer;
    assert.ok(ranBetween, "a task queued after the query ran before its answer was complete");
    // Every flow once, as one piece of the same flows writes them.
    assert.equal(body, recordsJson(h.fa.core.query(null)));
    assert.equal(JSON.parse(body).length, n);
    assert.equal(JSON.parse(await h.fa.recordsJson(null, 5)).length, 5);
    assert.equal(await h.fa.recordsJson({ destinationPort: 1 }, 10), "null");
  } finally {
    await h.fa.stop();
  }
});
