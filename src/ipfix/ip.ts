/**
 * Canonical IP address text, identical to Go's `net.IP.String()` because flow keys, query
 * filters and sink columns compare addresses as text (aggregation.md §1.1): IPv4 dotted quad;
 * IPv6 per RFC 5952; an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) prints as `a.b.c.d`.
 * Formatting runs once per address per decoded record, so it avoids intermediate arrays.
 */

// Decimal text of every byte value, so dotted quads are four lookups and three concatenations.
const DEC: readonly string[] = Array.from({ length: 256 }, (_, i) => String(i));
// Hex text of 16-bit groups, made on first use: a table of all 65,536 built at import cost
// several MB of resident memory in every isolate that imports this module. The table itself
// (512 KiB of slots) is allocated with the first IPv6 group formatted, not at import: most
// isolates that import this module never format one.
let HEX: (string | undefined)[] | undefined;

function hex(v: number): string {
  HEX ??= new Array<string | undefined>(65536).fill(undefined);
  let s = HEX[v];
  if (s === undefined) {
    s = v.toString(16);
    HEX[v] = s;
  }
  return s;
}

/** Dotted-quad text of the 4 bytes at `off`. */
export function formatIPv4(view: DataView, off: number): string {
  return DEC[view.getUint8(off)] + "." + DEC[view.getUint8(off + 1)] + "." +
    DEC[view.getUint8(off + 2)] + "." + DEC[view.getUint8(off + 3)];
}

/** Dotted-quad text of the 4 bytes at `off` of a byte array (same output as formatIPv4). */
export function formatIPv4Bytes(bytes: Uint8Array, off: number): string {
  return DEC[bytes[off]] + "." + DEC[bytes[off + 1]] + "." + DEC[bytes[off + 2]] + "." +
    DEC[bytes[off + 3]];
}

/** RFC 5952 text of the 16 bytes at `off`; IPv4-mapped addresses print as dotted quads. */
export function formatIPv6(bytes: Uint8Array, off: number): string {
  // Find the longest run (>= 2 groups) of zero groups; first one wins ties.
  let bestStart = -1;
  let bestLen = 1;
  let runStart = -1;
  for (let g = 0; g < 8; g++) {
    const zero = bytes[off + 2 * g] === 0 && bytes[off + 2 * g + 1] === 0;
    if (zero) {
      if (runStart < 0) runStart = g;
      const len = g - runStart + 1;
      if (len > bestLen) {
        bestLen = len;
        bestStart = runStart;
      }
    } else {
      runStart = -1;
    }
  }
  if (bestStart === 0 && bestLen === 5 && bytes[off + 10] === 0xff && bytes[off + 11] === 0xff) {
    return formatIPv4Bytes(bytes, off + 12);
  }
  let s = "";
  for (let g = 0; g < 8; g++) {
    if (g === bestStart) {
      s += "::";
      g += bestLen - 1;
      continue;
    }
    if (s.length > 0 && !s.endsWith(":")) s += ":";
    s += hex((bytes[off + 2 * g] << 8) | bytes[off + 2 * g + 1]);
  }
  return s;
}

function parseIPv4Into(text: string, out: Uint8Array, at: number): boolean {
  const parts = text.split(".");
  if (parts.length !== 4) return false;
  for (let i = 0; i < 4; i++) {
    const p = parts[i];
    // Leading zeros are rejected like Go >= 1.17 (they meant octal to some parsers).
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p)) return false;
    const v = Number(p);
    if (v > 255) return false;
    out[at + i] = v;
  }
  return true;
}

/**
 * Parses IPv6 text (with an optional dotted-quad tail, `::ffff:10.0.0.1`) into 16 bytes;
 * undefined when it is not IPv6 text (IPv4 text, zones, prefixes and brackets are rejected).
 */
export function parseIPv6(text: string): Uint8Array | undefined {
  const out = new Uint8Array(16);
  const dbl = text.indexOf("::");
  if (dbl !== text.lastIndexOf("::")) return undefined;
  const head = dbl >= 0 ? text.slice(0, dbl) : text;
  const tail = dbl >= 0 ? text.slice(dbl + 2) : "";
  const headParts = head === "" ? [] : head.split(":");
  const tailParts = tail === "" ? [] : tail.split(":");
  const groups: number[] = [];
  const all = dbl >= 0 ? [...headParts, "|", ...tailParts] : headParts;
  let gap = -1;
  for (let i = 0; i < all.length; i++) {
    const p = all[i];
    if (p === "|") {
      gap = groups.length;
      continue;
    }
    if (i === all.length - 1 && p.includes(".")) {
      const v4 = new Uint8Array(4);
      if (!parseIPv4Into(p, v4, 0)) return undefined;
      groups.push((v4[0] << 8) | v4[1], (v4[2] << 8) | v4[3]);
      continue;
    }
    if (!/^[0-9a-fA-F]{1,4}$/.test(p)) return undefined;
    groups.push(parseInt(p, 16));
  }
  if (gap < 0) {
    if (groups.length !== 8) return undefined;
  } else {
    // "::" stands for at least one zero group.
    if (groups.length > 7) return undefined;
    groups.splice(gap, 0, ...new Array(8 - groups.length).fill(0));
  }
  for (let g = 0; g < 8; g++) {
    out[2 * g] = groups[g] >> 8;
    out[2 * g + 1] = groups[g] & 0xff;
  }
  return out;
}

/**
 * Parses IPv4 dotted-quad or IPv6 text into 4 or 16 bytes; undefined when not an address
 * (zones, prefixes, brackets and octal-looking IPv4 parts are rejected).
 */
export function parseIP(text: string): Uint8Array | undefined {
  if (text.includes(":")) return parseIPv6(text);
  const out = new Uint8Array(4);
  return parseIPv4Into(text, out, 0) ? out : undefined;
}

/**
 * Canonical text of an address given as text (e.g. `2001:0DB8::1` → `2001:db8::1`,
 * `::ffff:10.0.0.1` → `10.0.0.1`); undefined when `text` is not an address.
 */
export function canonicalIP(text: string): string | undefined {
  const b = parseIP(text);
  if (b === undefined) return undefined;
  return b.length === 4 ? formatIPv4Bytes(b, 0) : formatIPv6(b, 0);
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

// Flow addresses repeat (pods, nodes, 0.0.0.0), so formatted IPv4 text is cached by value in a
// direct-mapped table: a hit costs one multiply and a compare instead of building a string, and
// every caller gets the same string object for the same address.
const IP4_SLOTS_LOG2 = 12;
const ip4Keys = new Float64Array(1 << IP4_SLOTS_LOG2).fill(-1); // -1 is never a u32
const ip4Text: string[] = new Array<string>(1 << IP4_SLOTS_LOG2).fill("");

/** {@linkcode formatIPv4Word} through a bounded cache by value (the decoder's and the core's). */
export function ipv4Text(w: number): string {
  const slot = Math.imul(w, 0x9e3779b1) >>> (32 - IP4_SLOTS_LOG2);
  if (ip4Keys[slot] === w) return ip4Text[slot];
  const s = formatIPv4Word(w);
  ip4Keys[slot] = w;
  ip4Text[slot] = s;
  return s;
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
