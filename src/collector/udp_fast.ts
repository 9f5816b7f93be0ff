/**
 * Fast UDP ingest for the IPFIX collector. Antrea Agents send one record per datagram, so the
 * receive path, not decoding, limits the lossless rate: `Deno.listenDatagram` costs one promise
 * and one allocation per datagram on the main thread (measured 12-40k/s lossless and 20-40 us
 * CPU per datagram on 2 shared cores). The default path here ("ffi") binds the socket through
 * libc and runs a `recvmmsg(2)` loop in a worker thread per socket, handing the main thread
 * whole batches: lossless at the rate of a C recv() loop, ~2 us per datagram at 100k/s (see
 * docs/udp-ingest.md for the measurements). Without `--allow-ffi` (or off Linux) it falls
 * back to `Deno.listenDatagram` ("deno") with the same callback shape.
 *
 * Permissions: `--allow-net` always; `--allow-ffi` (and `--allow-read` for the worker module
 * when not compiled) for the fast path. With `deno compile`, include
 * `src/collector/udp_fast_worker.ts` (`--include`) so the worker can be loaded.
 */

import { formatIPv6 } from "../ipfix/ip.ts";
import { logger, RateLimitedLog } from "../log.ts";
import {
  ffiAvailable,
  openLibc,
  openUdpSocket,
  parseBindHost,
  setRecvTimeout,
} from "./udp_fast_ffi.ts";
import * as wire from "./udp_fast_protocol.ts";
import { workerModule } from "../worker_module.ts";

const log = logger("collector.udp_fast");

/** The receive worker's module (the process needs read access to it to start the fast path). */
export const UDP_FAST_WORKER_MODULE: URL = workerModule("udp_fast");

/**
 * Default kernel receive buffer request: 4 MiB holds ~3,000 Agent datagrams, i.e. 10-20 ms at
 * 150-300k/s, enough to ride out a GC pause or a scheduling hiccup (the 208 KiB kernel default
 * holds ~150). Granted in full as root (SO_RCVBUFFORCE), else capped at net.core.rmem_max.
 */
export const DEFAULT_RECV_BUFFER = 4 << 20;

/**
 * Default memory bound of the batches waiting for the main thread: 64 MiB is ~200,000 Agent
 * datagrams, over a second at 150k/s.
 */
export const DEFAULT_MAX_QUEUED_BYTES = 64 << 20;

/**
 * Default scheduling slice of a receive thread: the kernel's minimum. The thread runs ~1 µs
 * per datagram and sleeps in between, so a short slice costs it nothing, and it lets the
 * thread preempt whatever runs on its CPU as soon as the socket wakes it: the 208 KiB default
 * buffer holds ~160 Agent datagrams, 2 ms at 80k/s, less than other threads' slices (1.5 ms
 * each on 2 CPUs, several when several are runnable). docs/udp-ingest.md has the measurements.
 */
export const DEFAULT_THREAD_SLICE_MICROS = 100;

/**
 * How long the receive worker naps between non-blocking reads while a batch fills, per byte of
 * socket buffer (as reported): 1 ms per MiB, so a nap at 100k datagrams/s fills at most an
 * eighth of the buffer whatever its size (the kernel's default 208 KiB holds ~160 Agent
 * datagrams: 0.2 ms, 20 datagrams). Napping instead of blocking saves a thread wake-up per
 * datagram or two, which on a virtual machine costs more CPU than receiving the datagram:
 * measured at 100k/s with that buffer, the receive thread's CPU per datagram 2.2-2.4 µs
 * blocking, 1.4 µs napping 0.2 ms, with the same losses (docs/udp-ingest.md).
 */
const NAP_MS_PER_BYTE = 1 / (1 << 20);
/**
 * The longest nap, reached at 2 MiB reported: 4 MiB reported holds ~3,000 datagrams, and 2 ms
 * at 300k/s is 600 of them.
 */
const NAP_MAX_MS = 2;
/** Below this nap (a buffer under 50 KiB) the worker blocks on the socket instead. */
const NAP_MIN_MS = 0.05;

/** The nap for a socket buffer of `recvBufferBytes` (as reported); 0: block on the socket. */
export function napFor(recvBufferBytes: number): number {
  const ms = Math.min(NAP_MAX_MS, recvBufferBytes * NAP_MS_PER_BYTE);
  return ms >= NAP_MIN_MS ? ms : 0;
}

/**
 * How long a socket's receive call blocks when nothing comes (the worker's only wake-ups at
 * idle), and so the longest a staged datagram waits for its batch while datagrams are sparse.
 */
export const IDLE_RECV_TIMEOUT_MS = 100;

/**
 * Default batch delay per socket of the fast path: each batch wakes the main thread, so the
 * sockets together post about as often as one socket with a 20 ms delay (50 times a second at
 * low rates): 20 ms times the sockets, at most {@linkcode IDLE_RECV_TIMEOUT_MS}.
 */
export function defaultMaxDelayMs(sockets: number): number {
  return Math.min(IDLE_RECV_TIMEOUT_MS, 20 * Math.max(1, sockets));
}

/** One or more received datagrams, each with its sender. Valid only during the callback. */
export interface UdpBatch {
  /** Number of datagrams in the batch. */
  readonly count: number;
  /** The datagrams' bytes back to back. */
  readonly data: Uint8Array;
  /** Offset of datagram `i` in `data`. */
  readonly offsets: Uint32Array;
  /** Length of datagram `i`. */
  readonly lengths: Uint32Array;
  /** Sender of datagram `i` as `ip:port` (`[v6]:port`); the same string object repeats. */
  readonly peers: readonly string[];
}

/** Which receive implementation runs. */
export type UdpReceiveMode = "ffi" | "deno";

/** Options for {@linkcode startUdpReceiver}. */
export interface UdpFastOptions {
  /** IP literal to bind (`0.0.0.0`, `::` for dual stack, `127.0.0.1`...). Default `0.0.0.0`. */
  hostname?: string;
  /** Port to bind; 0 picks a free one (see {@linkcode UdpReceiver.addr}). */
  port: number;
  /** `auto` (default) uses `ffi` when FFI is permitted on Linux, else `deno`. */
  mode?: "auto" | UdpReceiveMode;
  /**
   * Sockets/worker threads sharing the port with SO_REUSEPORT (ffi only, default 1). The kernel
   * spreads senders by 4-tuple hash, so this only helps with several Agents.
   */
  workers?: number;
  /** Datagrams per `recvmmsg` call (ffi only, default 64; each slot is maxDatagramSize bytes). */
  recvSlots?: number;
  /** Most datagrams per delivered batch (ffi only, default 1024). */
  maxBatchDatagrams?: number;
  /** Most bytes per delivered batch (ffi only, default 1 MiB). */
  maxBatchBytes?: number;
  /**
   * Longest a datagram waits in the worker for its batch to fill (ffi only, default
   * {@linkcode defaultMaxDelayMs}: 20 ms per socket; below one datagram per nap, where the
   * worker waits in the kernel for the batch, until the next datagram after that time or
   * {@linkcode IDLE_RECV_TIMEOUT_MS} without one).
   * Batching is what keeps the CPU cost per datagram low at modest rates: each batch wakes the
   * main thread, 100-200 µs of CPU on these VMs (docs/udp-ingest.md, "Wake-ups at low rates").
   */
  maxDelayMs?: number;
  /** Largest datagram accepted (default 65535); longer ones are dropped and counted. */
  maxDatagramSize?: number;
  /**
   * Requested kernel receive buffer in bytes (ffi only; default {@linkcode DEFAULT_RECV_BUFFER};
   * 0 = `net.core.rmem_default`). The granted size is in {@linkcode UdpReceiverStats}.
   */
  recvBufferBytes?: number;
  /**
   * Batches queued to the main thread above which new ones are dropped and counted (default
   * 1024). The worker never waits for the main thread: while the main thread is busy (GC, a
   * sweep, a slow exporter) the worker keeps reading the socket into this queue, so the
   * kernel buffer only has to cover the worker's own scheduling delays.
   */
  maxQueuedBatches?: number;
  /**
   * Bytes of queued batches above which new ones are dropped and counted (default
   * {@linkcode DEFAULT_MAX_QUEUED_BYTES}): the memory bound of that queue.
   */
  maxQueuedBytes?: number;
  /**
   * Scheduling slice asked for each receive thread, in µs (ffi only; default
   * {@linkcode DEFAULT_THREAD_SLICE_MICROS}; 0 keeps the kernel's default). See
   * `setThreadSlice` in udp_fast_ffi.ts.
   */
  threadSliceMicros?: number;
  /** Called for every batch, in arrival order per socket. Exceptions are counted and logged. */
  onDatagrams(batch: UdpBatch): void;
}

/** Counters of a receiver; everything that moves is counted. */
export interface UdpReceiverStats {
  /** Implementation in use. */
  mode: UdpReceiveMode;
  /** Sockets (worker threads) receiving. */
  workers: number;
  /** Datagrams received and queued for delivery. */
  datagrams: number;
  /** Bytes of those datagrams. */
  bytes: number;
  /** Batches delivered to the callback. */
  batches: number;
  /** Datagrams dropped because the main thread fell behind (`maxQueuedBatches`). */
  dropped: number;
  /** Datagrams longer than `maxDatagramSize`, dropped. */
  truncated: number;
  /**
   * Datagrams the kernel dropped because the socket buffer was full (ffi only, from
   * SO_RXQ_OVFL; learnt with the next datagram that arrives after the drops; 0 in deno mode,
   * where it cannot be observed).
   */
  kernelDrops: number;
  /** Socket errors other than timeouts. */
  errors: number;
  /** Callback invocations that threw. */
  callbackErrors: number;
  /**
   * Kernel receive buffer per socket in bytes as getsockopt(SO_RCVBUF) reports it (Linux
   * doubles the request for bookkeeping; 0 when unknown).
   */
  recvBufferBytes: number;
  /** Datagrams received per socket/worker (SO_REUSEPORT spreads senders by 4-tuple hash). */
  perWorker: number[];
  /** Batches posted by the workers and not yet delivered (the main thread's backlog). */
  queuedBatches: number;
  /** Bytes of those batches. */
  queuedBytes: number;
  /** Scheduling slice the receive threads run with, in µs (0: the kernel's default). */
  threadSliceMicros: number;
  /**
   * Receive calls, datagrams or not: the receive threads' wake-ups (ffi; an idle thread makes one
   * per {@linkcode IDLE_RECV_TIMEOUT_MS}; deno mode: one per datagram).
   */
  receiveCalls: number;
}

/** A running receiver. */
export interface UdpReceiver {
  /** Implementation in use. */
  readonly mode: UdpReceiveMode;
  /** The bound address (the real port when 0 was requested). */
  readonly addr: Deno.NetAddr;
  /** Returns a snapshot of the counters. */
  stats(): UdpReceiverStats;
  /** Stops receiving and releases the sockets and workers; idempotent. */
  close(): Promise<void>;
}

/** Starts receiving; resolves once the socket is bound and every worker is ready. */
export async function startUdpReceiver(options: UdpFastOptions): Promise<UdpReceiver> {
  const want = options.mode ?? "auto";
  const mode: UdpReceiveMode = want === "auto" ? (ffiAvailable() ? "ffi" : "deno") : want;
  if (mode === "ffi") return await startFfi(options);
  return startDeno(options);
}

/** Returns datagram `i` of a batch as a view (no copy). */
export function datagramAt(batch: UdpBatch, i: number): Uint8Array {
  return batch.data.subarray(batch.offsets[i], batch.offsets[i] + batch.lengths[i]);
}

/** Splits an `ip:port` / `[v6]:port` peer string. */
export function splitPeer(peer: string): { hostname: string; port: number } {
  const colon = peer.lastIndexOf(":");
  let host = peer.slice(0, colon);
  if (host.startsWith("[")) host = host.slice(1, -1);
  return { hostname: host, port: Number(peer.slice(colon + 1)) };
}

const callbackLog = new RateLimitedLog(10_000);

function deliver(
  options: UdpFastOptions,
  batch: UdpBatch,
  counts: { callbackErrors: number },
): void {
  try {
    options.onDatagrams(batch);
  } catch (e) {
    counts.callbackErrors++;
    const suppressed = callbackLog.allow("callback");
    if (suppressed >= 0) log.error("onDatagrams threw", { error: e, suppressed });
  }
}

async function startFfi(options: UdpFastOptions): Promise<UdpReceiver> {
  const libc = openLibc();
  const bind = parseBindHost(options.hostname ?? "0.0.0.0");
  const workers = Math.max(1, Math.floor(options.workers ?? 1));
  const recvSlots = clampInt(options.recvSlots ?? 64, 1, 1024);
  const maxDatagramSize = clampInt(options.maxDatagramSize ?? 65535, 1, 65535);
  const maxDelayMs = Math.max(0, options.maxDelayMs ?? defaultMaxDelayMs(workers));
  // In blocking mode the receive timeout doubles as the batch deadline (the worker flushes
  // when a wait for more data times out); it also bounds how long close() waits.
  const timeoutMs = maxDelayMs > 0 ? Math.max(1, Math.ceil(maxDelayMs)) : IDLE_RECV_TIMEOUT_MS;
  const fds: number[] = [];
  let port = options.port;
  let recvBufferBytes = 0;
  let napMs = 0;
  try {
    for (let i = 0; i < workers; i++) {
      const s = openUdpSocket(libc, bind, port, {
        reusePort: workers > 1,
        recvBufferBytes: options.recvBufferBytes ?? DEFAULT_RECV_BUFFER,
        timeoutMs,
      });
      fds.push(s.fd);
      port = s.port; // later sockets join the port the first one got
      recvBufferBytes = s.recvBufferBytes;
    }
    // Napping instead of blocking while a batch fills saves a thread wake-up per datagram but
    // leaves the socket unread for up to napMs: as long as the buffer allows (napFor). Then
    // the socket only blocks when idle, so a long timeout saves idle wake-ups.
    napMs = maxDelayMs > 0 ? napFor(recvBufferBytes) : 0;
    if (napMs > 0) { for (const fd of fds) setRecvTimeout(libc, fd, IDLE_RECV_TIMEOUT_MS); }
  } catch (e) {
    for (const fd of fds) libc.close(fd);
    throw e;
  }

  const sliceMicros = Math.max(0, options.threadSliceMicros ?? DEFAULT_THREAD_SLICE_MICROS);
  const control = new SharedArrayBuffer(wire.CONTROL.size * 4);
  const ctl = new Int32Array(control);
  const counterBufs: Float64Array[] = [];
  const counts = { callbackErrors: 0 };
  const peerCache = new PeerCache();
  const threads: Worker[] = [];
  const stopped: Promise<void>[] = [];
  const ready: Promise<void>[] = [];
  let closed = false;

  // Queue drops are counted by the workers; the main thread (the one that fell behind) logs
  // them when it catches up, at most every 10 s.
  let queueDropsLogged = 0;
  let sliceGranted = 0;
  const noteQueueDrops = (): void => {
    let dropped = 0;
    for (const c of counterBufs) dropped += c[wire.COUNTER.dropped];
    if (dropped === queueDropsLogged) return;
    const suppressed = callbackLog.allow("queue");
    if (suppressed < 0) return;
    log.warn("udp datagrams dropped: the main thread fell behind the receive queue", {
      dropped: dropped - queueDropsLogged,
      total: dropped,
    });
    queueDropsLogged = dropped;
  };

  for (const fd of fds) {
    const counters = new SharedArrayBuffer(wire.COUNTER.size * 8);
    counterBufs.push(new Float64Array(counters));
    const w = new Worker(UDP_FAST_WORKER_MODULE.href, {
      type: "module",
    });
    threads.push(w);
    let onReady!: () => void, onFail!: (e: Error) => void, onStop!: () => void;
    ready.push(
      new Promise<void>((res, rej) => {
        onReady = res;
        onFail = rej;
      }),
    );
    stopped.push(new Promise<void>((res) => (onStop = res)));
    w.onmessage = (ev: MessageEvent): void => {
      const m = ev.data as wire.WorkerBatch | wire.WorkerReady | { type: "stopped" } | {
        type: "error";
        message: string;
      };
      if (m.type === "batch") {
        Atomics.sub(ctl, wire.CONTROL.inflight, 1);
        Atomics.sub(ctl, wire.CONTROL.inflightBytes, m.buffer.byteLength);
        noteQueueDrops();
        if (closed) return;
        deliver(options, unpackBatch(m, peerCache), counts);
      } else if (m.type === "ready") {
        if (m.sliceErrno === 0) sliceGranted++;
        else if (m.sliceErrno > 0) {
          log.info("receive thread keeps the default scheduling slice", {
            fd,
            errno: m.sliceErrno,
          });
        }
        onReady();
      } else if (m.type === "stopped") {
        onStop();
      } else {
        log.error("receive worker failed", { fd, error: m.message });
        onFail(new Error(`udp_fast: worker: ${m.message}`));
        onStop();
      }
    };
    w.onerror = (ev: ErrorEvent): void => {
      ev.preventDefault();
      log.error("receive worker crashed", { fd, error: ev.message });
      onFail(new Error(`udp_fast: worker crashed: ${ev.message}`));
      onStop();
    };
    const start: wire.WorkerStart = {
      type: "start",
      fd,
      recvSlots,
      maxDatagramSize,
      maxBatchDatagrams: clampInt(options.maxBatchDatagrams ?? 1024, 1, 65536),
      maxBatchBytes: clampInt(options.maxBatchBytes ?? (1 << 20), 1, 1 << 30),
      maxDelayMs,
      napMs,
      control,
      counters,
      maxQueuedBatches: Math.max(1, options.maxQueuedBatches ?? 1024),
      // Int32 in the shared control array; 1 GiB leaves room for several workers' racing adds.
      maxQueuedBytes: clampInt(options.maxQueuedBytes ?? DEFAULT_MAX_QUEUED_BYTES, 1, 1 << 30),
      sliceMicros,
    };
    w.postMessage(start);
  }

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      Atomics.store(ctl, wire.CONTROL.stop, 1);
      Atomics.notify(ctl, wire.CONTROL.stop);
      // Batches posted before "stopped" (the worker drains the socket and flushes its staged
      // datagrams on stop) are still delivered: a graceful stop loses nothing already received.
      await Promise.all(stopped);
      closed = true;
      for (const w of threads) w.terminate();
      for (const fd of fds) libc.close(fd);
      log.debug("udp receiver closed", { port });
    })();
    return closing;
  };

  try {
    await Promise.all(ready);
  } catch (e) {
    await close();
    throw e;
  }
  const hostname = options.hostname ?? "0.0.0.0";
  log.info("udp receiver listening", {
    mode: "ffi",
    hostname,
    port,
    workers,
    recvBufferBytes,
    napMs,
  });
  return {
    mode: "ffi",
    addr: { transport: "udp", hostname, port },
    stats(): UdpReceiverStats {
      const s = zeroStats("ffi", workers, recvBufferBytes);
      s.callbackErrors = counts.callbackErrors;
      s.queuedBatches = Atomics.load(ctl, wire.CONTROL.inflight);
      s.queuedBytes = Atomics.load(ctl, wire.CONTROL.inflightBytes);
      s.threadSliceMicros = sliceGranted === workers ? sliceMicros : 0;
      s.perWorker = counterBufs.map((c) => c[wire.COUNTER.datagrams]);
      for (const c of counterBufs) {
        s.datagrams += c[wire.COUNTER.datagrams];
        s.bytes += c[wire.COUNTER.bytes];
        s.batches += c[wire.COUNTER.batches];
        s.dropped += c[wire.COUNTER.dropped];
        s.truncated += c[wire.COUNTER.truncated];
        s.kernelDrops += c[wire.COUNTER.kernelDrops];
        s.errors += c[wire.COUNTER.errors];
        s.receiveCalls += c[wire.COUNTER.receiveCalls];
      }
      return s;
    },
    close,
  };
}

/** Counters before anything was received. */
function zeroStats(
  mode: UdpReceiveMode,
  workers: number,
  recvBufferBytes: number,
): UdpReceiverStats {
  return {
    mode,
    workers,
    datagrams: 0,
    bytes: 0,
    batches: 0,
    dropped: 0,
    truncated: 0,
    kernelDrops: 0,
    errors: 0,
    callbackErrors: 0,
    recvBufferBytes,
    perWorker: new Array(workers).fill(0),
    queuedBatches: 0,
    queuedBytes: 0,
    threadSliceMicros: 0,
    receiveCalls: 0,
  };
}

function startDeno(options: UdpFastOptions): UdpReceiver {
  const conn = Deno.listenDatagram({
    transport: "udp",
    hostname: options.hostname ?? "0.0.0.0",
    port: options.port,
  });
  const addr = conn.addr as Deno.NetAddr;
  const maxDatagramSize = clampInt(options.maxDatagramSize ?? 65535, 1, 65535);
  const s = zeroStats("deno", 1, 0);
  let closed = false;
  const loop = (async (): Promise<void> => {
    while (!closed) {
      let data: Uint8Array, peer: Deno.Addr;
      try {
        [data, peer] = await conn.receive();
      } catch (e) {
        if (closed) return;
        s.errors++;
        log.warn("udp receive failed", { error: e });
        continue;
      }
      if (data.byteLength > maxDatagramSize) {
        s.truncated++;
        continue;
      }
      s.datagrams++;
      s.bytes += data.byteLength;
      s.batches++;
      s.receiveCalls++;
      const p = peer as Deno.NetAddr;
      const key = p.hostname.includes(":")
        ? `[${p.hostname}]:${p.port}`
        : `${p.hostname}:${p.port}`;
      deliver(options, {
        count: 1,
        data,
        offsets: new Uint32Array([0]),
        lengths: new Uint32Array([data.byteLength]),
        peers: [key],
      }, s);
    }
  })();
  log.info("udp receiver listening", { mode: "deno", hostname: addr.hostname, port: addr.port });
  return {
    mode: "deno",
    addr,
    stats: (): UdpReceiverStats => ({ ...s, perWorker: [s.datagrams] }),
    close: async (): Promise<void> => {
      if (closed) return;
      closed = true;
      conn.close();
      await loop;
    },
  };
}

function unpackBatch(m: wire.WorkerBatch, cache: PeerCache): UdpBatch {
  const L = wire.batchLayout(m.count);
  const peerBytes = new Uint8Array(m.buffer, L.peers, m.count * wire.PEER_SIZE);
  const peers = new Array<string>(m.count);
  for (let i = 0; i < m.count; i++) peers[i] = cache.get(peerBytes, i * wire.PEER_SIZE);
  return {
    count: m.count,
    data: new Uint8Array(m.buffer, L.data),
    offsets: new Uint32Array(m.buffer, L.offsets, m.count),
    lengths: new Uint32Array(m.buffer, L.lengths, m.count),
    peers,
  };
}

function clampInt(v: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, Math.floor(v)));
}

/**
 * Turns 18-byte binary peers into `ip:port` strings without allocating per datagram: IPv4
 * peers are cached by a numeric key (ip * 65536 + port fits in 2^53), IPv6 by text.
 */
class PeerCache {
  readonly #v4 = new Map<number, string>();
  readonly #v6 = new Map<string, string>();

  /** Returns the peer string for the entry at `at`. */
  get(peers: Uint8Array, at: number): string {
    const port = (peers[at + 16] << 8) | peers[at + 17];
    let mapped = peers[at + 10] === 0xff && peers[at + 11] === 0xff;
    for (let i = 0; i < 10 && mapped; i++) mapped = peers[at + i] === 0;
    if (mapped) {
      const ip = ((peers[at + 12] << 24) >>> 0) + (peers[at + 13] << 16) +
        (peers[at + 14] << 8) + peers[at + 15];
      const key = ip * 65536 + port;
      let s = this.#v4.get(key);
      if (s === undefined) {
        if (this.#v4.size > 65536) this.#v4.clear();
        s = `${peers[at + 12]}.${peers[at + 13]}.${peers[at + 14]}.${peers[at + 15]}:${port}`;
        this.#v4.set(key, s);
      }
      return s;
    }
    const text = `[${formatIPv6(peers, at)}]:${port}`;
    let s = this.#v6.get(text);
    if (s === undefined) {
      if (this.#v6.size > 65536) this.#v6.clear();
      this.#v6.set(text, text);
      s = text;
    }
    return s;
  }
}
