/**
 * The process's own resource use, read when the counters are (the `record metrics` line every
 * 60 s, `GET /metrics`): what an operator watches to see memory grow or a core saturate. In
 * `/metrics` they keep the names Prometheus's client libraries (Go's included) give them
 * (`process_resident_memory_bytes`, `process_cpu_seconds_total`, `process_start_time_seconds`),
 * so dashboards made for any process work. Every thread counts: the shard and sink workers are
 * threads of this process, so their CPU and memory are in these figures, except the V8 heap ones,
 * which are the main thread's own (each worker has its own heap). No permission is needed.
 *
 * @module
 */

import process from "node:process";
import { getHeapStatistics } from "node:v8";

/** A reading of the process's resource use. */
export interface ProcessStats {
  /** Resident set size now, bytes (`VmRSS`: the runtime's code, every thread's memory). */
  residentMemoryBytes: number;
  /** The highest resident set size since start, bytes (`getrusage` `ru_maxrss`). */
  maxResidentMemoryBytes: number;
  /** User and system CPU time of all threads since start, seconds. */
  cpuSecondsTotal: number;
  /** When the process started, seconds since the Unix epoch. */
  startTimeSeconds: number;
  /** The main thread's V8 heap in use, bytes. */
  heapUsedBytes: number;
  /** The main thread's V8 heap reserved, bytes. */
  heapTotalBytes: number;
  /** Memory outside the main thread's heap held by its objects (buffers), bytes. */
  externalMemoryBytes: number;
}

/** Reads the process's resource use now. */
export function processStats(): ProcessStats {
  const mem = Deno.memoryUsage();
  const cpu = process.cpuUsage();
  return {
    residentMemoryBytes: mem.rss,
    // Linux reports ru_maxrss in KiB. Its count and VmRSS are read at different moments from
    // counters the kernel syncs lazily: the peak can read a few pages under the current value.
    maxResidentMemoryBytes: Math.max(process.resourceUsage().maxRSS * 1024, mem.rss),
    cpuSecondsTotal: (cpu.user + cpu.system) / 1e6,
    startTimeSeconds: Math.round(performance.timeOrigin) / 1000,
    heapUsedBytes: mem.heapUsed,
    heapTotalBytes: mem.heapTotal,
    externalMemoryBytes: mem.external,
  };
}

/**
 * One thread's V8 memory: each thread (the main one, every shard and sink worker) runs its own
 * isolate with its own heap, which {@linkcode ProcessStats} does not split. Read in the thread
 * itself; `/metrics` shows each thread's (`flow_aggregator_thread_heap_used_bytes{thread=...}`),
 * the metrics line their sums, so memory growing in one worker can be told from the process's.
 */
export interface ThreadMemory {
  /** V8 heap in use, bytes. */
  heapUsedBytes: number;
  /** V8 heap reserved, bytes. */
  heapTotalBytes: number;
  /** Memory outside the heap held by its objects (buffers), bytes. */
  externalMemoryBytes: number;
}

/**
 * The calling thread's V8 memory now. About 1.5 µs here (no system call, unlike
 * `Deno.memoryUsage()`, which also reads the RSS: about 12 µs), so a shard can read it with
 * every report.
 */
export function threadMemory(): ThreadMemory {
  const h = getHeapStatistics();
  return {
    heapUsedBytes: h.used_heap_size,
    heapTotalBytes: h.total_heap_size,
    externalMemoryBytes: h.external_memory,
  };
}
