/**
 * Go `time.ParseDuration` semantics (control-plane.md §1.3), because the configuration file is
 * shared with upstream Antrea and its users write Go durations (`1h30m`, `3.5s`, `500ms`). The
 * parser works in exact bigint nanoseconds so that overflow is detected like Go does, and
 * converts to milliseconds only at the end. Also Go's `strconv.ParseBool` ({@linkcode goBool}),
 * which upstream's flags and `antctl set` read booleans with.
 */

import { MAX_TIMER_DELAY_MS } from "../clock.ts";

/** Go's `strconv.ParseBool`: its six spellings of each value; undefined for anything else. */
export function goBool(text: string): boolean | undefined {
  if (["1", "t", "T", "TRUE", "true", "True"].includes(text)) return true;
  if (["0", "f", "F", "FALSE", "false", "False"].includes(text)) return false;
  return undefined;
}

const UNIT_NS: Record<string, bigint> = {
  ns: 1n,
  us: 1_000n,
  "\u00b5s": 1_000n,
  "\u03bcs": 1_000n,
  ms: 1_000_000n,
  s: 1_000_000_000n,
  m: 60_000_000_000n,
  h: 3_600_000_000_000n,
};

const MAX_NS = (1n << 63n) - 1n;

function quote(s: string): string {
  return JSON.stringify(s);
}

function isDigit(c: string | undefined): boolean {
  return c !== undefined && c >= "0" && c <= "9";
}

/**
 * Parses a Go duration string into exact nanoseconds. Throws an `Error` whose message is the
 * text Go produces (`time: missing unit in duration "60"`, `time: unknown unit "d" in duration
 * "5d"`, `time: invalid duration "abc"`).
 */
export function parseDurationNs(s: string): bigint {
  const orig = s;
  let neg = false;
  let i = 0;
  if (s[0] === "-" || s[0] === "+") {
    neg = s[0] === "-";
    i = 1;
  }
  if (s.slice(i) === "0") return 0n;
  if (i === s.length) throw new Error(`time: invalid duration ${quote(orig)}`);
  let total = 0n;
  while (i < s.length) {
    const c = s[i];
    if (!(c === "." || isDigit(c))) throw new Error(`time: invalid duration ${quote(orig)}`);
    const intStart = i;
    while (isDigit(s[i])) i++;
    const intDigits = s.slice(intStart, i);
    let fracDigits = "";
    if (s[i] === ".") {
      i++;
      const fracStart = i;
      while (isDigit(s[i])) i++;
      fracDigits = s.slice(fracStart, i);
    }
    if (intDigits === "" && fracDigits === "") {
      throw new Error(`time: invalid duration ${quote(orig)}`);
    }
    const unitStart = i;
    while (i < s.length && s[i] !== "." && !isDigit(s[i])) i++;
    const unit = s.slice(unitStart, i);
    if (unit === "") throw new Error(`time: missing unit in duration ${quote(orig)}`);
    const unitNs = UNIT_NS[unit];
    if (unitNs === undefined) {
      throw new Error(`time: unknown unit ${quote(unit)} in duration ${quote(orig)}`);
    }
    const whole = intDigits === "" ? 0n : BigInt(intDigits);
    let v = whole * unitNs;
    if (fracDigits !== "") {
      // Go truncates the fractional part toward zero at nanosecond precision.
      v += (BigInt(fracDigits) * unitNs) / 10n ** BigInt(fracDigits.length);
    }
    total += v;
    if (total > MAX_NS + (neg ? 1n : 0n)) throw new Error(`time: invalid duration ${quote(orig)}`);
  }
  return neg ? -total : total;
}

/**
 * {@linkcode parseDuration} for a value the process waits on (an interval, a timeout): at most
 * {@linkcode MAX_TIMER_DELAY_MS}, which is as good as "never" for all of them (a Go ticker of
 * `1000000h` never fires; here it fired every few ms: an S3 object, an IPFIX connection or a
 * ClickHouse commit each time).
 */
export function parseWaitDuration(s: string): number {
  return Math.min(parseDuration(s), MAX_TIMER_DELAY_MS);
}

/**
 * Parses a Go duration string into milliseconds (fractional below 1 ms, e.g. `500us` → 0.5).
 * Throws with Go's error text; see {@linkcode parseDurationNs}.
 */
export function parseDuration(s: string): number {
  const ns = parseDurationNs(s);
  const ms = ns / 1_000_000n;
  const rest = ns % 1_000_000n;
  return Number(ms) + Number(rest) / 1e6;
}
