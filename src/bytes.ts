/**
 * Byte-array helpers shared by the modules that assemble or write bytes (IPFIX transport
 * writes, DER encoding, files and sockets written in full).
 *
 * @module
 */

/** Writes all of `data` to `w` (a file or a connection), however many writes that takes. */
export async function writeAll(
  w: { write(p: Uint8Array): Promise<number> },
  data: Uint8Array,
): Promise<void> {
  let off = 0;
  while (off < data.length) off += await w.write(data.subarray(off));
}

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
