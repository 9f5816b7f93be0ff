/**
 * Messages and shared-memory layout between `udp_fast.ts` (main thread) and
 * `udp_fast_worker.ts` (receive loop). Kept separate so the main thread never loads the
 * worker module.
 */

/** Start message sent by the main thread. */
export interface WorkerStart {
  /** Discriminator. */
  type: "start";
  /** The bound socket. */
  fd: number;
  /** Datagrams per recvmmsg call (receive slots). */
  recvSlots: number;
  /** Receive slot size; longer datagrams are truncated by the kernel and dropped here. */
  maxDatagramSize: number;
  /** Most datagrams per posted batch. */
  maxBatchDatagrams: number;
  /** Most datagram bytes per posted batch (one datagram may exceed it alone). */
  maxBatchBytes: number;
  /** Longest time a received datagram waits in the worker before its batch is posted. */
  maxDelayMs: number;
  /** Nap between non-blocking reads while staging; 0 = always block on the socket. */
  napMs: number;
  /** Int32Array view, see {@linkcode CONTROL}. */
  control: SharedArrayBuffer;
  /** Float64Array view of this worker's counters, see {@linkcode COUNTER}. */
  counters: SharedArrayBuffer;
  /** Posted batches above which new batches are dropped (and counted) instead of queued. */
  maxQueuedBatches: number;
  /** Bytes of posted, unconsumed batches above which new batches are dropped (and counted). */
  maxQueuedBytes: number;
  /** Scheduling slice to ask for the receive thread, in µs; 0 keeps the kernel's default. */
  sliceMicros: number;
}

/** The worker's first message: bound and receiving. */
export interface WorkerReady {
  /** Discriminator. */
  type: "ready";
  /** 0: the slice was granted; an errno when refused; -1 when not asked for. */
  sliceErrno: number;
}

/** Slots of the shared control array (Int32). */
export const CONTROL = {
  /** Non-zero: stop (the main thread also notifies this slot to cut a sleep short). */
  stop: 0,
  /** Batches posted by all workers and not yet consumed by the main thread. */
  inflight: 1,
  /** Bytes of those batches (their buffers). */
  inflightBytes: 2,
  size: 3,
} as const;

/**
 * A batch as posted to the main thread: one transferred buffer holding, for `count`
 * datagrams, offsets (u32 each, into the data region), lengths (u32 each), peers
 * ({@linkcode PEER_SIZE} bytes each, padded to 4) and then the data region.
 */
export interface WorkerBatch {
  /** Discriminator. */
  type: "batch";
  /** Number of datagrams. */
  count: number;
  /** The packed buffer (see {@linkcode batchLayout}). */
  buffer: ArrayBuffer;
}

/** Byte positions of the regions of a packed batch of `count` datagrams. */
export function batchLayout(count: number): {
  offsets: number;
  lengths: number;
  peers: number;
  data: number;
} {
  const peersBytes = (count * PEER_SIZE + 3) & ~3;
  return { offsets: 0, lengths: count * 4, peers: count * 8, data: count * 8 + peersBytes };
}

/** Index of each counter in the shared counter array. */
export const COUNTER = {
  datagrams: 0,
  bytes: 1,
  batches: 2,
  dropped: 3,
  truncated: 4,
  errors: 5,
  /** Latest SO_RXQ_OVFL value: datagrams the kernel dropped on this socket (buffer full). */
  kernelDrops: 6,
  /** recvmmsg calls, datagrams or not: the thread's wake-ups (idle: one per receive timeout). */
  receiveCalls: 7,
  size: 8,
} as const;

/** Bytes per peer entry: IPv6 (or IPv4-mapped) address then port, network order. */
export const PEER_SIZE = 18;
