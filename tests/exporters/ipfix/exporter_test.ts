import assert from "node:assert/strict";
import type { Exporter } from "../../../src/exporters/exporter.ts";
import {
  exportTemplateFields,
  IpfixExporter,
  type IpfixExporterOptions,
  ipfixOptionsFromConfig,
  observationDomainIdFromUuid,
} from "../../../src/exporters/ipfix/exporter.ts";
import type { AggregatedRecord, ExportedFlow } from "../../../src/aggregation/record.ts";
import { type CaptureOptions, CaptureServer } from "../../../src/flowgen/capture.ts";
import { exportedFlow, fixtureFlow } from "../fixtures.ts";
import { ManualClock } from "../../../src/clock.ts";
import { WallStepClock } from "../../_helpers/wall_step_clock.ts";
import { elementByName, encodeDataSet, encodeMessage, fieldsFor } from "../../../src/ipfix/mod.ts";
import { jsonRecordLine } from "../../../src/exporters/ipfix/json.ts";
import { setLogWriter } from "../../../src/log.ts";
import {
  SPEC_AGENT_IPV4,
  SPEC_AGENT_IPV6,
  SPEC_FA_APPENDED,
  SPEC_POD_LABELS,
} from "../../_helpers/spec_fields.ts";
import { SilentCollector } from "../../_helpers/silent_collector.ts";
import { withDeadline } from "../../_helpers/wait.ts";

// Exporter warnings (connection refused, drops) are expected here; keep test output readable.
setLogWriter(() => {});

/**
 * Fixture record F (exporters.md §8.0, shared with the flat record and log tests) with every one
 * of the 65 fields set to a distinct value, so a field encoded under the wrong IE shows up.
 */
function fixture(ipv6: boolean, i = 0): AggregatedRecord {
  return fixtureFlow(ipv6, {
    flowEndSeconds: 1637706973 + i,
    destinationTransportPort: 5201 + (i % 1000),
    octetDeltaCount: 8982624938n + BigInt(i),
    octetDeltaCountFromSourceNode: 1n,
    octetDeltaCountFromDestinationNode: 2n,
    octetTotalCountFromSourceNode: 3n,
    octetTotalCountFromDestinationNode: 4n,
    packetDeltaCountFromSourceNode: 5n,
    packetDeltaCountFromDestinationNode: 6n,
    packetTotalCountFromSourceNode: 7n,
    packetTotalCountFromDestinationNode: 8n,
    reverseOctetDeltaCountFromSourceNode: 9n,
    reverseOctetDeltaCountFromDestinationNode: 10n,
    reverseOctetTotalCountFromSourceNode: 11n,
    reverseOctetTotalCountFromDestinationNode: 12n,
    reversePacketDeltaCountFromSourceNode: 13n,
    reversePacketDeltaCountFromDestinationNode: 14n,
    reversePacketTotalCountFromSourceNode: 15n,
    reversePacketTotalCountFromDestinationNode: (1n << 64n) - 1n, // exact above 2^53
  }).record;
}

function flow(ipv6: boolean, i = 0, record = fixture(ipv6, i)): ExportedFlow {
  return exportedFlow(record, ipv6);
}

function exporter(port: number, proto: string, extra: Partial<IpfixExporterOptions> = {}) {
  return new IpfixExporter({
    address: `127.0.0.1:${port}:${proto}`,
    observationDomainId: 1,
    backoffInitialMs: 20,
    backoffMaxMs: 100,
    stopTimeoutMs: 2000,
    ...extra,
  });
}

/** Starts a capture server for `proto` and an {@linkcode exporter} sending to it. */
async function startExporter(
  proto: "tcp" | "udp",
  extra: Partial<IpfixExporterOptions> = {},
  capture: Partial<CaptureOptions> = {},
): Promise<{ cap: CaptureServer; e: IpfixExporter }> {
  const cap = CaptureServer.listen({ kind: proto, ...capture });
  const e = exporter(cap.port, proto, extra);
  await e.start();
  return { cap, e };
}

/** Asserts that a decoded record carries exactly the template fields with the sent values. */
function assertSameValues(got: Record<string, unknown>, sent: AggregatedRecord, names: string[]) {
  assert.deepEqual(Object.keys(got), names);
  const s = sent as unknown as Record<string, unknown>;
  for (const n of names) assert.deepEqual(got[n], s[n], `field ${n}`);
}

Deno.test("observation domain id is FNV-1 of the 16 raw UUID bytes (spec vectors)", () => {
  assert.equal(observationDomainIdFromUuid("00000000-0000-0000-0000-000000000000"), 1768495365);
  assert.equal(observationDomainIdFromUuid("123e4567-e89b-12d3-a456-426614174000"), 528865862);
  assert.equal(observationDomainIdFromUuid("4c7a2a3e-5a1f-4b7e-9d3c-2f1e0a9b8c7d"), 3481426297);
  const e = new IpfixExporter({
    address: "127.0.0.1:4739",
    clusterUuid: "123e4567-e89b-12d3-a456-426614174000",
  });
  assert.equal(e.observationDomainId, 528865862);
  assert.throws(() => observationDomainIdFromUuid("not-a-uuid"), /not a UUID/);
});

Deno.test("constructor rejects an unsupported record format and a bad address", () => {
  assert.throws(
    () => new IpfixExporter({ address: "127.0.0.1:1", recordFormat: "CSV" }),
    /record format CSV is not supported/,
  );
  assert.throws(
    () => new IpfixExporter({ address: "127.0.0.1:1:sctp" }),
    /connection over sctp transport proto is not supported/,
  );
});

Deno.test("templates have the exporters.md §2.4 element order, 63 fields or 65 with labels", () => {
  // Whole lists against the spec's order (ipfix.md §5.3 = exporters.md §2.4), IPv6 with its three
  // address IEs, labels last.
  const v4 = exportTemplateFields(false, false);
  assert.equal(v4.length, 63);
  assert.deepEqual(v4, [...SPEC_AGENT_IPV4, ...SPEC_FA_APPENDED]);
  const v6l = exportTemplateFields(true, true);
  assert.equal(v6l.length, 65);
  assert.deepEqual(v6l, [...SPEC_AGENT_IPV6, ...SPEC_FA_APPENDED, ...SPEC_POD_LABELS]);
  const e = new IpfixExporter({ address: "127.0.0.1:1", observationDomainId: 1, podLabels: true });
  assert.deepEqual(e.templates.map((t) => [t.id, t.fields.length]), [[256, 65], [257, 65]]);
  const f = e.templates[0].fields[12];
  assert.deepEqual(f, { id: 86, enterprise: 29305, length: 8 });
  assert.equal(elementByName("reversePacketTotalCount")?.id, 86);
});

Deno.test("TCP: templates first (480-byte messages), then every record decodes identically", async () => {
  const { cap, e } = await startExporter("tcp");
  // The very first record after start must go out (upstream sent it with template id 0).
  for (let i = 0; i < 50; i++) e.addRecord(flow(i % 5 === 0, i));
  await cap.waitFor(() => cap.records.length === 50, 5000, "50 records");
  await e.stop();
  // stop() closes the socket: the collector sees EOF.
  await cap.waitFor(() => cap.peerCloses === 1, 2000, "EOF after stop");
  await cap.close();
  const [t1, t2] = cap.messages;
  assert.equal(t1.bytes.length, 480);
  assert.equal(t2.bytes.length, 480);
  assert.deepEqual(t1.setIds, [2]);
  assert.equal(t1.header?.sequenceNumber, 0);
  assert.equal(t1.header?.observationDomainId, 1);
  const v4 = exportTemplateFields(false, false);
  const v6 = exportTemplateFields(true, false);
  // Within each family the records keep their order; the batch goes out IPv4 then IPv6.
  const idx = [...Array(50).keys()];
  const order = [...idx.filter((i) => i % 5 !== 0), ...idx.filter((i) => i % 5 === 0)];
  order.forEach((i, k) => {
    const got = cap.records[k];
    assert.equal(got.templateId, i % 5 === 0 ? 257 : 256);
    assertSameValues(got.record, fixture(i % 5 === 0, i), i % 5 === 0 ? v6 : v4);
  });
  // One message per family for the whole batch, one set per message, never template id 0.
  const dataMsgs = cap.messages.slice(2);
  assert.equal(dataMsgs.length, 2, `batched: ${dataMsgs.length} messages`);
  for (const m of dataMsgs) {
    assert.equal(m.setIds.length, 1);
    assert.ok(m.setIds[0] === 256 || m.setIds[0] === 257);
    assert.ok(m.bytes.length < 65535);
  }
  // RFC 7011 sequence numbers: data records sent before each message.
  let before = 0;
  for (const m of dataMsgs) {
    assert.equal(m.header?.sequenceNumber, before);
    before += cap.records.filter((r) => r.sequenceNumber === m.header?.sequenceNumber).length;
  }
  const s = e.stats();
  assert.equal(s.received, 50);
  assert.equal(s.exported, 50);
  assert.equal(s.dropped, 0);
  assert.equal(s.templatesSent, 2);
  assert.equal(s.messages, cap.messages.length);
  assert.equal(s.bytes, cap.messages.reduce((n, m) => n + m.bytes.length, 0));
});

Deno.test("data message for fixture F with labels is 734 bytes (650 without)", async () => {
  for (const [labels, size] of [[true, 734], [false, 650]] as const) {
    const { cap, e } = await startExporter("tcp", { podLabels: labels });
    const r = fixture(false);
    // F has no per-node stats; they are zero-valued fixed fields and do not change the size.
    e.addRecord(flow(false, 0, r));
    await cap.waitFor(() => cap.records.length === 1);
    await e.stop();
    await cap.close();
    assert.equal(cap.messages[0].bytes.length, labels ? 496 : 480);
    assert.equal(cap.messages[2].bytes.length, size);
    if (labels) {
      assert.equal(cap.records[0].record.sourcePodLabels, r.sourcePodLabels);
    } else {
      assert.equal(cap.records[0].record.sourcePodLabels, undefined);
    }
  }
});

Deno.test("absent IEs are sent as zero values, looked up by name", async () => {
  const { cap, e } = await startExporter("tcp");
  const r = fixture(false);
  delete r.destinationClusterIPv4;
  (r as unknown as Record<string, unknown>).egressName = undefined;
  // Property order of the snapshot must not matter: rebuild it reversed.
  const reversed = Object.fromEntries(Object.entries(r).reverse()) as unknown as AggregatedRecord;
  e.addRecord(flow(false, 0, reversed));
  await cap.waitFor(() => cap.records.length === 1);
  await e.stop();
  await cap.close();
  const got = cap.records[0].record;
  assert.equal(got.destinationClusterIPv4, "0.0.0.0");
  assert.equal(got.egressName, "");
  assert.equal(got.sourcePodName, "perftest-a");
  assert.equal(got.octetTotalCount, 30472817041n);
});

Deno.test("UDP: every message < 1400 bytes, several records per datagram", async () => {
  const { cap, e } = await startExporter("udp");
  for (let i = 0; i < 40; i++) e.addRecord(flow(false, i));
  await cap.waitFor(() => cap.records.length === 40, 5000, "40 records");
  await e.stop();
  await cap.close();
  for (const m of cap.messages) assert.ok(m.bytes.length < 1400, `${m.bytes.length} bytes`);
  const data = cap.messages.filter((m) => m.setIds[0] === 256);
  assert.ok(data.length <= 40 / 2, `${data.length} datagrams for 40 records`);
  const names = exportTemplateFields(false, false);
  cap.records.forEach((r, i) => assertSameValues(r.record, fixture(false, i), names));
  assert.equal(cap.decodeErrors, 0);
  assert.equal(cap.templateMisses, 0);
});

Deno.test("UDP: templates are refreshed once the interval has passed on the clock", async () => {
  const clock = new ManualClock();
  const { cap, e } = await startExporter("udp", { clock, templateRefreshMs: 600_000 });
  e.addRecord(flow(false, 0));
  await cap.waitFor(() => cap.records.length === 1);
  e.addRecord(flow(false, 1));
  await cap.waitFor(() => cap.records.length === 2);
  assert.equal(e.stats().templatesSent, 2, "no refresh before the interval");
  clock.advance(600_000);
  e.addRecord(flow(true, 2));
  await cap.waitFor(() => cap.records.length === 3);
  await e.stop();
  await cap.close();
  assert.equal(e.stats().templatesSent, 4);
  assert.equal(e.stats().templateRefreshes, 1);
  const tmpl = cap.messages.filter((m) => m.setIds[0] === 2);
  assert.equal(tmpl.length, 4);
  // The refresh precedes the data sent after the interval.
  const idx = cap.messages.findIndex((m, i) => i > 2 && m.setIds[0] === 2);
  const lastData = cap.messages.findLastIndex((m) => m.setIds[0] === 257);
  assert.ok(idx > 0 && idx < lastData);
});

Deno.test("JSON format: one sorted, bigint-exact document per line, no templates", async () => {
  const clock = new ManualClock(Date.UTC(2023, 6, 25, 10, 0, 0, 500));
  const { cap, e } = await startExporter("tcp", { recordFormat: "JSON", clock }, { json: true });
  e.addRecord(flow(false, 0));
  e.addRecord(flow(true, 1));
  await cap.waitFor(() => cap.lines.length === 2);
  await e.stop();
  await cap.close();
  assert.equal(e.stats().templatesSent, 0);
  const line = cap.lines[0];
  assert.ok(line.startsWith('{"@timestamp":"2023-07-25T10:00:00Z","ipfix":{'), line);
  assert.ok(line.includes('"reversePacketTotalCountFromDestinationNode":18446744073709551615'));
  const obj = JSON.parse(line);
  const keys = Object.keys(obj.ipfix);
  assert.deepEqual(keys, [...keys].sort());
  assert.equal(keys.length, 63);
  assert.equal(obj.ipfix.sourceIPv4Address, "10.10.0.79");
  assert.equal(JSON.parse(cap.lines[1]).ipfix.sourceIPv6Address, "2001:0:3238:dfe1:63::fefb");
});

Deno.test("collector down: bounded queue drops the oldest, stop() counts the rest", async () => {
  // Reserve a port nobody listens on.
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  const e = exporter(port, "tcp", { maxQueueRecords: 10, stopTimeoutMs: 100 });
  await e.start();
  for (let i = 0; i < 25; i++) e.addRecord(flow(false, i));
  assert.equal(e.stats().dropped, 15);
  assert.equal(e.stats().queued, 10);
  await e.stop();
  const s = e.stats();
  assert.equal(s.received, 25);
  assert.equal(s.exported, 0);
  assert.equal(s.dropped, 25);
  assert.equal(s.exported + s.dropped, s.received);
  assert.ok(s.errors >= 1, "connect failures are counted");
  e.addRecord(flow(false, 99));
  assert.equal(e.stats().dropped, 26, "records after stop are dropped and counted");
});

Deno.test("TCP collector drops the connection: reconnect, templates re-sent, nothing re-sent twice", async () => {
  const { cap, e } = await startExporter("tcp");
  for (let i = 0; i < 10; i++) e.addRecord(flow(false, i));
  await cap.waitFor(() => cap.records.length === 10);
  cap.dropConnections();
  await cap.waitFor(() => !e.stats().connected, 2000, "exporter notices EOF");
  for (let i = 10; i < 20; i++) e.addRecord(flow(false, i));
  await cap.waitFor(() => cap.records.length === 20, 5000, "20 records");
  await e.stop();
  await cap.close();
  const s = e.stats();
  assert.equal(s.reconnects, 1);
  assert.equal(s.templatesSent, 4);
  assert.equal(cap.connections, 2);
  assert.equal(cap.records.length, 20, "each record reached the collector once");
  // The first session ended without proof that the collector read its records (it did, but a
  // crashed one would not have): possibly lost, never exported. The second ended cleanly at
  // stop(), the collector closing after reading to the end: exported.
  assert.equal(s.possiblyLost, 10);
  assert.equal(s.unacknowledged, 10);
  assert.equal(s.exported, 10);
  assert.equal(s.exported + s.unacknowledged + s.dropped + s.queued, s.received);
  // The second session starts with templates and sequence number 0 again.
  const second = cap.messages.filter((m) => m.session === "conn-2");
  assert.deepEqual(second.slice(0, 2).map((m) => m.setIds[0]), [2, 2]);
  assert.equal(second[2].header?.sequenceNumber, 0);
});

Deno.test("oversized record is dropped and counted, the rest still goes out", async () => {
  const { cap, e } = await startExporter("udp", { podLabels: true });
  const big = fixture(false);
  big.sourcePodLabels = "x".repeat(70_000);
  e.addRecord(flow(false, 0, big));
  e.addRecord(flow(false, 1));
  await cap.waitFor(() => cap.records.length === 1);
  await e.stop();
  await cap.close();
  const s = e.stats();
  assert.equal(s.dropped, 1);
  assert.equal(s.exported, 1);
  assert.ok(s.errors >= 1);
});

// A record larger than maxMessageBytes on its own went out in a larger datagram (IP-fragmented
// past the path MTU) with nothing counted or logged, though the option said "strictly below".
Deno.test("UDP: a record larger than maxMessageBytes goes alone in a datagram, counted as oversize", async () => {
  const { cap, e } = await startExporter("udp", { podLabels: true });
  const big = fixture(false);
  big.sourcePodLabels = "x".repeat(3000);
  e.addRecord(flow(false, 0));
  await cap.waitFor(() => cap.records.length === 1);
  assert.equal(e.stats().oversizeDatagrams, 0, "a record of the usual size fits");
  e.addRecord(flow(false, 1, big));
  await cap.waitFor(() => cap.records.length === 2);
  await e.stop();
  await cap.close();
  const s = e.stats();
  assert.equal(s.exported, 2);
  assert.equal(s.dropped, 0);
  assert.equal(s.oversizeDatagrams, 1);
});

Deno.test("long outage: the queue stays bounded while records keep arriving", async () => {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  const e = exporter(port, "tcp", { maxQueueRecords: 1000, stopTimeoutMs: 50 });
  await e.start();
  const f = flow(false, 0);
  for (let i = 0; i < 200_000; i++) e.addRecord(f);
  const s = e.stats();
  assert.equal(s.queued, 1000);
  assert.equal(s.dropped, 199_000);
  await e.stop();
  assert.equal(e.stats().dropped, 200_000);
});

// The queue held each record as its object (about 1.5 KB of heap with its strings and bigints)
// and bounded only their number: with the collector down at 5,000 records/s a review saw the
// sink worker's heap swing 212-774 MB and the process's RSS reach 1.2 GB. Records now wait
// encoded, bounded in bytes as well.
Deno.test("collector down: the queue is bounded in bytes too, the oldest dropped", async () => {
  const e = exporter(refusedPort(), "tcp", {
    maxQueueRecords: 1000,
    maxQueueBytes: 10 * 635, // ten 630-byte records of the 63-field template, 5 bytes each more
    stopTimeoutMs: 100,
  });
  await e.start();
  for (let i = 0; i < 25; i++) e.addRecord(flow(false, i));
  let s = e.stats();
  assert.equal(s.queued, 10);
  assert.equal(s.queuedBytes, 10 * 635);
  assert.equal(s.dropped, 15);
  await e.stop();
  s = e.stats();
  assert.equal(s.dropped, 25);
  assert.equal(s.queuedBytes, 0);
  assert.equal(s.exported + s.dropped, s.received);
});

/** A port reserved for a capture server that is not listening yet ({@linkcode CaptureServer.reopen}). */
async function closedCapture(opts: Partial<CaptureOptions>): Promise<CaptureServer> {
  const cap = CaptureServer.listen({ kind: "tcp", ...opts });
  await cap.close();
  return cap;
}

/** Feeds `records` to `e` while its collector is down, then lets it connect on `clock`. */
async function queueThenConnect(
  e: IpfixExporter,
  cap: CaptureServer,
  clock: ManualClock,
  records: ExportedFlow[],
): Promise<void> {
  await e.start();
  for (const r of records) e.addRecord(r);
  await clock.whenTimersPending(); // refused, waiting out the backoff
  assert.equal(e.stats().queued, records.length);
  // The records wait a minute (the export time is the sending time's); the backoff is over.
  clock.advance(60_000);
  cap.reopen();
}

Deno.test("records queued while the collector was down go out as the codec encodes them", async () => {
  const clock = new ManualClock();
  const cap = await closedCapture({});
  const e = exporter(cap.port, "tcp", { clock, podLabels: true, backoffInitialMs: 1000 });
  const records = [...Array(30).keys()].map((i) => flow(i % 3 === 0, i));
  await queueThenConnect(e, cap, clock, records);
  await cap.waitFor(() => cap.records.length === 30, 5000, "30 records");
  await e.stop();
  await cap.close();
  // Direct encoding of the same records: one message per family, IPv4 first (one batch), the
  // header's export time the sending time's, its sequence number the records sent before it.
  const v4 = records.filter((r) => !r.isIPv6).map((r) => r.record);
  const v6 = records.filter((r) => r.isIPv6).map((r) => r.record);
  const header = (seq: number) => ({
    exportTime: Math.floor(clock.wallMs() / 1000),
    sequenceNumber: seq,
    observationDomainId: 1,
  });
  const set = (id: number, ipv6: boolean, recs: AggregatedRecord[]) =>
    encodeDataSet(
      id,
      fieldsFor(exportTemplateFields(ipv6, true)),
      recs as unknown as Record<string, never>[],
    );
  const expected = [
    encodeMessage(header(0), [set(256, false, v4)]),
    encodeMessage(header(v4.length), [set(257, true, v6)]),
  ];
  assert.deepEqual(cap.messages.slice(2).map((m) => m.bytes), expected);
});

Deno.test("JSON queued while the collector was down: stamped when sent, same document", async () => {
  const clock = new ManualClock(Date.UTC(2023, 6, 25, 10, 0, 0));
  const cap = await closedCapture({ json: true });
  const e = exporter(cap.port, "tcp", { clock, recordFormat: "JSON", backoffInitialMs: 1000 });
  const records = [flow(false, 0), flow(true, 1)];
  await queueThenConnect(e, cap, clock, records);
  await cap.waitFor(() => cap.lines.length === 2, 5000, "2 documents");
  await e.stop();
  await cap.close();
  const expected = records.map((r) => {
    const names = exportTemplateFields(r.isIPv6, false);
    const rec = r.record as unknown as Record<string, never>;
    return jsonRecordLine(names, names.map((n) => rec[n]), clock.wallMs()).trimEnd();
  });
  assert.deepEqual(cap.lines, expected);
  assert.ok(cap.lines[0].startsWith('{"@timestamp":"2023-07-25T10:01:00Z"'), cap.lines[0]);
});

Deno.test("IPv6 collector address ([::1]:port:tcp)", async () => {
  const cap = CaptureServer.listen({ kind: "tcp", hostname: "::1" });
  const e = exporter(cap.port, "tcp", { address: `[::1]:${cap.port}:tcp` });
  await e.start();
  e.addRecord(flow(true, 0));
  await cap.waitFor(() => cap.records.length === 1);
  await e.stop();
  await cap.close();
  assert.equal(cap.records[0].record.sourceIPv6Address, "2001:0:3238:dfe1:63::fefb");
});

/** A local TCP port nobody listens on (connects are refused at once). */
function refusedPort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

Deno.test("reconnect backoff runs on the clock: 1 s, 2 s, 4 s, then capped at 4 s", async () => {
  const clock = new ManualClock();
  const e = exporter(refusedPort(), "tcp", {
    clock,
    backoffInitialMs: 1000,
    backoffMaxMs: 4000,
    stopTimeoutMs: 2000,
  });
  await e.start();
  e.addRecord(flow(false, 0));
  let attempts = 0;
  for (const delay of [1000, 2000, 4000, 4000, 4000]) {
    // The pump has dialled (refused: one error each) and now waits on exactly one timer.
    await clock.whenTimersPending();
    attempts++;
    assert.deepEqual(clock.pendingTimers(), [delay], `delay after attempt ${attempts}`);
    assert.equal(e.stats().errors, attempts);
    clock.advance(delay - 1);
    assert.deepEqual(clock.pendingTimers(), [1], "no redial before the delay is over");
    assert.equal(e.stats().errors, attempts);
    clock.advance(1);
    assert.deepEqual(clock.pendingTimers(), []);
  }
  await clock.whenTimersPending();
  assert.equal(e.stats().errors, 6);
  assert.equal(e.stats().queued, 1, "the record waits for the collector");
  // stop() keeps trying for stopTimeoutMs on the same clock, then gives up on the record.
  const stopped = e.stop();
  assert.deepEqual(clock.pendingTimers(), [2000, 4000]);
  clock.advance(2000);
  await stopped;
  assert.deepEqual(clock.pendingTimers(), []);
  const s = e.stats();
  assert.equal(s.errors, 6, "no attempt after the stop timeout");
  assert.equal(s.dropped, 1);
  assert.equal(s.exported + s.dropped, s.received);
});

Deno.test("'records dropped' is logged every 10 s of the clock's monotonic time, a wall step back included", async () => {
  // Its limiter read Date.now: an hour's step back muted the warnings for the hour.
  const clock = new WallStepClock();
  const warnedAt: number[] = [];
  setLogWriter((line) => {
    if (line.includes("queue full")) warnedAt.push(clock.nowMs() / 1000);
  });
  try {
    const e = exporter(refusedPort(), "tcp", {
      clock,
      maxQueueRecords: 1,
      backoffInitialMs: 3_600_000,
      backoffMaxMs: 3_600_000,
      stopTimeoutMs: 100,
    });
    await e.start();
    e.addRecord(flow(false, 0));
    // A record a second for 2 minutes, each dropping one; the wall clock goes back 1 h at 1 min.
    for (let s = 0; s < 120; s++) {
      if (s === 60) clock.stepWall(-3_600_000);
      e.addRecord(flow(false, s));
      clock.advance(1000);
    }
    assert.equal(e.stats().dropped, 120);
    const stopped = e.stop();
    await clock.whenTimersPending(2);
    clock.advance(3_600_000);
    await stopped;
  } finally {
    setLogWriter(() => {});
  }
  assert.deepEqual(warnedAt, Array.from({ length: 12 }, (_, i) => i * 10));
});

Deno.test("a short session keeps the backoff growing; a 10 s session resets it", async () => {
  const clock = new ManualClock();
  const { cap, e } = await startExporter("tcp", {
    clock,
    backoffInitialMs: 1000,
    backoffMaxMs: 8000,
  });
  let sent = 0;
  const send = async (): Promise<void> => {
    e.addRecord(flow(false, sent++));
    await cap.waitFor(() => cap.records.length === sent, 5000, `record ${sent}`);
  };
  /** The collector ends the session; the next record finds it gone. */
  const endSession = async (): Promise<void> => {
    cap.dropConnections();
    await cap.waitFor(() => !e.stats().connected, 5000, "exporter notices EOF");
    e.addRecord(flow(false, sent++));
  };
  await send();
  assert.equal(cap.connections, 1);
  assert.deepEqual(clock.pendingTimers(), [], "the first connect is immediate");

  // A collector that accepts and then closes every session must not make the exporter loop:
  // a session shorter than 10 s on the clock delays the next dial by the next backoff step.
  for (const [delay, connections] of [[1000, 2], [2000, 3], [4000, 4]]) {
    await endSession();
    await clock.whenTimersPending();
    assert.deepEqual(clock.pendingTimers(), [delay]);
    assert.equal(cap.connections, connections - 1, "no redial before the delay");
    clock.advance(delay);
    await cap.waitFor(() => cap.records.length === sent, 5000, `record ${sent}`);
    assert.equal(cap.connections, connections);
  }

  // This session lasts 10 s: once it ends the exporter redials at once, with no timer...
  clock.advance(10_000);
  await endSession();
  await cap.waitFor(() => cap.records.length === sent, 5000, `record ${sent}`);
  assert.equal(cap.connections, 5);
  assert.deepEqual(clock.pendingTimers(), []);
  // ...and the backoff starts over at the initial delay.
  await endSession();
  await clock.whenTimersPending();
  assert.deepEqual(clock.pendingTimers(), [1000]);
  clock.advance(1000);
  await cap.waitFor(() => cap.records.length === sent, 5000, `record ${sent}`);
  assert.equal(cap.connections, 6);

  await e.stop();
  await cap.close();
  const s = e.stats();
  assert.equal(s.reconnects, 5);
  assert.equal(cap.records.length, sent);
  // Every session but the last was ended by the collector with records not proven read.
  assert.equal(s.exported + s.unacknowledged, sent);
  assert.equal(s.unacknowledged, s.possiblyLost);
  assert.ok(s.exported >= 1, "the last session ended cleanly");
  assert.equal(s.dropped, 0);
});

Deno.test("JSON format over UDP: one datagram per record", async () => {
  const { cap, e } = await startExporter("udp", { recordFormat: "JSON" }, { json: true });
  for (let i = 0; i < 5; i++) e.addRecord(flow(i === 4, i));
  await cap.waitFor(() => cap.lines.length === 5);
  await e.stop();
  await cap.close();
  assert.equal(cap.messages.length, 5);
  assert.equal(e.stats().messages, 5);
  const last = JSON.parse(cap.lines[4]);
  assert.equal(last.ipfix.destinationClusterIPv6, "2001:0:3238:dfe1:64::a");
  assert.equal(last.ipfix.destinationClusterIPv4, undefined);
});

Deno.test("options from the flowCollector config section; explicit ODID 0 is honoured", () => {
  const o = ipfixOptionsFromConfig(
    {
      address: "[::1]:4739:udp",
      observationDomainID: 0,
      recordFormat: "JSON",
      idleSessionTimeoutMs: 60_000,
      templateRefreshTimeoutMs: 120_000,
    },
    { podLabels: true },
  );
  assert.deepEqual(o, {
    address: "[::1]:4739:udp",
    observationDomainId: 0,
    recordFormat: "JSON",
    idleSessionTimeoutMs: 60_000,
    templateRefreshMs: 120_000,
    podLabels: true,
  });
  assert.equal(new IpfixExporter(o).observationDomainId, 0);
  const derived = new IpfixExporter(
    ipfixOptionsFromConfig({
      address: "h",
      recordFormat: "",
      idleSessionTimeoutMs: 0,
      templateRefreshTimeoutMs: 60_000,
    }, {
      clusterUuid: "00000000-0000-0000-0000-000000000000",
    }),
  );
  assert.equal(derived.observationDomainId, 1768495365);
});

// The templates went out at the first send and then every 1800 s, not configurable: nfcapd
// started after the aggregator decoded none of 3,343 datagrams while each counted `exported`.
Deno.test("UDP: a collector that starts late decodes once the default 60 s refresh has passed", async () => {
  const clock = new ManualClock();
  const cap = CaptureServer.listen({ kind: "udp" });
  await cap.close();
  const e = exporter(cap.port, "udp", { clock });
  await e.start();
  e.addRecord(flow(false, 0));
  await cap.waitFor(() => e.stats().exported === 1, 2000, "sent to nobody");
  assert.equal(e.stats().templatesSent, 2);
  assert.deepEqual(clock.pendingTimers(), [60_000]);
  // The collector starts: data without templates is all it gets.
  cap.reopen();
  e.addRecord(flow(false, 1));
  await cap.waitFor(() => cap.templateMisses === 1, 2000, "a data set it cannot decode");
  clock.advance(59_999);
  assert.equal(e.stats().templateRefreshes, 0);
  clock.advance(1);
  await cap.waitFor(() => e.stats().templateRefreshes === 1, 2000, "refresh at 60 s");
  e.addRecord(flow(false, 2));
  await cap.waitFor(() => cap.records.length === 1, 2000, "the next record decodes");
  await e.stop();
  await cap.close();
  assert.equal(cap.records[0].record.flowEndSeconds, fixture(false, 2).flowEndSeconds);
  const s = e.stats();
  assert.equal(s.templatesSent, 4);
  assert.equal(s.templateRefreshes, 1);
  assert.equal(s.exported, 3);
});

Deno.test("TCP: templates once per connection, never refreshed", async () => {
  const clock = new ManualClock();
  const { cap, e } = await startExporter("tcp", { clock });
  e.addRecord(flow(false, 0));
  await cap.waitFor(() => cap.records.length === 1);
  assert.deepEqual(clock.pendingTimers(), [], "no refresh timer");
  clock.advance(3_600_000);
  e.addRecord(flow(false, 1));
  await cap.waitFor(() => cap.records.length === 2);
  await e.stop();
  await cap.close();
  assert.equal(e.stats().templatesSent, 2);
  assert.equal(e.stats().templateRefreshes, 0);
});

Deno.test("UDP: the refresh timer on the clock re-sends templates while idle", async () => {
  const clock = new ManualClock();
  const { cap, e } = await startExporter("udp", { clock, templateRefreshMs: 150_000 });
  e.addRecord(flow(false, 0));
  await cap.waitFor(() => cap.records.length === 1);
  // No more records: only the timer can trigger the next announcements.
  assert.deepEqual(clock.pendingTimers(), [150_000]);
  clock.advance(149_999);
  assert.equal(e.stats().templatesSent, 2);
  clock.advance(1);
  await cap.waitFor(() => e.stats().templatesSent === 4, 2000, "idle refresh");
  assert.deepEqual(clock.pendingTimers(), [150_000], "re-armed for the next interval");
  await cap.waitFor(() => cap.messages.length === 5);
  await e.stop();
  await cap.close();
  const sets = cap.messages.map((m) => m.setIds[0]);
  assert.deepEqual(sets, [2, 2, 256, 2, 2]);
  assert.deepEqual(clock.pendingTimers(), [], "stop() disarms the refresh");
});

/**
 * Exports three records over TCP, the middle one with `protocolIdentifier` set to `value`: it is
 * dropped and counted as an error, the other two go out. Returns the capture.
 */
async function oneBadProtocol(value: unknown) {
  const { cap, e } = await startExporter("tcp");
  const bad = fixture(false, 1);
  (bad as unknown as Record<string, unknown>).protocolIdentifier = value;
  e.addRecord(flow(false, 0));
  e.addRecord(flow(false, 1, bad));
  e.addRecord(flow(false, 2));
  await cap.waitFor(() => cap.records.length === 2);
  await e.stop();
  await cap.close();
  const s = e.stats();
  assert.equal(s.exported, 2);
  assert.equal(s.dropped, 1);
  assert.equal(s.errors, 1);
  assert.deepEqual(cap.records.map((r) => r.record.flowEndSeconds), [1637706973, 1637706975]);
  return cap;
}

Deno.test("a record with a wrongly typed value is dropped alone; its batch still goes out", async () => {
  const cap = await oneBadProtocol("tcp");
  // RFC sequence numbers count only what was sent.
  assert.equal(cap.messages.length, 3);
});

Deno.test("a record with a value too large for its field is dropped and counted, not wrapped", async () => {
  // protocolIdentifier (unsigned8) 300 went out as 44 (0x2c): a wrong flow, silently.
  await oneBadProtocol(300);
});

Deno.test("a record queued while the idle pump is between its checks is still sent", async () => {
  // The idle pump checks the queue, then awaits the UDP template refresh check (a real send
  // when due), then waits for a wake-up: a record added in between signalled nobody and sat in
  // the queue until some later record arrived. The clock hook adds it exactly there.
  let reads = -1;
  const hook: { run?: () => void } = {};
  class HookClock extends ManualClock {
    override nowMs(): number {
      if (reads >= 0 && ++reads === 2) hook.run?.();
      return super.nowMs();
    }
  }
  const { cap, e } = await startExporter("udp", { clock: new HookClock() });
  e.addRecord(flow(false, 0));
  await cap.waitFor(() => cap.records.length === 1);
  // Read 1: the refresh check before sending record 1; read 2: the idle check after it.
  hook.run = () => e.addRecord(flow(false, 2));
  reads = 0;
  e.addRecord(flow(false, 1));
  await cap.waitFor(() => cap.records.length === 3, 2000, "the record added while going idle");
  await e.stop();
  await cap.close();
  assert.equal(e.stats().exported, 3);
});

Deno.test("flush() between slices: more records than the queue holds all reach the collector", async () => {
  // The export loop hands a burst (shutdown, expiry storm) over in slices and awaits flush()
  // in between; without it every slice beyond the queue bound was dropped.
  const cap = CaptureServer.listen({ kind: "tcp" });
  const e: Exporter = exporter(cap.port, "tcp", { maxQueueRecords: 1000 });
  await e.start();
  for (let slice = 0; slice < 3; slice++) {
    for (let i = 0; i < 1000; i++) e.addRecord(flow(false, slice * 1000 + i));
    await e.flush?.();
  }
  await cap.waitFor(() => cap.records.length === 3000, 5000, "3000 records");
  await e.stop();
  await cap.close();
  const s = e.stats();
  assert.equal(s.dropped, 0);
  assert.equal(s.exported, 3000);
});

// While a collector does not read, each flush the export loop gave up on (its timeout) kept a
// waiter of its own until the queue drained: one more per burst for as long as it stalls.
Deno.test("flush(): calls waiting for a collector that does not read share one wait", async () => {
  const silent = new SilentCollector();
  const e: Exporter = exporter(silent.port, "tcp", { maxQueueRecords: 100_000, stopTimeoutMs: 50 });
  await e.start();
  for (let i = 0; i < 20_000; i++) e.addRecord(flow(false, i));
  const first = e.flush!();
  for (let i = 0; i < 100; i++) assert.equal(e.flush!(), first, "the same wait");
  await e.stop();
  // The stop's drop of what was left releases the wait.
  await withDeadline(first, 5_000, "the flush after stop");
  await silent.kill();
});

Deno.test("flush() does not wait for a collector that is down", async () => {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  const x = exporter(port, "tcp", {
    backoffInitialMs: 60_000,
    backoffMaxMs: 60_000,
    stopTimeoutMs: 50,
  });
  const e: Exporter = x;
  await e.start();
  e.addRecord(flow(false, 1));
  const t0 = performance.now();
  await e.flush?.();
  // Refused at once on loopback; waiting for the reconnect would take the 60 s backoff.
  assert.ok(performance.now() - t0 < 30_000, "flush resolved once the connect attempt failed");
  assert.equal(x.stats().queued, 1, "the record waits for the reconnect");
  await e.stop();
  assert.equal(e.stats().dropped, 1);
});

Deno.test("stop() during a connect that never completes ends within the stop timeout", async () => {
  // A TCP server that accepts and never answers: the TLS handshake hangs until its timeout.
  const server = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    try {
      for await (const c of server) held.push(c);
    } catch {
      // listener closed
    }
  })();
  const port = (server.addr as Deno.NetAddr).port;
  const e = exporter(port, "tls", { connectTimeoutMs: 30_000, stopTimeoutMs: 200 });
  try {
    await e.start();
    e.addRecord(flow(false));
    while (held.length === 0) await new Promise((r) => setTimeout(r, 10));
    const t0 = performance.now();
    await e.stop();
    const took = performance.now() - t0;
    // The stop timeout is 200 ms; waiting for the connect would take its 30 s timeout.
    assert.ok(took < 15_000, `stop took ${Math.round(took)} ms (connect timeout is 30 s)`);
    assert.equal(e.stats().dropped, 1, "the undelivered record is counted");
  } finally {
    for (const c of held) c.close();
    server.close();
    await accepting;
  }
});
