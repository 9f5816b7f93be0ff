/**
 * The fast UDP path's kernel drop count when the drops are the tail of a burst: no datagram
 * comes after them to carry the count (SO_RXQ_OVFL), so the receiver reads it itself (SO_MEMINFO)
 * when the socket is quiet and at stop. The receiver runs in its own process, stopped (SIGSTOP,
 * as a receive thread kept off the CPU) while the burst arrives.
 */

import assert from "node:assert/strict";
import { udpTableDrops } from "../../src/collector/udp.ts";

Deno.test("udp fast path: the drops of a burst's tail are reported, while running and at stop", async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("../_helpers/udp_fast_child.ts", import.meta.url).pathname],
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  const next = async (): Promise<Record<string, number | boolean>> => {
    for (;;) {
      const nl = buf.indexOf("\n");
      if (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        return JSON.parse(line);
      }
      const { value, done } = await reader.read();
      assert.ok(!done, "the receiver process ended");
      buf += value;
    }
  };
  const sender = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: 0 });
  try {
    const port = Number((await next()).port);
    Deno.kill(child.pid, "SIGSTOP");
    for (let i = 0; i < 200; i++) {
      await sender.send(new Uint8Array(1000), { transport: "udp", hostname: "127.0.0.1", port });
    }
    const drops = udpTableDrops(Deno.readTextFileSync("/proc/net/udp"), port).drops;
    assert.ok(drops > 0, "the stopped receiver's small buffer overflowed");
    Deno.kill(child.pid, "SIGCONT");
    // While running: once the socket is quiet, without another datagram.
    let last = await next();
    const until = Date.now() + 5000;
    while (last.kernelDrops !== drops && Date.now() < until) last = await next();
    assert.equal(last.kernelDrops, drops, `reported ${last.kernelDrops}, the kernel's ${drops}`);
    assert.equal(Number(last.got) + drops, 200);
    Deno.kill(child.pid, "SIGTERM");
    let fin = await next();
    while (fin.final !== true) fin = await next();
    assert.equal(fin.kernelDrops, drops);
  } finally {
    sender.close();
    try {
      Deno.kill(child.pid, "SIGKILL");
    } catch {
      // exited
    }
    await child.status;
    await reader.cancel().catch(() => {});
  }
});
