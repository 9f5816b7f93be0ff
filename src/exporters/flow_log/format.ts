/**
 * The flow log line (exporters.md §5.2) and its filters (§5.3). A line is 28 comma-joined
 * fields of the flat record, newline-terminated, with no header and no labels; upstream
 * tooling parses it positionally, so the order and the pretty-printed names are exact. The
 * field list is the record schema's log projection (`src/record/schema.ts`). String fields
 * come from the wire, so they are escaped (see {@linkcode clean}): a comma becomes a space,
 * control characters (C0, DEL, C1) become `\xHH`, U+FFFD (invalid UTF-8) `\ufffd` and `\` is
 * doubled, so a value can neither split a line nor send escape sequences to a terminal
 * following the log with `tail -f`.
 */

import type { FlowLoggerFilter } from "./config.ts";
import type { FlatRecord } from "../flat_record.ts";
import { type FlatField, LOG_LINE_FIELDS, RECORD_SCHEMA } from "../../record/schema.ts";

const PROTOCOLS: Record<number, string> = {
  1: "ICMP",
  2: "IGMP",
  6: "TCP",
  17: "UDP",
  58: "IPv6-ICMP",
  132: "SCTP",
};

const RULE_ACTIONS = ["", "Allow", "Drop", "Reject"];
const POLICY_TYPES = ["", "K8sNetworkPolicy", "AntreaNetworkPolicy", "AntreaClusterNetworkPolicy"];

/** Number of fields in a flow log line. */
export const LOG_LINE_FIELD_COUNT: number = LOG_LINE_FIELDS.length;

/** Pretty name of an IP protocol number (`Unknown Protocol` when not one of the six). */
export function protocolName(p: number): string {
  return PROTOCOLS[p] ?? "Unknown Protocol";
}

/** Pretty name of a rule action code: 0 → "", 1..3 → Allow/Drop/Reject, else `Invalid`. */
export function ruleActionName(a: number): string {
  return RULE_ACTIONS[a] ?? "Invalid";
}

/** Pretty name of a policy type code: 0 → "", 1..3 → the type, else `Invalid`. */
export function policyTypeName(t: number): string {
  return POLICY_TYPES[t] ?? "Invalid";
}

// Must stay in sync with escapeAll. Not global (`g`): test() keeps no lastIndex state.
// deno-lint-ignore no-control-regex -- matching control characters is the point
const SPECIAL = /[\x00-\x1f,\\\x7f-\x9f\ufffd]/;

/**
 * Keeps one record on one line with 28 fields, and keeps the terminal of whoever runs
 * `tail -f` on the log out of the wire's reach. Valid Kubernetes names never contain any of
 * these characters; upstream wrote them raw (§9.1), which let a crafted value forge log lines
 * or send escape sequences (ESC[2J clears the screen) to a terminal. So, in every string field:
 * - `,` becomes a space (unchanged from before: it is the field separator, not a control);
 * - C0 controls U+0000–U+001F (NUL, ESC, `\n`, `\r`, `\t`…), DEL U+007F and the C1 controls
 *   U+0080–U+009F are written as `\xHH` (two lowercase hex digits): `\x1b`, `\x00`, `\x0a`;
 * - U+FFFD, what the decoder puts for invalid UTF-8 on the wire, is written as `\ufffd`;
 * - `\` itself is written as `\\`, so the escaping reads back unambiguously.
 * The hot path is one precompiled RegExp test per field (every exported flow, ~20 string
 * fields): a field with none of these characters is returned as is, without allocating.
 * Measured over 100k lines of normal names, the test is about twice as fast as a char-code
 * loop (V8 scans a character class natively), and faster than the old 3-character scan.
 */
export function clean(s: string): string {
  return SPECIAL.test(s) ? escapeAll(s) : s;
}

/** The rare path of {@linkcode clean}: rewrites every special character of `s`. */
function escapeAll(s: string): string {
  let out = "";
  let from = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    let rep: string;
    if (c === 0x2c) rep = " ";
    else if (c === 0x5c) rep = "\\\\";
    else if (c < 0x20 || (c >= 0x7f && c <= 0x9f)) rep = "\\x" + c.toString(16).padStart(2, "0");
    else if (c === 0xfffd) rep = "\\ufffd";
    else continue;
    out += s.slice(from, i) + rep;
    from = i + 1;
  }
  return out + s.slice(from);
}

// The codes that `prettyPrint` turns into names; every other number is written in decimal.
const PRETTY: Partial<Record<FlatField, (code: number) => string>> = {
  protocolIdentifier: protocolName,
  ingressNetworkPolicyRuleAction: ruleActionName,
  ingressNetworkPolicyType: policyTypeName,
  egressNetworkPolicyRuleAction: ruleActionName,
  egressNetworkPolicyType: policyTypeName,
};

/** The value expression of one log field over the flat record `r`. */
function fieldSource(name: FlatField, prettyPrint: boolean): string {
  const row = RECORD_SCHEMA.find((r) => r[0] === name)!;
  const v = `r[${JSON.stringify(name)}]`;
  if (row[1] === "string" || row[1] === "ipAddress") return `H.clean(${v})`;
  return prettyPrint && PRETTY[name] !== undefined ? `H.pretty[${JSON.stringify(name)}](${v})` : v;
}

// The line is generated once per prettyPrint value from the schema's log field list at module
// load (as the codec compiles its decoders): no loop over field names. An array joined once
// gives one flat string; a template literal of 56 parts built a rope of cons strings per line,
// which cost garbage here and flattening when the batch was encoded.
const [PLAIN, PRETTY_LINE] = [false, true].map((pretty) =>
  new Function(
    "H",
    `return (r) => [${
      LOG_LINE_FIELDS.map((f) => fieldSource(f, pretty)).join(", ")
    }].join(",") + "\\n";`,
  )({ clean, pretty: PRETTY }) as (r: FlatRecord) => string
);

/** Formats one flat record as a log line, including the trailing `\n`. */
export function formatLogLine(r: FlatRecord, prettyPrint: boolean): string {
  return prettyPrint ? PRETTY_LINE(r) : PLAIN(r);
}

/** Action name → code as upstream maps it; unknown names map to 255, which never matches. */
export function ruleActionCode(name: string): number {
  const i = ["None", "Allow", "Drop", "Reject"].indexOf(name);
  return i >= 0 ? i : 255;
}

/** A compiled filter list; `matches` decides whether a record is logged. */
export class LogFilter {
  readonly #filters: { ingress: Set<number> | null; egress: Set<number> | null }[];

  /** Compiles the `flowLogger.filters` list. */
  constructor(filters: readonly FlowLoggerFilter[]) {
    const set = (names: readonly string[]): Set<number> | null =>
      names.length === 0 ? null : new Set(names.map(ruleActionCode));
    this.#filters = filters.map((f) => ({
      ingress: set(f.ingressNetworkPolicyRuleActions),
      egress: set(f.egressNetworkPolicyRuleActions),
    }));
  }

  /** True when there are no filters, or any filter matches both of its directions. */
  matches(r: FlatRecord): boolean {
    if (this.#filters.length === 0) return true;
    return this.#filters.some((f) =>
      (f.ingress === null || f.ingress.has(r.ingressNetworkPolicyRuleAction)) &&
      (f.egress === null || f.egress.has(r.egressNetworkPolicyRuleAction))
    );
  }
}
