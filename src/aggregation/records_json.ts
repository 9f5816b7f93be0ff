/**
 * Held records as the API's `/flowrecords` writes them (upstream's JSON: every IE present keyed by
 * name, 64-bit counters as exact integers). Shard workers write their records' texts, the main
 * thread only joins them.
 *
 * @module
 */

import type { AggregatedRecord } from "./record.ts";

/** `JSON.stringify` with BigInt values written as exact integer digits. */
export function stringifyExact(value: unknown, space?: number): string {
  const raw = (JSON as unknown as { rawJSON(s: string): unknown }).rawJSON;
  return JSON.stringify(value, (_k, v) => typeof v === "bigint" ? raw(v.toString()) : v, space);
}

/** The JSON text of each record. */
export function recordTexts(records: readonly AggregatedRecord[]): string[] {
  return records.map((r) => stringifyExact(r));
}

/** The `/flowrecords` body of records' texts: a JSON array, `null` when none (upstream's nil). */
export function joinRecordTexts(texts: readonly string[]): string {
  return texts.length === 0 ? "null" : `[${texts.join(",")}]`;
}

/** The `/flowrecords` body of `records`. */
export function recordsJson(records: readonly AggregatedRecord[]): string {
  return joinRecordTexts(recordTexts(records));
}
