/**
 * The drain at stop: what the kernel already acknowledged (bytes of a TCP/TLS connection,
 * datagrams queued on the UDP socket) is read and decoded before the sockets close, and a peer
 * that never stops sending is cut at the deadline and counted.
 */

import assert from "node:assert/strict";
import { setLogLevel } from "../../src/log.ts";
import { generateCertificates } from "../../src/pki/mod.ts";
import { openTransport, type Transport } from "../../src/net/transport.ts";
import {
  concat,
  GOLDEN_DATA,
  GOLDEN_TEMPLATE,
  goldenBacklog,
  startCollector,
  udpClient,
  udpSend,
  writeAll,
} from "./helpers.ts";
import { clientTls, collectorTls } from "../_helpers/tls.ts";
import { waitFor, withDeadline } from "../_helpers/wait.ts";

setLogLevel("error");

const certs = generateCertificates({ namespace: "flow-aggregator", address: "127.0.0.1" });

for (const protocol of ["tcp", "tls"] as const) {
  Deno.test(`drain: ${protocol} bytes written before stop() are decoded, none lost`, async () => {
    const { c } = await startCollector({
      address: "127.0.0.1:0",
      protocol,
      ...(protocol === "tls" ? { tls: collectorTls(certs) } : {}),
    });
    const n = 3000; // ~525 KB: more than one read, most still queued when stop() starts
    const senders: Transport[] = [];
    try {
      for (let i = 0; i < 2; i++) {
        senders.push(
          await openTransport({
            host: "127.0.0.1",
            port: c.port,
            kind: protocol,
            tls: protocol === "tls" ? { ...clientTls(certs), settleMs: 0 } : undefined,
          }),
        );
      }
      await Promise.all(senders.map((t) => t.send([goldenBacklog(n)])));
    } finally {
      await c.stop();
    }
    const s = c.stats();
    assert.equal(s.dataRecords, 2 * n, "every record written before the stop was decoded");
    assert.equal(s.bytesLostAtStop, 0);
    assert.equal(s.connectionsCutAtStop, 0);
    assert.equal(s.decodeErrorsTotal, 0);
    // The half-close told the senders to stop: their transports saw the collector go.
    for (const t of senders) {
      await t.closed;
      assert.equal(t.open, false);
    }
  });
}

Deno.test("drain: a peer that keeps sending is cut at the deadline and counted", async () => {
  const drain = { deadlineMs: 2000, quietMs: 500 };
  const { c } = await startCollector({ address: "127.0.0.1:0", protocol: "tcp", drain });
  // A raw socket that ignores the half-close and writes until the collector is gone. It gives
  // the event loop a turn after every write: a writer in the collector's own process that finds
  // room in its socket writes again without the runtime polling the collector's pending read
  // (`fairness.ts`), so the reads came in bursts between MBs of writes, and under load one burst
  // of writes outlasted the quiet period: the connection looked drained and was not cut.
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
  await writeAll(conn, GOLDEN_TEMPLATE);
  let writes = 0;
  let closedByTest = false;
  const flood = (async (): Promise<"collector closed" | "test closed"> => {
    const chunk = concat(...new Array(50).fill(GOLDEN_DATA));
    try {
      for (;;) {
        await writeAll(conn, chunk);
        writes++;
        await new Promise((r) => setTimeout(r, 0));
      }
    } catch {
      return closedByTest ? "test closed" : "collector closed";
    }
  })();
  try {
    await waitFor(() => c.stats().dataRecords >= 100, {
      what: "the flood being read",
      timeoutMs: 30_000,
    });
    const writesBeforeStop = writes;
    await withDeadline(c.stop(), drain.deadlineMs + 30_000, "stop() (the drain's deadline)");
    const writesDuringDrain = writes - writesBeforeStop;
    // The peer was still sending when the drain ended: its writes went on through the drain, and
    // it was the collector that closed the connection under it.
    assert.ok(writesDuringDrain > 0, "the peer wrote during the drain");
    assert.equal(
      await withDeadline(flood, 30_000, "the writer seeing the connection closed"),
      "collector closed",
    );
    const s = c.stats();
    assert.equal(s.connectionsCutAtStop, 1);
    assert.equal(s.sessionsActive, 0);
    // Whole messages were decoded; the started one is counted, not silently dropped.
    assert.ok(s.dataRecords >= 100);
    assert.equal(s.decodeErrorsTotal, 0);
    const decoded = GOLDEN_TEMPLATE.length + s.dataRecords * GOLDEN_DATA.length;
    assert.equal(s.bytes, decoded + s.bytesLostAtStop, "bytes read = decoded + lost at stop");
  } finally {
    closedByTest = true;
    try {
      conn.close();
    } catch { /* already closed */ }
    await flood;
  }
});

Deno.test("drain: datagrams queued on the UDP socket at stop() are received and decoded", async () => {
  const { c } = await startCollector({ address: "127.0.0.1:0", protocol: "udp" });
  const client = udpClient("127.0.0.1");
  const n = 150; // fits the default socket buffer (rmem_default): queued, not dropped
  try {
    await udpSend(client, "127.0.0.1", c.port, GOLDEN_TEMPLATE);
    for (let i = 0; i < n; i++) await udpSend(client, "127.0.0.1", c.port, GOLDEN_DATA);
  } finally {
    await c.stop();
    client.close();
  }
  const s = c.stats();
  assert.equal(s.udpReceiver?.kernelDropsKnown, true, "the test runs with --allow-all");
  assert.equal(s.udpReceiver?.kernelDrops, 0);
  assert.equal(s.messages, n + 1, "every queued datagram was received before the close");
  assert.equal(s.dataRecords, n);
});
