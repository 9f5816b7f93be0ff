/**
 * Round trip: flowgen (simulated Agents) -> our Collector -> aggregation -> IpfixExporter -> a
 * second Collector, which must decode every exported record with identical values for all
 * 63/65 IEs, IPv4 and IPv6, over TCP and UDP.
 */
import assert from "node:assert/strict";
import { exportTemplateFields, IpfixExporter } from "../../src/exporters/ipfix/exporter.ts";
import { syntheticAggregate } from "../../src/flowgen/mod.ts";
import type { ExportedFlow } from "../../src/aggregation/record.ts";
import { setLogWriter } from "../../src/log.ts";
import { generateCertificates } from "../../src/pki/mod.ts";
import { clientTls, collectorTls } from "../_helpers/tls.ts";
import { waitFor } from "../_helpers/wait.ts";
import { kernelUdpDrops } from "../_helpers/udp_drops.ts";
import { DEFAULT_RECV_BUFFER } from "../../src/collector/udp_fast.ts";
import {
  decodingCollector,
  flowgenToAgentSide,
  type Received,
  syntheticFlows,
} from "./helpers/ipfix_export.ts";

setLogWriter(() => {});

/** Asserts `got[i]` carries exactly the template fields of `sent[i]` with identical values. */
function assertIdentical(got: Received[], sent: ExportedFlow[], labels: boolean): void {
  assert.equal(got.length, sent.length);
  // Order is kept within each family (the exporter may put IPv4 before IPv6 in a batch).
  for (const v6 of [false, true]) {
    assertSameOrder(
      got.filter((g) => g.templateId === (v6 ? 257 : 256)),
      sent.filter((f) => f.isIPv6 === v6),
      labels,
    );
  }
}

function assertSameOrder(got: Received[], sent: ExportedFlow[], labels: boolean): void {
  assert.equal(got.length, sent.length);
  for (let i = 0; i < sent.length; i++) {
    const f = sent[i];
    const names = exportTemplateFields(f.isIPv6, labels);
    assert.equal(got[i].templateId, f.isIPv6 ? 257 : 256);
    assert.deepEqual(Object.keys(got[i].record), names, `record ${i}: template order`);
    const exp = f.record as unknown as Record<string, unknown>;
    for (const n of names) {
      const want = exp[n] ?? (n === "destinationClusterIPv4" ? "0.0.0.0" : undefined);
      assert.deepEqual(got[i].record[n], want, `record ${i} field ${n}`);
    }
  }
}

async function roundTrip(exportProto: "tcp" | "udp", labels: boolean, records: number) {
  const exported: ExportedFlow[] = [];
  const got: Received[] = [];
  const external = await decodingCollector(exportProto, got);
  const exporter = new IpfixExporter({
    address: `127.0.0.1:${external.port}:${exportProto}`,
    clusterUuid: "4c7a2a3e-5a1f-4b7e-9d3c-2f1e0a9b8c7d",
    podLabels: labels,
  });
  await exporter.start();
  let seq = 0;
  const { agentSide, report } = await flowgenToAgentSide((r) => {
    const f = syntheticAggregate(r, seq++);
    exported.push(f);
    exporter.addRecord(f);
  }, {
    agents: 3,
    flows: 300,
    rate: exportProto === "udp" ? 4000 : 20_000,
    records,
    seed: 99,
  });
  // Wait on counts, with a generous deadline. TCP: every record arrived. UDP: the exporter has
  // sent every record, and each of its datagrams was read by the external collector or dropped
  // by the kernel, which counts it in /proc/net/udp (a lost one is reported below, not waited
  // for until the deadline).
  const ledger = () => {
    const s = exporter.stats();
    const es = external.stats();
    return {
      records: report.records,
      received: got.length,
      exported: s.exported,
      sent: s.messages,
      read: es.messages + es.decodeErrorsTotal,
      kernelDrops: exportProto === "udp" ? kernelUdpDrops(external.port).drops : 0,
    };
  };
  await waitFor(() => {
    const l = ledger();
    if (exportProto === "tcp") return l.received >= l.records;
    return l.exported >= l.records && l.read + l.kernelDrops >= l.sent;
  }, { timeoutMs: 30_000, what: "exported records" }).catch((e) => {
    throw new Error(`${e.message}: ${JSON.stringify(ledger())}`);
  });
  const kernel = exportProto === "udp" ? kernelUdpDrops(external.port) : undefined;
  await exporter.stop();
  await agentSide.stop();
  await external.stop();
  if (kernel !== undefined) {
    // Accounting first: every datagram was decoded or dropped by the kernel (and counted by the
    // collector as the kernel did); then nothing was dropped: the whole export (~500
    // datagrams, about 1 MiB of socket memory) fits in the receive buffer even if never read.
    const es = external.stats();
    const rx = es.udpReceiver!;
    assert.equal(kernel.sockets, 1, "only the collector's socket on its port");
    assert.equal(rx.mode, "ffi");
    assert.equal(rx.queueDrops + rx.oversized, 0);
    assert.equal(es.messages + es.decodeErrorsTotal + kernel.drops, exporter.stats().messages);
    assert.equal(rx.kernelDrops, kernel.drops, "the collector's kernel drop count");
    assert.ok(rx.recvBufferBytes >= DEFAULT_RECV_BUFFER, `socket buffer ${rx.recvBufferBytes} B`);
    assert.equal(kernel.drops, 0, "datagrams dropped by the kernel");
  }
  assert.equal(exported.length, report.records);
  assert.ok(report.ipv6Records > 0 && report.ipv4Records > 0, "both families exercised");
  assertIdentical(got, exported, labels);
  const s = exporter.stats();
  assert.equal(s.received, report.records);
  assert.equal(s.exported, report.records);
  assert.equal(s.dropped, 0);
  const es = external.stats();
  assert.equal(es.templateMisses, 0);
  assert.equal(es.decodeErrorsTotal, 0);
  assert.equal(es.dataRecords, report.records);
  return { s, es };
}

Deno.test("round trip over TCP with Pod labels: all 65 IEs identical, IPv4 and IPv6", async () => {
  const { s, es } = await roundTrip("tcp", true, 3000);
  assert.ok(s.messages < 3000 / 4, `records batched: ${s.messages} messages`);
  assert.equal(es.templateRecords, 2);
});

Deno.test("round trip over UDP without labels: all 63 IEs identical, datagrams < 1400 B", async () => {
  const { s } = await roundTrip("udp", false, 1500);
  assert.ok(s.bytes / s.messages < 1400);
  assert.ok(s.messages < 1500, "several records per datagram");
});

Deno.test("export over mutual TLS to our Collector; a client without certificate is refused", async () => {
  const certs = generateCertificates({ address: "127.0.0.1" });
  const got: Received[] = [];
  const c = await decodingCollector("tls", got, collectorTls(certs));
  const e = new IpfixExporter({
    address: `127.0.0.1:${c.port}:tls`,
    observationDomainId: 3,
    tls: clientTls(certs),
  });
  await e.start();
  const sent = syntheticFlows(200, { agents: 2, flows: 50, seed: 6 });
  for (const f of sent) e.addRecord(f);
  await waitFor(() => got.length >= sent.length, { timeoutMs: 5000, what: "tls records" });
  await e.stop();
  assertIdentical(got, sent, false);
  // Same collector, exporter without a client certificate: the handshake is refused.
  const bad = new IpfixExporter({
    address: `127.0.0.1:${c.port}:tls`,
    observationDomainId: 3,
    tls: { ca: certs.ca.certPem },
    backoffInitialMs: 50,
    stopTimeoutMs: 300,
  });
  await bad.start();
  bad.addRecord(sent[0]);
  await waitFor(() => c.stats().tlsHandshakeFailures >= 1, {
    timeoutMs: 3000,
    what: "refused handshake",
  });
  await bad.stop();
  await c.stop();
  assert.equal(got.length, sent.length, "nothing from the refused client");
  const s = bad.stats();
  assert.equal(s.exported, 0, "a refused session is not counted as delivery");
  assert.equal(s.dropped, 1);
  assert.ok(s.errors >= 1);
});
