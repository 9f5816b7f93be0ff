/**
 * One thread's V8 memory: each thread (the main one, every shard and sink worker) runs its own
 * isolate with its own heap, which the process's figures (`process_stats.ts`) do not split. Read
 * in the thread itself; `/metrics` shows each thread's
 * (`flow_aggregator_thread_heap_used_bytes{thread=...}`), the metrics line their sums, so memory
 * growing in one worker can be told from the process's.
 *
 * No `node:` import here: the workers import this module, and loading Node's compatibility
 * modules (`node:process`, `node:v8`) costs each worker a few MB of RSS.
 *
 * @module
 */

/** A thread's V8 memory. */
export interface ThreadMemory {
  /** V8 heap in use, bytes. */
  heapUsedBytes: number;
  /** V8 heap reserved, bytes. */
  heapTotalBytes: number;
  /** Memory outside the heap held by its objects (buffers), bytes. */
  externalMemoryBytes: number;
}

/** How old a reading may be: `Deno.memoryUsage()` also reads the RSS (about 12 µs here). */
const MAX_AGE_MS = 1000;

let last: ThreadMemory | undefined;
let lastAt = -Infinity;

/**
 * The calling thread's V8 memory, read at most once a second (a shard asks with every report,
 * after each slice of ingest): the last reading when it is younger.
 */
export function threadMemory(now: number = performance.now()): ThreadMemory {
  if (last === undefined || now - lastAt >= MAX_AGE_MS) {
    const m = Deno.memoryUsage();
    last = {
      heapUsedBytes: m.heapUsed,
      heapTotalBytes: m.heapTotal,
      externalMemoryBytes: m.external,
    };
    lastAt = now;
  }
  return last;
}
