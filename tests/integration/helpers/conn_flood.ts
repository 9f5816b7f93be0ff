/**
 * A connection attacker for the end-to-end tests, run as its own process so its sockets use
 * its own file descriptors: opens `--count` TCP connections to `--host`:`--port`, 100 at a
 * time, and holds them. `--mode idle` sends nothing (idle connections, or TLS handshakes that
 * never start); `--mode slowloris` sends the 16-byte header of a 65,535-byte message and 100
 * bytes of its body, then nothing. It prints one JSON line when every connection is open
 * (`{"opened":N}`) and then, every 100 ms while it changes, how many the collector closed
 * (`{"opened":N,"closed":K}`); it exits when stdin closes. (No source-address option: binding
 * thousands of sockets to one address before connecting is quadratic in the kernel; the tests
 * attack over `::1` and serve their Agent on 127.0.0.1 instead.)
 *
 *   deno run --allow-net tests/integration/helpers/conn_flood.ts --port P --count N \
 *     [--mode idle|slowloris] [--host ::1]
 */

import { parseArgs } from "node:util";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    port: { type: "string" },
    count: { type: "string", default: "1" },
    mode: { type: "string", default: "idle" },
    host: { type: "string", default: "::1" },
  },
});

/** Header of a message announcing 65,535 bytes, then 100 bytes of its body. */
const SLOWLORIS = new Uint8Array(116);
SLOWLORIS.set([0, 10, 0xff, 0xff]);

const port = Number(values.port);
const count = Number(values.count);
let closed = 0;
const conns: Deno.TcpConn[] = [];

/** Opens one connection and counts when the collector closes it (EOF or reset). */
async function open(): Promise<void> {
  let conn: Deno.TcpConn;
  try {
    conn = await Deno.connect({ hostname: values.host, port });
  } catch {
    closed++;
    return;
  }
  conns.push(conn);
  (async () => {
    try {
      if (values.mode === "slowloris") await conn.write(SLOWLORIS);
      const buf = new Uint8Array(64);
      while ((await conn.read(buf)) !== null) {
        // the collector never sends
      }
    } catch {
      // reset
    }
    closed++;
  })();
}

// In batches: one at a time, 10k connections take longer than a short idle timeout.
for (let i = 0; i < count; i += 100) {
  await Promise.all(Array.from({ length: Math.min(100, count - i) }, open));
}
const write = (o: object): void => console.log(JSON.stringify(o));
write({ opened: count });
let reported = -1;
const timer = setInterval(() => {
  if (closed === reported) return;
  reported = closed;
  write({ opened: count, closed });
}, 100);
// Exit when the test closes stdin (or dies).
for await (const _ of Deno.stdin.readable) {
  // nothing to read
}
clearInterval(timer);
for (const c of conns) {
  try {
    c.close();
  } catch {
    // closed already
  }
}
Deno.exit(0);
