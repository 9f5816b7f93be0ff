/**
 * The API front's memory under clients that send requests without reading the answers, measured
 * from outside: the front in its own process (tests/_helpers/api_flood_server.ts), the clients in
 * another, so neither paces the other through a shared event loop. Before the bound on the
 * encrypted bytes handed to the TLS layer, 8 such connections took the front from 49 to 1,139 MiB
 * of RSS in 8 s, still climbing; a handler that never answers cost ~35 MiB per connection.
 */

import assert from "node:assert/strict";
import { rssBytes } from "../../scripts/bench/process.ts";

/** N connections, each writing pipelined requests flat out and never reading. */
const FLOOD_CLIENT = `
const [port, ca, n] = Deno.args;
const req = "GET / HTTP/1.1\\r\\nhost: x\\r\\n\\r\\n";
const block = new TextEncoder().encode(req.repeat(Math.floor(65536 / req.length)));
for (let i = 0; i < Number(n); i++) {
  const c = await Deno.connectTls({ hostname: "127.0.0.1", port: Number(port), caCerts: [ca] });
  await c.handshake();
  (async () => { for (;;) await c.write(block); })().catch(() => {});
}
console.log("connected");
await new Promise(() => {});
`;

async function floodRssGrowth(mode: "ok" | "hang", connections: number, seconds: number) {
  const server = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("../_helpers/api_flood_server.ts", import.meta.url).pathname, mode],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const lines = server.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let client: Deno.ChildProcess | undefined;
  try {
    let first = "";
    while (!first.includes("\n")) {
      const { value, done } = await lines.read();
      assert.ok(!done, "the server process ended");
      first += value;
    }
    const { port, caPem } = JSON.parse(first.split("\n")[0]);
    const before = await rssBytes(server.pid);
    client = new Deno.Command(Deno.execPath(), {
      args: ["eval", FLOOD_CLIENT, String(port), caPem, String(connections)],
      stdout: "null",
      stderr: "inherit",
    }).spawn();
    let peak = before;
    for (let i = 0; i < seconds * 4; i++) {
      await new Promise((r) => setTimeout(r, 250));
      peak = Math.max(peak, await rssBytes(server.pid));
    }
    return (peak - before) / 2 ** 20;
  } finally {
    for (const p of [client, server]) {
      try {
        p?.kill("SIGKILL");
      } catch {
        // already gone
      }
      await p?.status;
    }
    await lines.cancel().catch(() => {});
  }
}

Deno.test("api front: clients sending without reading the answers cannot grow its memory", async () => {
  // Answered at once: the answers pile up unread, so the front stops reading each socket.
  const ok = await floodRssGrowth("ok", 8, 6);
  // Never answered: the first request's handler holds the connection; the rest is not read.
  const hang = await floodRssGrowth("hang", 16, 4);
  console.log(`RSS growth: answered ${ok.toFixed(0)} MiB, never answered ${hang.toFixed(0)} MiB`);
  // What the process allocates serving at full speed, not what the clients sent (GiBs).
  assert.ok(ok < 256, `answered: +${ok.toFixed(0)} MiB`);
  assert.ok(hang < 128, `never answered: +${hang.toFixed(0)} MiB`);
});
