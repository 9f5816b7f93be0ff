import assert from "node:assert/strict";
import net from "node:net";
import { logger, setLogLevel } from "../../src/log.ts";
import { acceptLoop } from "../../src/collector/tcp.ts";
import {
  concat,
  dataMessage,
  GOLDEN_DATA,
  GOLDEN_TEMPLATE,
  readUntilClosed,
  SMALL_FIELDS,
  smallRecord,
  startCollector,
  templateMessage,
  writeAll,
} from "./helpers.ts";
import { waitFor } from "../_helpers/wait.ts";

setLogLevel("error");

Deno.test("tcp: golden vectors from 127.0.0.1 and ::1, messages split byte by byte", async () => {
  const { c, received } = await startCollector({ address: "[::]:0", protocol: "tcp" });
  try {
    const v4 = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
    const v6 = await Deno.connect({ hostname: "::1", port: c.port });
    await writeAll(v4, concat(GOLDEN_TEMPLATE, GOLDEN_DATA));
    // One byte per write: framing must reassemble across reads.
    for (const b of concat(GOLDEN_TEMPLATE, GOLDEN_DATA)) {
      await writeAll(v6, new Uint8Array([b]));
    }
    await waitFor(() => received.length === 2, { what: "two data sets" });
    assert.deepEqual(received.map((r) => r.ctx.exporterAddress).sort(), ["127.0.0.1", "::1"]);
    for (const r of received) {
      assert.equal(r.ctx.transport, "tcp");
      assert.equal(r.records[0].sourceTransportPort, 44752);
      assert.equal(r.records[0].octetTotalCount, 15000n);
    }
    assert.equal(c.stats().sessionsActive, 2);
    v4.close();
    v6.close();
    await waitFor(() => c.stats().sessionsActive === 0, { what: "sessions closed on EOF" });
    const s = c.stats();
    assert.equal(s.sessionsClosed, 2);
    assert.equal(s.sessionsClosedOnError, 0);
    assert.equal(s.messages, 4);
    assert.equal(s.bytes, 2 * (GOLDEN_TEMPLATE.length + GOLDEN_DATA.length));
  } finally {
    await c.stop();
  }
});

Deno.test("tcp: two connections with different domains share template id 256", async () => {
  const { c, received } = await startCollector({ address: "127.0.0.1:0", protocol: "tcp" });
  const a = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
  const b = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
  try {
    await writeAll(a, templateMessage(5, 256, SMALL_FIELDS));
    await writeAll(b, GOLDEN_TEMPLATE);
    await writeAll(b, GOLDEN_DATA);
    await writeAll(a, dataMessage(5, 256, SMALL_FIELDS, [smallRecord(1), smallRecord(2)]));
    await waitFor(() => received.length === 2, { what: "data from both" });
    const fromA = received.find((r) => r.ctx.observationDomainId === 5)!;
    assert.deepEqual(fromA.records.map((r) => r.packetTotalCount), [1n, 2n]);
    const fromB = received.find((r) => r.ctx.observationDomainId === 0x33de13e2)!;
    assert.equal(fromB.records[0].sourcePodNamespace, "antrea-test");
    assert.equal(c.stats().dataRecords, 3);
  } finally {
    a.close();
    b.close();
    await c.stop();
  }
});

Deno.test("tcp: templates are scoped to the connection and dropped when it closes", async () => {
  const { c, received } = await startCollector({ address: "127.0.0.1:0", protocol: "tcp" });
  try {
    const a = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
    await writeAll(a, GOLDEN_TEMPLATE);
    await waitFor(() => c.stats().templateRecords === 1, { what: "template" });
    a.close();
    const b = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
    await writeAll(b, GOLDEN_DATA);
    await waitFor(() => c.stats().templateMisses === 1, { what: "miss on a new connection" });
    // A data set for an unknown template is not malformed: the session stays open.
    await writeAll(b, concat(GOLDEN_TEMPLATE, GOLDEN_DATA));
    await waitFor(() => received.length === 1, { what: "recovered after template" });
    b.close();
  } finally {
    await c.stop();
  }
});

for (
  const [name, bad, reason] of [
    ["Length 0", new Uint8Array([0, 10, 0, 0]), "framing"],
    ["Length 15", concat(new Uint8Array([0, 10, 0, 15]), new Uint8Array(11)), "framing"],
    ["version 9", concat(new Uint8Array([0, 9, 0, 16]), new Uint8Array(12)), "framing"],
    [
      "a framed message with a bad set",
      (() => {
        const m = GOLDEN_TEMPLATE.slice();
        m[19] = 3; // set length 3 < 4
        return m;
      })(),
      undefined,
    ],
  ] as const
) {
  Deno.test(`tcp: ${name} closes only that session`, async () => {
    const { c, received } = await startCollector({ address: "127.0.0.1:0", protocol: "tcp" });
    const good = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
    const bad_ = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
    try {
      await writeAll(good, GOLDEN_TEMPLATE);
      await waitFor(() => c.stats().sessionsActive === 2 && c.stats().messages === 1, {
        what: "setup",
      });
      await writeAll(bad_, concat(bad, GOLDEN_TEMPLATE));
      assert.equal(await readUntilClosed(bad_), true, "server closes the bad session");
      await waitFor(() => c.stats().sessionsClosedOnError === 1, { what: "closed on error" });
      // The good session is unaffected and still decodes.
      await writeAll(good, GOLDEN_DATA);
      await waitFor(() => received.length === 1, { what: "good session still works" });
      const s = c.stats();
      assert.equal(s.sessionsActive, 1);
      // The template written behind the bad bytes (same write, one loopback segment) was read
      // but never decoded: counted, not silently lost.
      assert.equal(
        s.bytesDiscarded,
        reason === undefined ? GOLDEN_TEMPLATE.length : bad.length + GOLDEN_TEMPLATE.length,
      );
      if (reason !== undefined) {
        assert.equal(s.decodeErrors[reason], 1);
        assert.equal(s.messages, 2); // nothing after the framing error was decoded
      } else {
        assert.equal(s.setErrors.badSetLength, 1);
      }
    } finally {
      good.close();
      await c.stop();
    }
  });
}

Deno.test("tcp: a partial message at EOF is counted as truncated", async () => {
  const { c } = await startCollector({ address: "127.0.0.1:0", protocol: "tcp" });
  try {
    const a = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
    await writeAll(a, GOLDEN_TEMPLATE.subarray(0, 100));
    a.close();
    await waitFor(() => c.stats().sessionsClosed === 1, { what: "closed" });
    assert.equal(c.stats().decodeErrors.truncated, 1);
  } finally {
    await c.stop();
  }
});

Deno.test("tcp: a partial message cut by a reset is counted as truncated, as at EOF", async () => {
  const { c } = await startCollector({ address: "127.0.0.1:0", protocol: "tcp" });
  const a = net.connect({ host: "127.0.0.1", port: c.port });
  try {
    await new Promise<void>((resolve, reject) => {
      a.once("connect", () => resolve());
      a.once("error", reject);
    });
    a.write(concat(GOLDEN_TEMPLATE, GOLDEN_DATA.subarray(0, 30)));
    const sent = GOLDEN_TEMPLATE.length + 30;
    await waitFor(() => c.stats().bytes === sent, { what: "the template and 30 bytes read" });
    a.resetAndDestroy(); // RST (SO_LINGER 0), no FIN
    await waitFor(() => c.stats().sessionsClosed === 1, { what: "closed" });
    const s = c.stats();
    assert.equal(s.messages, 1);
    assert.equal(s.decodeErrors.truncated, 1);
    assert.equal(s.sessionsClosedOnError, 0);
  } finally {
    a.destroy();
    await c.stop();
  }
});

Deno.test("tcp: stop closes open connections and the listener", async () => {
  const { c } = await startCollector({ address: "127.0.0.1:0", protocol: "tcp" });
  const port = c.port;
  const a = await Deno.connect({ hostname: "127.0.0.1", port });
  await writeAll(a, GOLDEN_TEMPLATE);
  await waitFor(() => c.stats().messages === 1, { what: "template" });
  await c.stop();
  assert.equal(await readUntilClosed(a), true);
  a.close();
  assert.equal(c.stats().sessionsActive, 0);
  await assert.rejects(Deno.connect({ hostname: "127.0.0.1", port }));
});

Deno.test("tcp: a connection handler that throws, at once or later, is logged and the accept loop goes on", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const counters = { acceptErrors: 0 };
  const handlers = new Set<Promise<void>>();
  const served: number[] = [];
  let n = 0;
  const loop = acceptLoop(listener, { log: logger("accept-test"), counters }, handlers, (conn) => {
    const i = ++n;
    if (i === 1) throw new Error("at once");
    if (i === 2) return Promise.reject(new Error("later"));
    served.push(i);
    conn.close();
    return Promise.resolve();
  });
  try {
    for (let i = 0; i < 3; i++) {
      const c = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
      await waitFor(() => n === i + 1, { what: `connection ${i + 1} handled` });
      c.close();
    }
    assert.deepEqual(served, [3]);
    assert.equal(counters.acceptErrors, 1, "the handler that threw at accept");
    await waitFor(() => handlers.size === 0, { what: "handlers settled" });
  } finally {
    await loop.stop();
  }
});
