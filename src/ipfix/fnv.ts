/**
 * FNV-1 (not FNV-1a) 32-bit hash. Antrea derives the Agent's Observation Domain ID from the
 * Node name with it (ipfix.md §6.1), and the FA its own from the cluster UUID bytes.
 */

const utf8 = new TextEncoder();

/** FNV-1 32-bit hash of `data` (a string is hashed as its UTF-8 bytes), as an unsigned number. */
export function fnv1_32(data: Uint8Array | string): number {
  const bytes = typeof data === "string" ? utf8.encode(data) : data;
  let h = 2166136261;
  for (let i = 0; i < bytes.length; i++) {
    h = Math.imul(h, 16777619) ^ bytes[i];
  }
  return h >>> 0;
}
