/**
 * The API port's own server (src/api/front.ts, src/api/http1.ts): HTTP/1.1 over TLS for real
 * clients (fetch, kept-alive connections, the live view's stream), and its bounds: connections
 * in total and per address, the request and idle timeouts, malformed or oversized requests, each
 * counted.
 */

import assert from "node:assert/strict";
import { type ApiServer, startApiServer } from "../../src/api/server.ts";
import tls from "node:tls";
import {
  ApiFront,
  type ApiFrontLimits,
  type ApiFrontStats,
  type Handler,
} from "../../src/api/front.ts";
import { generateApiCertificate } from "../../src/pki/mod.ts";
import { logger } from "../../src/log.ts";
import { LiveHub, LiveView } from "../../src/api/live.ts";
import { zeroStats } from "../_helpers/stats.ts";
import { waitFor } from "../_helpers/wait.ts";
import { prng } from "../_helpers/prng.ts";

const ROOMY: ApiFrontLimits = {
  maxConnections: 64,
  maxConnectionsPerAddress: 64,
  requestTimeoutMs: 10_000,
  idleTimeoutMs: 60_000,
};

async function withApi(
  limits: Partial<ApiFrontLimits>,
  body: (api: ApiServer, live: LiveHub) => Promise<void>,
  stats = () => zeroStats({ numRecordsReceived: 7 }),
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "fa-api-front-" });
  const live = new LiveHub(new LiveView(), () => ({ received: 1 }), 50);
  const api = await startApiServer({
    records: () => "null",
    stats,
    ready: () => true,
    live,
  }, {
    hostname: "127.0.0.1",
    port: 0,
    tokenFile: `${dir}/token`,
    version: "0.1.0",
    limits: { ...ROOMY, ...limits },
  });
  try {
    await body(api, live);
  } finally {
    await api.close();
    await Deno.remove(dir, { recursive: true });
  }
}

/** A TLS connection to the API, handshake done. */
async function tlsConn(api: ApiServer): Promise<Deno.TlsConn> {
  const c = await Deno.connectTls({ hostname: "127.0.0.1", port: api.port, caCerts: [api.caPem] });
  await c.handshake();
  return c;
}

/** Everything `c` sends until it closes (or errors: a reset). */
async function readAll(c: Deno.Conn): Promise<string> {
  const chunks: Uint8Array[] = [];
  const buf = new Uint8Array(65536);
  try {
    for (;;) {
      const n = await c.read(buf);
      if (n === null) break;
      chunks.push(buf.slice(0, n));
    }
  } catch {
    // reset or closed
  }
  try {
    c.close();
  } catch {
    // already closed
  }
  return new TextDecoder().decode(new Uint8Array(chunks.flatMap((x) => [...x])));
}

const send = (c: Deno.Conn, text: string) => c.write(new TextEncoder().encode(text));

/** The counters once `pred` holds (the front counts as it closes). */
async function statsWhen(api: ApiServer, pred: (s: ApiFrontStats) => boolean) {
  await waitFor(() => pred(api.stats()), { timeoutMs: 10_000, what: "API counters" });
  return api.stats();
}

Deno.test("api front: fetch over TLS, kept-alive requests, HEAD, status and headers as the handler made them", async () => {
  await withApi({}, async (api) => {
    const client = Deno.createHttpClient({ caCerts: [api.caPem] });
    try {
      const base = `https://127.0.0.1:${api.port}`;
      const auth = { authorization: `Bearer ${api.token}` };
      for (let i = 0; i < 3; i++) {
        const r = await fetch(`${base}/healthz`, { client });
        assert.equal(r.status, 200);
        assert.equal(await r.text(), "ok");
      }
      const m = await fetch(`${base}/recordmetrics`, { client, headers: auth });
      assert.equal(m.status, 200);
      assert.equal(m.headers.get("content-type"), "application/json");
      assert.deepEqual(await m.json(), { numRecordsReceived: 7 });
      const denied = await fetch(`${base}/metrics`, { client });
      assert.equal(denied.status, 403);
      await denied.body?.cancel();
      const head = await fetch(`${base}/healthz`, { client, method: "HEAD" });
      assert.equal(head.status, 200);
      assert.equal(head.headers.get("content-length"), "2");
      assert.equal(await head.text(), "");
      // The kept-alive requests share connections: far fewer than requests were opened.
      assert.ok(api.stats().connections <= 2, `${api.stats().connections} connections open`);
    } finally {
      client.close();
    }
    // Pipelined requests on one raw connection, the last asking to close.
    const c = await tlsConn(api);
    await send(
      c,
      "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\nGET /nothing HTTP/1.1\r\nhost: x\r\n" +
        `authorization: Bearer ${api.token}\r\nconnection: close\r\n\r\n`,
    );
    const text = await readAll(c);
    assert.match(text, /^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\nokHTTP\/1\.1 404 Not Found\r\n/);
    assert.match(text, /connection: close/);
  });
});

Deno.test("api front: the live view streams chunked, and its source stops when the client leaves", async () => {
  await withApi({}, async (api, live) => {
    const c = await tlsConn(api);
    await send(
      c,
      `GET /ui/events HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${api.token}\r\n\r\n`,
    );
    const buf = new Uint8Array(65536);
    let text = "";
    while (!text.includes("data: ")) {
      const n = await c.read(buf);
      assert.ok(n !== null, `closed early: ${text}`);
      text += new TextDecoder().decode(buf.subarray(0, n));
    }
    assert.match(text, /^HTTP\/1\.1 200 OK\r\n/);
    assert.match(text, /transfer-encoding: chunked\r\n/);
    assert.match(text, /content-type: text\/event-stream\r\n/);
    assert.match(text, /\r\n\r\n[0-9a-f]+\r\n: connected\n\n\r\n/);
    assert.equal(live.streams, 1);
    c.close();
    // The next event's write fails: the stream is cancelled, the hub forgets it.
    await waitFor(() => live.streams === 0, { timeoutMs: 10_000, what: "live stream dropped" });
    await statsWhen(api, (s) => s.connections === 0);
  });
});

Deno.test("api front: connections over the caps are closed at accept and counted by cap", async () => {
  await withApi({ maxConnections: 2 }, async (api) => {
    const held = [await tlsConn(api), await tlsConn(api)];
    await statsWhen(api, (s) => s.connections === 2);
    const over = await Deno.connect({ hostname: "127.0.0.1", port: api.port });
    assert.equal(await readAll(over), "", "closed at once");
    const s = await statsWhen(api, (s) => s.connectionsRefused.maxApiConnections === 1);
    assert.equal(s.connectionsRefused.maxApiConnectionsPerAddress, 0);
    for (const c of held) c.close();
    // Places free again once they closed.
    await statsWhen(api, (s) => s.connections === 0);
    const again = await tlsConn(api);
    await send(again, "GET /healthz HTTP/1.0\r\n\r\n");
    assert.match(await readAll(again), /^HTTP\/1\.1 200 OK\r\n[^]*connection: close\r\n\r\nok$/);
  });
  await withApi({ maxConnectionsPerAddress: 1 }, async (api) => {
    const held = await tlsConn(api);
    await statsWhen(api, (s) => s.connections === 1);
    const over = await Deno.connect({ hostname: "127.0.0.1", port: api.port });
    assert.equal(await readAll(over), "");
    const s = await statsWhen(api, (s) => s.connectionsRefused.maxApiConnectionsPerAddress === 1);
    assert.equal(s.connectionsRefused.maxApiConnections, 0);
    held.close();
  });
});

Deno.test("api front: a silent or slow handshake, a head begun and not finished, and an idle connection are closed and counted", async () => {
  await withApi({ requestTimeoutMs: 200, idleTimeoutMs: 600 }, async (api) => {
    // No TLS at all: the handshake never starts.
    const silent = await Deno.connect({ hostname: "127.0.0.1", port: api.port });
    assert.equal(await readAll(silent), "");
    let s = await statsWhen(api, (s) => s.connectionsTimedOut.apiRequestTimeout === 1);
    assert.equal(s.handshakeFailures, 0, "a timeout is not a failed handshake");
    // A request's head begun and never finished (slowloris).
    const slow = await tlsConn(api);
    await send(slow, "GET /healthz HTTP/1.1\r\nx-a: 1\r\n");
    assert.equal(await readAll(slow), "");
    s = await statsWhen(api, (s) => s.connectionsTimedOut.apiRequestTimeout === 2);
    // Handshake done, then nothing: the idle timeout, not the request timeout.
    const idle = await tlsConn(api);
    assert.equal(await readAll(idle), "");
    s = await statsWhen(api, (s) => s.connectionsTimedOut.apiIdleTimeout === 1);
    assert.equal(s.connectionsTimedOut.apiRequestTimeout, 2);
    assert.equal(s.connections, 0);
  });
});

Deno.test("api front: a request body sent a byte at a time is cut at the request timeout", async () => {
  await withApi({ requestTimeoutMs: 300, idleTimeoutMs: 60_000 }, async (api) => {
    const slow = await tlsConn(api);
    await send(slow, "GET /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n");
    // One body byte every 50 ms: never idle, never done (before, only the idle timeout applied,
    // and each byte restarted it).
    let closed = false;
    const reading = readAll(slow).then((text) => {
      closed = true;
      return text;
    });
    for (let i = 0; i < 60 && !closed; i++) {
      await send(slow, "x").catch(() => {});
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(closed, "still open after 3 s of a slow body");
    assert.equal(await reading, "");
    const s = await statsWhen(api, (s) => s.connectionsTimedOut.apiRequestTimeout === 1);
    assert.equal(s.connectionsTimedOut.apiIdleTimeout, 0);
  });
});

Deno.test("api front: malformed and oversized requests get their status and a close, counted", async () => {
  await withApi({}, async (api) => {
    const cases: [string, RegExp][] = [
      ["NOT A REQUEST LINE AT ALL\r\n\r\n", /^HTTP\/1\.1 400 /],
      ["GET /healthz HTTP/1.1\r\nbad header\r\n\r\n", /^HTTP\/1\.1 400 /],
      ["GET /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 999999\r\n\r\n", /^HTTP\/1\.1 413 /],
      [
        "POST /healthz HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n",
        /^HTTP\/1\.1 501 /,
      ],
      [`GET /healthz HTTP/1.1\r\nx: ${"a".repeat(20_000)}\r\n\r\n`, /^HTTP\/1\.1 431 /],
      ["CONNECT /healthz HTTP/1.1\r\nhost: x\r\n\r\n", /^HTTP\/1\.1 400 /],
      // RFC 9112 §3.2, as Go's server: HTTP/1.1 needs one Host field, no version may have two.
      ["GET /healthz HTTP/1.1\r\n\r\n", /^HTTP\/1\.1 400 [^]*missing required Host header/],
      ["GET /healthz HTTP/1.0\r\nhost: a\r\nHost: b\r\n\r\n", /^HTTP\/1\.1 400 [^]*too many Host/],
    ];
    for (const [request, want] of cases) {
      const c = await tlsConn(api);
      await send(c, request);
      const text = await readAll(c);
      assert.match(text, want, request.slice(0, 40));
      assert.match(text, /connection: close\r\n/);
    }
    const s = await statsWhen(api, (s) => s.connections === 0);
    assert.equal(s.badRequests, cases.length);
    // A small body is read and dropped; the connection goes on.
    const c = await tlsConn(api);
    await send(
      c,
      "PUT /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhelloGET /healthz HTTP/1.1\r\n" +
        "host: x\r\nconnection: close\r\n\r\n",
    );
    assert.equal((await readAll(c)).match(/HTTP\/1\.1 200 OK/g)?.length, 2);
  });
});

Deno.test("api front: a handler that throws answers 500, and the connection serves the next request", async () => {
  await withApi({}, async (api) => {
    const c = await tlsConn(api);
    await send(
      c,
      `GET /metrics HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${api.token}\r\n\r\n` +
        "GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    const text = await readAll(c);
    assert.match(
      text,
      /^HTTP\/1\.1 500 Internal Server Error\r\n[^]*internal error\nHTTP\/1\.1 200 OK/,
    );
    assert.equal(api.stats().badRequests, 0, "a handler's failure is not a bad request");
    assert.equal(api.stats().handlerErrors, 1);
  }, () => {
    throw new Error("counters unavailable");
  });
});

Deno.test("api front: 300 mutated requests each get an answer or a close, and nothing stays open", async () => {
  const rnd = prng(0xa91);
  const seeds = [
    "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n",
    "GET /flowrecords?limit=2 HTTP/1.1\r\nhost: x\r\nauthorization: Bearer t\r\n\r\n",
    "PUT /loglevel?level=1 HTTP/1.0\r\ncontent-length: 3\r\n\r\nabc",
  ];
  await withApi({ requestTimeoutMs: 300, idleTimeoutMs: 300 }, async (api) => {
    const bytes = (s: string) => new TextEncoder().encode(s);
    for (let i = 0; i < 300; i++) {
      const b = bytes(seeds[i % seeds.length]);
      const flips = 1 + Math.floor(rnd() * 4);
      for (let k = 0; k < flips; k++) b[Math.floor(rnd() * b.length)] = Math.floor(rnd() * 256);
      const cut = b.subarray(0, 1 + Math.floor(rnd() * b.length));
      const c = await tlsConn(api);
      await c.write(cut).catch(() => 0);
      // The end of the input (close_notify): an unfinished head then ends the connection.
      await c.closeWrite().catch(() => {});
      // Whatever it is, the front answers and/or closes.
      const text = await readAll(c);
      assert.ok(text === "" || text.startsWith("HTTP/1.1 "), `input ${i}: ${text.slice(0, 40)}`);
    }
    const s = await statsWhen(api, (s) => s.connections === 0);
    assert.ok(s.badRequests > 0, "some mutants were refused as bad requests");
  });
});

/** A front on 127.0.0.1 answering with `handler` (no API behind it), closed after `body`. */
async function withFront(
  handler: Handler,
  limits: Partial<ApiFrontLimits>,
  body: (front: ApiFront, connect: () => Promise<Deno.TlsConn>) => Promise<void>,
): Promise<void> {
  const cert = await generateApiCertificate();
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const front = new ApiFront(listener, { cert: cert.chainPem, key: cert.keyPem }, handler, {
    ...ROOMY,
    ...limits,
  }, { log: logger("api-front-test") });
  front.start();
  const port = listener.addr.port;
  try {
    await body(front, async () => {
      const c = await Deno.connectTls({ hostname: "127.0.0.1", port, caCerts: [cert.caPem] });
      await c.handshake();
      return c;
    });
  } finally {
    await front.close();
  }
}

const stream = (chunks: string[], then: "close" | "silent", cancelled?: () => void) =>
  new Response(
    new ReadableStream({
      start(c) {
        for (const x of chunks) c.enqueue(new TextEncoder().encode(x));
        if (then === "close") c.close();
      },
      cancel: () => cancelled?.(),
    }),
    { headers: { "content-type": "text/event-stream" } },
  );

Deno.test("api front: an event stream to an HTTP/1.0 client is sent close-delimited, not chunked", async () => {
  await withFront(
    () => stream(["data: one\n\n", "data: two\n\n"], "close"),
    {},
    async (_f, connect) => {
      const c = await connect();
      await send(c, "GET /ui/events HTTP/1.0\r\n\r\n");
      const text = await readAll(c);
      const [head, body] = text.split("\r\n\r\n");
      assert.doesNotMatch(head, /transfer-encoding|content-length/i);
      assert.match(head, /connection: close/);
      assert.equal(body, "data: one\n\ndata: two\n\n");
    },
  );
});

Deno.test("api front: a client leaving a silent event stream frees its connection and stops the source", async () => {
  let cancelled = false;
  await withFront(
    () => stream([": connected\n\n"], "silent", () => cancelled = true),
    {},
    async (front, connect) => {
      const c = await connect();
      await send(c, "GET /ui/events HTTP/1.1\r\nhost: x\r\n\r\n");
      assert.ok((await c.read(new Uint8Array(4096))) !== null);
      c.close();
      await waitFor(() => front.stats().connections === 0 && cancelled, { what: "stream dropped" });
    },
  );
});

Deno.test("api front: a peer gone during its handshake fails it within a second, counted, its place freed", async () => {
  await withApi({ requestTimeoutMs: 60_000 }, async (api) => {
    const c = await Deno.connect({ hostname: "127.0.0.1", port: api.port });
    await send(c, "\x16\x03\x01");
    c.close();
    const s = await statsWhen(api, (s) => s.handshakeFailures === 1 && s.connections === 0);
    assert.equal(s.connectionsTimedOut.apiRequestTimeout, 0);
  });
});

Deno.test("api front: a large answer read slowly but steadily is not cut as idle", async () => {
  const size = 2 << 20;
  await withFront(
    () => new Response(new Uint8Array(size).fill(97)),
    { idleTimeoutMs: 1000 },
    async (front, connect) => {
      const c = await connect();
      await send(c, "GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
      const buf = new Uint8Array(16 * 1024);
      let got = 0;
      for (;;) {
        await new Promise((r) => setTimeout(r, 20));
        const n = await c.read(buf);
        if (n === null) break;
        got += n;
      }
      c.close();
      assert.ok(got > size, `${got} bytes of a ${size}-byte body and its head`);
      assert.equal(front.stats().connectionsTimedOut.apiIdleTimeout, 0);
    },
  );
});

Deno.test("api front: an HTTP/1.0 client offering ALPN http/1.0 is served, and the close is a clean TLS end", async () => {
  await withApi({}, async (api) => {
    const alpn = await new Promise<string | false | null>((resolve, reject) => {
      const s = tls.connect({
        host: "127.0.0.1",
        port: api.port,
        ca: [api.caPem],
        servername: "localhost",
        ALPNProtocols: ["http/1.0"],
      }, () => {
        resolve(s.alpnProtocol ?? null);
        s.destroy();
      });
      s.on("error", reject);
    });
    assert.equal(alpn, "http/1.0");
    // Read strictly: a close without TLS close_notify is an error to this client.
    const c = await tlsConn(api);
    await send(c, "GET /healthz HTTP/1.0\r\n\r\n");
    const buf = new Uint8Array(4096);
    let text = "";
    for (;;) {
      const n = await c.read(buf);
      if (n === null) break;
      text += new TextDecoder().decode(buf.subarray(0, n));
    }
    c.close();
    assert.match(text, /^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\nok$/);
  });
});

// Clients asking and never reading made the process build and hold answers without bound (found
// by review: 128 of them, 6 GB of RSS and the main thread blocked for a minute).
Deno.test("api front: past maxPendingResponseBytes of unread answers, requests are refused before the handler; health checks still answered", async () => {
  const size = 32 << 20; // more than the socket buffers take
  let handled = 0;
  await withFront(
    (req) => {
      handled++;
      return new URL(req.url).pathname === "/healthz"
        ? new Response("ok")
        : new Response(new Uint8Array(size).fill(97));
    },
    { maxPendingResponseBytes: 1 },
    async (front, connect) => {
      const silent = await connect();
      await send(silent, "GET /big HTTP/1.1\r\nhost: x\r\n\r\n");
      await waitFor(() => handled === 1, { what: "the first answer built" });
      const other = await connect();
      await send(other, "GET /big HTTP/1.1\r\nhost: x\r\n\r\n");
      assert.match(await readAll(other), /^HTTP\/1\.1 503 /);
      assert.equal(handled, 1, "refused before the handler");
      assert.equal(front.stats().refusedBusy.pendingResponseBytes, 1);
      const health = await connect();
      await send(health, "GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
      assert.match(await readAll(health), /^HTTP\/1\.1 200 /);
      // The silent client reads its answer at last: the next request is served.
      silent.close();
      await waitFor(() => front.stats().connections === 0, { what: "the silent client gone" });
      const next = await connect();
      await send(next, "GET /healthz2 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
      const text = await readAll(next);
      assert.match(text, /^HTTP\/1\.1 200 /);
    },
  );
});

Deno.test("api server: a second server that cannot bind the port leaves the serving one's token and CA as they are", async () => {
  await withApi({}, async (api) => {
    const dir = await Deno.makeTempDir({ prefix: "fa-api-second-" });
    try {
      // The first server's files, where the second is pointed too.
      const tokenFile = `${dir}/token`;
      await Deno.writeTextFile(tokenFile, api.token);
      await Deno.writeTextFile(`${dir}/api-ca.crt`, api.caPem);
      await assert.rejects(
        startApiServer({ records: () => "null", stats: () => zeroStats(), ready: () => true }, {
          hostname: "127.0.0.1",
          port: api.port,
          tokenFile,
          version: "0.1.0",
          limits: ROOMY,
        }),
        /API server cannot listen on 127\.0\.0\.1:\d+/,
      );
      assert.equal(await Deno.readTextFile(tokenFile), api.token);
      assert.equal(await Deno.readTextFile(`${dir}/api-ca.crt`), api.caPem);
      assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name).sort(), [
        "api-ca.crt",
        "token",
      ]);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  });
});
