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
import { type FlatRecord, labels } from "../flat_record.ts";
import { clean } from "../text.ts";
import {
  type BatchField,
  batchField,
  batchNumber,
  batchRowBase,
  type FlowBatch,
} from "../batch.ts";
import { formatIPv4Bytes, formatIPv6 } from "../../ipfix/ip.ts";
import {
  type FlatField,
  ieName,
  LOG_LINE_FIELDS,
  RECORD_SCHEMA,
  type SchemaRow,
} from "../../record/schema.ts";

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

/** Compiles a function of `params` returning the `sources` joined by commas, plus `\n`. */
function compileLine<F>(params: string, sources: readonly string[], helpers: object): F {
  // An array joined once gives one flat string; a template literal of 56 parts built a rope of
  // cons strings per line, which cost garbage here and flattening when the batch was encoded.
  return new Function(
    "H",
    `return (${params}) => [${sources.join(", ")}].join(",") + "\\n";`,
  )(helpers) as F;
}

/**
 * The line of a flat record with `fields` (the log line's by default), generated once from the
 * schema (as the codec compiles its decoders): straight-line code, no loop over field names.
 * Other field lists are for tests.
 */
export function flatLineFormat(
  prettyPrint: boolean,
  fields: readonly FlatField[] = LOG_LINE_FIELDS,
): (r: FlatRecord) => string {
  return compileLine(
    "r",
    fields.map((f) => fieldSource(f, prettyPrint)),
    { clean, pretty: PRETTY },
  );
}

const [PLAIN, PRETTY_LINE] = [false, true].map((pretty) => flatLineFormat(pretty));

/** Formats one flat record as a log line, including the trailing `\n`. */
export function formatLogLine(r: FlatRecord, prettyPrint: boolean): string {
  return prettyPrint ? PRETTY_LINE(r) : PLAIN(r);
}

// ---- Lines read straight from a batch row ------------------------------------------------------
//
// In its worker the flow log gets flows as binary batches (../batch.ts). Decoding each row into a
// record object and then a flat record only to join 28 of its fields cost about a microsecond per
// flow, on a core the sender shares. So the line is also generated from the same log field list
// as code reading the row in place: numbers from the DataView, addresses formatted from their
// bytes, strings from the batch's table, each distinct string escaped once per batch. Absent
// fields print as the flat record's zero values, so the line is byte for byte the one
// formatLogLine gives for the same flow.

/** Row layout of a field the log line reads; batches carry every exported IE. */
function layoutOf(ie: string, field: string): BatchField {
  const f = batchField(ie);
  if (f === undefined) {
    throw new Error(`flow log: field ${field} (${ie}) is not carried by batches`);
  }
  return f;
}

function present(f: BatchField): string {
  return `(b[base + ${f.presentByte}] & ${f.presentMask}) !== 0`;
}

function address(f: BatchField): string {
  if (f.kind === "ipv4") return `H.v4(b, base + ${f.offset})`;
  if (f.kind === "ipv6") return `H.v6(b, base + ${f.offset})`;
  throw new Error(`flow log: an address field stored as ${f.kind}`);
}

/** The value expression of one log field over the row at `base` (`s`: strings, `cs`: clean). */
function rowFieldSource(row: SchemaRow, prettyPrint: boolean): string {
  const name = row[0] as FlatField;
  if (row[1] === "ipAddress") {
    // As the flat record: the IPv4 IE if present, else the IPv6 one, else "". Formatted
    // addresses are canonical and contain nothing clean() would change.
    const v4 = layoutOf(ieName(row, false), name);
    const v6 = layoutOf(ieName(row, true), name);
    return `(${present(v4)} ? ${address(v4)} : ${present(v6)} ? ${address(v6)} : "")`;
  }
  const f = layoutOf(name, name);
  const at = `base + ${f.offset}`;
  switch (f.kind) {
    case "string":
      return row[2] === "label"
        ? `(${present(f)} ? H.clean(H.labels(s[v.getUint32(${at}, true)])) : "")`
        : `(${present(f)} ? cs[v.getUint32(${at}, true)] : "")`;
    case "bigint":
      return `(${present(f)} ? v.getBigUint64(${at}, true) : 0n)`;
    case "number": {
      const value = `(${present(f)} ? v.getFloat64(${at}, true) : 0)`;
      return prettyPrint && PRETTY[name] !== undefined
        ? `H.pretty[${JSON.stringify(name)}](${value})`
        : value;
    }
    default:
      return `H.clean(${present(f)} ? ${address(f)} : "")`;
  }
}

/** The line of the row at `base` (`s`: the batch's strings, `cs`: the same escaped). */
type RowLine = (
  v: DataView,
  b: Uint8Array,
  base: number,
  s: readonly (string | undefined)[],
  cs: readonly string[],
) => string;

function rowLineFormat(prettyPrint: boolean, fields: readonly FlatField[]): RowLine {
  return compileLine(
    "v, b, base, s, cs",
    fields.map((f) => rowFieldSource(RECORD_SCHEMA.find((r) => r[0] === f)!, prettyPrint)),
    { clean, labels, pretty: PRETTY, v4: formatIPv4Bytes, v6: formatIPv6 },
  );
}

const [ROW_PLAIN, ROW_PRETTY] = [false, true].map((pretty) =>
  rowLineFormat(pretty, LOG_LINE_FIELDS)
);

const INGRESS_ACTION = layoutOf("ingressNetworkPolicyRuleAction", "ingressNetworkPolicyRuleAction");
const EGRESS_ACTION = layoutOf("egressNetworkPolicyRuleAction", "egressNetworkPolicyRuleAction");

/** Options of {@linkcode BatchLines}. */
export interface BatchLinesOptions {
  /** Protocol, rule action and policy type codes as names (`flowLogger.prettyPrint`). */
  prettyPrint: boolean;
  /**
   * Fields of the line; default the log line's. Other lists (compiled on each use, as with
   * {@linkcode flatLineFormat}) are for tests.
   */
  fields?: readonly FlatField[];
}

/**
 * The log lines of one received batch, read from its rows in place: the same text
 * {@linkcode formatLogLine} gives for the flat record of the same flow.
 */
export class BatchLines {
  readonly #batch: FlowBatch;
  readonly #line: RowLine;
  /** The batch's string table, each entry escaped once ({@linkcode clean}). */
  readonly #clean: string[];

  /** Prepares the lines of `batch`. */
  constructor(batch: FlowBatch, options: BatchLinesOptions) {
    const { prettyPrint, fields } = options;
    this.#batch = batch;
    this.#line = fields !== undefined
      ? rowLineFormat(prettyPrint, fields)
      : prettyPrint
      ? ROW_PRETTY
      : ROW_PLAIN;
    this.#clean = batch.strings.map((x) => x === undefined ? "" : clean(x));
  }

  /** Rows in the batch. */
  get count(): number {
    return this.#batch.count;
  }

  /** The line of row `r`, including the trailing `\n`. */
  line(r: number): string {
    const b = this.#batch;
    return this.#line(b.view, b.bytes, batchRowBase(r), b.strings, this.#clean);
  }

  /** True when `filter` logs row `r` (see {@linkcode LogFilter.matches}). */
  matches(filter: LogFilter, r: number): boolean {
    if (filter.empty) return true;
    const base = batchRowBase(r);
    return filter.matchesActions(
      batchNumber(this.#batch, base, INGRESS_ACTION),
      batchNumber(this.#batch, base, EGRESS_ACTION),
    );
  }
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

  /** True when there are no filters: every record is logged. */
  get empty(): boolean {
    return this.#filters.length === 0;
  }

  /** True when there are no filters, or any filter matches both of its directions. */
  matches(r: FlatRecord): boolean {
    return this.matchesActions(r.ingressNetworkPolicyRuleAction, r.egressNetworkPolicyRuleAction);
  }

  /** {@linkcode matches} for a record with these ingress and egress rule action codes. */
  matchesActions(ingress: number, egress: number): boolean {
    if (this.#filters.length === 0) return true;
    return this.#filters.some((f) =>
      (f.ingress === null || f.ingress.has(ingress)) && (f.egress === null || f.egress.has(egress))
    );
  }
}
