/**
 * The TCP/TLS connection bounds of the `limits:` section against real sockets on loopback:
 * caps refuse at accept and count by limit, the timeouts run on an injected clock and count by
 * limit, and a legitimate peer is served next to every refused or timed-out one.
 */

import assert from "node:assert/strict";
import { ManualClock } from "../../src/clock.ts";
import type { LimitsConfig } from "../../src/config/limits.ts";
import { setLogLevel } from "../../src/log.ts";
import { generateCertificates } from "../../src/pki/mod.ts";
import { openTransport } from "../../src/net/transport.ts";
import type { Collector } from "../../src/collector/mod.ts";
import {
  concat,
  GOLDEN_DATA,
  GOLDEN_TEMPLATE,
  readUntilClosed,
  startCollector,
  writeAll,
} from "./helpers.ts";
import { clientTls, collectorTls } from "../_helpers/tls.ts";
import { waitFor } from "../_helpers/wait.ts";

setLogLevel("error");

const certs = generateCertificates({ namespace: "flow-aggregator", address: "127.0.0.1" });

/** Starts a collector with `limits` on `clock`; the caller stops it. */
function start(
  protocol: "tcp" | "tls",
  limits: Partial<LimitsConfig>,
  clock = new ManualClock(),
): ReturnType<typeof startCollector> {
  return startCollector({
    address: "[::]:0",
    protocol,
    clock,
    limits,
    ...(protocol === "tls" ? { tls: collectorTls(certs) } : {}),
  });
}

/** Sends the golden template and data over a legitimate connection; waits for the record. */
async function servesAgent(c: Collector, protocol: "tcp" | "tls"): Promise<void> {
  const before = c.stats().dataRecords;
  const t = await openTransport({
    host: "127.0.0.1",
    port: c.port,
    kind: protocol,
    tls: protocol === "tls" ? { ...clientTls(certs), settleMs: 0 } : undefined,
  });
  try {
    await t.send([GOLDEN_TEMPLATE, GOLDEN_DATA]);
    await waitFor(() => c.stats().dataRecords === before + 1, { what: "the agent's record" });
  } finally {
    t.close();
  }
}

Deno.test("connections: the per-address and total caps refuse at accept, counted by limit", async () => {
  const { c } = await start("tcp", { maxConnections: 4, maxConnectionsPerAddress: 2 });
  const open: Deno.TcpConn[] = [];
  try {
    for (const hostname of ["127.0.0.1", "127.0.0.1", "::1"]) {
      open.push(await Deno.connect({ hostname, port: c.port }));
    }
    await waitFor(() => c.stats().sessionsActive === 3, { what: "three admitted" });
    const overAddress = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
    assert.equal(await readUntilClosed(overAddress), true, "closed at accept");
    open.push(await Deno.connect({ hostname: "::1", port: c.port }));
    await waitFor(() => c.stats().sessionsActive === 4, { what: "a fourth from another address" });
    const overTotal = await Deno.connect({ hostname: "::1", port: c.port });
    assert.equal(await readUntilClosed(overTotal), true, "closed at accept");
    let s = c.stats();
    assert.deepEqual(s.connectionsRefused, { maxConnectionsPerAddress: 1, maxConnections: 1 });
    assert.equal(s.sessionsOpened, 4, "a refused connection opens no session");
    // The admitted ones are served; one gone frees a place.
    await writeAll(open[2], concat(GOLDEN_TEMPLATE, GOLDEN_DATA));
    await waitFor(() => c.stats().dataRecords === 1, { what: "record on an admitted connection" });
    open.shift()!.close();
    await waitFor(() => c.stats().sessionsActive === 3, { what: "a place freed" });
    await servesAgent(c, "tcp");
    s = c.stats();
    assert.equal(s.dataRecords, 2);
    assert.deepEqual(s.connectionsRefused, { maxConnectionsPerAddress: 1, maxConnections: 1 });
  } finally {
    for (const o of open) o.close();
    await c.stop();
  }
});

Deno.test("connections: a silent connection is closed at the idle timeout (injected clock)", async () => {
  const clock = new ManualClock();
  const { c } = await start("tcp", { idleTimeoutMs: 5000, readTimeoutMs: 60_000 }, clock);
  const idle = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
  const active = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
  try {
    await writeAll(idle, GOLDEN_TEMPLATE);
    await writeAll(active, GOLDEN_TEMPLATE);
    await waitFor(() => c.stats().messages === 2, { what: "templates" });
    clock.advance(4000);
    await writeAll(active, GOLDEN_DATA);
    await waitFor(() => c.stats().dataRecords === 1, { what: "active connection's record" });
    clock.advance(999);
    assert.equal(c.stats().sessionsActive, 2, "not before the timeout");
    clock.advance(1);
    assert.equal(await readUntilClosed(idle), true, "idle connection closed");
    await waitFor(() => c.stats().sessionsActive === 1, { what: "idle session closed" });
    assert.deepEqual(c.stats().connectionsTimedOut, { idleTimeout: 1 });
    // The active one read 1 s ago: its idle time started then.
    clock.advance(3999);
    assert.equal(c.stats().sessionsActive, 1);
    clock.advance(1);
    await waitFor(() => c.stats().sessionsActive === 0, { what: "second idle close" });
    assert.deepEqual(c.stats().connectionsTimedOut, { idleTimeout: 2 });
  } finally {
    idle.close();
    active.close();
    await c.stop();
  }
});

Deno.test("connections: a started message not completed in time is closed at the read timeout", async () => {
  const clock = new ManualClock();
  const { c } = await start("tcp", { readTimeoutMs: 1000, idleTimeoutMs: 600_000 }, clock);
  // Slowloris: a header announcing 65,535 bytes, 100 bytes of body, then silence.
  const header = new Uint8Array([0, 10, 0xff, 0xff, ...new Array(12).fill(0)]);
  const slow = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
  const tiny = await Deno.connect({ hostname: "::1", port: c.port });
  try {
    await writeAll(slow, concat(header, new Uint8Array(100)));
    await writeAll(tiny, new Uint8Array([0, 10, 0])); // not even a whole length field
    await waitFor(() => c.stats().bytes === 119, { what: "partial messages read" });
    clock.advance(999);
    assert.equal(c.stats().sessionsActive, 2);
    clock.advance(1);
    assert.equal(await readUntilClosed(slow), true);
    assert.equal(await readUntilClosed(tiny), true);
    await waitFor(() => c.stats().sessionsActive === 0, { what: "both closed" });
    const s = c.stats();
    assert.deepEqual(s.connectionsTimedOut, { readTimeout: 2 });
    assert.equal(s.bytesDiscarded, 119, "the partial messages are counted, never decoded");
    assert.equal(s.messages, 0);
    await servesAgent(c, "tcp");
  } finally {
    slow.close();
    tiny.close();
    await c.stop();
  }
});

Deno.test("connections: a peer completing each message in time is never read-timed-out", async () => {
  const clock = new ManualClock();
  const { c } = await start("tcp", { readTimeoutMs: 1000, idleTimeoutMs: 600_000 }, clock);
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
  try {
    const stream = concat(GOLDEN_TEMPLATE, GOLDEN_DATA, GOLDEN_DATA, GOLDEN_DATA);
    // Every write ends inside a message; each message completes within 600 ms of starting.
    for (const [from, to] of [[0, 200], [200, 400], [400, 600], [600, stream.length]]) {
      await writeAll(conn, stream.subarray(from, to));
      await waitFor(() => c.stats().bytes === to, { what: `bytes up to ${to}` });
      clock.advance(600);
    }
    assert.equal(c.stats().dataRecords, 3);
    assert.equal(c.stats().sessionsActive, 1);
    assert.deepEqual(c.stats().connectionsTimedOut, {});
  } finally {
    conn.close();
    await c.stop();
  }
});

Deno.test("connections: TLS handshakes in progress are capped and time out", async () => {
  const clock = new ManualClock();
  const { c } = await start("tls", { maxTlsHandshakes: 2, tlsHandshakeTimeoutMs: 10_000 }, clock);
  const halfOpen: Deno.TcpConn[] = [];
  try {
    // Plain TCP connections that never start a handshake.
    for (let i = 0; i < 2; i++) {
      halfOpen.push(await Deno.connect({ hostname: "127.0.0.1", port: c.port }));
    }
    await waitFor(() => c.stats().connectionsRefused.maxTlsHandshakes === undefined);
    const third = await Deno.connect({ hostname: "::1", port: c.port });
    assert.equal(await readUntilClosed(third), true, "refused at accept");
    assert.deepEqual(c.stats().connectionsRefused, { maxTlsHandshakes: 1 });
    clock.advance(9_999);
    clock.advance(1);
    for (const h of halfOpen) assert.equal(await readUntilClosed(h), true, "timed out");
    await waitFor(() => c.stats().connectionsTimedOut.tlsHandshakeTimeout === 2, {
      what: "handshake timeouts counted",
    });
    const s = c.stats();
    assert.equal(s.tlsHandshakeFailures, 0, "closed by us: counted as timeouts only");
    assert.equal(s.sessionsOpened, 0);
    // The places are free again: a real Agent completes its handshake and is served.
    await servesAgent(c, "tls");
  } finally {
    for (const h of halfOpen) h.close();
    await c.stop();
  }
});

Deno.test("connections: an agent is served while the handshake cap is full", async () => {
  const clock = new ManualClock();
  const { c } = await start("tls", { maxTlsHandshakes: 1, tlsHandshakeTimeoutMs: 10_000 }, clock);
  const stuck = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
  try {
    await waitFor(() => c.stats().sessionsOpened === 0);
    // The cap is full: the Agent's connection is refused until the stuck one times out.
    await assert.rejects(servesAgent(c, "tls"));
    assert.equal(c.stats().connectionsRefused.maxTlsHandshakes, 1);
    clock.advance(10_000);
    assert.equal(await readUntilClosed(stuck), true);
    await waitFor(() => c.stats().connectionsTimedOut.tlsHandshakeTimeout === 1);
    await servesAgent(c, "tls");
  } finally {
    stuck.close();
    await c.stop();
  }
});
