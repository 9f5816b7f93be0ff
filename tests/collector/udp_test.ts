import assert from "node:assert/strict";
import { Collector } from "../../src/collector/mod.ts";
import { ManualClock } from "../../src/clock.ts";
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

Deno.test("udp: more sources than maxUdpSessions evicts the least recently active", async () => {
  const { c } = await startCollector({
    address: "127.0.0.1:0",
    protocol: "udp",
    maxUdpSessions: 2,
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
    // The evicted first source lost its templates: its data is a miss now.
    await udpSend(clients[0], "127.0.0.1", c.port, GOLDEN_DATA);
    await waitFor(() => c.stats().templateMisses === 1, { what: "miss for evicted session" });
  } finally {
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

Deno.test("udp: a pluggable (async) receive path feeds the same sessions; mapped IPv4 is normalised", async () => {
  let deliver: ((d: Uint8Array, h: string, p: number) => void) | undefined;
  let closed = false;
  let endRun: () => void = () => {};
  const { c, received } = await startCollector({
    protocol: "udp",
    udpReceiver: async (address) => {
      await Promise.resolve();
      assert.deepEqual(address, { hostname: "::", port: 4739, wildcard: true });
      return {
        port: 4739,
        run: (handler) => {
          deliver = handler;
          return new Promise<void>((r) => endRun = r);
        },
        close: () => {
          closed = true;
          endRun();
          return Promise.resolve();
        },
      };
    },
  });
  assert.equal(c.port, 4739);
  deliver!(GOLDEN_TEMPLATE, "::ffff:10.0.0.9", 5000);
  deliver!(GOLDEN_DATA, "::ffff:10.0.0.9", 5000);
  // Same IP, other port: another session without the template.
  deliver!(GOLDEN_DATA, "::ffff:10.0.0.9", 5001);
  assert.equal(received.length, 1);
  assert.equal(received[0].ctx.exporterAddress, "10.0.0.9");
  const s = c.stats();
  assert.equal(s.sessionsOpened, 2);
  assert.equal(s.templateMisses, 1);
  assert.equal(s.exporters["10.0.0.9"].sessionsOpened, 2);
  await c.stop();
  assert.equal(closed, true);
  assert.equal(c.stats().sessionsActive, 0);
});
