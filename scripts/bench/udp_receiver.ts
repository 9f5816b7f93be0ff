/**
 * A UDP receiver under test, run as its own process by the UDP benchmark so that each receive
 * path gets a fresh runtime. Same protocol as udp_recv.c: prints "READY <port>" once bound,
 * answers every stdin line with {"count":N,...}, exits on stdin EOF.
 *
 *   deno run --allow-all scripts/bench/udp_receiver.ts --mode=<mode> [--workers=N]
 *        [--rcvbuf=BYTES] [--slots=N] [--delay=MS] [--port=P]
 *
 * Modes: deno (Deno.listenDatagram, one receive() per datagram), dgram (node:dgram 'message'
 * events, no recvBufferSize: it collapses throughput under Deno), fast (src/collector/
 * udp_fast.ts, libc recvmmsg in worker threads), fast-deno (udp_fast's fallback path).
 */

import dgram from "node:dgram";
import { setLogLevel } from "../../src/log.ts";
import { startUdpReceiver } from "../../src/collector/udp_fast.ts";

function flag(name: string, dflt: string): string {
  const f = Deno.args.find((a) => a.startsWith(`--${name}=`));
  return f === undefined ? dflt : f.slice(name.length + 3);
}

const mode = flag("mode", "fast");
const port = Number(flag("port", "0"));
const host = "127.0.0.1";
let count = 0;
let extra: () => Record<string, unknown> = () => ({});
let boundPort = 0;

setLogLevel("warn");

if (mode === "deno") {
  const conn = Deno.listenDatagram({ transport: "udp", hostname: host, port });
  boundPort = (conn.addr as Deno.NetAddr).port;
  (async () => {
    for await (const _ of conn) count++;
  })();
} else if (mode === "dgram") {
  const sock = dgram.createSocket({ type: "udp4" });
  sock.on("message", () => count++);
  await new Promise<void>((res) => sock.bind(port, host, () => res()));
  boundPort = sock.address().port;
} else if (mode === "fast" || mode === "fast-deno") {
  const rx = await startUdpReceiver({
    hostname: host,
    port,
    mode: mode === "fast" ? "ffi" : "deno",
    workers: Number(flag("workers", "1")),
    recvSlots: Number(flag("slots", "64")),
    maxDelayMs: Number(flag("delay", "5")),
    recvBufferBytes: flag("rcvbuf", "") === "" ? undefined : Number(flag("rcvbuf", "0")),
    onDatagrams(batch): void {
      count += batch.count;
    },
  });
  boundPort = rx.addr.port;
  extra = () => {
    const s = rx.stats();
    return {
      dropped: s.dropped,
      kernelDrops: s.kernelDrops,
      batches: s.batches,
      rcvbuf: s.recvBufferBytes,
    };
  };
} else {
  console.error(`unknown mode ${mode}`);
  Deno.exit(2);
}

const enc = new TextEncoder();
await Deno.stdout.write(enc.encode(`READY ${boundPort}\n`));
const dec = new TextDecoder();
let pending = "";
for await (const chunk of Deno.stdin.readable) {
  pending += dec.decode(chunk, { stream: true });
  let nl: number;
  while ((nl = pending.indexOf("\n")) >= 0) {
    pending = pending.slice(nl + 1);
    await Deno.stdout.write(enc.encode(JSON.stringify({ count, ...extra() }) + "\n"));
  }
}
Deno.exit(0);
