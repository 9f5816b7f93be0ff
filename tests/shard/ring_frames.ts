/** Deterministic frame contents and a checksum, shared by the ring tests and their worker. */

/** Frame `i` of stream `seed`: 0..255 bytes (about 1 in 64 empty), derived from both. */
export function frameContent(seed: number, i: number): Uint8Array {
  let x = Math.imul(seed ^ Math.imul(i, 0x9e3779b1), 0x85ebca6b) >>> 0;
  const len = (x & 63) === 0 ? 0 : (x >>> 8) & 255;
  const out = new Uint8Array(len);
  for (let k = 0; k < len; k++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    out[k] = x >>> 24;
  }
  return out;
}

/** FNV-1a of a frame's bytes, with its length mixed in (so empty frames count). */
export function frameChecksum(f: Uint8Array): number {
  let h = 0x811c9dc5 ^ f.length;
  for (let k = 0; k < f.length; k++) h = Math.imul(h ^ f[k], 0x01000193);
  return h >>> 0;
}
