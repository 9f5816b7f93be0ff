/**
 * Fuzzing through live listeners: > 100,000 random and mutated messages go through a real UDP
 * socket and a real TCP listener. Nothing may crash or hang, every message must be counted
 * exactly once (decoded or rejected), and the collector must still decode good data afterwards.
 * Deterministic: a seeded PRNG, so a failure reproduces.
 */

import assert from "node:assert/strict";
import { Collector } from "../../src/collector/mod.ts";
import { setLogLevel } from "../../src/log.ts";
import {
  AGENT_FIELDS,
  collectingSink,
  concat,
  dataMessage,
  GOLDEN_DATA,
  GOLDEN_TEMPLATE,
  readUntilClosed,
  SMALL_FIELDS,
  smallRecord,
  templateMessage,
  udpClient,
  writeAll,
} from "./helpers.ts";
import { encodeDataSet, encodeMessage, encodeTemplateSet } from "../../src/ipfix/mod.ts";
import { prng } from "../_helpers/prng.ts";
import { waitFor } from "../_helpers/wait.ts";

setLogLevel("error");

const UDP_MESSAGES = 100_000;
const TCP_MESSAGES = 12_000;
const SEED = 0x5eed_1234;

const SMALL_TEMPLATE = templateMessage(7, 300, SMALL_FIELDS);
const SMALL_DATA = dataMessage(7, 300, SMALL_FIELDS, [
  smallRecord(1),
  smallRecord(2),
  smallRecord(3),
]);
// Template + data in one message, so a single message exercises template and record decoding.
const MULTI_SET = encodeMessage(
  { exportTime: 1, sequenceNumber: 0, observationDomainId: 0x33de13e2 },
  [
    encodeTemplateSet([{ id: 256, fields: AGENT_FIELDS, scopeFieldCount: 0 }]),
    GOLDEN_DATA.subarray(16),
    encodeTemplateSet([{ id: 300, fields: SMALL_FIELDS, scopeFieldCount: 0 }]),
    encodeDataSet(300, SMALL_FIELDS, [smallRecord(9)]),
  ],
);
const CORPUS = [GOLDEN_TEMPLATE, GOLDEN_DATA, SMALL_TEMPLATE, SMALL_DATA, MULTI_SET];

/**
 * Fuzz inputs that were not a verbatim corpus message. Each test asserts its share (UDP ≥ 89,500,
 * TCP ≥ 10,500), so together they always exceed 100,000 mutated messages.
 */
let mutatedTotal = 0;

/** Produces one fuzz input: a valid message (1 in 10), a mutation of one, or random bytes. */
function fuzzMessage(rnd: () => number): Uint8Array {
  const m = fuzzMessageInner(rnd);
  if (!CORPUS.some((c) => c.length === m.length && c.every((b, i) => b === m[i]))) mutatedTotal++;
  return m;
}

function fuzzMessageInner(rnd: () => number): Uint8Array {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
  const int = (n: number): number => Math.floor(rnd() * n);
  const base = pick(CORPUS);
  switch (int(10)) {
    case 0: // valid, so templates get registered and data decoded
      return base.slice();
    case 1: { // random bytes
      const b = new Uint8Array(int(300));
      for (let i = 0; i < b.length; i++) b[i] = int(256);
      return b;
    }
    case 2: { // random body behind a plausible header
      const b = new Uint8Array(16 + int(400));
      for (let i = 16; i < b.length; i++) b[i] = int(256);
      b.set([0, 10, b.length >> 8, b.length & 0xff]);
      return b;
    }
    case 3: // truncated
      return base.slice(0, int(base.length));
    case 4: { // extended with garbage (header length now wrong on UDP)
      const extra = new Uint8Array(1 + int(64));
      for (let i = 0; i < extra.length; i++) extra[i] = int(256);
      return concat(base, extra);
    }
    case 5: { // set header corrupted
      const b = base.slice();
      const at = 16 + int(4);
      if (at < b.length) b[at] = int(256);
      return b;
    }
    case 6: { // template field count / field spec corrupted
      const b = base.slice();
      for (let k = 0; k < 3; k++) b[16 + int(Math.max(1, b.length - 16))] = int(256);
      return b;
    }
    case 7: { // two messages spliced
      const other = pick(CORPUS);
      return concat(base.subarray(0, int(base.length)), other.subarray(int(other.length)));
    }
    default: { // bit flips anywhere, header included
      const b = base.slice();
      const flips = 1 + int(8);
      for (let k = 0; k < flips; k++) b[int(b.length)] ^= 1 << int(8);
      return b;
    }
  }
}

/** What the collector must reject as a whole (everything else is a decoded message). */
function isMessageLevelInvalid(m: Uint8Array): boolean {
  if (m.length < 16) return true;
  const version = (m[0] << 8) | m[1];
  const length = (m[2] << 8) | m[3];
  return version !== 10 || length !== m.length;
}

Deno.test(`fuzz: ${UDP_MESSAGES} random/mutated datagrams through a live UDP listener`, async () => {
  const { received, sink } = collectingSink();
  let sunk = 0;
  const c = new Collector({ address: "127.0.0.1:0", protocol: "udp" }, (r, ctx) => {
    sunk += r.length;
    if (received.length < 10) sink(r, ctx);
  });
  await c.start();
  const clients = [udpClient("127.0.0.1"), udpClient("127.0.0.1"), udpClient("127.0.0.1")];
  const rnd = prng(SEED);
  mutatedTotal = 0;
  let expectInvalid = 0;
  let bytes = 0;
  try {
    const BATCH = 100;
    for (let sent = 0; sent < UDP_MESSAGES;) {
      const n = Math.min(BATCH, UDP_MESSAGES - sent);
      const sends: Promise<number>[] = [];
      for (let i = 0; i < n; i++) {
        const m = fuzzMessage(rnd);
        if (isMessageLevelInvalid(m)) expectInvalid++;
        bytes += m.length;
        sends.push(clients[(sent + i) % clients.length].send(m, {
          transport: "udp",
          hostname: "127.0.0.1",
          port: c.port,
        }));
      }
      await Promise.all(sends);
      sent += n;
      // Bounded in-flight datagrams: the kernel would drop a burst, and loss is not the point.
      await waitFor(() => {
        const s = c.stats();
        return s.messages + s.decodeErrorsTotal === sent;
      }, { what: `datagrams counted (seed ${SEED}, sent ${sent})` });
    }
    const s = c.stats();
    assert.equal(s.messages + s.decodeErrorsTotal, UDP_MESSAGES);
    assert.equal(s.decodeErrorsTotal, expectInvalid, "every message-level error counted");
    assert.equal(s.messages, UDP_MESSAGES - expectInvalid);
    assert.equal(Object.values(s.decodeErrors).reduce((a, b) => a + b, 0), s.decodeErrorsTotal);
    assert.equal(s.decodeErrors.internal, undefined, "no codec exception escaped as a bug");
    assert.equal(s.bytes, bytes);
    assert.equal(s.dataRecords, sunk);
    assert.ok(s.templateMisses > 0 && Object.keys(s.setErrors).length > 0, "fuzz reached sets");
    assert.ok(s.dataRecords > 1000, "fuzz reached record decoding");
    assert.equal(s.sessionsOpened, clients.length);
    assert.ok(mutatedTotal >= 89_500, `only ${mutatedTotal} mutated UDP messages`);
    // Still alive and correct: a fresh source gets its records decoded.
    const fresh = udpClient("127.0.0.1");
    const before = sunk;
    await fresh.send(concat(GOLDEN_TEMPLATE), {
      transport: "udp",
      hostname: "127.0.0.1",
      port: c.port,
    });
    await fresh.send(GOLDEN_DATA, { transport: "udp", hostname: "127.0.0.1", port: c.port });
    await waitFor(() => sunk === before + 1, { what: "good data after fuzzing" });
    fresh.close();
  } finally {
    for (const cl of clients) cl.close();
    await c.stop();
  }
  assert.ok(received.length > 0);
});

/**
 * On TCP a bad message closes the session and the rest of the stream is dropped, so each batch
 * is written on a fresh connection and whatever the server did not consume is resent on the
 * next one. Header Length is set to the real size (or left < 16 / bad version = framing error),
 * so each input is exactly one framed unit and the accounting is exact.
 */
Deno.test(`fuzz: ${TCP_MESSAGES} random/mutated messages through a live TCP listener`, async () => {
  let sunk = 0;
  const c = new Collector({ address: "127.0.0.1:0", protocol: "tcp" }, (r) => sunk += r.length);
  await c.start();
  const rnd = prng(SEED ^ 0xffff);
  mutatedTotal = 0;
  const inputs: Uint8Array[] = [];
  for (let i = 0; i < TCP_MESSAGES; i++) {
    let m = fuzzMessage(rnd);
    if (m.length < 4) m = concat(m, new Uint8Array(4 - m.length));
    if (m[0] === 0 && m[1] === 10) {
      m[2] = m.length >> 8;
      m[3] = m.length & 0xff;
    }
    inputs.push(m);
  }
  try {
    const BATCH = 64;
    let next = 0;
    let connections = 0;
    let closedByServer = 0;
    const processed = (): number => {
      const s = c.stats();
      return s.messages + s.decodeErrorsTotal;
    };
    while (next < inputs.length) {
      const batch = inputs.slice(next, next + BATCH);
      const before = processed();
      const errorsBefore = c.stats().sessionsClosedOnError;
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
      connections++;
      try {
        await writeAll(conn, concat(...batch));
        // Half-close: after consuming everything the server sees EOF and closes too, so in
        // both outcomes the client learns the server is done by its read ending (no polling).
        await conn.closeWrite();
      } catch {
        // The server may already have closed the session on an early bad message.
      }
      assert.equal(await readUntilClosed(conn), true, `tcp batch at ${next} (seed ${SEED})`);
      conn.close();
      // Counters are updated before the server closes its socket, so they are final here.
      const consumed = processed() - before;
      assert.ok(consumed >= 1 && consumed <= batch.length, `consumed ${consumed}`);
      if (c.stats().sessionsClosedOnError > errorsBefore) closedByServer++;
      else assert.equal(consumed, batch.length, "a session without error consumed its batch");
      next += consumed;
    }
    const s = c.stats();
    assert.equal(s.messages + s.decodeErrorsTotal, TCP_MESSAGES, "every message counted once");
    assert.equal(s.decodeErrors.internal, undefined);
    assert.equal(s.sessionsOpened, connections);
    assert.equal(s.sessionsClosedOnError, closedByServer);
    assert.ok(
      s.decodeErrors.framing > 0 && s.dataRecords > 100,
      "fuzz reached framing and records",
    );
    assert.equal(s.dataRecords, sunk);
    assert.equal(s.sessionsActive, 0);
    assert.ok(mutatedTotal >= 10_500, `only ${mutatedTotal} mutated TCP messages`);
    // Still alive and correct.
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
    const before = sunk;
    await writeAll(conn, concat(GOLDEN_TEMPLATE, GOLDEN_DATA));
    await waitFor(() => sunk === before + 1, { what: "good data after fuzzing" });
    conn.close();
  } finally {
    await c.stop();
  }
});
