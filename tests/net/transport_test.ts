import assert from "node:assert/strict";
import { openTransport } from "../../src/net/transport.ts";
import { concat } from "../_helpers/bytes.ts";

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
