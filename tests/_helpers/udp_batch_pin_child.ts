/**
 * Child of tests/collector/session_raw_test.ts (run with `--v8-flags=--expose-gc`): 50 UDP
 * sessions in raw mode, each whose one data message arrived at the start of its own 1 MiB
 * receive batch (as the fast path hands them over), then how many of those batches are still
 * alive after garbage collection, as one JSON line.
 *
 * @module
 */

import { Collector } from "../../src/collector/collector.ts";
import { type DatagramHandler, udpPeer, type UdpReceiver } from "../../src/collector/udp.ts";
import { dataMessage, SMALL_FIELDS, smallRecord, templateMessage } from "../collector/helpers.ts";

const gc = (globalThis as unknown as { gc: () => void }).gc;
let handler!: DatagramHandler;
const rx: UdpReceiver = {
  port: 1,
  run(h) {
    handler = h;
    return new Promise(() => {});
  },
  close() {},
};
const c = new Collector(
  { protocol: "udp", address: "127.0.0.1:0", udpReceiver: () => rx, raw: true, sweepIntervalMs: 0 },
  () => {},
);
await c.start();

const template = templateMessage(1, 256, SMALL_FIELDS);
const data = dataMessage(1, 256, SMALL_FIELDS, [smallRecord(0)]);

const SESSIONS = 50;
let alive = 0;
const registry = new FinalizationRegistry(() => alive--);
for (let i = 0; i < SESSIONS; i++) {
  const peer = udpPeer(`10.0.0.${i + 1}`, 4739);
  handler(template, 0, template.length, peer);
  const batch = new Uint8Array(1 << 20);
  batch.set(data, 0);
  handler(batch, 0, data.length, peer);
  registry.register(batch.buffer, i);
  alive++;
}
for (let k = 0; k < 5; k++) {
  gc();
  await new Promise((r) => setTimeout(r, 50));
}
const s = c.stats();
console.log(JSON.stringify({ sessions: s.sessionsOpened, dataRecords: s.dataRecords, alive }));

Deno.exit(0);
