/**
 * A shard's counters in shared memory: the shard writes its {@linkcode ShardReport} after every
 * slice of ingest and every expiry sweep, the main thread reads it when it needs the counters
 * (the metrics line, `/metrics`, the API, a dying shard's accounting). Before, the shard posted
 * them as a message at least every 50 ms while records flowed and every 500 ms at idle: each
 * post woke the main thread (100-200 µs of CPU on these VMs, `scripts/bench/wake_cost.ts`),
 * about 20 wakes a second per shard at a cluster's pace, for counters read once a minute. Read
 * here, they are also never older than the shard's last slice.
 *
 * Two copies of the values keep a read whole: the writer (the shard, alone) writes the copy not
 * published, then publishes it by moving the sequence word on (by 2: its bit 1 names the
 * published copy); a reader copies the published values between two reads of an unchanged
 * sequence, else tries again. A writer stopped in the middle of a write (its worker terminated)
 * has touched only the copy not published: a read then gives the last report written whole.
 * With one copy under a seqlock such a read gave the last one this reader had read, which could
 * be a minute old, and a dying shard's accounting was made from it. The counters' identities
 * (`recordsIn` = accepted + rejected, ...) hold in every snapshot read. The layout is derived from the counters object
 * itself ({@linkcode REPORT_FIELDS}), so a counter added to the core is carried without an edit;
 * the shard thread's V8 memory ({@linkcode ThreadMemory}) follows the counters.
 *
 * @module
 */

import { type AggregationStats, CoreCounters } from "../aggregation/counters.ts";
import type { ShardReport } from "./protocol.ts";
import { type ThreadMemory, threadMemory } from "../thread_memory.ts";

/** One number of a report: a counter, or one entry of a nested map of counters. */
type Field = readonly [key: string, sub: string | undefined];

/** The counters of `AggregationStats` in cell order (the strings cut come after them). */
export const REPORT_FIELDS: readonly Field[] = (() => {
  const fields: Field[] = [];
  const zero = new CoreCounters().snapshot(0, 0) as unknown as Record<string, unknown>;
  for (const [k, v] of Object.entries(zero)) {
    if (typeof v === "number") fields.push([k, undefined]);
    else if (v !== null && typeof v === "object") {
      for (const sub of Object.keys(v)) fields.push([k, sub]);
    } else throw new Error(`report cell: counter ${k} is not a number or a map of numbers`);
  }
  return fields;
})();

/** The figures of the shard thread's memory, in cell order after `stringsTruncated`. */
const MEMORY_FIELDS = Object.keys(threadMemory()) as (keyof ThreadMemory)[];

/** Values of a cell: the counters, then `stringsTruncated`, then the thread's memory. */
const VALUES = REPORT_FIELDS.length + 1 + MEMORY_FIELDS.length;

/** Bytes of a cell: the sequence word (8, for the alignment of the values) and two copies. */
export const REPORT_CELL_BYTES = 8 + 2 * 8 * VALUES;

/** Most attempts of a read that keeps meeting a write before it settles for the last read. */
const READ_ATTEMPTS = 1000;

/** The copy (0 or 1) published at sequence `s`. */
function copyAt(s: number): number {
  return (s >>> 1) & 1;
}

/** One shard's report in a `SharedArrayBuffer` of {@linkcode REPORT_CELL_BYTES}. */
export class ReportCell {
  readonly #seq: Int32Array;
  readonly #values: readonly [Float64Array, Float64Array];
  readonly #copy = new Float64Array(VALUES);
  #last: ShardReport | undefined;

  /** A cell over `sab` (fresh: zeroed, nothing written yet). */
  constructor(sab: SharedArrayBuffer) {
    this.#seq = new Int32Array(sab, 0, 1);
    this.#values = [
      new Float64Array(sab, 8, VALUES),
      new Float64Array(sab, 8 + 8 * VALUES, VALUES),
    ];
  }

  /** A new cell's memory. */
  static create(): SharedArrayBuffer {
    return new SharedArrayBuffer(REPORT_CELL_BYTES);
  }

  /** Writes `r` (the shard: the only writer). */
  write(r: ShardReport): void {
    const next = Atomics.load(this.#seq, 0) + 2;
    const v = this.#values[copyAt(next)];
    const stats = r.stats as unknown as Record<string, number | Record<string, number>>;
    for (let i = 0; i < REPORT_FIELDS.length; i++) {
      const [k, sub] = REPORT_FIELDS[i];
      v[i] = sub === undefined ? stats[k] as number : (stats[k] as Record<string, number>)[sub];
    }
    v[REPORT_FIELDS.length] = r.stringsTruncated;
    for (let i = 0; i < MEMORY_FIELDS.length; i++) {
      v[REPORT_FIELDS.length + 1 + i] = r.memory[MEMORY_FIELDS[i]];
    }
    Atomics.store(this.#seq, 0, next); // published
  }

  /**
   * The last report written whole; undefined before the first. A read that keeps meeting writes
   * (a writer faster than the copy, which does not happen with a shard's pace) gives the last
   * read instead.
   */
  read(): ShardReport | undefined {
    const seq = this.#seq;
    const copy = this.#copy;
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      const s = Atomics.load(seq, 0);
      if (s === 0) return this.#last;
      // The writer writes this copy only once it has published the other one: if the
      // sequence has not moved, the copy read was not being written.
      copy.set(this.#values[copyAt(s)]);
      if (Atomics.load(seq, 0) !== s) continue;
      this.#last = reportOf(copy);
      return this.#last;
    }
    return this.#last;
  }
}

/** The report of the values `v` in {@linkcode REPORT_FIELDS} order. */
function reportOf(v: Float64Array): ShardReport {
  const stats: Record<string, number | Record<string, number>> = {};
  for (let i = 0; i < REPORT_FIELDS.length; i++) {
    const [k, sub] = REPORT_FIELDS[i];
    if (sub === undefined) stats[k] = v[i];
    else ((stats[k] ??= {}) as Record<string, number>)[sub] = v[i];
  }
  const memory = {} as ThreadMemory;
  for (let i = 0; i < MEMORY_FIELDS.length; i++) {
    memory[MEMORY_FIELDS[i]] = v[REPORT_FIELDS.length + 1 + i];
  }
  return {
    stats: stats as unknown as AggregationStats,
    stringsTruncated: v[REPORT_FIELDS.length],
    memory,
  };
}
