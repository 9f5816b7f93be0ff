/**
 * The fast UDP receive path delivers every datagram with its bytes and sender, in both modes,
 * and counts what it cannot deliver. Low rates only: this is a correctness test, the rate
 * measurements live in scripts/bench.ts.
 */

import { formatIPv6 } from "../../src/ipfix/ip.ts";
import assert from "node:assert/strict";
import {
  datagramAt,
  defaultMaxDelayMs,
  IDLE_RECV_TIMEOUT_MS,
  napFor,
  splitPeer,
  startUdpReceiver,
  type UdpBatch,
  type UdpFastOptions,
  type UdpReceiveMode,
  type UdpReceiver,
} from "../../src/collector/udp_fast.ts";
import { parseBindHost } from "../../src/collector/udp_fast_ffi.ts";
import { runDeno } from "../_helpers/process.ts";
import { waitFor } from "../_helpers/wait.ts";

/** Runs `code` (a UDP sender) in a process of its own, so a stalled main thread here cannot slow it. */
/** Sends `total` 100-byte datagrams to `port` from another process, `gapMs` (5) ms apart. */
function sendPaced(port: number, total: number, gapMs = 5): Promise<void> {
  return sendFromProcess(`
    const s = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: 0 });
    const to = { transport: "udp", hostname: "127.0.0.1", port: ${port} };
    for (let i = 0; i < ${total}; i++) {
      await s.send(new Uint8Array(100), to);
      await new Promise((r) => setTimeout(r, ${gapMs}));
    }
    s.close();`);
}

/**
 * Starts a receiver on a free port whose `finished` resolves once `onBatch` returns true for a
 * batch (`onBatch` may throw: the receiver counts that as a callback error).
 */
async function receiveUntil(
  options: Omit<UdpFastOptions, "port" | "onDatagrams">,
  onBatch: (batch: UdpBatch) => boolean,
): Promise<{ rx: UdpReceiver; finished: Promise<void> }> {
  let done!: () => void;
  const finished = new Promise<void>((res) => (done = res));
  const rx = await startUdpReceiver({
    ...options,
    port: 0,
    onDatagrams(batch: UdpBatch): void {
      if (onBatch(batch)) done();
    },
  });
  return { rx, finished };
}

async function sendFromProcess(code: string): Promise<void> {
  const r = await runDeno(["eval", "--unstable-net", code]);
  assert.equal(r.code, 0, `sender process failed: ${r.stderr}`);
}

interface Seen {
  peer: string;
  bytes: Uint8Array;
}

/** Sends `perSender` datagrams from each of `senders` sockets; each carries its own id. */
async function sendAndCollect(
  mode: UdpReceiveMode,
  opts: { senders: number; perSender: number; workers?: number; hostname?: string },
): Promise<
  {
    seen: Map<number, Seen>;
    ports: number[];
    batches: number;
    datagrams: number;
    errors: number;
    perWorker: number[];
  }
> {
  const hostname = opts.hostname ?? "127.0.0.1";
  const total = opts.senders * opts.perSender;
  const seen = new Map<number, Seen>();
  let duplicates = 0;
  const { rx, finished: allIn } = await receiveUntil(
    { hostname, mode, workers: opts.workers },
    (batch) => {
      for (let i = 0; i < batch.count; i++) {
        const d = datagramAt(batch, i);
        const id = new DataView(d.buffer, d.byteOffset, d.byteLength).getUint32(0);
        if (seen.has(id)) duplicates++;
        // Copy: the batch is only valid during the callback.
        seen.set(id, { peer: batch.peers[i], bytes: d.slice() });
      }
      return seen.size === total;
    },
  );
  assert.equal(rx.mode, mode);
  const sockets = Array.from(
    { length: opts.senders },
    () => Deno.listenDatagram({ transport: "udp", hostname, port: 0 }),
  );
  const ports = sockets.map((s) => (s.addr as Deno.NetAddr).port);
  const target: Deno.NetAddr = { transport: "udp", hostname, port: rx.addr.port };
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    for (let n = 0; n < opts.perSender; n++) {
      for (let s = 0; s < opts.senders; s++) {
        const id = s * opts.perSender + n;
        // 200-400 bytes like an Agent record; content derived from the id.
        const msg = new Uint8Array(200 + (id % 201));
        new DataView(msg.buffer).setUint32(0, id);
        for (let k = 4; k < msg.length; k++) msg[k] = (id + k) & 0xff;
        await sockets[s].send(msg, target);
      }
      // A tiny pause every 10 rounds keeps the rate low (a default-size socket buffer is
      // enough), which is what this correctness test is about.
      if (n % 10 === 9) await new Promise((r) => setTimeout(r, 5));
    }
    const timeout = new Promise<void>((_, rej) => {
      timer = setTimeout(() => rej(new Error(`only ${seen.size}/${total} datagrams`)), 10_000);
    });
    await Promise.race([allIn, timeout]);
  } finally {
    clearTimeout(timer);
    for (const s of sockets) s.close();
    await rx.close();
  }
  const st = rx.stats();
  assert.equal(duplicates, 0);
  assert.equal(st.dropped, 0);
  assert.equal(st.callbackErrors, 0);
  return {
    seen,
    ports,
    batches: st.batches,
    datagrams: st.datagrams,
    errors: st.errors,
    perWorker: st.perWorker,
  };
}

function assertAll(
  r: { seen: Map<number, Seen>; ports: number[] },
  perSender: number,
  hostPrefix: string,
): void {
  assert.equal(r.seen.size, r.ports.length * perSender);
  for (const [id, { peer, bytes }] of r.seen) {
    const sender = Math.floor(id / perSender);
    assert.equal(peer, `${hostPrefix}:${r.ports[sender]}`, `peer of datagram ${id}`);
    assert.equal(bytes.length, 200 + (id % 201), `length of datagram ${id}`);
    for (let k = 4; k < bytes.length; k++) {
      if (bytes[k] !== ((id + k) & 0xff)) assert.fail(`datagram ${id} byte ${k} differs`);
    }
  }
}

Deno.test("udp_fast ffi: every datagram and its sender ip:port arrive intact", async () => {
  const r = await sendAndCollect("ffi", { senders: 3, perSender: 400 });
  assertAll(r, 400, "127.0.0.1");
  assert.equal(r.datagrams, 1200);
});

Deno.test("udp_fast ffi: sustained traffic (GC in the worker) keeps every datagram", async () => {
  // Regression: the worker once let the GC free its iovec array, after which recvmmsg failed
  // with EFAULT and reception silently stopped after a few thousand datagrams.
  const r = await sendAndCollect("ffi", { senders: 4, perSender: 5000 });
  assert.equal(r.seen.size, 20_000);
  assert.equal(r.errors, 0);
});

Deno.test("udp_fast ffi: two SO_REUSEPORT workers together deliver every datagram", async () => {
  // 16 senders: the chance that the 4-tuple hash puts all of them on one socket is 2^-15.
  const r = await sendAndCollect("ffi", { senders: 16, perSender: 50, workers: 2 });
  assertAll(r, 50, "127.0.0.1");
  assert.equal(r.perWorker.length, 2);
  assert.ok(r.perWorker[0] > 0 && r.perWorker[1] > 0, `spread ${r.perWorker}`);
  assert.equal(r.perWorker[0] + r.perWorker[1], 800);
});

Deno.test("udp_fast ffi: IPv6 loopback peers are reported as [::1]:port", async () => {
  const r = await sendAndCollect("ffi", { senders: 2, perSender: 100, hostname: "::1" });
  assertAll(r, 100, "[::1]");
});

Deno.test("udp_fast ffi: a dual-stack :: socket reports IPv4 senders as a.b.c.d:port", async () => {
  const got: string[] = [];
  const { rx, finished } = await receiveUntil({ hostname: "::", mode: "ffi" }, (batch) => {
    got.push(...batch.peers);
    return got.length === 2;
  });
  const v4 = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: 0 });
  const v6 = Deno.listenDatagram({ transport: "udp", hostname: "::1", port: 0 });
  try {
    await v4.send(new Uint8Array(20), {
      transport: "udp",
      hostname: "127.0.0.1",
      port: rx.addr.port,
    });
    await v6.send(new Uint8Array(20), { transport: "udp", hostname: "::1", port: rx.addr.port });
    await finished;
  } finally {
    v4.close();
    v6.close();
    await rx.close();
  }
  assert.deepEqual(
    got.sort(),
    [
      `127.0.0.1:${(v4.addr as Deno.NetAddr).port}`,
      `[::1]:${(v6.addr as Deno.NetAddr).port}`,
    ].sort(),
  );
});

Deno.test("udp_fast ffi: a stalled consumer makes the worker drop and count, never queue forever", async () => {
  // A separate process sends (this thread will be blocked inside the callback).
  const total = 60;
  let calls = 0, delivered = 0;
  const rx = await startUdpReceiver({
    hostname: "127.0.0.1",
    port: 0,
    mode: "ffi",
    maxDelayMs: 0, // one batch per recvmmsg call
    maxQueuedBatches: 1,
    onDatagrams(batch: UdpBatch): void {
      delivered += batch.count;
      if (calls++ === 0) {
        const until = performance.now() + 600; // stall while the sender goes on
        while (performance.now() < until) { /* busy: the main thread is stuck */ }
      }
    },
  });
  try {
    await sendPaced(rx.addr.port, total);
    // Let the worker hand over what it holds, then check the books balance.
    await waitFor(() => rx.stats().datagrams + rx.stats().dropped >= total, {
      timeoutMs: 3000,
      intervalMs: 20,
      what: `${total} datagrams delivered or dropped`,
    });
    await new Promise((r) => setTimeout(r, 50)); // deliver posted batches
    const st = rx.stats();
    assert.ok(st.dropped > 0, `expected drops while stalled, stats ${JSON.stringify(st)}`);
    assert.equal(st.datagrams + st.dropped, total);
    assert.equal(delivered, st.datagrams);
  } finally {
    await rx.close();
  }
});

Deno.test("udp_fast ffi: kernel drops on a full socket buffer are reported (SO_RXQ_OVFL)", async () => {
  const burst = 2000;
  let delivered = 0;
  const rx = await startUdpReceiver({
    hostname: "127.0.0.1",
    port: 0,
    mode: "ffi",
    recvBufferBytes: 1, // the kernel's minimum: a few datagrams
    onDatagrams(batch: UdpBatch): void {
      delivered += batch.count;
    },
  });
  // A burst far faster than one wake-up per datagram, then (after the reader caught up) one
  // last datagram that carries the final drop count.
  const code = `
    const s = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: 0 });
    const to = { transport: "udp", hostname: "127.0.0.1", port: ${rx.addr.port} };
    const msg = new Uint8Array(1000);
    await Promise.all(Array.from({ length: ${burst} }, () => s.send(msg, to)));
    await new Promise((r) => setTimeout(r, 300));
    await s.send(msg, to);
    s.close();`;
  try {
    await sendFromProcess(code);
    await waitFor(() => rx.stats().datagrams + rx.stats().kernelDrops >= burst + 1, {
      timeoutMs: 3000,
      intervalMs: 20,
      what: `${burst + 1} datagrams delivered or dropped by the kernel`,
    });
    const st = rx.stats();
    assert.ok(st.kernelDrops > 0, `expected kernel drops, stats ${JSON.stringify(st)}`);
    assert.equal(st.datagrams + st.kernelDrops, burst + 1);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(delivered, rx.stats().datagrams);
  } finally {
    await rx.close();
  }
});

Deno.test("udp_fast deno fallback: same delivery contract", async () => {
  const r = await sendAndCollect("deno", { senders: 2, perSender: 300 });
  assertAll(r, 300, "127.0.0.1");
  assert.equal(r.batches, 600);
});

Deno.test("udp_fast ffi: oversize datagrams and throwing callbacks are counted, not fatal", async () => {
  const got: number[] = [];
  let calls = 0;
  const { rx, finished } = await receiveUntil(
    { hostname: "127.0.0.1", mode: "ffi", maxDatagramSize: 100 },
    (batch) => {
      calls++;
      for (let i = 0; i < batch.count; i++) got.push(batch.lengths[i]);
      if (calls === 1) throw new Error("consumer bug"); // the first batch holds only the 50
      return got.includes(7);
    },
  );
  const tx = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: 0 });
  const to: Deno.NetAddr = { transport: "udp", hostname: "127.0.0.1", port: rx.addr.port };
  try {
    await tx.send(new Uint8Array(50), to); // delivered, callback throws
    await new Promise((r) => setTimeout(r, 50));
    await tx.send(new Uint8Array(300), to); // longer than maxDatagramSize: dropped
    await new Promise((r) => setTimeout(r, 50));
    await tx.send(new Uint8Array(7), to); // delivered after both
    await finished;
  } finally {
    tx.close();
    await rx.close();
  }
  const st = rx.stats();
  assert.deepEqual(got, [50, 7]);
  assert.equal(st.truncated, 1);
  assert.equal(st.callbackErrors, 1);
  assert.equal(st.datagrams, 2);
  assert.equal(st.bytes, 57);
});

/** Sends datagrams of `sizes` (content from size and index) and returns what arrived. */
async function roundTripSizes(
  maxDatagramSize: number | undefined,
  sizes: readonly number[],
): Promise<{ got: Uint8Array[]; truncated: number }> {
  const got: Uint8Array[] = [];
  const { rx, finished } = await receiveUntil(
    { hostname: "127.0.0.1", mode: "ffi", maxDatagramSize },
    (batch) => {
      let end = false;
      for (let i = 0; i < batch.count; i++) {
        const d = datagramAt(batch, i).slice();
        if (d.length === 3) end = true; // the end marker
        else got.push(d);
      }
      return end;
    },
  );
  const tx = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: 0 });
  const to: Deno.NetAddr = { transport: "udp", hostname: "127.0.0.1", port: rx.addr.port };
  try {
    for (const [k, n] of sizes.entries()) await tx.send(sizedDatagram(n, k), to);
    await tx.send(new Uint8Array(3), to);
    await finished;
  } finally {
    tx.close();
    await rx.close();
  }
  return { got, truncated: rx.stats().truncated };
}

function sizedDatagram(n: number, k: number): Uint8Array {
  const d = new Uint8Array(n);
  for (let i = 0; i < n; i++) d[i] = (i * 7 + n + k) & 0xff;
  return d;
}

Deno.test("udp_fast ffi: datagrams of every length up to the IPv4 maximum arrive whole", async () => {
  // Around a page and an MTU, and the largest IPv4 datagram: byte for byte, in order.
  const sizes = [1, 2047, 2048, 2049, 4096, 9000, 65507, 300];
  const r = await roundTripSizes(undefined, sizes);
  assert.equal(r.truncated, 0);
  assert.deepEqual(r.got.map((d) => d.length), sizes);
  for (const [k, n] of sizes.entries()) assert.deepEqual(r.got[k], sizedDatagram(n, k));
});

Deno.test("udp_fast ffi: a datagram one byte past maxDatagramSize is dropped and counted", async () => {
  const sizes = [2049, 5001, 5000, 2048];
  const r = await roundTripSizes(5000, sizes);
  assert.equal(r.truncated, 1);
  assert.deepEqual(r.got.map((d) => d.length), [2049, 5000, 2048]);
  for (const [j, k] of [0, 2, 3].entries()) assert.deepEqual(r.got[j], sizedDatagram(sizes[k], k));
});

Deno.test("udp_fast: close() is idempotent and frees the port", async () => {
  const rx = await startUdpReceiver({
    hostname: "127.0.0.1",
    port: 0,
    mode: "ffi",
    onDatagrams() {},
  });
  const port = rx.addr.port;
  await rx.close();
  await rx.close();
  const again = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port });
  again.close();
});

Deno.test("udp_fast: bind host parsing accepts IP literals only", () => {
  assert.deepEqual([...parseBindHost("10.1.2.3").bytes], [10, 1, 2, 3]);
  assert.deepEqual([...parseBindHost("localhost").bytes], [127, 0, 0, 1]);
  assert.equal(formatIPv6(parseBindHost("::1").bytes, 0), "::1");
  assert.equal(formatIPv6(parseBindHost("[fd00::a:1]").bytes, 0), "fd00::a:1");
  // Peer text uses the codec formatting: IPv4-mapped prints as its dotted quad (Go style).
  assert.equal(formatIPv6(parseBindHost("::ffff:10.0.0.1").bytes, 0), "10.0.0.1");
  assert.equal(formatIPv6(parseBindHost("1:2:3:4:5:6:7:8").bytes, 0), "1:2:3:4:5:6:7:8");
  assert.throws(() => parseBindHost("example.com"), /not an IP literal/);
  assert.throws(() => parseBindHost("1.2.3.256"), /not an IP literal/);
  assert.throws(() => parseBindHost("1::2::3"), /not an IP literal/);
  assert.deepEqual(splitPeer("[::1]:4739"), { hostname: "::1", port: 4739 });
  assert.deepEqual(splitPeer("10.0.0.1:55"), { hostname: "10.0.0.1", port: 55 });
});

Deno.test("udp_fast: the receive thread's nap scales with the socket buffer, never past 2 ms", () => {
  // The kernel's default buffer (212,992 bytes): about 0.2 ms, a fifth of a millisecond.
  assert.ok(Math.abs(napFor(212_992) - 0.203) < 0.001, String(napFor(212_992)));
  assert.equal(napFor(1 << 20), 1);
  assert.equal(napFor(2 << 20), 2);
  // 4 MiB asked and reported doubled: the cap.
  assert.equal(napFor(8 << 20), 2);
  // A buffer of a few datagrams (the kernel's minimum): the thread blocks on the socket.
  assert.equal(napFor(4608), 0);
  assert.equal(napFor(0), 0);
});

Deno.test("udp_fast: the sockets together post about 50 batches a second at most, at low rates", () => {
  assert.equal(defaultMaxDelayMs(1), 20);
  assert.equal(defaultMaxDelayMs(2), 40);
  assert.equal(defaultMaxDelayMs(0), 20, "no socket count: one");
  // Never longer than a sparse datagram can wait anyway (the idle receive timeout).
  assert.equal(defaultMaxDelayMs(8), IDLE_RECV_TIMEOUT_MS);
  assert.equal(IDLE_RECV_TIMEOUT_MS, 100);
});

Deno.test("udp_fast ffi: sparse datagrams are waited for in the kernel, not one wake each", async () => {
  // Below one datagram per nap the receive thread waits inside recvmmsg for the batch: a few
  // receive calls per batch. Waking for each datagram (as before) took one call per datagram
  // (66 for the first case, measured), and a thread that never judged the pace, napping on,
  // one per nap (229 for the first). The second case, sparser than one datagram per batch
  // delay, cannot batch; it guards against napping on (measured: 19 calls).
  for (
    const { total, gapMs, maxDelayMs, bufferBytes, perDatagram } of [
      // 200/s, the kernel's default buffer (a 0.2 ms nap), batches of 100 ms.
      { total: 60, gapMs: 5, maxDelayMs: 100, bufferBytes: 0, perDatagram: 0.5 },
      // 25/s, 4 MiB (a 2 ms nap), the default batch delay (20 ms).
      { total: 12, gapMs: 40, maxDelayMs: undefined, bufferBytes: 4 << 20, perDatagram: 3 },
    ]
  ) {
    let delivered = 0;
    const rx = await startUdpReceiver({
      hostname: "127.0.0.1",
      port: 0,
      mode: "ffi",
      maxDelayMs,
      recvBufferBytes: bufferBytes,
      onDatagrams(batch: UdpBatch): void {
        delivered += batch.count;
      },
    });
    try {
      const before = rx.stats().receiveCalls;
      await sendPaced(rx.addr.port, total, gapMs);
      await waitFor(() => delivered >= total, {
        timeoutMs: 3000,
        intervalMs: 10,
        what: "delivery",
      });
      const st = rx.stats();
      const calls = st.receiveCalls - before;
      assert.equal(st.datagrams, total);
      assert.equal(delivered, total);
      assert.equal(st.kernelDrops, 0);
      // The sender's process start and its timers add idle receive timeouts (one per 100 ms).
      const idle = Math.ceil((total * gapMs + 1000) / IDLE_RECV_TIMEOUT_MS);
      assert.ok(
        calls < total * perDatagram + idle,
        `${calls} receive calls for ${total} datagrams ${gapMs} ms apart`,
      );
    } finally {
      await rx.close();
    }
  }
});

/** Spins (never yielding to the event loop, so no batch can be delivered) until `done()`. */
function blockMainThread(done: () => boolean, maxMs: number): number {
  const start = performance.now();
  while (!done() && performance.now() - start < maxMs) { /* the main thread is stuck */ }
  return performance.now() - start;
}

Deno.test("udp_fast ffi: a blocked main thread loses nothing that fits the worker's queue", async () => {
  // The kernel's default buffer (~100-200 datagrams) and a main thread stuck for the whole
  // send: the worker keeps reading into its queue, so the socket never overflows.
  const total = 1500;
  let delivered = 0;
  let first!: () => void;
  const started = new Promise<void>((res) => (first = res));
  const rx = await startUdpReceiver({
    hostname: "127.0.0.1",
    port: 0,
    mode: "ffi",
    recvBufferBytes: 0, // net.core.rmem_default
    onDatagrams(batch: UdpBatch): void {
      delivered += batch.count;
      first();
    },
  });
  // One datagram, a pause (the main thread sees it and blocks), then ~1,000/s for ~1.5 s.
  const code = `
    const s = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: 0 });
    const to = { transport: "udp", hostname: "127.0.0.1", port: ${rx.addr.port} };
    const msg = new Uint8Array(300);
    await s.send(msg, to);
    await new Promise((r) => setTimeout(r, 300));
    for (let i = 1; i < ${total}; i++) {
      await s.send(msg, to);
      if (i % 5 === 0) await new Promise((r) => setTimeout(r, 5));
    }
    s.close();`;
  try {
    const sender = sendFromProcess(code);
    await started;
    const before = delivered;
    const blockedMs = blockMainThread(() => rx.stats().datagrams >= total, 20_000);
    const duringBlock = rx.stats().datagrams - before;
    assert.equal(delivered, before, "nothing is delivered while the main thread is blocked");
    await sender;
    await waitFor(() => delivered >= total, { timeoutMs: 3000, intervalMs: 20, what: "delivery" });
    const st = rx.stats();
    assert.ok(duringBlock >= 1000, `received ${duringBlock} while blocked ${blockedMs} ms`);
    assert.equal(st.kernelDrops, 0);
    assert.equal(st.dropped, 0);
    assert.equal(st.datagrams, total);
    assert.equal(delivered, total);
    assert.equal(st.queuedBatches, 0);
    assert.equal(st.queuedBytes, 0);
  } finally {
    await rx.close();
  }
});

Deno.test("udp_fast ffi: the queue's byte bound drops and counts what does not fit", async () => {
  const total = 60;
  let calls = 0, delivered = 0;
  const rx = await startUdpReceiver({
    hostname: "127.0.0.1",
    port: 0,
    mode: "ffi",
    maxDelayMs: 0, // one batch per recvmmsg call
    maxQueuedBytes: 1000, // a few 100-byte batches (each has 26 bytes of header)
    onDatagrams(batch: UdpBatch): void {
      delivered += batch.count;
      if (calls++ === 0) blockMainThread(() => false, 600);
    },
  });
  try {
    await sendPaced(rx.addr.port, total);
    await waitFor(() => rx.stats().datagrams + rx.stats().dropped >= total, {
      timeoutMs: 3000,
      intervalMs: 20,
      what: `${total} datagrams delivered or dropped`,
    });
    await waitFor(() => delivered >= rx.stats().datagrams, {
      timeoutMs: 3000,
      intervalMs: 20,
      what: "posted batches delivered",
    });
    const st = rx.stats();
    assert.ok(st.dropped > 0, `expected drops while stalled, stats ${JSON.stringify(st)}`);
    assert.ok(st.dropped < total - 5, `the bound let a few batches through: ${st.dropped}`);
    assert.equal(st.datagrams + st.dropped, total);
    assert.equal(delivered, st.datagrams);
    assert.equal(st.queuedBytes, 0);
  } finally {
    await rx.close();
  }
});

Deno.test("udp_fast ffi: the receive thread runs with the short scheduling slice asked for", async () => {
  const rx = await startUdpReceiver({
    hostname: "127.0.0.1",
    port: 0,
    mode: "ffi",
    threadSliceMicros: 250,
    onDatagrams() {},
  });
  try {
    assert.equal(rx.stats().threadSliceMicros, 250);
    // Kernels with custom slices (6.12+) show them in the thread's sched file.
    const slices: number[] = [];
    for (const t of Deno.readDirSync("/proc/self/task")) {
      let sched: string;
      try {
        sched = Deno.readTextFileSync(`/proc/self/task/${t.name}/sched`);
      } catch (err) {
        // A thread of another test module of this process ended since the listing.
        if (err instanceof Deno.errors.NotFound) continue;
        throw err;
      }
      const m = /^se\.slice\s+:\s+(\d+)/m.exec(sched);
      if (m !== null) slices.push(Number(m[1]));
    }
    if (slices.length > 0) assert.ok(slices.includes(250_000), `slices ${slices}`);
  } finally {
    await rx.close();
  }
  const off = await startUdpReceiver({
    hostname: "127.0.0.1",
    port: 0,
    mode: "ffi",
    threadSliceMicros: 0,
    onDatagrams() {},
  });
  assert.equal(off.stats().threadSliceMicros, 0);
  await off.close();
});
