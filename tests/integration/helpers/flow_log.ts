/**
 * Reads the flow log the process writes (exporters.md §5.2: 28 comma-separated fields per
 * line) into named fields, so the end-to-end tests can compare lines field by field.
 */

import { SPEC_LOG_LINE } from "../../_helpers/spec_fields.ts";
import { pollUntil } from "../../_helpers/wait.ts";

/** The 28 fields of a flow log line, in order (exporters.md §5.2). */
export const FLOW_LOG_FIELDS = SPEC_LOG_LINE;

/** Name of one flow log field. */
export type FlowLogField = typeof FLOW_LOG_FIELDS[number];

/** One parsed flow log line. */
export type FlowLogLine = Record<FlowLogField, string>;

/** Parses one line (without its newline); throws unless it has exactly 28 fields. */
export function parseFlowLogLine(line: string): FlowLogLine {
  const parts = line.split(",");
  if (parts.length !== FLOW_LOG_FIELDS.length) {
    throw new Error(`flow log line has ${parts.length} fields, want 28: ${line}`);
  }
  return Object.fromEntries(FLOW_LOG_FIELDS.map((f, i) => [f, parts[i]])) as FlowLogLine;
}

/** The 5-tuple of a line, `src:sport->dst:dport/proto`. */
export function lineKey(l: FlowLogLine): string {
  return `${l.sourceIP}:${l.sourceTransportPort}->${l.destinationIP}:${l.destinationTransportPort}/${l.protocolIdentifier}`;
}

/** Reads and parses every complete line of the flow log; a missing file reads as no lines. */
export async function readFlowLog(path: string): Promise<FlowLogLine[]> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return [];
    throw e;
  }
  const lines = text.split("\n");
  lines.pop(); // the part after the last newline is incomplete (or empty)
  return lines.map(parseFlowLogLine);
}

/** Groups lines by {@linkcode lineKey}. */
export function byKey(lines: readonly FlowLogLine[]): Map<string, FlowLogLine[]> {
  const m = new Map<string, FlowLogLine[]>();
  for (const l of lines) {
    const k = lineKey(l);
    const list = m.get(k);
    if (list) list.push(l);
    else m.set(k, [l]);
  }
  return m;
}

/** Polls the flow log until every key in `keys` has at least one line; returns all lines. */
export function waitForKeys(
  path: string,
  keys: Iterable<string>,
  timeoutMs = 10_000,
): Promise<FlowLogLine[]> {
  const want = [...keys];
  return pollUntil(async () => {
    const lines = await readFlowLog(path);
    const have = byKey(lines);
    return want.every((k) => have.has(k)) ? lines : undefined;
  }, { timeoutMs, intervalMs: 50, what: `flow log ${path} to contain ${want.length} flows` });
}
