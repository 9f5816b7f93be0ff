/**
 * Checks and reads of raw record values. A decoded record comes from the network, so a field
 * may be absent or of the wrong type; these helpers never throw and are cheap enough for the
 * per-record path.
 */

import { parseIPv4Word } from "../ipfix/ip.ts";

/** A u8/u16/u32 IE value as a number; anything else (absent, bad input) reads as 0. */
export function num(v: number | undefined): number {
  return typeof v === "number" && v >= 0 && v <= 0xffffffff ? v : 0;
}

/** True when `v` is an integer in `0..max`. */
export function isUint(v: number, max: number): boolean {
  return typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= max;
}

/**
 * True when a u64 counter is a bigint or a non-negative safe integer (the decoder's wire-number
 * mode), or absent and not `required`.
 */
export function okCounter(v: bigint | number | undefined, required: boolean): boolean {
  if (v === undefined) return !required;
  return typeof v === "bigint" || (Number.isSafeInteger(v) && v >= 0);
}

/** An IPv4 address IE value (dotted-quad text, or its u32 in wire-number mode) as its u32; -1 if invalid. */
export function ipv4Word(v: string | number | undefined): number {
  if (typeof v === "number") return isUint(v, 0xffffffff) ? v : -1;
  return typeof v === "string" ? parseIPv4Word(v) : -1;
}
