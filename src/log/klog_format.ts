/**
 * klog's text line (control-plane.md §6.4), for operators whose log pipelines and alerts parse
 * upstream's logs: `I1203 09:31:24.123456   12345 collector:0] "msg" key="value" n=3`. The
 * severity letter and time (local, as klog), the process id padded to 7 columns, then a
 * `file:line` stand-in: we have no Go source file, so it is the logger's component name and
 * line 0, which keeps the `<file>:<line>]` shape those parsers expect. The message and string
 * values are quoted as Go's `%q` does for printable text (JSON string rules); numbers, bigints
 * and booleans are bare, as klog's structured `InfoS`/`ErrorS` render them.
 *
 * @module
 */

import type { LogLevel } from "../log.ts";

/** klog's severity letter of each level (debug lines are klog `V(n)` info lines). */
export const KLOG_LETTER: Readonly<Record<LogLevel, string>> = {
  error: "E",
  warn: "W",
  info: "I",
  debug: "I",
};

function two(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

/** klog's header time: `MMDD hh:mm:ss.uuuuuu` in local time (microseconds from milliseconds). */
export function klogTime(at: Date): string {
  const ms = at.getMilliseconds();
  return `${two(at.getMonth() + 1)}${two(at.getDate())} ${two(at.getHours())}:` +
    `${two(at.getMinutes())}:${two(at.getSeconds())}.${String(ms * 1000).padStart(6, "0")}`;
}

function klogValue(v: unknown): string {
  if (typeof v === "number" || typeof v === "bigint" || typeof v === "boolean") return String(v);
  if (v instanceof Error) return JSON.stringify(v.message);
  if (typeof v === "string") return JSON.stringify(v);
  if (v === undefined || v === null) return "<nil>";
  return JSON.stringify(
    JSON.stringify(v, (_k, x) => typeof x === "bigint" ? x.toString() : x) ?? String(v),
  );
}

/** What one klog line is made of. */
export interface KlogEvent {
  /** Severity. */
  readonly level: LogLevel;
  /** The logger's component (the `file:line` stand-in). */
  readonly component: string;
  /** The message. */
  readonly msg: string;
  /** Structured key/values, in order. */
  readonly fields?: Readonly<Record<string, unknown>>;
}

/** Formats one event as a klog text line (no trailing newline). */
export function formatKlogLine(event: KlogEvent, options: { at: Date; pid: number }): string {
  let line = `${KLOG_LETTER[event.level]}${klogTime(options.at)} ${
    String(options.pid).padStart(7)
  } ${event.component}:0] ${JSON.stringify(event.msg)}`;
  for (const [k, v] of Object.entries(event.fields ?? {})) line += ` ${k}=${klogValue(v)}`;
  return line;
}
