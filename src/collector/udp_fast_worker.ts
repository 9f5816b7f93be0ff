/**
 * Worker thread of the fast UDP receive path: owns one bound socket fd (created by
 * `udp_fast.ts`) and runs a blocking `recvmmsg(2)` loop on it, so the main thread's event loop
 * never waits on the socket and a whole batch of datagrams costs one system call and one
 * `postMessage`. Each batch is copied into a compact transferable buffer (data back to back,
 * offsets, lengths, 18-byte peer addresses) and posted to the main thread.
 * The receive loop blocks this thread on purpose; the socket has a receive timeout so the
 * loop sees the stop flag within `timeoutMs`.
 */

import { errno, IOVEC_SIZE, LINUX, MMSGHDR_SIZE, openLibc, SOCKADDR_SLOT } from "./udp_fast_ffi.ts";
import { COUNTER, PEER_SIZE, type WorkerBatch, type WorkerStart } from "./udp_fast_protocol.ts";

/** The slice of the worker global scope used here (keeps this file free of worker-only libs). */
interface WorkerScope {
  onmessage: ((ev: MessageEvent<WorkerStart>) => void) | null;
  postMessage(message: unknown, transfer?: Transferable[]): void;
}

const scope = self as unknown as WorkerScope;

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
  const control = new Int32Array(cfg.control);
  const counters = new Float64Array(cfg.counters);
  const n = cfg.batchSize;
  const slot = cfg.maxDatagramSize;
  const recvBuf = new Uint8Array(n * slot);
  const names = new Uint8Array(n * SOCKADDR_SLOT);
  const iovs = new Uint8Array(n * IOVEC_SIZE);
  const msgs = new Uint8Array(n * MMSGHDR_SIZE);
  const msgView = new DataView(msgs.buffer);
  const iovView = new DataView(iovs.buffer);
  const ptr = (a: Uint8Array): bigint => BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(a)));
  const recvPtr = ptr(recvBuf);
  const namesPtr = ptr(names);
  const iovsPtr = ptr(iovs);
  for (let i = 0; i < n; i++) {
    iovView.setBigUint64(i * IOVEC_SIZE, recvPtr + BigInt(i * slot), true);
    iovView.setBigUint64(i * IOVEC_SIZE + 8, BigInt(slot), true);
    const m = i * MMSGHDR_SIZE;
    msgView.setBigUint64(m, namesPtr + BigInt(i * SOCKADDR_SLOT), true); // msg_name
    msgView.setUint32(m + 8, 28, true); // msg_namelen
    msgView.setBigUint64(m + 16, iovsPtr + BigInt(i * IOVEC_SIZE), true); // msg_iov
    msgView.setBigUint64(m + 24, 1n, true); // msg_iovlen
  }
  scope.postMessage({ type: "ready" });

  let datagrams = 0, bytes = 0, batches = 0, dropped = 0, truncated = 0, errors = 0;
  let lastUsed = n;
  while (Atomics.load(control, 0) === 0) {
    // The kernel rewrites msg_namelen; restore it for the slots the last call used.
    for (let i = 0; i < lastUsed; i++) msgView.setUint32(i * MMSGHDR_SIZE + 8, 28, true);
    const got = libc.recvmmsg(cfg.fd, msgs, n, LINUX.MSG_WAITFORONE, null);
    if (got <= 0) {
      lastUsed = 0;
      if (got < 0) {
        const err = errno(libc);
        if (err === LINUX.EBADF) break;
        if (err !== LINUX.EAGAIN && err !== LINUX.EINTR) {
          errors++;
          counters[COUNTER.errors] = errors;
        }
      }
      continue;
    }
    lastUsed = got;
    let total = 0, kept = 0;
    for (let i = 0; i < got; i++) {
      const m = i * MMSGHDR_SIZE;
      if ((msgView.getInt32(m + 48, true) & LINUX.MSG_TRUNC) !== 0) continue;
      total += msgView.getUint32(m + 56, true);
      kept++;
    }
    truncated += got - kept;
    if (Atomics.load(control, 1) >= cfg.maxQueuedBatches) {
      // The consumer is behind; dropping here is counted, unlike a silent kernel drop.
      dropped += kept;
    } else if (kept > 0) {
      const data = new Uint8Array(total);
      const offsets = new Uint32Array(kept);
      const lengths = new Uint32Array(kept);
      const peers = new Uint8Array(kept * PEER_SIZE);
      let off = 0, k = 0;
      for (let i = 0; i < got; i++) {
        const m = i * MMSGHDR_SIZE;
        if ((msgView.getInt32(m + 48, true) & LINUX.MSG_TRUNC) !== 0) continue;
        const len = msgView.getUint32(m + 56, true);
        data.set(recvBuf.subarray(i * slot, i * slot + len), off);
        offsets[k] = off;
        lengths[k] = len;
        encodePeer(names, i * SOCKADDR_SLOT, peers, k * PEER_SIZE);
        off += len;
        k++;
      }
      Atomics.add(control, 1, 1);
      const batch: WorkerBatch = { type: "batch", count: kept, data, offsets, lengths, peers };
      scope.postMessage(batch, [data.buffer, offsets.buffer, lengths.buffer, peers.buffer]);
      datagrams += kept;
      bytes += total;
      batches++;
    }
    counters[COUNTER.datagrams] = datagrams;
    counters[COUNTER.bytes] = bytes;
    counters[COUNTER.batches] = batches;
    counters[COUNTER.dropped] = dropped;
    counters[COUNTER.truncated] = truncated;
  }
}

/** Copies a sockaddr_in/in6 into the 18-byte peer form (IPv4 as ::ffff:a.b.c.d). */
function encodePeer(names: Uint8Array, at: number, out: Uint8Array, to: number): void {
  const family = names[at] | (names[at + 1] << 8);
  if (family === LINUX.AF_INET) {
    out.fill(0, to, to + 10);
    out[to + 10] = 0xff;
    out[to + 11] = 0xff;
    out.set(names.subarray(at + 4, at + 8), to + 12);
  } else {
    out.set(names.subarray(at + 8, at + 24), to);
  }
  out[to + 16] = names[at + 2];
  out[to + 17] = names[at + 3];
}
