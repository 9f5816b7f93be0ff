/**
 * Correlation predicates (spec aggregation.md §1.2-1.4) and the Pod-label encoding of §6.6.
 * Kept apart from the core so that the rules can be read and tested alone.
 */

import type { FlowInput } from "./record.ts";

/** flowType values (Antrea IE 137). */
export const FlowType = {
  Unknown: 0,
  IntraNode: 1,
  InterNode: 2,
  ToExternal: 3,
  FromExternal: 4,
} as const;

/** Network policy rule actions (Antrea IEs 139/140). */
export const RuleAction = { NoAction: 0, Allow: 1, Drop: 2, Reject: 3 } as const;

/**
 * True iff the record is one half of an InterNode flow whose other half is expected (§1.3):
 * flowType 2, egress action not Drop/Reject, ingress action not Reject. Ingress Drop still
 * requires correlation because both Nodes report it. `flowType` is passed separately because
 * a missing IE is treated as 0 by the caller.
 */
export function correlationRequired(r: FlowInput, flowType: number): boolean {
  if (flowType !== FlowType.InterNode) return false;
  const eg = r.egressNetworkPolicyRuleAction;
  if (eg === RuleAction.Drop || eg === RuleAction.Reject) return false;
  return r.ingressNetworkPolicyRuleAction !== RuleAction.Reject;
}

/** True when only the source Pod name is set: the record came from the source Node (§1.4). */
export function isFromSource(
  sourcePodName: string | undefined,
  destPodName: string | undefined,
): boolean {
  return onlyFirstSet(sourcePodName, destPodName);
}

function onlyFirstSet(first: string | undefined, second: string | undefined): boolean {
  return first !== undefined && first !== "" && (second === undefined || second === "");
}

/** True when only the destination Pod name is set: the record came from the destination Node. */
export function isFromDestination(
  sourcePodName: string | undefined,
  destPodName: string | undefined,
): boolean {
  return onlyFirstSet(destPodName, sourcePodName);
}

/**
 * Encodes Pod labels as Go's `json.Marshal` of a map does (the Go 1.21 Antrea v1.13 was built
 * with), byte for byte: compact, keys sorted by their UTF-8 bytes, `<`, `>`, `&`, U+2028 and
 * U+2029 escaped as `\u003c`…, control characters other than `\n`, `\r`, `\t` as `\u00XX`
 * (`\b` and `\f` too), an unpaired surrogate as U+FFFD. A Pod without labels gives `{}` (newer
 * Antrea; v1.13 printed `null`, L17) so that consumers always get a JSON object.
 */
export function encodePodLabels(labels: Record<string, string> | undefined | null): string {
  if (labels === undefined || labels === null) return "{}";
  const keys = Object.keys(labels).sort(byUtf8);
  let out = "{";
  for (let i = 0; i < keys.length; i++) {
    if (i > 0) out += ",";
    out += goJsonString(keys[i]) + ":" + goJsonString(String(labels[keys[i]]));
  }
  return out + "}";
}

// An escape sequence of JSON.stringify's output is matched whole, so `\\b` (an escaped
// backslash, then b) is never taken for `\b`.
const GO_ESCAPES = /\\(.)|[<>&\u2028\u2029]/g;

// What Kubernetes allows in label keys and values: nothing to escape.
const PLAIN = /^[A-Za-z0-9._/-]*$/;

function goJsonString(s: string): string {
  if (PLAIN.test(s)) return `"${s}"`;
  return JSON.stringify(s.toWellFormed()).replace(GO_ESCAPES, (m, esc: string | undefined) => {
    if (esc === undefined) return "\\u" + m.charCodeAt(0).toString(16).padStart(4, "0");
    if (esc === "b") return "\\u0008";
    if (esc === "f") return "\\u000c";
    return m;
  });
}

/** UTF-8 byte order (code point order), which differs from UTF-16 order past U+D7FF. */
function byUtf8(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return codePointRank(x) - codePointRank(y);
  }
  return a.length - b.length;
}

// Surrogates (U+D800–DFFF, i.e. code points past U+FFFF) rank above U+E000–FFFF.
function codePointRank(unit: number): number {
  return unit >= 0xe000 ? unit - 0x800 : unit >= 0xd800 ? unit + 0x2000 : unit;
}
