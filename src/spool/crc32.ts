/**
 * CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, the one of zlib and gzip), table
 * driven: the spool's frame checksum.
 *
 * @module
 */

const TABLE: Uint32Array = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/**
 * The CRC-32 of `bytes`, continuing from `crc` (the result of a previous call over the bytes
 * before them; 0 to start).
 */
export function crc32(bytes: Uint8Array, crc = 0): number {
  let c = ~crc >>> 0;
  for (let i = 0; i < bytes.length; i++) c = TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return ~c >>> 0;
}
