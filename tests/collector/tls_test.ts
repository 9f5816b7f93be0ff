import assert from "node:assert/strict";
import net from "node:net";
import tls from "node:tls";
import { Collector, type CollectorOptions } from "../../src/collector/mod.ts";
import { generateCertificates } from "../../src/pki/mod.ts";
import { setLogLevel } from "../../src/log.ts";
import {
  concat,
  GOLDEN_DATA,
  GOLDEN_TEMPLATE,
  goldenBacklog,
  readUntilClosed,
  type Received,
  startCollector,
  writeAll,
} from "./helpers.ts";
import { collectorTls } from "../_helpers/tls.ts";
import { waitFor } from "../_helpers/wait.ts";

setLogLevel("error");

const certs = generateCertificates({ namespace: "flow-aggregator", address: "127.0.0.1" });
const otherCa = generateCertificates({});

/** Starts a TLS Collector on `address` with the test certificates (and `limits`). */
function startTls(
  address = "127.0.0.1:0",
  limits?: CollectorOptions["limits"],
): ReturnType<typeof startCollector> {
  return startCollector({ address, protocol: "tls", tls: collectorTls(certs), limits });
}

/** Waits for one failed handshake to be counted; no session was opened and nothing decoded. */
async function assertRefusedOnce(c: Collector, received: Received[]): Promise<void> {
  await waitFor(() => c.stats().tlsHandshakeFailures === 1, { what: "handshake failure counted" });
  assert.equal(c.stats().sessionsOpened, 0);
  assert.equal(received.length, 0);
}

/** Connects, writes `data`, waits for the server to close or `holdMs`; returns what happened. */
function tlsSend(
  host: string,
  port: number,
  client: { certPem: string; keyPem: string } | undefined,
  data: Uint8Array,
): Promise<{ error?: string; serverVerified: boolean }> {
  return new Promise((resolve) => {
    let error: string | undefined;
    let serverVerified = false;
    const s = tls.connect({
      host,
      port,
      ca: [certs.ca.certPem],
      servername: "flow-aggregator.flow-aggregator.svc",
      ...(client ? { cert: client.certPem, key: client.keyPem } : {}),
    }, () => {
      serverVerified = s.authorized;
      s.write(data, () => s.end());
    });
    s.on("error", (e: Error) => error = e.message);
    s.on("close", () => resolve({ error, serverVerified }));
    s.resume();
  });
}

/**
 * An Agent's node:tls client (the CA, the service name, the Agents' client certificate) over
 * `where`: a port on 127.0.0.1, or a socket of the test's own; its errors are the test's to
 * observe (ignored here).
 */
function agentTls(where: { port: number } | { socket: net.Socket }): tls.TLSSocket {
  const s = tls.connect({
    ...("port" in where ? { host: "127.0.0.1", port: where.port } : { socket: where.socket }),
    ca: [certs.ca.certPem],
    servername: "flow-aggregator.flow-aggregator.svc",
    cert: certs.client.certPem,
    key: certs.client.keyPem,
  });
  s.on("error", () => {});
  return s;
}

for (const host of ["127.0.0.1", "::1"]) {
  Deno.test(`tls: a client with the CA-signed certificate is collected (${host})`, async () => {
    const { c, received } = await startTls("[::]:0");
    try {
      const r = await tlsSend(host, c.port, certs.client, concat(GOLDEN_TEMPLATE, GOLDEN_DATA));
      assert.equal(r.serverVerified, true);
      await waitFor(() => received.length === 1, { what: "data over TLS" });
      assert.equal(received[0].ctx.transport, "tls");
      assert.equal(received[0].ctx.exporterAddress, host);
      assert.equal(received[0].records[0].destinationTransportPort, 5201);
      await waitFor(() => c.stats().sessionsClosed === 1, { what: "session closed on EOF" });
      const s = c.stats();
      assert.equal(s.tlsHandshakeFailures, 0);
      assert.equal(s.sessionsOpened, 1);
      assert.equal(s.messages, 2);
    } finally {
      await c.stop();
    }
  });
}

Deno.test("tls: a burst of several read turns is decoded whole from its 16 KiB pieces", async () => {
  const { c, received } = await startTls();
  try {
    // One 2 MiB write: reads of up to 256 KiB, each handed to the TLS layer in 16 KiB pieces
    // whose edges fall inside TLS records and IPFIX messages.
    const reps = Math.ceil(2 * 1024 * 1024 / GOLDEN_DATA.length);
    const r = await tlsSend("127.0.0.1", c.port, certs.client, goldenBacklog(reps));
    assert.equal(r.error, undefined);
    await waitFor(() => c.stats().sessionsClosed === 1, { what: "session closed on EOF" });
    const s = c.stats();
    assert.equal(s.messages, reps + 1);
    assert.equal(s.sessionsClosedOnError, 0);
    assert.equal(received.length, reps);
  } finally {
    await c.stop();
  }
});

Deno.test("tls: past maxReadBufferBytes a burst is read in smaller pieces, whole; the room is given back", async () => {
  const { c, received } = await startTls(undefined, { maxReadBufferBytes: 4096 });
  try {
    const reps = Math.ceil(1024 * 1024 / GOLDEN_DATA.length);
    const r = await tlsSend("127.0.0.1", c.port, certs.client, goldenBacklog(reps));
    assert.equal(r.error, undefined);
    await waitFor(() => c.stats().sessionsClosed === 1, { what: "session closed on EOF" });
    await waitFor(() => c.stats().readBufferBytes === 0, { what: "read buffers given back" });
    const s = c.stats();
    assert.equal(s.sessionsClosedOnError, 0);
    assert.equal(received.length, reps);
    assert.ok(s.readBuffersLimited > 0, "encrypted reads were held to smaller buffers");
  } finally {
    await c.stop();
  }
});

Deno.test("tls: a client without a certificate is refused and counted", async () => {
  const { c, received } = await startTls();
  try {
    await tlsSend("127.0.0.1", c.port, undefined, concat(GOLDEN_TEMPLATE, GOLDEN_DATA));
    await assertRefusedOnce(c, received);
    assert.equal(c.stats().messages, 0);
  } finally {
    await c.stop();
  }
});

Deno.test("tls: a client certificate from another CA is refused and counted", async () => {
  const { c, received } = await startTls();
  try {
    await tlsSend("127.0.0.1", c.port, otherCa.client, concat(GOLDEN_TEMPLATE, GOLDEN_DATA));
    await assertRefusedOnce(c, received);
    // A good client still gets through afterwards.
    await tlsSend("127.0.0.1", c.port, certs.client, concat(GOLDEN_TEMPLATE, GOLDEN_DATA));
    await waitFor(() => received.length === 1, { what: "good client after a refused one" });
  } finally {
    await c.stop();
  }
});

Deno.test("tls: a framing error closes the TLS session", async () => {
  const { c } = await startTls();
  try {
    await tlsSend("127.0.0.1", c.port, certs.client, new Uint8Array([0, 10, 0, 0, 1, 2, 3]));
    await waitFor(() => c.stats().sessionsClosedOnError === 1, { what: "closed on framing error" });
    assert.equal(c.stats().decodeErrors.framing, 1);
  } finally {
    await c.stop();
  }
});

Deno.test("tls: plain IPFIX bytes sent to the TLS port fail the handshake and are counted", async () => {
  const { c, received } = await startTls();
  try {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
    await writeAll(conn, concat(GOLDEN_TEMPLATE, GOLDEN_DATA));
    assert.equal(await readUntilClosed(conn), true, "server drops the connection");
    conn.close();
    await assertRefusedOnce(c, received);
  } finally {
    await c.stop();
  }
});

Deno.test("tls: protocol tls without material is a configuration error", () => {
  assert.throws(() => new Collector({ protocol: "tls" }, () => {}), /tls\.caPem/);
});

Deno.test("tls: stop() does not wait for a client that never completes the handshake", async () => {
  const { c } = await startTls();
  // A TCP peer that connects and stays silent: node's server.close() would wait for it until the
  // 120 s handshake timeout, so a shutdown (or a reload) would hang that long.
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await new Promise((r) => setTimeout(r, 50));
    const r = await Promise.race([
      c.stop().then(() => "stopped"),
      new Promise((resolve) => (timer = setTimeout(() => resolve("hung"), 2000))),
    ]);
    assert.equal(r, "stopped");
    assert.equal(await readUntilClosed(conn), true, "the silent peer is disconnected");
  } finally {
    clearTimeout(timer);
    conn.close();
    await c.stop();
  }
});

Deno.test("tls: concurrent accepted and refused handshakes each reach their own connection", async () => {
  // One node:tls server serves every connection: each handshake's outcome must still reach the
  // connection it belongs to, while good and bad clients are in their handshakes together.
  const { c, received } = await startTls();
  try {
    const data = concat(GOLDEN_TEMPLATE, GOLDEN_DATA);
    const clients = [certs.client, otherCa.client, undefined];
    await Promise.all(
      Array.from({ length: 12 }, (_, i) => tlsSend("127.0.0.1", c.port, clients[i % 3], data)),
    );
    await waitFor(() => c.stats().tlsHandshakeFailures === 8, { what: "8 refusals counted" });
    await waitFor(() => received.length === 4, { what: "the 4 good clients' data" });
    await waitFor(() => c.stats().sessionsClosed === 4, { what: "their sessions closed on EOF" });
    const s = c.stats();
    assert.equal(s.sessionsOpened, 4);
    assert.equal(s.sessionsClosedOnError, 0);
    assert.equal(s.messages, 8);
  } finally {
    await c.stop();
  }
});

/** The ClientHello a node:tls client with the Agents' certificate sends first. */
async function clientHello(): Promise<Uint8Array> {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const s = agentTls({ port: l.addr.port });
  const conn = await l.accept();
  try {
    const buf = new Uint8Array(8192);
    const n = await conn.read(buf);
    assert.ok(n !== null && n > 5 && buf[0] === 22, "a TLS handshake record");
    return buf.slice(0, n);
  } finally {
    conn.close();
    l.close();
    s.destroy();
  }
}

Deno.test("tls: a peer gone in its handshake fails it within a second (counted), its places freed for the next Agent", async () => {
  // The handshake timeout is far away: the places must come back because the peer left, not
  // because the sweep closed it (a TCP health check, a port scan, an Agent giving up).
  const { c, received } = await startTls("127.0.0.1:0", {
    maxConnections: 1,
    maxTlsHandshakes: 1,
    tlsHandshakeTimeoutMs: 60_000,
  });
  try {
    const hello = await clientHello();
    const peers: [string, (conn: Deno.TcpConn) => Promise<void>][] = [
      ["connect, then close", async () => {}],
      ["ClientHello, then FIN", async (conn) => {
        await writeAll(conn, hello);
        await conn.closeWrite();
        await readUntilClosed(conn);
      }],
      ["half a ClientHello, then close", (conn) => writeAll(conn, hello.subarray(0, 20))],
    ];
    for (const [i, [what, peer]] of peers.entries()) {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
      await peer(conn);
      conn.close();
      await waitFor(() => c.stats().tlsHandshakeFailures === i + 1, { what: `${what}: counted` });
      assert.equal(c.stats().connectionsTimedOut.tlsHandshakeTimeout ?? 0, 0, what);
    }
    // Every place is back: an Agent is served under the caps of one.
    const r = await tlsSend(
      "127.0.0.1",
      c.port,
      certs.client,
      concat(GOLDEN_TEMPLATE, GOLDEN_DATA),
    );
    assert.equal(r.error, undefined);
    await waitFor(() => received.length === 1, { what: "the Agent's data" });
    assert.equal(c.stats().connectionsRefused.maxConnections ?? 0, 0);
    assert.equal(c.stats().connectionsRefused.maxTlsHandshakes ?? 0, 0);
  } finally {
    await c.stop();
  }
});

/**
 * An Agent's TLS connection to the collector on `port` through a relay of the test's: `wire` is
 * the relay's own connection to the collector, on which the test writes what no TLS layer would;
 * `wireClosed` resolves once the collector closed it (the relay keeps it open when the Agent
 * leaves, and reads it to the end, whatever the Agent still takes).
 */
async function relayedAgent(port: number): Promise<{
  agent: tls.TLSSocket;
  wire: Deno.TcpConn;
  wireClosed: Promise<void>;
  close(): void;
}> {
  const relay = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const agent = agentTls({ port: relay.addr.port });
  const agentSide = await relay.accept();
  relay.close();
  const wire = await Deno.connect({ hostname: "127.0.0.1", port });
  const buf = new Uint8Array(64 * 1024);
  void (async () => {
    try {
      for (;;) {
        const n = await agentSide.read(buf);
        if (n === null) return;
        await writeAll(wire, buf.subarray(0, n));
      }
    } catch {
      // Either side gone.
    }
  })();
  const wireClosed = (async () => {
    const back = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        const n = await wire.read(back);
        if (n === null) return;
        await writeAll(agentSide, back.subarray(0, n)).catch(() => {});
      }
    } catch {
      // Reset: closed too.
    }
  })();
  await new Promise<void>((resolve, reject) => {
    agent.once("secureConnect", () => resolve());
    agent.once("error", reject);
  });
  return {
    agent,
    wire,
    wireClosed,
    close(): void {
      agent.destroy();
      for (const c of [agentSide, wire]) {
        try {
          c.close();
        } catch {
          // Already closed.
        }
      }
    },
  };
}

/** A TLS 1.2/1.3 application-data record of 64 bytes that cannot decrypt. */
const CORRUPT_RECORD = concat(
  new Uint8Array([0x17, 0x03, 0x03, 0x00, 0x40]),
  crypto.getRandomValues(new Uint8Array(0x40)),
);

/** Writes `total` bytes of junk in 1 MiB writes; resolves with what was written before a failure. */
async function writeJunk(conn: Deno.TcpConn, total: number): Promise<number> {
  const junk = crypto.getRandomValues(new Uint8Array(64 * 1024));
  let written = 0;
  try {
    while (written < total) {
      for (let i = 0; i < 16; i++) await writeAll(conn, junk);
      written += 16 * junk.length;
    }
  } catch {
    // The collector closed the connection.
  }
  return written;
}

Deno.test("tls: a record that does not decrypt closes the session at once (closed on error) and nothing more is read", async () => {
  // The idle timeout is far away: the connection must be closed for its failed TLS layer.
  const { c } = await startTls(undefined, { idleTimeoutMs: 120_000 });
  const relayed = await relayedAgent(c.port);
  try {
    relayed.agent.write(GOLDEN_TEMPLATE);
    await waitFor(() => c.stats().messages === 1, { what: "the template" });
    await writeAll(relayed.wire, CORRUPT_RECORD);
    // What a peer sends after it is never decrypted: once the collector closed the connection
    // its writes fail (before, every byte was read into the failed TLS layer, without bound).
    const written = writeJunk(relayed.wire, 64 * 1024 * 1024);
    await waitFor(() => c.stats().sessionsClosed === 1, { what: "session closed" });
    const s = c.stats();
    assert.equal(s.sessionsClosedOnError, 1);
    assert.equal(s.sessionsActive, 0);
    assert.equal(s.messages, 1);
    let closed = false;
    void relayed.wireClosed.then(() => closed = true);
    await waitFor(() => closed, { what: "the collector closed the connection" });
    assert.ok(await written < 64 * 1024 * 1024, "the collector stopped reading the connection");
  } finally {
    relayed.close();
    await c.stop();
  }
});

Deno.test("tls: a partial message before a record that does not decrypt is counted as truncated", async () => {
  const { c } = await startTls(undefined, { idleTimeoutMs: 120_000 });
  const relayed = await relayedAgent(c.port);
  try {
    relayed.agent.write(concat(GOLDEN_TEMPLATE, GOLDEN_DATA.subarray(0, 30)));
    const sent = GOLDEN_TEMPLATE.length + 30;
    await waitFor(() => c.stats().bytes === sent, { what: "the template and 30 bytes decrypted" });
    await writeAll(relayed.wire, CORRUPT_RECORD);
    await waitFor(() => c.stats().sessionsClosed === 1, { what: "session closed" });
    const s = c.stats();
    assert.equal(s.sessionsClosedOnError, 1);
    assert.equal(s.messages, 1);
    assert.equal(s.decodeErrors.truncated, 1);
    assert.equal(s.bytesDiscarded, 0, "counted once, as a truncated message");
  } finally {
    relayed.close();
    await c.stop();
  }
});

Deno.test("tls: a partial message cut by a reset is counted as truncated, as at EOF", async () => {
  // The reset reaches the TLS socket as an error (the collector's next write fails) or, as here
  // mostly, as the end of its input: counted either way, once.
  const { c } = await startTls();
  const raw = net.connect({ host: "127.0.0.1", port: c.port });
  const agent = agentTls({ socket: raw });
  try {
    await new Promise<void>((resolve) => agent.once("secureConnect", () => resolve()));
    agent.write(concat(GOLDEN_TEMPLATE, GOLDEN_DATA.subarray(0, 30)));
    const sent = GOLDEN_TEMPLATE.length + 30;
    await waitFor(() => c.stats().bytes === sent, { what: "the template and 30 bytes decrypted" });
    raw.resetAndDestroy(); // RST (SO_LINGER 0): no close_notify, no FIN
    await waitFor(() => c.stats().sessionsClosed === 1, { what: "session closed" });
    const s = c.stats();
    assert.equal(s.messages, 1);
    assert.equal(s.decodeErrors.truncated, 1);
    assert.equal(s.sessionsClosedOnError, 0);
  } finally {
    agent.destroy();
    raw.destroy();
    await c.stop();
  }
});
