/**
 * Byte-array helpers shared by the modules that assemble wire bytes (IPFIX transport writes,
 * DER encoding).
 *
 * @module
 */

/** The parts back to back in one new array. */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array<ArrayBuffer> {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}
