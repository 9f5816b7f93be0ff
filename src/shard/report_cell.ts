/**
 * A shard's counters in shared memory: the shard writes its {@linkcode ShardReport} after every
 * slice of ingest and every expiry sweep, the main thread reads it when it needs the counters
 * (the metrics line, `/metrics`, the API, a dying shard's accounting). Before, the shard posted
 * them as a message at least every 50 ms while records flowed and every 500 ms at idle: each
 * post woke the main thread (100-200 µs of CPU on these VMs, `scripts/bench/wake_cost.ts`),
 * about 20 wakes a second per shard at a cluster's pace, for counters read once a minute. Read
 * here, they are also never older than the shard's last slice.
 *
 * A seqlock keeps a read whole: the writer (the shard, alone) makes the sequence word odd,
 * writes the values, makes it even again; a reader copies the values between two reads of an
 * even, unchanged sequence, else tries again. The counters' identities (`recordsIn` = accepted
 * + rejected, ...) hold in every snapshot read. The layout is derived from the counters object
 * itself ({@linkcode REPORT_FIELDS}), so a counter added to the core is carried without an edit.
 *
 * @module
 */

import { type AggregationStats, CoreCounters } from "../aggregation/counters.ts";
import type { ShardReport } from "./protocol.ts";

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

/** Values of a cell: the counters, then `stringsTruncated`. */
const VALUES = REPORT_FIELDS.length + 1;

/** Bytes of a cell: the sequence word (8, for the alignment of the values) and the values. */
export const REPORT_CELL_BYTES = 8 + 8 * VALUES;

/** Most attempts of a read that keeps meeting a write before it settles for the last read. */
const READ_ATTEMPTS = 1000;

/** One shard's report in a `SharedArrayBuffer` of {@linkcode REPORT_CELL_BYTES}. */
export class ReportCell {
  readonly #seq: Int32Array;
  readonly #values: Float64Array;
  readonly #copy = new Float64Array(VALUES);
  #last: ShardReport | undefined;

  /** A cell over `sab` (fresh: zeroed, nothing written yet). */
  constructor(sab: SharedArrayBuffer) {
    this.#seq = new Int32Array(sab, 0, 1);
    this.#values = new Float64Array(sab, 8, VALUES);
  }

  /** A new cell's memory. */
  static create(): SharedArrayBuffer {
    return new SharedArrayBuffer(REPORT_CELL_BYTES);
  }

  /** Writes `r` (the shard: the only writer). */
  write(r: ShardReport): void {
    const seq = this.#seq;
    const s = Atomics.load(seq, 0);
    Atomics.store(seq, 0, s + 1); // odd: a write in progress
    const v = this.#values;
    const stats = r.stats as unknown as Record<string, number | Record<string, number>>;
    for (let i = 0; i < REPORT_FIELDS.length; i++) {
      const [k, sub] = REPORT_FIELDS[i];
      v[i] = sub === undefined ? stats[k] as number : (stats[k] as Record<string, number>)[sub];
    }
    v[REPORT_FIELDS.length] = r.stringsTruncated;
    Atomics.store(seq, 0, s + 2);
  }

  /**
   * The last report written, whole; undefined before the first. A read that keeps meeting a
   * write (a writer stopped in the middle of one: its worker was terminated) gives the last
   * whole read instead.
   */
  read(): ShardReport | undefined {
    const seq = this.#seq;
    const copy = this.#copy;
    for (let attempt = 0; attempt < READ_ATTEMPTS; attempt++) {
      const s = Atomics.load(seq, 0);
      if (s === 0) return this.#last;
      if ((s & 1) !== 0) continue;
      copy.set(this.#values);
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
  return {
    stats: stats as unknown as AggregationStats,
    stringsTruncated: v[REPORT_FIELDS.length],
  };
}
