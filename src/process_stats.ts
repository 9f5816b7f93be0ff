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
