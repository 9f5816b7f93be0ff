import assert from "node:assert/strict";
import { Counters, withEarlierCollectors } from "../../src/collector/stats.ts";
import type { UdpReceiverCounters } from "../../src/collector/udp.ts";

const udp = (drops: number, sockets: number): UdpReceiverCounters => ({
  mode: "ffi",
  kernelDrops: drops,
  kernelDropsKnown: true,
  queueDrops: drops,
  oversized: 0,
  handlerErrors: 0,
  recvBufferBytes: 4 << 20,
  sockets,
  socketDatagrams: new Array(sockets).fill(7),
});

Deno.test("collector counters: counts add up over replaced collectors, gauges are the current one's", () => {
  const a = new Counters("udp");
  a.sessionsOpened = 5;
  a.sessionsClosed = 5;
  a.bytes = 100;
  a.decodeError("framing: short", a.exporter("10.0.0.1"));
  a.connectionRefused("maxConnections");
  const b = new Counters("tcp");
  b.sessionsOpened = 3;
  b.sessionsClosed = 1;
  b.bytes = 10;
  b.decodeError("framing: short", b.exporter("10.0.0.1"));
  b.decodeError("length mismatch", b.exporter("10.0.0.2"));
  const earlier = withEarlierCollectors(undefined, { ...a.snapshot(), udpReceiver: udp(4, 2) });
  const s = withEarlierCollectors(earlier, b.snapshot())!;
  assert.equal(s.transport, "tcp");
  assert.equal(s.sessionsOpened, 8);
  assert.equal(s.sessionsClosed, 6);
  assert.equal(s.sessionsActive, 2, "the current collector's");
  assert.equal(s.bytes, 110);
  assert.deepEqual(s.decodeErrors, { "framing: short": 2, "length mismatch": 1 });
  assert.equal(s.decodeErrorsTotal, 3);
  assert.deepEqual(s.connectionsRefused, { maxConnections: 1 });
  assert.equal(s.exporters["10.0.0.1"].decodeErrors, 2);
  assert.equal(s.exporters["10.0.0.2"].decodeErrors, 1);
  // The UDP path's drops are kept, with no socket now.
  assert.equal(s.udpReceiver?.kernelDrops, 4);
  assert.equal(s.udpReceiver?.sockets, 0);
  // A new UDP receive path adds its drops; its state is its own.
  const c = withEarlierCollectors(s, {
    ...new Counters("udp").snapshot(),
    udpReceiver: udp(1, 1),
  })!;
  assert.equal(c.udpReceiver?.kernelDrops, 5);
  assert.equal(c.udpReceiver?.queueDrops, 5);
  assert.equal(c.udpReceiver?.sockets, 1);
  // With no collector running (after stop), the counts stay and the gauges are 0.
  const stopped = withEarlierCollectors(withEarlierCollectors(earlier, b.snapshot()), undefined)!;
  assert.equal(stopped.sessionsOpened, 8);
  assert.equal(stopped.sessionsActive, 0);
  assert.equal(withEarlierCollectors(undefined, undefined), undefined);
});
