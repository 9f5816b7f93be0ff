/**
 * Checks and reads of raw record values. A decoded record comes from the network, so a field
 * may be absent or of the wrong type; these helpers never throw and are cheap enough for the
 * per-record path.
 */

/** A u8/u16/u32 IE value as a number; anything else (absent, bad input) reads as 0. */
export function num(v: number | undefined): number {
  return typeof v === "number" && v >= 0 && v <= 0xffffffff ? v : 0;
}

/** True when `v` is an integer in `0..max`. */
export function isUint(v: number, max: number): boolean {
  return typeof v === "number" && Number.isInteger(v) && v >= 0 && v <= max;
}

/** True when a u64 counter is a bigint, or absent and not `required`. */
export function okBig(v: bigint | undefined, required: boolean): boolean {
  return v === undefined ? !required : typeof v === "bigint";
}
