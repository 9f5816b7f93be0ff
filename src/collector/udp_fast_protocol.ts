/**
 * Messages and shared-counter layout between `udp_fast.ts` (main thread) and
 * `udp_fast_worker.ts` (receive loop). Kept separate so the main thread never loads the
 * worker module.
 */

/** Start message sent by the main thread. */
export interface WorkerStart {
  /** Discriminator. */
  type: "start";
  /** The bound socket. */
  fd: number;
  /** Datagrams per recvmmsg call. */
  batchSize: number;
  /** Receive slot size; longer datagrams are truncated by the kernel and dropped here. */
  maxDatagramSize: number;
  /** Int32Array view: [0] stop flag, [1] batches posted and not yet consumed. */
  control: SharedArrayBuffer;
  /** Float64Array view of this worker's counters, see {@linkcode COUNTER}. */
  counters: SharedArrayBuffer;
  /** Posted batches above which new batches are dropped (and counted) instead of queued. */
  maxQueuedBatches: number;
}

/** A batch as posted to the main thread. */
export interface WorkerBatch {
  /** Discriminator. */
  type: "batch";
  /** Number of datagrams. */
  count: number;
  /** All datagram bytes back to back. */
  data: Uint8Array;
  /** Start of datagram i in `data`. */
  offsets: Uint32Array;
  /** Length of datagram i. */
  lengths: Uint32Array;
  /** 18 bytes per datagram: IPv6 (or IPv4-mapped) address then port, network order. */
  peers: Uint8Array;
}

/** Index of each counter in the shared counter array. */
export const COUNTER = {
  datagrams: 0,
  bytes: 1,
  batches: 2,
  dropped: 3,
  truncated: 4,
  errors: 5,
  size: 6,
} as const;

/** Bytes per peer entry in {@linkcode WorkerBatch.peers}. */
export const PEER_SIZE = 18;
