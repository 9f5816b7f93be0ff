/**
 * Flow keys (spec aggregation.md §1.1): the directional 5-tuple of a flow with addresses in
 * canonical text (IPv4 dotted quad, IPv6 per RFC 5952, IPv4-mapped IPv6 printed as IPv4 like Go
 * does). The core stores addresses as u32 words (see `flow_table.ts`); this module parses text
 * into words, formats words back to canonical text, and canonicalises query text. IPv6 text is
 * parsed and printed by the codec's `ip.ts` (one implementation of Go's rules for the whole
 * program); IPv4 has its own allocation-free parser here because it runs for every record and,
 * unlike the codec's, reads leading zeros as decimal (`010.0.0.1` is `10.0.0.1`).
 */

import { formatIPv6, parseIPv6 } from "../ipfix/ip.ts";
import type { FlowKey } from "./record.ts";

/** Human-readable key text for logs: `10.0.0.1:1234->10.0.0.2:5678/6`, IPv6 in brackets. */
export function formatFlowKey(k: FlowKey): string {
  const a = (ip: string, port: number): string =>
    ip.includes(":") ? `[${ip}]:${port}` : `${ip}:${port}`;
  return `${a(k.sourceAddress, k.sourcePort)}->${
    a(k.destinationAddress, k.destinationPort)
  }/${k.protocol}`;
}

// Canonicalising IPv6 text is costly; flows repeat the same addresses, so remember results.
// Bounded: cleared when full (losing only the cache, never correctness).
const V6_CACHE_MAX = 65_536;
const v6Cache = new Map<string, string>();

/**
 * Returns the canonical text of an address given as text, or undefined when it is not a valid
 * address of the given family. `v4` selects the IE family the text came from.
 */
export function canonicalAddress(text: string, v4: boolean): string | undefined {
  if (typeof text !== "string") return undefined;
  if (v4) {
    const w = parseIPv4Word(text);
    if (w < 0) return undefined;
    // Canonical text (the usual case) is returned as is: no new string per record.
    return hasLeadingZero(text) ? formatIPv4Word(w) : text;
  }
  const hit = v6Cache.get(text);
  if (hit !== undefined) return hit;
  const b = parseIPv6(text);
  if (b === undefined) return undefined;
  const out = formatIPv6(b, 0);
  if (v6Cache.size >= V6_CACHE_MAX) v6Cache.clear();
  v6Cache.set(text, out);
  return out;
}

/**
 * Canonicalises address text of either family (for query filters, where the family is not
 * known). Returns undefined if it is neither valid IPv4 nor valid IPv6 text.
 */
export function canonicalAnyAddress(text: string): string | undefined {
  if (typeof text !== "string") return undefined;
  return text.includes(":") ? canonicalAddress(text, false) : canonicalAddress(text, true);
}

/**
 * Parses IPv4 dotted-quad text into its u32 value (leading zeros read as decimal, as the
 * canonical form drops them); -1 when the text is not an IPv4 address. Allocation-free: it
 * runs for every ingested record.
 */
export function parseIPv4Word(s: string): number {
  const n = s.length;
  if (n < 7 || n > 15) return -1;
  let acc = 0;
  let parts = 0;
  let val = 0;
  let digits = 0;
  for (let i = 0; i <= n; i++) {
    const c = i === n ? 46 : s.charCodeAt(i);
    if (c === 46) {
      if (digits === 0 || val > 255) return -1;
      acc = acc * 256 + val;
      parts++;
      val = 0;
      digits = 0;
    } else if (c >= 48 && c <= 57) {
      val = val * 10 + (c - 48);
      if (++digits > 3) return -1;
    } else {
      return -1;
    }
  }
  return parts === 4 ? acc : -1;
}

/** Dotted-quad text of a u32 IPv4 value. */
export function formatIPv4Word(w: number): string {
  return `${w >>> 24}.${(w >>> 16) & 255}.${(w >>> 8) & 255}.${w & 255}`;
}

/** True when a part of dotted-quad text has a leading zero (`01`), which Go does not print. */
function hasLeadingZero(s: string): boolean {
  for (let i = 0; i < s.length - 1; i++) {
    if (
      s.charCodeAt(i) === 48 && (i === 0 || s.charCodeAt(i - 1) === 46) &&
      s.charCodeAt(i + 1) !== 46
    ) return true;
  }
  return false;
}

const V6_WORDS_MAX = 65_536;
const v6Words = new Map<string, Uint32Array>();

/**
 * The 4 big-endian u32 words of IPv6 text, or undefined when invalid. Cached (bounded) because
 * the same addresses repeat in every record of a flow. The returned array must not be mutated.
 */
export function parseIPv6Words(s: string): Uint32Array | undefined {
  const hit = v6Words.get(s);
  if (hit !== undefined) return hit;
  if (typeof s !== "string") return undefined;
  const b = parseIPv6(s);
  if (b === undefined) return undefined;
  const dv = new DataView(b.buffer, b.byteOffset, 16);
  const w = new Uint32Array([dv.getUint32(0), dv.getUint32(4), dv.getUint32(8), dv.getUint32(12)]);
  if (v6Words.size >= V6_WORDS_MAX) v6Words.clear();
  v6Words.set(s, w);
  return w;
}

// Scratch for formatting words through the codec's byte formatter (synchronous, not re-entered).
const v6Bytes = new Uint8Array(16);
const v6View = new DataView(v6Bytes.buffer);

/** Canonical text (RFC 5952, IPv4-mapped as dotted quad) of 4 IPv6 words. */
export function formatIPv6Words(w0: number, w1: number, w2: number, w3: number): string {
  v6View.setUint32(0, w0);
  v6View.setUint32(4, w1);
  v6View.setUint32(8, w2);
  v6View.setUint32(12, w3);
  return formatIPv6(v6Bytes, 0);
}
