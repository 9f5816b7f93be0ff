import assert from "node:assert/strict";
import {
  Collector,
  type DatagramHandler,
  DenoUdpReceiver,
  fastUdpReceiverFactory,
  type UdpPeer,
  udpPeer,
  type UdpReceiverFactory,
  udpTableDrops,
} from "../../src/collector/mod.ts";
import type { ListenAddress } from "../../src/collector/address.ts";
import { ManualClock } from "../../src/clock.ts";
import { encodeMessage } from "../../src/ipfix/mod.ts";
import { setLogLevel, setLogWriter } from "../../src/log.ts";
import {
  dataMessage,
  GOLDEN_DATA,
  GOLDEN_TEMPLATE,
  SMALL_FIELDS,
  smallRecord,
  startCollector,
  templateMessage,
  udpClient,
  udpSend,
} from "./helpers.ts";
import { waitFor } from "../_helpers/wait.ts";

setLogLevel("error");

Deno.test("udp: golden vectors over 127.0.0.1 and ::1 on one dual-stack socket", async () => {
  const { c, received } = await startCollector({ address: "[::]:0", protocol: "udp" });
  const v4 = udpClient("127.0.0.1");
  const v6 = udpClient("::1");
  try {
    for (const [client, host] of [[v4, "127.0.0.1"], [v6, "::1"]] as const) {
      await udpSend(client, host, c.port, GOLDEN_TEMPLATE);
      await udpSend(client, host, c.port, GOLDEN_DATA);
    }
    await waitFor(() => received.length === 2, { what: "two data sets" });
    const byAddr = new Map(received.map((r) => [r.ctx.exporterAddress, r]));
    assert.deepEqual([...byAddr.keys()].sort(), ["127.0.0.1", "::1"]);
    for (const r of received) {
      assert.equal(r.ctx.transport, "udp");
      assert.equal(r.ctx.observationDomainId, 0x33de13e2);
      assert.equal(r.ctx.templateId, 256);
      assert.equal(r.ctx.options, false);
      assert.equal(r.records.length, 1);
      const rec = r.records[0];
      assert.equal(rec.sourceIPv4Address, "10.10.0.79");
      assert.equal(rec.destinationIPv4Address, "10.10.1.80");
      assert.equal(rec.sourceTransportPort, 44752);
      assert.equal(rec.destinationTransportPort, 5201);
      assert.equal(rec.packetTotalCount, 100n);
      assert.equal(rec.octetTotalCount, 15000n);
      assert.equal(rec.sourcePodName, "perftest-a");
      assert.equal(rec.tcpState, "ESTABLISHED");
    }
    const s = c.stats();
    assert.equal(s.messages, 4);
    assert.equal(s.dataRecords, 2);
    assert.equal(s.templateRecords, 2);
    assert.equal(s.sessionsOpened, 2);
    assert.equal(s.sessionsActive, 2);
    assert.equal(s.bytes, 2 * (GOLDEN_TEMPLATE.length + GOLDEN_DATA.length));
    assert.equal(s.exporters["127.0.0.1"].dataRecords, 1);
    assert.equal(s.exporters["::1"].messages, 2);
    assert.equal(s.decodeErrorsTotal, 0);
  } finally {
    v4.close();
    v6.close();
    await c.stop();
  }
  assert.equal(c.stats().sessionsActive, 0);
});

Deno.test("udp: two exporters with different domains share template id 256 without clashing", async () => {
  const { c, received } = await startCollector({ address: "127.0.0.1:0", protocol: "udp" });
  const a = udpClient("127.0.0.1");
  const b = udpClient("127.0.0.1");
  try {
    // Same id 256, different definitions: templates are per session and domain.
    await udpSend(a, "127.0.0.1", c.port, templateMessage(1, 256, SMALL_FIELDS));
    await udpSend(b, "127.0.0.1", c.port, GOLDEN_TEMPLATE);
    await waitFor(() => c.stats().templateRecords === 2, { what: "templates" });
    await udpSend(b, "127.0.0.1", c.port, GOLDEN_DATA);
    await udpSend(a, "127.0.0.1", c.port, dataMessage(1, 256, SMALL_FIELDS, [smallRecord(7)]));
    await waitFor(() => received.length === 2, { what: "data" });
    const fromA = received.find((r) => r.ctx.observationDomainId === 1)!;
    const fromB = received.find((r) => r.ctx.observationDomainId === 0x33de13e2)!;
    assert.equal(fromA.records[0].packetTotalCount, 7n);
    assert.equal(Object.keys(fromA.records[0]).length, 5);
    assert.equal(fromB.records[0].sourcePodName, "perftest-a");
    assert.equal(Object.keys(fromB.records[0]).length, 39);
    assert.equal(c.stats().templateMisses, 0);
  } finally {
    a.close();
    b.close();
    await c.stop();
  }
});

Deno.test("udp: data before its template is counted as a miss, then the session recovers", async () => {
  const { c, received } = await startCollector({ address: "127.0.0.1:0", protocol: "udp" });
  const a = udpClient("127.0.0.1");
  try {
    await udpSend(a, "127.0.0.1", c.port, GOLDEN_DATA);
    await waitFor(() => c.stats().templateMisses === 1, { what: "template miss" });
    assert.equal(received.length, 0);
    await udpSend(a, "127.0.0.1", c.port, GOLDEN_TEMPLATE);
    await udpSend(a, "127.0.0.1", c.port, GOLDEN_DATA);
    await waitFor(() => received.length === 1, { what: "data after template" });
    const s = c.stats();
    assert.equal(s.templateMisses, 1);
    // The records of the missed set (message and set headers excluded), whatever their number.
    assert.equal(s.templateMissBytes, GOLDEN_DATA.length - 16 - 4);
    assert.equal(s.exporters["127.0.0.1"].templateMisses, 1);
    assert.equal(s.messages, 3);
    assert.equal(s.dataRecords, 1);
  } finally {
    a.close();
    await c.stop();
  }
});

Deno.test("udp: bad datagrams are counted by reason and the loop keeps receiving", async () => {
  const { c, received } = await startCollector({ address: "127.0.0.1:0", protocol: "udp" });
  const a = udpClient("127.0.0.1");
  try {
    const lengthMismatch = GOLDEN_TEMPLATE.slice(0, 200); // header says 288
    const v9 = GOLDEN_TEMPLATE.slice();
    v9[1] = 9;
    await udpSend(a, "127.0.0.1", c.port, lengthMismatch);
    await udpSend(a, "127.0.0.1", c.port, v9);
    await udpSend(a, "127.0.0.1", c.port, new Uint8Array([0, 10, 0]));
    await udpSend(a, "127.0.0.1", c.port, new Uint8Array(0));
    await udpSend(a, "127.0.0.1", c.port, GOLDEN_TEMPLATE);
    await udpSend(a, "127.0.0.1", c.port, GOLDEN_DATA);
    await waitFor(() => received.length === 1, { what: "good data after bad datagrams" });
    const s = c.stats();
    assert.equal(s.decodeErrorsTotal, 4);
    assert.equal(s.decodeErrors.badLength, 1);
    assert.equal(s.decodeErrors.badVersion, 1);
    assert.equal(s.decodeErrors.truncated, 2);
    assert.equal(s.messages, 2);
    assert.equal(s.exporters["127.0.0.1"].decodeErrors, 4);
  } finally {
    a.close();
    await c.stop();
  }
});

Deno.test("udp: templates and idle sessions expire after the TTL (injected clock)", async () => {
  const clock = new ManualClock();
  const { c, received } = await startCollector({
    address: "127.0.0.1:0",
    protocol: "udp",
    templateTtlMs: 60_000,
    clock,
    sweepIntervalMs: 0,
  });
  const a = udpClient("127.0.0.1");
  try {
    await udpSend(a, "127.0.0.1", c.port, GOLDEN_TEMPLATE);
    await waitFor(() => c.stats().messages === 1, { what: "template" });
    clock.advance(59_999);
    assert.equal(c.expireIdleSessions(), 0);
    await udpSend(a, "127.0.0.1", c.port, GOLDEN_DATA);
    await waitFor(() => received.length === 1, { what: "data within TTL" });
    // The data message refreshed the session but not the template (announced at t=0).
    clock.advance(1);
    await udpSend(a, "127.0.0.1", c.port, GOLDEN_DATA);
    await waitFor(() => c.stats().templateMisses === 1, { what: "miss after template TTL" });
    clock.advance(60_000);
    assert.equal(c.expireIdleSessions(), 1);
    const s = c.stats();
    assert.equal(s.sessionsExpired, 1);
    assert.equal(s.sessionsActive, 0);
    assert.equal(s.sessionsOpened, 1);
  } finally {
    a.close();
    await c.stop();
  }
});

Deno.test("udp: the sink throwing is counted and does not stop collection", async () => {
  let calls = 0;
  const c = new Collector({ address: "127.0.0.1:0", protocol: "udp" }, () => {
    calls++;
    throw new Error("sink broke");
  });
  await c.start();
  const a = udpClient("127.0.0.1");
  try {
    await udpSend(a, "127.0.0.1", c.port, GOLDEN_TEMPLATE);
    await udpSend(a, "127.0.0.1", c.port, GOLDEN_DATA);
    await udpSend(a, "127.0.0.1", c.port, GOLDEN_DATA);
    await waitFor(() => calls === 2, { what: "two sink calls" });
    assert.equal(c.stats().sinkErrors, 2);
    assert.equal(c.stats().dataRecords, 2);
  } finally {
    a.close();
    await c.stop();
  }
});

Deno.test("udp: more sources than maxUdpSessions evicts the least recently active, logged", async () => {
  const lines: string[] = [];
  setLogLevel("warn");
  const prev = setLogWriter((l) => lines.push(l));
  const { c } = await startCollector({
    address: "127.0.0.1:0",
    protocol: "udp",
    limits: { maxUdpSessions: 2 },
  });
  const clients = [udpClient("127.0.0.1"), udpClient("127.0.0.1"), udpClient("127.0.0.1")];
  try {
    for (const [i, cl] of clients.entries()) {
      await udpSend(cl, "127.0.0.1", c.port, GOLDEN_TEMPLATE);
      await waitFor(() => c.stats().messages === i + 1, { what: "template" });
    }
    const s = c.stats();
    assert.equal(s.sessionsOpened, 3);
    assert.equal(s.sessionsActive, 2);
    assert.equal(s.sessionsEvicted, 1);
    // Counted and logged, naming the limit (was counted only).
    assert.equal(
      lines.filter((l) => l.includes("limit=maxUdpSessions")).length,
      1,
      lines.join("\n"),
    );
    // The evicted first source lost its templates: its data is a miss now.
    await udpSend(clients[0], "127.0.0.1", c.port, GOLDEN_DATA);
    await waitFor(() => c.stats().templateMisses === 1, { what: "miss for evicted session" });
  } finally {
    setLogWriter(prev);
    for (const cl of clients) cl.close();
    await c.stop();
  }
});

Deno.test("udp: template misses are counted each time but logged rate-limited", async () => {
  const clock = new ManualClock();
  const lines: string[] = [];
  setLogLevel("warn");
  const prev = setLogWriter((l) => lines.push(l));
  const { c } = await startCollector({ address: "127.0.0.1:0", protocol: "udp", clock });
  const a = udpClient("127.0.0.1");
  try {
    for (let i = 0; i < 5; i++) await udpSend(a, "127.0.0.1", c.port, GOLDEN_DATA);
    await waitFor(() => c.stats().templateMisses === 5, { what: "five misses" });
    const missLines = (): string[] => lines.filter((l) => l.includes("unknown template"));
    assert.equal(missLines().length, 1);
    assert.match(missLines()[0], /exporter=127\.0\.0\.1/);
    assert.match(missLines()[0], /templateIds=256/);
    clock.advance(10_000);
    await udpSend(a, "127.0.0.1", c.port, GOLDEN_DATA);
    await waitFor(() => c.stats().templateMisses === 6, { what: "sixth miss" });
    assert.equal(missLines().length, 2);
    assert.match(missLines()[1], /suppressed=4/);
  } finally {
    a.close();
    await c.stop();
    setLogWriter(prev);
    setLogLevel("error");
  }
});

/**
 * A pluggable receive path driven by the test: `deliver` hands a datagram to the collector's
 * handler, synchronously; `closed` tells whether the collector closed it.
 */
function pluggableUdp(): {
  factory: UdpReceiverFactory;
  deliver: (data: Uint8Array, peer: UdpPeer, start?: number, end?: number) => void;
  closed: () => boolean;
  address: () => ListenAddress | undefined;
} {
  let handler: DatagramHandler | undefined;
  let closed = false;
  let bound: ListenAddress | undefined;
  let endRun: () => void = () => {};
  return {
    factory: async (address) => {
      await Promise.resolve();
      bound = address;
      return {
        port: 4739,
        run: (h) => {
          handler = h;
          return new Promise<void>((r) => endRun = r);
        },
        close: () => {
          closed = true;
          endRun();
          return Promise.resolve();
        },
      };
    },
    deliver: (data, peer, start = 0, end = data.length) => handler!(data, start, end, peer),
    closed: () => closed,
    address: () => bound,
  };
}

Deno.test("udp: a pluggable (async) receive path feeds the same sessions; mapped IPv4 is normalised", async () => {
  const rx = pluggableUdp();
  const { c, received } = await startCollector({ protocol: "udp", udpReceiver: rx.factory });
  assert.deepEqual(rx.address(), { hostname: "::", port: 4739, wildcard: true });
  assert.equal(c.port, 4739);
  const peer = udpPeer("::ffff:10.0.0.9", 5000);
  rx.deliver(GOLDEN_TEMPLATE, peer);
  // A datagram in place inside a bigger buffer (a batch of the fast path).
  const batch = new Uint8Array(7 + GOLDEN_DATA.length + 5).fill(0xee);
  batch.set(GOLDEN_DATA, 7);
  rx.deliver(batch, peer, 7, 7 + GOLDEN_DATA.length);
  // Same IP, other port: another session without the template.
  rx.deliver(GOLDEN_DATA, udpPeer("::ffff:10.0.0.9", 5001));
  assert.equal(received.length, 1);
  assert.equal(received[0].records[0].sourceIPv4Address, "10.10.0.79");
  assert.equal(received[0].ctx.exporterAddress, "10.0.0.9");
  const s = c.stats();
  assert.equal(s.sessionsOpened, 2);
  assert.equal(s.templateMisses, 1);
  assert.equal(s.exporters["10.0.0.9"].sessionsOpened, 2);
  await c.stop();
  assert.equal(rx.closed(), true);
  assert.equal(c.stats().sessionsActive, 0);
});

Deno.test("udp: maxUdpSessions evicts the least recently active session, runs of one sender included", async () => {
  const rx = pluggableUdp();
  const { c, received } = await startCollector({
    protocol: "udp",
    limits: { maxUdpSessions: 2 },
    udpReceiver: rx.factory,
  });
  const [a, b, x, y] = [5001, 5002, 5003, 5004].map((port) => udpPeer("10.0.0.1", port));
  const send = (m: Uint8Array, p: UdpPeer) => rx.deliver(m, p);
  send(GOLDEN_TEMPLATE, a);
  send(GOLDEN_DATA, a);
  send(GOLDEN_TEMPLATE, b);
  // a becomes the most recently active again (b was the newest), then x evicts b, not a.
  send(GOLDEN_DATA, a);
  send(GOLDEN_TEMPLATE, x);
  assert.equal(c.stats().sessionsEvicted, 1);
  send(GOLDEN_DATA, a);
  assert.equal(received.length, 3, "a kept its template");
  send(GOLDEN_DATA, b);
  assert.equal(c.stats().templateMisses, 1, "b was evicted: a new session without it");
  // b came back as a new session, evicting x (then the eldest); a run of datagrams from b keeps
  // it the newest without re-inserting it, so y evicts a.
  assert.equal(c.stats().sessionsEvicted, 2);
  send(GOLDEN_DATA, b);
  send(GOLDEN_DATA, b);
  send(GOLDEN_TEMPLATE, y);
  send(GOLDEN_DATA, b);
  assert.equal(c.stats().templateMisses, 4, "b is still there, without a template");
  send(GOLDEN_DATA, a);
  assert.equal(c.stats().templateMisses, 5, "a was evicted by y");
  assert.equal(c.stats().sessionsEvicted, 4);
  await c.stop();
});

// A /proc/net/udp6 excerpt (header, then one row per socket; drops is the last column).
const UDP6_TABLE =
  `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  100: 00000000000000000000000000000000:1283 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 41 2 0000000000000000 17
  101: 0000000000000000FFFF00000100007F:E2D4 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 42 2 0000000000000000 5
  102: 00000000000000000000000001000000:1283 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000  1000        0 43 2 0000000000000000 3
`;

Deno.test("udp kernel drops: the drops column of the rows bound to the port is summed", () => {
  assert.deepEqual(udpTableDrops(UDP6_TABLE, 4739), { rows: 2, drops: 20 });
  assert.deepEqual(udpTableDrops(UDP6_TABLE, 0xe2d4), { rows: 1, drops: 5 });
  assert.deepEqual(udpTableDrops(UDP6_TABLE, 9), { rows: 0, drops: 0 });
  const v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  " +
    "timeout inode ref pointer drops\n" +
    "   7: 0100007F:1283 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 " +
    "99 2 ffff8a0c4e3b1c00 123456\n";
  assert.deepEqual(udpTableDrops(v4, 4739), { rows: 1, drops: 123456 });
});

Deno.test("udp kernel drops: a real overflow on loopback is counted, sent == received + kernelDrops", async () => {
  const rx = new DenoUdpReceiver(
    { hostname: "127.0.0.1", port: 0, wildcard: false },
    { kernelDropsIntervalMs: 0 },
  );
  const tx = udpClient("127.0.0.1");
  let received = 0;
  let loop: Promise<void> | undefined;
  try {
    assert.equal(rx.counters().kernelDropsKnown, Deno.build.os === "linux");
    if (Deno.build.os !== "linux") return;
    // Near-maximal datagrams while nobody reads: a few fill the socket's buffer
    // (net.core.rmem_default), the kernel drops the rest. Sent one at a time so loopback
    // delivers each before the next (no softnet backlog drops, which no socket counts).
    const size = 60_000;
    const sent = 200 + 2 * Math.ceil(rx.counters().recvBufferBytes / size);
    const msg = new Uint8Array(size);
    for (let i = 0; i < sent; i++) await udpSend(tx, "127.0.0.1", rx.port, msg);
    await rx.refreshKernelDrops();
    const drops = rx.counters().kernelDrops;
    assert.ok(drops > 0, `kernel drops after a burst of ${sent}: ${drops}`);
    loop = rx.run(() => received++);
    await waitFor(() => received + drops === sent, {
      what: `${sent - drops} queued datagrams read`,
    });
    await rx.close();
    await loop;
    // Nothing was sent after the burst: the final read (at close) changes nothing.
    assert.equal(rx.counters().kernelDrops, drops);
    assert.equal(received + rx.counters().kernelDrops, sent);
  } finally {
    tx.close();
    await rx.close();
    await loop;
  }
});

Deno.test("udp kernel drops: without /proc they are unknown (not 0) and the start-up log says why", async () => {
  const lines: string[] = [];
  setLogLevel("info");
  const prev = setLogWriter((l) => lines.push(l));
  const missing = await Deno.makeTempDir({ prefix: "fa-noproc-" });
  try {
    const rx = new DenoUdpReceiver(
      { hostname: "127.0.0.1", port: 0, wildcard: false },
      { procNetDir: `${missing}/net`, sysctlDir: `${missing}/sys` },
    );
    const loop = rx.run(() => {});
    await rx.close();
    await loop;
    const c = rx.counters();
    assert.equal(c.kernelDropsKnown, false);
    assert.equal(c.kernelDrops, 0);
    assert.equal(c.recvBufferBytes, 0);
    const warn = lines.filter((l) => l.includes("not observable"));
    assert.equal(warn.length, 1);
    assert.match(warn[0], /level=warn/);
    assert.match(warn[0], /--allow-ffi/);
    assert.match(warn[0], /--allow-all/);
    assert.equal(lines.filter((l) => l.includes("receive buffer unknown")).length, 1);
  } finally {
    setLogWriter(prev);
    setLogLevel("error");
    await Deno.remove(missing, { recursive: true });
  }
});

Deno.test("udp receive buffer: below 4 MiB a start-up warning gives the sysctl command", async () => {
  const lines: string[] = [];
  setLogLevel("warn");
  const prev = setLogWriter((l) => lines.push(l));
  const dir = await Deno.makeTempDir({ prefix: "fa-sysctl-" });
  const open = (rmemDefault: number, rmemMax: number) => {
    Deno.writeTextFileSync(`${dir}/rmem_default`, `${rmemDefault}\n`);
    Deno.writeTextFileSync(`${dir}/rmem_max`, `${rmemMax}\n`);
    return new DenoUdpReceiver(
      { hostname: "127.0.0.1", port: 0, wildcard: false },
      { sysctlDir: dir, kernelDropsIntervalMs: 0 },
    );
  };
  try {
    const small = open(212992, 212992);
    assert.equal(small.counters().recvBufferBytes, 212992);
    await small.close();
    const warn = lines.filter((l) => l.includes("receive buffer is small"));
    assert.equal(warn.length, 1);
    assert.match(warn[0], /sysctl -w net\.core\.rmem_max=8388608/);
    assert.match(warn[0], /recvBufferBytes=212992/);
    const big = open(8 << 20, 8 << 20);
    assert.equal(big.counters().recvBufferBytes, 8 << 20);
    await big.close();
    assert.equal(lines.filter((l) => l.includes("receive buffer is small")).length, 1);
  } finally {
    setLogWriter(prev);
    setLogLevel("error");
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("udp: the default socket path reports its kernel drops in the collector's stats", async () => {
  const { c } = await startCollector({ address: "127.0.0.1:0", protocol: "udp" });
  try {
    const r = c.stats().udpReceiver;
    assert.ok(r, "receive-path counters");
    assert.equal(r.mode, "socket");
    assert.equal(r.kernelDropsKnown, Deno.build.os === "linux");
    assert.equal(r.kernelDrops, 0);
    assert.equal(r.sockets, 1);
    assert.deepEqual(r.socketDatagrams, [0]);
  } finally {
    await c.stop();
  }
});

Deno.test("udp: the fast path's sockets share the port and the Agents; every session decodes whole", async () => {
  const { c, received } = await startCollector({
    address: "127.0.0.1:0",
    protocol: "udp",
    udpReceiver: fastUdpReceiverFactory({ mode: "ffi", workers: 2, recvBufferBytes: 0 }),
  });
  // 16 Agents: the chance that the 4-tuple hash puts all of them on one socket is 2^-15.
  const agents = Array.from({ length: 16 }, () => udpClient("127.0.0.1"));
  try {
    for (const a of agents) {
      // Template first, then data: a session split over two sockets could see them reordered.
      await udpSend(a, "127.0.0.1", c.port, GOLDEN_TEMPLATE);
      await udpSend(a, "127.0.0.1", c.port, GOLDEN_DATA);
    }
    await waitFor(() => received.length === 16, { what: "16 data messages decoded" });
    const s = c.stats();
    assert.equal(s.templateMisses, 0);
    const r = s.udpReceiver!;
    assert.equal(r.mode, "ffi");
    assert.equal(r.sockets, 2);
    assert.equal(r.socketDatagrams.length, 2);
    assert.equal(r.socketDatagrams[0] + r.socketDatagrams[1], 32);
    assert.ok(r.socketDatagrams.every((n) => n > 0), `spread ${r.socketDatagrams}`);
  } finally {
    for (const a of agents) a.close();
    await c.stop();
  }
});

Deno.test("udp: datagrams that are no IPFIX message open no session, so they evict no Agent's", async () => {
  for (const mode of ["socket", "ffi"] as const) {
    const { c, received } = await startCollector({
      address: "127.0.0.1:0",
      protocol: "udp",
      limits: { maxUdpSessions: 1 },
      ...(mode === "ffi" ? { udpReceiver: fastUdpReceiverFactory({ mode: "ffi" }) } : {}),
    });
    const agent = udpClient("127.0.0.1");
    const junk = udpClient("127.0.0.1");
    try {
      await udpSend(agent, "127.0.0.1", c.port, GOLDEN_TEMPLATE);
      await waitFor(() => c.stats().messages === 1, { what: `${mode}: template` });
      const v9 = GOLDEN_TEMPLATE.slice();
      v9[1] = 9;
      // From another source, at the session cap: empty, 1 byte, a header's worth of v9, cut.
      for (const d of [new Uint8Array(0), new Uint8Array([0]), v9, GOLDEN_TEMPLATE.slice(0, 40)]) {
        await udpSend(junk, "127.0.0.1", c.port, d);
      }
      await waitFor(() => c.stats().decodeErrorsTotal === 4, { what: `${mode}: junk counted` });
      await udpSend(agent, "127.0.0.1", c.port, GOLDEN_DATA);
      await waitFor(() => received.length === 1, { what: `${mode}: the Agent's data decoded` });
      const s = c.stats();
      assert.deepEqual(s.decodeErrors, { truncated: 2, badVersion: 1, badLength: 1 }, mode);
      assert.equal(s.sessionsEvicted, 0, mode);
      assert.equal(s.sessionsOpened, 1, mode);
      assert.equal(s.templateMisses, 0, mode);
      assert.equal(s.exporters["127.0.0.1"].decodeErrors, 4, mode);
    } finally {
      agent.close();
      junk.close();
      await c.stop();
    }
  }
});

Deno.test("udp: a handler that throws loses its datagram only, counted, on both receive paths", async () => {
  const address: ListenAddress = { hostname: "127.0.0.1", port: 0, wildcard: false };
  const receivers = [
    ["socket", new DenoUdpReceiver(address)],
    ["ffi", await fastUdpReceiverFactory({ mode: "ffi" })(address)],
  ] as const;
  for (const [mode, rx] of receivers) {
    let calls = 0;
    let handled = 0;
    const loop = rx.run(() => {
      if (++calls === 1) throw new Error("a bug in the handler");
      handled++;
    });
    const s = udpClient("127.0.0.1");
    try {
      // Sent back to back: on the fast path they arrive in one batch.
      for (let i = 0; i < 10; i++) await udpSend(s, "127.0.0.1", rx.port, new Uint8Array([i]));
      await waitFor(() => handled === 9, { what: `${mode}: the 9 others handled` });
      assert.equal(rx.counters?.().handlerErrors, 1, mode);
    } finally {
      s.close();
      await rx.close();
      await loop;
    }
  }
});

Deno.test("udp: the fast path's port cannot be taken by a second socket", async () => {
  const address: ListenAddress = { hostname: "127.0.0.1", port: 0, wildcard: false };
  const rx = await fastUdpReceiverFactory({ mode: "ffi" })(address);
  try {
    // Without SO_REUSEADDR on ours, another socket (another instance, another process in the
    // pod) gets "address in use" instead of every datagram.
    await assert.rejects(
      async () => await fastUdpReceiverFactory({ mode: "ffi" })({ ...address, port: rx.port }),
      /EADDRINUSE|errno=98|in use/i,
    );
    assert.throws(
      () => Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: rx.port }),
      Deno.errors.AddrInUse,
    );
  } finally {
    await rx.close();
  }
});

Deno.test("udp: a live session's expired templates give their room under maxTemplates back at the sweep", async () => {
  const clock = new ManualClock();
  const ttl = 60_000;
  const { c } = await startCollector({
    address: "127.0.0.1:0",
    protocol: "udp",
    templateTtlMs: ttl,
    clock,
    sweepIntervalMs: 0,
    limits: { maxTemplates: 2 },
  });
  const a = udpClient("127.0.0.1");
  const b = udpClient("127.0.0.1");
  try {
    await udpSend(a, "127.0.0.1", c.port, templateMessage(1, [256, 257], SMALL_FIELDS));
    await waitFor(() => c.stats().templatesHeld === 2, { what: "A's two templates" });
    // A keeps its session alive (a message without templates) but never refreshes them.
    clock.advance(0.9 * ttl);
    const noSets = encodeMessage({ exportTime: 1, sequenceNumber: 0, observationDomainId: 1 }, []);
    await udpSend(a, "127.0.0.1", c.port, noSets);
    await waitFor(() => c.stats().messages === 2, { what: "A's later message" });
    clock.advance(0.2 * ttl);
    assert.equal(c.expireIdleSessions(), 0, "A's session is not idle");
    assert.equal(c.stats().templatesHeld, 0, "A's expired templates left the budget");
    await udpSend(b, "127.0.0.1", c.port, templateMessage(1, 300, SMALL_FIELDS));
    await waitFor(() => c.stats().templatesHeld === 1, { what: "B's template held" });
    assert.deepEqual(c.stats().templatesRefused, {});
  } finally {
    a.close();
    b.close();
    await c.stop();
  }
});
