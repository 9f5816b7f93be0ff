import assert from "node:assert/strict";
import { openTransport, SendError, type Transport, UdpTransport } from "../../src/net/transport.ts";
import { concat } from "../_helpers/bytes.ts";
import { unreadBytes } from "../_helpers/silent_collector.ts";
import { waitFor, withDeadline } from "../_helpers/wait.ts";

const LOOPBACK = "127.0.0.1";

async function readAll(conn: Deno.Conn): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  const buf = new Uint8Array(4096);
  for (;;) {
    const n = await conn.read(buf);
    if (n === null) break;
    chunks.push(buf.slice(0, n));
  }
  return concat(...chunks);
}

Deno.test("tcp: connects, writes the messages back to back, and close ends the session", async () => {
  const listener = Deno.listen({ hostname: LOOPBACK, port: 0 });
  try {
    const accepted = listener.accept();
    const t = await openTransport({ host: LOOPBACK, port: listener.addr.port, kind: "tcp" });
    const server = await accepted;
    assert.equal(t.kind, "tcp");
    assert.equal(t.open, true);
    await t.send([new Uint8Array([1, 2, 3]), new Uint8Array([4, 5])]);
    t.close();
    t.close(); // idempotent
    assert.equal(t.open, false);
    await t.closed;
    assert.deepEqual(await readAll(server), new Uint8Array([1, 2, 3, 4, 5]));
    server.close();
    await assert.rejects(t.send([new Uint8Array([6])]), /connection closed/);
  } finally {
    listener.close();
  }
});

Deno.test("tcp: the transport closes itself when the collector goes away", async () => {
  const listener = Deno.listen({ hostname: LOOPBACK, port: 0 });
  try {
    const accepted = listener.accept();
    const t = await openTransport({ host: LOOPBACK, port: listener.addr.port, kind: "tcp" });
    (await accepted).close();
    await t.closed;
    assert.equal(t.open, false);
  } finally {
    listener.close();
  }
});

Deno.test("udp: sends one datagram per message, and close makes send fail", async () => {
  const server = Deno.listenDatagram({ transport: "udp", hostname: LOOPBACK, port: 0 });
  try {
    const port = (server.addr as Deno.NetAddr).port;
    const t = await openTransport({ host: LOOPBACK, port, kind: "udp" });
    assert.equal(t.kind, "udp");
    assert.equal(t.open, true);
    await t.send([new Uint8Array([1, 2, 3]), new Uint8Array([4, 5])]);
    assert.deepEqual((await server.receive())[0], new Uint8Array([1, 2, 3]));
    assert.deepEqual((await server.receive())[0], new Uint8Array([4, 5]));
    t.close();
    t.close(); // idempotent
    assert.equal(t.open, false);
    await t.closed;
    await assert.rejects(t.send([new Uint8Array([6])]), /connection closed/);
  } finally {
    server.close();
  }
});

Deno.test("tcp: a refused connection rejects naming the target", async () => {
  // A port that was just free: bind, note it, release it.
  const probe = Deno.listen({ hostname: LOOPBACK, port: 0 });
  const port = probe.addr.port;
  probe.close();
  await assert.rejects(
    openTransport({ host: LOOPBACK, port, kind: "tcp", connectTimeoutMs: 2000 }),
    (e: Error) => {
      assert.match(e.message, new RegExp(`^dial tcp ${LOOPBACK}:${port}: `));
      return true;
    },
  );
});

Deno.test("an aborted signal abandons the connect", async () => {
  const listener = Deno.listen({ hostname: LOOPBACK, port: 0 });
  try {
    await assert.rejects(
      openTransport({
        host: LOOPBACK,
        port: listener.addr.port,
        kind: "tcp",
        signal: AbortSignal.abort(),
      }),
      /connect: aborted/,
    );
  } finally {
    listener.close();
  }
});

/** A TCP listener with one accepted connection and a transport connected to it. */
async function connected(): Promise<
  { listener: Deno.TcpListener; server: Deno.Conn; t: Transport }
> {
  const listener = Deno.listen({ hostname: LOOPBACK, port: 0 });
  const accepted = listener.accept();
  const t = await openTransport({ host: LOOPBACK, port: listener.addr.port, kind: "tcp" });
  return { listener, server: await accepted, t };
}

Deno.test("tcp: shutdown is true once the peer read to our end of stream and closed", async () => {
  const { listener, server, t } = await connected();
  try {
    await t.send([new Uint8Array([1, 2, 3])]);
    const shut = t.shutdown();
    // The peer reads to EOF (our end of stream), then closes: that answer is the proof.
    assert.deepEqual(await readAll(server), new Uint8Array([1, 2, 3]));
    server.close();
    assert.equal(await shut, true);
    assert.equal(t.open, false);
  } finally {
    listener.close();
  }
});

Deno.test("tcp: shutdown is false when the peer left first or never answers", async () => {
  let { listener, server, t } = await connected();
  // The peer closed on its own (EOF before our end of stream): no proof of anything.
  server.close();
  await t.closed;
  assert.equal(await t.shutdown(), false);
  listener.close();

  ({ listener, server, t } = await connected());
  try {
    // A peer that never closes: the caller ends the wait by closing.
    const shut = t.shutdown();
    setTimeout(() => t.close(), 50);
    assert.equal(await shut, false);
  } finally {
    server.close();
    listener.close();
  }
});

Deno.test("tcp: a send cut short says how many bytes the kernel took, exactly", async () => {
  const { listener, server, t } = await connected();
  try {
    // 16 MiB into a peer that does not read: the write blocks once both buffers are full (our
    // send buffer grows to 4 MiB at most, net.ipv4.tcp_wmem; the peer's stays small unread).
    const data = new Uint8Array(16 << 20);
    for (let i = 0; i < data.length; i++) data[i] = i & 0xff;
    const sending = t.send([data]);
    // Some of it has reached the peer's socket: the send is under way (it cannot finish).
    await waitFor(async () => (await unreadBytes(listener.addr.port)) > 0, { what: "bytes" });
    t.close();
    const err = await sending.then(() => undefined, (e) => e);
    assert.ok(err instanceof SendError, String(err));
    assert.ok(err.written > 0 && err.written < data.length, `written ${err.written}`);
    // The kernel still delivers what it took, and nothing more.
    const got = await readAll(server);
    assert.equal(got.length, err.written);
    assert.deepEqual(got.subarray(got.length - 16), data.subarray(err.written - 16, err.written));
  } finally {
    server.close();
    listener.close();
  }
});

// Deno's TLS could not cancel a pending handshake: closing its connection left the socket open,
// so each attempt at a collector that accepts and never answers kept one socket (bounded at 4
// per address, then refused). Over our own socket, giving up closes it.
Deno.test("tls: a handshake given up on closes its socket, every time", async () => {
  const listener = Deno.listen({ hostname: LOOPBACK, port: 0 });
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    try {
      for await (const c of listener) held.push(c);
    } catch {
      // closed
    }
  })();
  const target = {
    host: LOOPBACK,
    port: listener.addr.port,
    kind: "tls" as const,
    connectTimeoutMs: 100,
  };
  try {
    for (let i = 0; i < 10; i++) {
      await assert.rejects(openTransport(target), /tls handshake: timeout/);
    }
    await waitFor(() => held.length === 10, { what: "ten connections accepted" });
    // Each one ends: the peer reads our ClientHello, then the end of the stream.
    for (const c of held) {
      const got = await withDeadline(readAll(c), 5000, "our end of the connection");
      assert.ok(got.length > 0, "a ClientHello");
    }
  } finally {
    for (const c of held) c.close();
    listener.close();
    await accepting;
  }
});

// Found by review: a resolver that does not answer held a UDP open about 30 s past its connect
// timeout, and a send to a name (the worker's path) as long, closing the socket or not: the
// sink's stop took 27-28 s instead of its 2-5 s.
Deno.test("udp: a send to a name that hangs in the resolver is given up at close()", async () => {
  let pending = 0;
  const sock = {
    send: () => {
      pending++;
      return new Promise<number>(() => {}); // the system resolver, not answering
    },
    close: () => {},
  } as unknown as Deno.DatagramConn;
  const name = "collector.example";
  const t = new UdpTransport(sock, { transport: "udp", hostname: name, port: 4739 }, name);
  const sent = t.send([new Uint8Array(20)]).then(() => "sent", (e) => e);
  await waitFor(() => pending === 1, { what: "the send" });
  t.close();
  const outcome = await withDeadline(sent, 5_000, "the send after close()");
  assert.ok(outcome instanceof SendError, String(outcome));
  assert.match(outcome.message, /connection closed/);
});

Deno.test("udp: the open's name resolution is bounded like a connect (an aborted open gives up)", async () => {
  const outcome = await openTransport({
    kind: "udp",
    host: "127.0.0.1",
    port: 9,
    signal: AbortSignal.abort(),
  }).then((t) => {
    t.close();
    return "opened";
  }, (e: Error) => e.message);
  assert.match(outcome, /^dial udp 127\.0\.0\.1:9: resolve: aborted$/);
});
