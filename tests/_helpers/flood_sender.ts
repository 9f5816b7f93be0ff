/**
 * A flat-out IPFIX sender for fairness tests, run as its own process so that senders don't
 * share one event loop (a Deno writer whose socket has room writes again without a turn of the
 * loop, which would make the senders themselves unfair). Usage:
 *
 *   deno run --allow-net --allow-read flood_sender.ts PORT FILE HEAD_BYTES [CA CERT KEY]
 *
 * Connects to 127.0.0.1:PORT (with mutual TLS when the three PEM files are given), writes FILE's first HEAD_BYTES (the templates), prints `ready`,
 * waits for a line on stdin, then writes the rest of FILE over and over until it is killed or
 * the collector closes the connection.
 */

const [port, file, head, ca, cert, key] = Deno.args;
const bytes = await Deno.readFile(file);
const headBytes = Number(head);
const conn = ca === undefined
  ? await Deno.connect({ hostname: "127.0.0.1", port: Number(port) })
  : await Deno.connectTls({
    hostname: "127.0.0.1",
    port: Number(port),
    caCerts: [await Deno.readTextFile(ca)],
    cert: await Deno.readTextFile(cert),
    key: await Deno.readTextFile(key),
  });
await writeAll(bytes.subarray(0, headBytes));
console.log("ready");
const reader = Deno.stdin.readable.getReader();
await reader.read();
reader.releaseLock();
const body = bytes.subarray(headBytes);
try {
  for (;;) await writeAll(body);
} catch {
  // The collector closed the connection, or the test killed us: done either way.
}

async function writeAll(b: Uint8Array): Promise<void> {
  for (let off = 0; off < b.length;) off += await conn.write(b.subarray(off));
}
