/**
 * Text of a flow as the line-based sinks write it (the flow log, the S3 CSV objects): one
 * record a line, its fields separated by `,`, with no quoting (upstream's formats, exporters.md
 * §3, §4.2). A value from the wire (an Agent's Pod or policy names) or from the Kubernetes API
 * can hold any character; written raw, a crafted one forged records (a `\n` then a whole line)
 * or shifted columns (a `,`) in both sinks (S3 found by review, the flow log before), or sent
 * escape sequences to a terminal. {@linkcode clean} rewrites what valid Kubernetes names never
 * contain, so their bytes are unchanged.
 *
 * @module
 */

import { unicodeEscape, UNSAFE_CHARS } from "../log.ts";

// Every character clean() rewrites: the unsafe ones, the field separator, the escape character
// itself and U+FFFD. Not global (`g`) for test(): it keeps no lastIndex state.
const SPECIAL_CLASS = `[${UNSAFE_CHARS},\\\\\\ufffd]`;
const SPECIAL = new RegExp(SPECIAL_CLASS);
const SPECIAL_ALL = new RegExp(SPECIAL_CLASS, "g");

/**
 * The value `s` safe for one field of a line (the flow log's and the S3 objects'):
 * - `,` becomes a space (it is the field separator, not a control);
 * - C0 controls U+0000–U+001F (NUL, ESC, `\n`, `\r`, `\t`…), DEL U+007F and the C1 controls
 *   U+0080–U+009F are written as `\xHH` (two lowercase hex digits): `\x1b`, `\x00`, `\x0a`;
 * - the line and paragraph separators U+2028/U+2029 (lines to JavaScript and Python readers),
 *   the bidirectional marks and overrides U+200E/U+200F, U+202A–U+202E, U+2066–U+2069 (they
 *   reorder text on a terminal) and U+FFFD (what the decoder puts for invalid UTF-8 on the
 *   wire) are written as `\uHHHH`;
 * - `\` itself is written as `\\`, so the escaping reads back unambiguously.
 * The hot path is one precompiled RegExp test per field (every exported flow, ~20 string
 * fields): a field with none of these characters is returned as is, without allocating.
 * Measured over 100k lines of normal names, the test is about twice as fast as a char-code
 * loop (V8 scans a character class natively).
 */
export function clean(s: string): string {
  return SPECIAL.test(s) ? escapeAll(s) : s;
}

/** The rare path of {@linkcode clean}: rewrites every special character of `s`. */
function escapeAll(s: string): string {
  return s.replace(SPECIAL_ALL, escapeChar);
}

/** What {@linkcode clean} writes for one special character. */
function escapeChar(ch: string): string {
  const c = ch.charCodeAt(0);
  if (c === 0x2c) return " ";
  if (c === 0x5c) return "\\\\";
  if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) return "\\x" + c.toString(16).padStart(2, "0");
  return unicodeEscape(ch);
}

/**
 * Pod label JSON for a column between single quotes (the S3 objects): a `'` inside it (only in
 * a JSON string: keys and values) is written `\u0027`, the same JSON, so it cannot close the
 * quotes. `JSON.stringify` already writes control characters as escapes.
 */
export function quotedJson(json: string): string {
  return json.includes("'") ? json.replaceAll("'", "\\u0027") : json;
}
