/**
 * Flow keys (spec aggregation.md §1.1): the directional 5-tuple of a flow with addresses in
 * canonical text (IPv4 dotted quad, IPv6 per RFC 5952, IPv4-mapped IPv6 printed as IPv4 like Go
 * does). The core stores addresses as u32 words (see `flow_table.ts`); this module parses text
 * into words, formats words back to canonical text, and canonicalises query text.
 */

import type { FlowKey } from "./record.ts";

/** Human-readable key text for logs: `10.0.0.1:1234->10.0.0.2:5678/6`, IPv6 in brackets. */
export function formatFlowKey(k: FlowKey): string {
  const a = (ip: string, port: number): string =>
    ip.includes(":") ? `[${ip}]:${port}` : `${ip}:${port}`;
  return `${a(k.sourceAddress, k.sourcePort)}->${
    a(k.destinationAddress, k.destinationPort)
  }/${k.protocol}`;
}

/** True if `s` is already canonical dotted-quad text (no leading zeros, each part <= 255). */
function isCanonicalIPv4(s: string): boolean {
  const n = s.length;
  if (n < 7 || n > 15) return false;
  let parts = 0;
  let val = 0;
  let digits = 0;
  for (let i = 0; i <= n; i++) {
    const c = i === n ? 46 : s.charCodeAt(i);
    if (c === 46) {
      if (digits === 0 || val > 255) return false;
      parts++;
      val = 0;
      digits = 0;
    } else if (c >= 48 && c <= 57) {
      // "01" is not canonical: Go would print "1".
      if (digits === 1 && val === 0) return false;
      val = val * 10 + (c - 48);
      digits++;
      if (digits > 3) return false;
    } else {
      return false;
    }
  }
  return parts === 4;
}

/** Parses IPv4 text into 4 bytes (accepts leading zeros as decimal); undefined if invalid. */
function parseIPv4(s: string): number[] | undefined {
  const parts = s.split(".");
  if (parts.length !== 4) return undefined;
  const out: number[] = [];
  for (const p of parts) {
    if (!/^[0-9]{1,3}$/.test(p)) return undefined;
    const v = Number(p);
    if (v > 255) return undefined;
    out.push(v);
  }
  return out;
}

/** Parses IPv6 text (with optional embedded IPv4 tail) into 8 groups; undefined if invalid. */
function parseIPv6(s: string): number[] | undefined {
  if (s.length < 2 || s.length > 45) return undefined;
  let head = s;
  let v4tail: number[] | undefined;
  const lastColon = s.lastIndexOf(":");
  if (s.indexOf(".", lastColon) !== -1) {
    v4tail = parseIPv4(s.slice(lastColon + 1));
    if (v4tail === undefined) return undefined;
    head = s.slice(0, lastColon + 1);
    // "…:" left over: make it parse as groups by appending a placeholder group pair later.
    if (head.endsWith("::")) {
      // fine: the "::" gap absorbs.
    } else {
      head = head.slice(0, -1);
    }
  }
  const tailGroups = v4tail === undefined ? 0 : 2;
  const want = 8 - tailGroups;
  const dbl = head.indexOf("::");
  if (dbl !== -1 && head.indexOf("::", dbl + 1) !== -1) return undefined;
  const parseGroups = (t: string): number[] | undefined => {
    if (t === "") return [];
    const out: number[] = [];
    for (const g of t.split(":")) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
      out.push(parseInt(g, 16));
    }
    return out;
  };
  let groups: number[];
  if (dbl === -1) {
    const g = parseGroups(head);
    if (g === undefined || g.length !== want) return undefined;
    groups = g;
  } else {
    const left = parseGroups(head.slice(0, dbl));
    const right = parseGroups(head.slice(dbl + 2));
    if (left === undefined || right === undefined) return undefined;
    const fill = want - left.length - right.length;
    if (fill < 1) return undefined;
    groups = [...left, ...new Array<number>(fill).fill(0), ...right];
  }
  if (v4tail !== undefined) {
    groups.push((v4tail[0] << 8) | v4tail[1], (v4tail[2] << 8) | v4tail[3]);
  }
  return groups;
}

/** Formats 8 IPv6 groups per RFC 5952, with Go's IPv4-mapped quirk. */
function formatIPv6(g: number[]): string {
  if (
    g[0] === 0 && g[1] === 0 && g[2] === 0 && g[3] === 0 && g[4] === 0 && g[5] === 0xffff
  ) {
    // Go's net.IP.String prints ::ffff:a.b.c.d as a.b.c.d (spec §1.1 quirk).
    return `${g[6] >> 8}.${g[6] & 255}.${g[7] >> 8}.${g[7] & 255}`;
  }
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (bestLen < 2) bestStart = -1;
  let out = "";
  for (let i = 0; i < 8; i++) {
    if (i === bestStart) {
      out += "::";
      i += bestLen - 1;
      continue;
    }
    if (out !== "" && !out.endsWith(":")) out += ":";
    out += g[i].toString(16);
  }
  return out;
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
    if (isCanonicalIPv4(text)) return text;
    const b = parseIPv4(text);
    return b === undefined ? undefined : b.join(".");
  }
  const hit = v6Cache.get(text);
  if (hit !== undefined) return hit;
  const g = parseIPv6(text);
  if (g === undefined) return undefined;
  const out = formatIPv6(g);
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
  const g = parseIPv6(s);
  if (g === undefined) return undefined;
  const w = new Uint32Array([
    (g[0] << 16 | g[1]) >>> 0,
    (g[2] << 16 | g[3]) >>> 0,
    (g[4] << 16 | g[5]) >>> 0,
    (g[6] << 16 | g[7]) >>> 0,
  ]);
  if (v6Words.size >= V6_WORDS_MAX) v6Words.clear();
  v6Words.set(s, w);
  return w;
}

/** Canonical text (RFC 5952, IPv4-mapped as dotted quad) of 4 IPv6 words. */
export function formatIPv6Words(w0: number, w1: number, w2: number, w3: number): string {
  return formatIPv6([
    w0 >>> 16,
    w0 & 0xffff,
    w1 >>> 16,
    w1 & 0xffff,
    w2 >>> 16,
    w2 & 0xffff,
    w3 >>> 16,
    w3 & 0xffff,
  ]);
}
