/**
 * Worker thread of the fast UDP receive path: owns one bound socket fd (created by
 * `udp_fast.ts`) and runs a blocking `recvmmsg(2)` loop on it, so the main thread's event loop
 * never waits on the socket and a whole batch of datagrams costs one system call and one
 * `postMessage`. Datagrams are staged until the batch is full or `maxDelayMs` old, then
 * packed into one transferable buffer (offsets, lengths, 18-byte peers, data) and posted.
 * While staging, the loop either naps `napMs` between non-blocking reads (datagrams come faster
 * than one per nap: one wake per nap whatever the rate) or, sparser than that, waits in the
 * kernel for the batch (`recvmmsg` without MSG_WAITFORONE, with a timeout): each arrival wakes
 * the thread inside the kernel, so nothing overflows a small socket buffer, but the loop returns
 * to JavaScript once per batch, not once per datagram; see docs/udp-ingest.md.
 * The receive loop blocks this thread on purpose; the socket has a receive timeout so the
 * loop sees the stop flag within `timeoutMs`.
 */

import {
  addressOf,
  CMSG_SLOT,
  errno,
  IOVEC_SIZE,
  LINUX,
  MMSGHDR_SIZE,
  openLibc,
  setThreadSlice,
  SOCKADDR_SLOT,
  socketDrops,
} from "./udp_fast_ffi.ts";
import {
  batchLayout,
  CONTROL,
  COUNTER,
  PEER_SIZE,
  type WorkerBatch,
  type WorkerStart,
} from "./udp_fast_protocol.ts";

/**
 * Staged datagrams (or naps' time) it takes to judge the pace that chooses between napping and
 * waiting in the kernel.
 */
const PACE_SAMPLE = 8;

/** The slice of the worker global scope used here (keeps this file free of worker-only libs). */
interface WorkerScope {
  onmessage: ((ev: MessageEvent<WorkerStart>) => void) | null;
  postMessage(message: unknown, transfer?: Transferable[]): void;
}

const scope = self as unknown as WorkerScope;

// The kernel writes through raw pointers into these buffers; nothing in JS reads some of them
// (the iovec array), so without this reference the GC frees them and recvmmsg gets EFAULT.
const keepAlive: Uint8Array[] = [];

scope.onmessage = (ev: MessageEvent<WorkerStart>): void => {
  if (ev.data?.type !== "start") return;
  try {
    runLoop(ev.data);
    scope.postMessage({ type: "stopped" });
  } catch (e) {
    scope.postMessage({ type: "error", message: e instanceof Error ? e.message : String(e) });
  }
};

function runLoop(cfg: WorkerStart): void {
  const libc = openLibc();
  // Measured on a busy 2-core VM (docs/udp-ingest.md): with a small socket buffer, datagrams are
  // lost while this thread waits for a CPU after the socket woke it, not while it works.
  const sliceErrno = cfg.sliceMicros > 0 ? setThreadSlice(libc, cfg.sliceMicros) : -1;
  const control = new Int32Array(cfg.control);
  const counters = new Float64Array(cfg.counters);
  const n = cfg.recvSlots;
  const slot = cfg.maxDatagramSize;
  // The receive slots and the staging area share one buffer, so staging a datagram is one
  // copyWithin (a native memmove) with no view allocated per datagram: while the kernel queue
  // holds a burst, the worker drains it at the rate of a C recv() loop only if it does almost
  // nothing per datagram.
  const maxCount = cfg.maxBatchDatagrams;
  const stageAt = n * slot;
  const arena = new Uint8Array(stageAt + cfg.maxBatchBytes + slot);
  const names = new Uint8Array(n * SOCKADDR_SLOT);
  const iovs = new Uint8Array(n * IOVEC_SIZE);
  const msgs = new Uint8Array(n * MMSGHDR_SIZE);
  const cmsgs = new Uint8Array(n * CMSG_SLOT);
  const cmsgView = new DataView(cmsgs.buffer);
  keepAlive.push(arena, names, iovs, msgs, cmsgs);
  const msgView = new DataView(msgs.buffer);
  const iovView = new DataView(iovs.buffer);
  const ptr = (a: Uint8Array): bigint => addressOf(libc, a);
  const recvPtr = ptr(arena);
  const namesPtr = ptr(names);
  const iovsPtr = ptr(iovs);
  const cmsgsPtr = ptr(cmsgs);
  for (let i = 0; i < n; i++) {
    iovView.setBigUint64(i * IOVEC_SIZE, recvPtr + BigInt(i * slot), true);
    iovView.setBigUint64(i * IOVEC_SIZE + 8, BigInt(slot), true);
    const m = i * MMSGHDR_SIZE;
    msgView.setBigUint64(m, namesPtr + BigInt(i * SOCKADDR_SLOT), true); // msg_name
    msgView.setBigUint64(m + 16, iovsPtr + BigInt(i * IOVEC_SIZE), true); // msg_iov
    msgView.setBigUint64(m + 24, 1n, true); // msg_iovlen
    msgView.setBigUint64(m + 32, cmsgsPtr + BigInt(i * CMSG_SLOT), true); // msg_control
  }

  // Staging area: datagrams accumulate here across recvmmsg calls until the batch is full or
  // its oldest datagram has waited maxDelayMs. Posting one batch costs a thread wake-up and a
  // message-event turn on the main thread (~20-100 us on a busy VM); at low rates posting per
  // datagram would cost more CPU than the datagrams themselves.
  const stageOff = new Uint32Array(maxCount);
  const stageLen = new Uint32Array(maxCount);
  const stagePeers = new Uint8Array(maxCount * PEER_SIZE);
  let count = 0, used = 0, firstAt = 0;

  let datagrams = 0, bytes = 0, batches = 0, dropped = 0, truncated = 0, errors = 0;
  let kernelDrops = 0;
  let receiveCalls = 0;

  const flush = (): void => {
    const L = batchLayout(count);
    const size = L.data + used;
    if (
      Atomics.load(control, CONTROL.inflight) >= cfg.maxQueuedBatches ||
      Atomics.load(control, CONTROL.inflightBytes) + size > cfg.maxQueuedBytes
    ) {
      // The consumer is behind; dropping here is counted, unlike a silent kernel drop.
      dropped += count;
    } else {
      const buffer = new ArrayBuffer(size);
      new Uint32Array(buffer, L.offsets, count).set(stageOff.subarray(0, count));
      new Uint32Array(buffer, L.lengths, count).set(stageLen.subarray(0, count));
      new Uint8Array(buffer, L.peers, count * PEER_SIZE).set(
        stagePeers.subarray(0, count * PEER_SIZE),
      );
      new Uint8Array(buffer, L.data, used).set(arena.subarray(stageAt, stageAt + used));
      Atomics.add(control, CONTROL.inflight, 1);
      Atomics.add(control, CONTROL.inflightBytes, size);
      const batch: WorkerBatch = { type: "batch", count, buffer };
      scope.postMessage(batch, [buffer]);
      datagrams += count;
      bytes += used;
      batches++;
    }
    count = 0;
    used = 0;
    counters[COUNTER.datagrams] = datagrams;
    counters[COUNTER.bytes] = bytes;
    counters[COUNTER.batches] = batches;
    counters[COUNTER.dropped] = dropped;
    counters[COUNTER.truncated] = truncated;
  };

  /** The socket's cumulative drop count `d`, learnt from a datagram or read (it only grows). */
  const seenDrops = (d: number | undefined): void => {
    if (d !== undefined && d > kernelDrops) {
      kernelDrops = d;
      counters[COUNTER.kernelDrops] = kernelDrops;
    }
  };

  scope.postMessage({ type: "ready", sliceErrno });
  // Stages the `got` datagrams of one recvmmsg call, and restores the header fields the
  // kernel rewrote (msg_namelen, msg_controllen) in the slots it used, for the next call.
  const take = (got: number): void => {
    for (let i = 0; i < got; i++) {
      const m = i * MMSGHDR_SIZE;
      // SO_RXQ_OVFL: a cmsg (len u64, level i32, type i32, u32 data) carrying the socket's
      // cumulative drop count; only present once the count is non-zero.
      if (msgView.getUint32(m + 40, true) >= 20) {
        const c = i * CMSG_SLOT;
        if (
          cmsgView.getInt32(c + 8, true) === LINUX.SOL_SOCKET &&
          cmsgView.getInt32(c + 12, true) === LINUX.SO_RXQ_OVFL
        ) {
          seenDrops(cmsgView.getUint32(c + 16, true));
        }
      }
      const flags = msgView.getInt32(m + 48, true);
      const len = msgView.getUint32(m + 56, true);
      msgView.setUint32(m + 8, 28, true);
      msgView.setUint32(m + 40, CMSG_SLOT, true); // msg_controllen (u64; high half stays 0)
      if ((flags & LINUX.MSG_TRUNC) !== 0) {
        truncated++;
        continue;
      }
      if (count > 0 && used + len > cfg.maxBatchBytes) flush();
      if (count === 0) firstAt = performance.now();
      arena.copyWithin(stageAt + used, i * slot, i * slot + len);
      stageOff[count] = used;
      stageLen[count] = len;
      encodePeer(names, i * SOCKADDR_SLOT, stagePeers, count * PEER_SIZE);
      used += len;
      count++;
      if (count === maxCount) flush();
    }
  };

  for (let i = 0; i < n; i++) {
    msgView.setUint32(i * MMSGHDR_SIZE + 8, 28, true);
    msgView.setBigUint64(i * MMSGHDR_SIZE + 40, BigInt(CMSG_SLOT), true);
  }
  // recvmmsg's timeout (struct timespec) while waiting in the kernel for a batch; the kernel
  // writes the time left into it, so it is set before each call.
  const timeout = new BigInt64Array(2);
  const timeoutBytes = new Uint8Array(timeout.buffer);
  keepAlive.push(timeoutBytes);
  // Datagrams come less often than one per nap: wait in the kernel for the batch instead of
  // napping. Entered below one datagram per nap, left above two (no flapping at the border:
  // near it, waiting in the kernel was the cheaper of the two, docs/udp-ingest.md).
  let sparse = false;
  while (Atomics.load(control, CONTROL.stop) === 0) {
    // Nothing staged: block until a datagram is queued or the socket's receive timeout expires
    // (maxDelayMs without naps, else the idle timeout, IDLE_RECV_TIMEOUT_MS); waking on arrival
    // keeps a small socket buffer from overflowing. Staged, and no nap allowed or sparse
    // arrivals: wait in the kernel for the rest of the batch (below). Otherwise take only what
    // is queued, then nap below, which saves a thread wake-up per datagram at modest rates.
    const staged = count;
    const blocking = staged === 0 || cfg.napMs === 0 || sparse;
    let got: number;
    if (blocking && staged > 0) {
      // Blocking, without MSG_WAITFORONE: the kernel takes datagrams as they arrive (each one
      // wakes this thread in the kernel only) until n are in, the batch's time is up (checked
      // after each datagram) or the socket stayed quiet for its receive timeout.
      const left = Math.max(0, cfg.maxDelayMs - (performance.now() - firstAt));
      timeout[0] = BigInt(Math.floor(left / 1000));
      timeout[1] = BigInt(Math.floor((left % 1000) * 1e6));
      got = libc.recvmmsgTimeout(cfg.fd, msgs, n, 0, timeoutBytes);
    } else {
      const flags = blocking ? LINUX.MSG_WAITFORONE : LINUX.MSG_DONTWAIT;
      got = libc.recvmmsg(cfg.fd, msgs, n, flags, null);
    }
    if (got < 0) {
      const err = errno(libc);
      if (err === LINUX.EBADF) break;
      if (err !== LINUX.EAGAIN && err !== LINUX.EINTR) {
        errors++;
        counters[COUNTER.errors] = errors;
      }
      // Quiet: drops since the last datagram (a burst's tail) would otherwise stay unseen.
      if (blocking && staged === 0) seenDrops(socketDrops(libc, cfg.fd));
    }
    counters[COUNTER.receiveCalls] = ++receiveCalls;
    take(got);
    if (count === 0) continue;
    // Post when the oldest staged datagram is due, when a blocking wait timed out (the
    // socket was quiet for maxDelayMs), or at once when batching is off.
    const waited = performance.now() - firstAt;
    if (cfg.maxDelayMs === 0 || waited >= cfg.maxDelayMs || (blocking && got <= 0)) {
      flush();
    } else {
      // The batch's pace so far, once it has PACE_SAMPLE datagrams or PACE_SAMPLE naps' time,
      // and more than its first call (until then the last batch's mode goes on: a datagram or
      // two left over after a full batch are no pace). Sparser than one datagram per nap (below
      // 5,000/s per socket with the kernel's default buffer), napping would wake the thread
      // more often than datagrams come: wait in the kernel instead (docs/udp-ingest.md,
      // "Wake-ups at low rates").
      if (staged > 0 && (count >= PACE_SAMPLE || waited >= PACE_SAMPLE * cfg.napMs)) {
        const perDatagram = waited / count;
        sparse = perDatagram >= (sparse ? cfg.napMs / 2 : cfg.napMs);
      }
      // Drained for now: nap (close() notifies the stop slot to cut it short).
      if (!sparse && got < n) {
        Atomics.wait(control, CONTROL.stop, 0, Math.min(cfg.napMs, cfg.maxDelayMs - waited));
      }
    }
  }
  // Stop requested: drain what the kernel already holds for us (bounded), so a graceful stop
  // loses nothing that reached the socket before it.
  for (let k = 0; k < 4096; k++) {
    const got = libc.recvmmsg(cfg.fd, msgs, n, LINUX.MSG_DONTWAIT, null);
    if (got <= 0) break;
    take(got);
  }
  if (count > 0) flush();
  seenDrops(socketDrops(libc, cfg.fd));
  counters[COUNTER.truncated] = truncated;
}

/** Copies a sockaddr_in/in6 into the 18-byte peer form (IPv4 as ::ffff:a.b.c.d). */
function encodePeer(names: Uint8Array, at: number, out: Uint8Array, to: number): void {
  const family = names[at] | (names[at + 1] << 8);
  // Byte by byte: a subarray per datagram would allocate on the drain path.
  if (family === LINUX.AF_INET) {
    for (let k = 0; k < 10; k++) out[to + k] = 0;
    out[to + 10] = 0xff;
    out[to + 11] = 0xff;
    for (let k = 0; k < 4; k++) out[to + 12 + k] = names[at + 4 + k];
  } else {
    for (let k = 0; k < 16; k++) out[to + k] = names[at + 8 + k];
  }
  out[to + 16] = names[at + 2];
  out[to + 17] = names[at + 3];
}
