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
 * Encodes Pod labels as Go's `json.Marshal` of a map would: compact, keys sorted, with Go's
 * HTML-safe escaping of `<`, `>`, `&`, U+2028 and U+2029. A Pod without labels gives `{}`
 * (newer Antrea; v1.13 printed `null`, L17) so that consumers always get a JSON object.
 */
export function encodePodLabels(labels: Record<string, string> | undefined | null): string {
  if (labels === undefined || labels === null) return "{}";
  const keys = Object.keys(labels).sort();
  let out = "{";
  for (let i = 0; i < keys.length; i++) {
    if (i > 0) out += ",";
    out += JSON.stringify(keys[i]) + ":" + JSON.stringify(String(labels[keys[i]]));
  }
  out += "}";
  return out.replace(
    /[<>&\u2028\u2029]/g,
    (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"),
  );
}
