/**
 * The Pod watch stream as we read it (src/k8s/watch.ts) against an API server that sends what no
 * real one would: a line that never ends (bounded: the watch ends with an error, the process
 * lives), lines that are no event (counted), an event split across chunks (joined).
 */

import assert from "node:assert/strict";
import http from "node:http";
import { connectKube, resolveKubeTarget } from "../../src/k8s/client.ts";
import { MAX_WATCH_LINE_BYTES, type WatchEvent, watchStream } from "../../src/k8s/watch.ts";
import { waitFor, withDeadline } from "../_helpers/wait.ts";

/** A plain-HTTP API server answering every request with `handler`, and a client of it. */
async function withServer(
  handler: (res: http.ServerResponse) => void,
  body: (
    api: Awaited<ReturnType<typeof connectKube>>,
    server: { kubeconfig: string; sockets: ReadonlySet<unknown> },
  ) => Promise<void>,
): Promise<void> {
  const sockets = new Set<import("node:net").Socket>();
  const server = http.createServer((_req, res) => handler(res));
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  const dir = await Deno.makeTempDir({ prefix: "fa-watch-" });
  const kubeconfig = `${dir}/config`;
  await Deno.writeTextFile(
    kubeconfig,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      // Plain HTTP: client-node wants TLS verification off for it.
      clusters: [{
        name: "t",
        cluster: { server: `http://127.0.0.1:${port}`, "insecure-skip-tls-verify": true },
      }],
      users: [{ name: "t", user: { token: "x" } }],
      contexts: [{ name: "t", context: { cluster: "t", user: "t" } }],
      "current-context": "t",
    }),
  );
  try {
    const target = await resolveKubeTarget({ kubeconfig, env: () => undefined });
    await body(await connectKube(target!), { kubeconfig, sockets });
  } finally {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
    await Deno.remove(dir, { recursive: true });
  }
}

/** Watches until the stream ends: its events, malformed lines and end. */
async function watchAll(api: Awaited<ReturnType<typeof connectKube>>) {
  const events: WatchEvent[] = [];
  const malformed: string[] = [];
  const done = Promise.withResolvers<unknown>();
  await api.watchPods("1", {
    onEvent: (ev) => events.push(ev),
    onDone: (err) => done.resolve(err),
    onMalformed: (d) => malformed.push(d),
  });
  const err = await done.promise;
  return { events, malformed, err };
}

Deno.test("watch: a line that never ends is dropped at the bound, the watch ends with an error", async () => {
  const chunk = "x".repeat(64 * 1024);
  let sent = 0;
  await withServer((res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.write(`{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n{"type":"ADDED","object":"`);
    const more = () => {
      // Far past the bound, as fast as the client reads.
      while (sent < 4 * MAX_WATCH_LINE_BYTES && res.write(chunk)) sent += chunk.length;
      if (sent < 4 * MAX_WATCH_LINE_BYTES) res.once("drain", more);
    };
    res.on("error", () => {});
    more();
  }, async (api) => {
    const { events, err } = await watchAll(api);
    assert.equal(events.length, 1, "the whole line before it");
    assert.match(String(err), /longer than \d+ bytes/);
    assert.ok(sent < 2 * MAX_WATCH_LINE_BYTES, `read ${sent} bytes of it, not all`);
  });
});

Deno.test("watch: lines that are no event are counted, an event split across writes is joined", async () => {
  await withServer((res) => {
    res.writeHead(200, { "content-type": "application/json" });
    res.write('{"type":"ADD');
    setTimeout(() => {
      res.write('ED","object":{"metadata":{"name":"a"}}}\nnot json\n{"object":{}}\n\n');
      res.end('{"type":"DELETED","object":{"metadata":{"name":"a"}}}');
    }, 50);
  }, async (api) => {
    const { events, malformed, err } = await watchAll(api);
    assert.deepEqual(events.map((e) => e.type), ["ADDED", "DELETED"]);
    assert.equal(events[0].object.metadata.name, "a");
    assert.deepEqual(malformed, ["a line that is not JSON", "a line without an event type"]);
    assert.equal(err, null);
  });
});

Deno.test("watch: a status other than 200 ends it with that status", async () => {
  await withServer((res) => {
    res.writeHead(410, { "content-type": "application/json" });
    res.end('{"kind":"Status","code":410}');
  }, async (api) => {
    const { err } = await watchAll(api);
    assert.equal((err as { statusCode?: number }).statusCode, 410);
  });
});

Deno.test("watch: answer headers that never come end it after headersMs, its connection closed", async () => {
  await withServer(() => {/* never answers */}, async (_api, server) => {
    const lib = await import("@kubernetes/client-node");
    const { fetch } = await import("undici");
    const kc = new lib.KubeConfig();
    kc.loadFromString(await Deno.readTextFile(server.kubeconfig));
    const done = Promise.withResolvers<unknown>();
    const began = performance.now();
    watchStream({ lib, kc, fetch }, "/api/v1/pods", {}, {
      onEvent: () => {},
      onDone: (err) => done.resolve(err),
    }, { authMs: 60_000, headersMs: 300, inactivityMs: 60_000 });
    const err = await done.promise;
    const took = performance.now() - began;
    assert.equal((err as Error).name, "TimeoutError");
    assert.ok(took < 10_000, `ended after ${took} ms`);
    await waitFor(() => server.sockets.size === 0, { what: "the watch's connection closed" });
  });
});

/** Watches with `watchStream` itself (bounds of the test's choosing) until the stream ends. */
async function watchWith(
  kubeconfig: string,
  opts: { inactivityMs: number; maxMs?: number },
): Promise<{ err: unknown; events: number; tookMs: number }> {
  const lib = await import("@kubernetes/client-node");
  const { fetch } = await import("undici");
  const kc = new lib.KubeConfig();
  kc.loadFromString(await Deno.readTextFile(kubeconfig));
  const done = Promise.withResolvers<unknown>();
  let events = 0;
  const began = performance.now();
  watchStream({ lib, kc, fetch }, "/api/v1/pods", {}, {
    onEvent: () => events++,
    onDone: (err) => done.resolve(err),
  }, { authMs: 60_000, headersMs: 60_000, ...opts });
  const err = await withDeadline(done.promise, 10_000, "the watch's end");
  return { err, events, tookMs: performance.now() - began };
}

/** A server answering a watch with `line` every 50 ms, never ending it. */
function every50ms(line: string): (res: http.ServerResponse) => void {
  return (res) => {
    res.writeHead(200, { "content-type": "application/json" });
    const t = setInterval(() => res.write(line), 50);
    res.on("close", () => clearInterval(t));
    res.on("error", () => {});
  };
}

// Before, any byte reset the inactivity bound: whitespace every 20 s kept a dead watch open.
Deno.test("watch: blank lines are no sign of life, the inactivity bound ends the watch", async () => {
  await withServer(every50ms(" \n"), async (_api, server) => {
    const { err, tookMs } = await watchWith(server.kubeconfig, { inactivityMs: 300 });
    assert.equal((err as Error).name, "TimeoutError");
    assert.ok(tookMs < 5_000, `ended after ${tookMs} ms`);
  });
});

Deno.test("watch: a watch is ended maxMs after it began, whatever it sends", async () => {
  const bookmark = JSON.stringify({
    type: "BOOKMARK",
    object: { metadata: { resourceVersion: "5" } },
  });
  await withServer(every50ms(bookmark + "\n"), async (_api, server) => {
    const { err, events, tookMs } = await watchWith(server.kubeconfig, {
      inactivityMs: 60_000,
      maxMs: 500,
    });
    assert.match(String(err), /open longer than 500 ms/);
    assert.ok(events > 0, "its events before");
    assert.ok(tookMs < 5_000, `ended after ${tookMs} ms`);
  });
});
