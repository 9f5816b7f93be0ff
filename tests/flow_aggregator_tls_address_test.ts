/**
 * A live `flowAggregatorAddress` change (control-plane.md §2.3, §3.2): upstream kept the old
 * server certificate until a restart; here the collector restarts with a server certificate
 * re-issued for the new address by the same CA, so Agents keep their CA and client
 * certificate and can verify the collector under the new name.
 */

import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import tls from "node:tls";
import { ManualClock } from "../src/clock.ts";
import { diffConfig, parseConfig } from "../src/components.ts";
import { FlowAggregator } from "../src/flow_aggregator.ts";
import { setLogWriter } from "../src/log.ts";
import type { GeneratedCertificates } from "../src/pki/mod.ts";
import { clientTls } from "./_helpers/tls.ts";

function tlsConfig(address: string) {
  return parseConfig(`aggregatorTransportProtocol: TLS\nflowAggregatorAddress: ${address}\n`, {
    onWarning: () => {}, // no sink: expected here
  });
}

/** Connects as an Agent verifying the collector as `host`; "ok" or the TLS error code. */
function agentConnects(port: number, certs: GeneratedCertificates): Promise<string> {
  return new Promise((resolve) => {
    const s = tls.connect({ host: "127.0.0.1", port, ...clientTls(certs) }, () => {
      resolve(s.authorized ? "ok" : String(s.authorizationError));
      s.destroy();
    });
    s.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
  });
}

Deno.test("flowAggregatorAddress change: the server certificate is re-issued by the same CA", async () => {
  const lines: string[] = [];
  const restore = setLogWriter((l) => lines.push(l));
  const published: GeneratedCertificates[] = [];
  const fa = new FlowAggregator(tlsConfig("10.0.0.1"), {
    // The certificates are made at the clock's wall time: now, for the Agents' real TLS stack.
    clock: new ManualClock(Date.now()),
    manualSweep: true,
    listenAddress: "127.0.0.1:0",
    metricsLogIntervalMs: 0,
    namespace: "ns1",
    onCertificates: (c) => {
      published.push(c);
    },
  });
  try {
    await fa.start();
    const [first] = published;
    assert.match(new X509Certificate(first.server.certPem).subjectAltName ?? "", /10\.0\.0\.1/);
    // An Agent reaching the collector as 127.0.0.1 cannot verify it yet.
    assert.equal(await agentConnects(fa.collectorPort, first), "ERR_TLS_CERT_ALTNAME_INVALID");

    const next = tlsConfig("127.0.0.1");
    const diff = diffConfig(fa.config, next);
    assert.equal(diff.collector, true);
    assert.deepEqual(diff.restartRequired, []);
    await fa.update(next, diff);

    assert.equal(published.length, 2);
    const second = published[1];
    assert.equal(second.ca.certPem, first.ca.certPem, "same CA");
    assert.deepEqual(second.client, first.client, "same client certificate for the Agents");
    const server = new X509Certificate(second.server.certPem);
    const ca = new X509Certificate(second.ca.certPem);
    assert.equal(server.subjectAltName, "DNS:flow-aggregator.ns1.svc, IP Address:127.0.0.1");
    assert.ok(server.checkIssued(ca) && server.verify(ca.publicKey), "signed by the same CA");
    assert.notEqual(server.serialNumber, new X509Certificate(first.server.certPem).serialNumber);
    assert.equal(server.validTo, ca.validTo);
    // An Agent with the material it already has now verifies the collector as 127.0.0.1.
    assert.equal(await agentConnects(fa.collectorPort, first), "ok");
    assert.ok(lines.some((l) => l.includes("server certificate re-issued")));
    assert.ok(!lines.some((l) => l.includes("please restart")), "nothing claimed needing restart");
  } finally {
    await fa.stop();
    setLogWriter(restore);
  }
});
