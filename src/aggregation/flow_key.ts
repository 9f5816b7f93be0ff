/**
 * Flow keys (spec aggregation.md §1.1): the directional 5-tuple of a flow with addresses in
 * canonical text (IPv4 dotted quad, IPv6 per RFC 5952, IPv4-mapped IPv6 printed as IPv4 like Go
 * does). The core stores addresses as u32 words (see `flow_table.ts`); this module parses text
 * into words, formats words back to canonical text, and canonicalises query text. IPv6 text is
 * parsed and printed by the codec's `ip.ts` (one implementation of Go's rules for the whole
 * program); IPv4 has its own allocation-free parser here because it runs for every record and,
 * unlike the codec's, reads leading zeros as decimal (`010.0.0.1` is `10.0.0.1`).
 */

import {
  formatIPv4Word,
  formatIPv6,
  formatIPv6Words,
  ipv4Text,
  parseIPv4Word,
  parseIPv6,
  parseIPv6Words,
} from "../ipfix/ip.ts";
import type { RejectReason } from "./counters.ts";
import type { ExportedFlow, FlowInput, FlowKey } from "./record.ts";
import { ipv4Word, isUint } from "./values.ts";

// The word forms of addresses live with the codec's text forms (one implementation of the
// address rules); re-exported here, where the core's callers have always found them.
export { formatIPv4Word, formatIPv6Words, parseIPv4Word, parseIPv6Words };

/** Why a record has no valid flow key: the core's reject reason and its log text. */
export type KeyProblem = readonly [RejectReason, string];

const NO_PORTS: KeyProblem = ["missingKeyField", "record without protocol or ports"];
const BAD_PORTS: KeyProblem = ["badFieldType", "record with an out-of-range protocol or port"];
const NO_ADDRESS: KeyProblem = ["missingKeyField", "record without source or destination address"];
const MIXED: KeyProblem = ["mixedAddressFamily", "record mixes IPv4 and IPv6 addresses"];
const BAD_ADDRESS: KeyProblem = ["badAddress", "record with an invalid address"];

/**
 * Reads the flow key of a record into the probe words `k` (the layout of `flow_table.ts`:
 * source words 0-3, destination 4-7, protocol 8, ports 9 and 10, family 11). The IPv4 IE wins
 * when a record carries both families. Returns why the record has no valid key, or undefined
 * when `k` holds it. The one reading of a key, for the core's ingest and the shard router.
 */
export function readFlowKey(k: Uint32Array, r: FlowInput): KeyProblem | undefined {
  const sport = r.sourceTransportPort;
  const dport = r.destinationTransportPort;
  const proto = r.protocolIdentifier;
  if (sport === undefined || dport === undefined || proto === undefined) return NO_PORTS;
  if (!isUint(sport, 0xffff) || !isUint(dport, 0xffff) || !isUint(proto, 0xff)) return BAD_PORTS;
  const src4 = r.sourceIPv4Address;
  const dst4 = r.destinationIPv4Address;
  const srcV4 = src4 !== undefined;
  const dstV4 = dst4 !== undefined;
  const src = srcV4 ? src4 : r.sourceIPv6Address;
  const dst = dstV4 ? dst4 : r.destinationIPv6Address;
  if (src === undefined || dst === undefined) return NO_ADDRESS;
  if (srcV4 !== dstV4) return MIXED;
  if (srcV4) {
    // A u32 in wire-number mode (the collector's records), dotted-quad text otherwise.
    const a = ipv4Word(src);
    const b = ipv4Word(dst);
    if (a < 0 || b < 0) return BAD_ADDRESS;
    k[0] = a;
    k[1] = k[2] = k[3] = 0;
    k[4] = b;
    k[5] = k[6] = k[7] = 0;
    k[11] = 4;
  } else {
    // IPv6 IEs are text in both decoder modes (a non-string reads as invalid).
    const a = v6Words(src);
    const b = v6Words(dst);
    if (a === undefined || b === undefined) return BAD_ADDRESS;
    // Word by word: TypedArray#set costs a builtin call per record.
    k[0] = a[0];
    k[1] = a[1];
    k[2] = a[2];
    k[3] = a[3];
    k[4] = b[0];
    k[5] = b[1];
    k[6] = b[2];
    k[7] = b[3];
    k[11] = 6;
  }
  k[8] = proto;
  k[9] = sport;
  k[10] = dport;
  return undefined;
}

/**
 * The words of an IPv6 IE's text: IPv6 text, or a dotted quad, which is how the codec prints
 * an IPv4-mapped address (`::ffff:a.b.c.d`), read back as that address (the words a key read
 * from the record's bytes has). Undefined when neither.
 */
function v6Words(x: string | number): Uint32Array | undefined {
  if (typeof x !== "string") return undefined;
  const w = parseIPv6Words(x);
  if (w !== undefined) return w;
  const w4 = parseIPv4Word(x);
  return w4 < 0 ? undefined : new Uint32Array([0, 0, 0xffff, w4]);
}

/** Human-readable key text for logs: `10.0.0.1:1234->10.0.0.2:5678/6`, IPv6 in brackets. */
export function formatFlowKey(k: FlowKey): string {
  const a = (ip: string, port: number): string =>
    ip.includes(":") ? `[${ip}]:${port}` : `${ip}:${port}`;
  return `${a(k.sourceAddress, k.sourcePort)}->${
    a(k.destinationAddress, k.destinationPort)
  }/${k.protocol}`;
}

/**
 * The source (or, with `destination`, the destination) address of an exported flow as canonical
 * text: the key's, or formatted from the core's words when the export loop asked for no text
 * (its sinks all read the words, see `ExportHooks.addressText`). Call it during the export.
 */
export function exportedAddress(flow: ExportedFlow, destination: boolean): string {
  const text = destination ? flow.key.destinationAddress : flow.key.sourceAddress;
  const w = flow.addressWords;
  if (text !== "" || w === undefined) return text;
  const at = (flow.addressAt ?? 0) + (destination ? 4 : 0);
  return flow.isIPv6
    ? formatIPv6Words(w[at], w[at + 1], w[at + 2], w[at + 3])
    : formatIPv4Word(w[at]);
}

// Canonicalising IPv6 text is costly; flows repeat the same addresses, so remember results.
// Bounded: cleared when full (losing only the cache, never correctness).
const V6_CACHE_MAX = 65_536;
const v6Cache = new Map<string, string>();

/**
 * Returns the canonical text of an address given as text (or, for IPv4, as its u32), or
 * undefined when it is not a valid address of the given family. `v4` selects the IE family the
 * value came from.
 */
export function canonicalAddress(text: string | number, v4: boolean): string | undefined {
  if (v4) {
    const w = ipv4Word(text);
    if (w < 0) return undefined;
    // An IPv4 IE in wire-number mode is its u32; canonical text (the usual case) is returned as
    // is: no new string per record.
    if (typeof text === "number") return ipv4Text(w);
    return hasLeadingZero(text) ? formatIPv4Word(w) : text;
  }
  if (typeof text !== "string") return undefined;
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
