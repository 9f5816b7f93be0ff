/**
 * A process receiving on the fast UDP path (127.0.0.1, the smallest receive buffer) for
 * tests/collector/udp_fast_drops_test.ts: prints `{port}`, then `{got, kernelDrops}` every
 * 100 ms, and on SIGTERM closes the receiver and prints `{final: true, got, kernelDrops}`.
 *
 * @module
 */

import { startUdpReceiver } from "../../src/collector/udp_fast.ts";
import { setLogLevel } from "../../src/log.ts";

setLogLevel("error");
let got = 0;
const rx = await startUdpReceiver({
  hostname: "127.0.0.1",
  port: 0,
  mode: "ffi",
  recvBufferBytes: 1,
  onDatagrams(b) {
    got += b.count;
  },
});
console.log(JSON.stringify({ port: rx.addr.port }));
const timer = setInterval(() => {
  console.log(JSON.stringify({ got, kernelDrops: rx.stats().kernelDrops }));
}, 100);
Deno.addSignalListener("SIGTERM", async () => {
  clearInterval(timer);
  await rx.close();
  console.log(JSON.stringify({ final: true, got, kernelDrops: rx.stats().kernelDrops }));
  Deno.exit(0);
});
