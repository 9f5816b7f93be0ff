/**
 * Structured logging: one event per line, `key=value` pairs (logfmt), JSON or klog text lines
 * (as upstream writes them), with levels. Every module logs through a {@linkcode Logger} from
 * {@linkcode logger}; nothing outside `main.ts` and `scripts/` writes to the console directly.
 * Output goes to stderr so that stdout stays free for the flow log when it is configured to
 * write there; `src/log/` adds klog's log files (`--log_dir`) as another writer.
 */

import { formatKlogLine } from "./log/klog_format.ts";

/**
 * The longest text of an error a peer sent that is logged or printed (a server's error body can
 * be megabytes): see {@linkcode clipText}.
 */
export const MAX_ERROR_TEXT = 2048;

/** `text` cut to `max` characters, saying how many were left out. */
export function clipText(text: string, max: number = MAX_ERROR_TEXT): string {
  return text.length <= max
    ? text
    : `${text.slice(0, max)}… (${text.length - max} more characters)`;
}

/** Severity of a log event, most severe first. */
export type LogLevel = "error" | "warn" | "info" | "debug";

const LEVELS: Record<LogLevel, number> = { error: 0, warn: 1, info: 2, debug: 3 };

/** Key/value context attached to an event. Values are rendered with `String()` (bigint exact). */
export type LogFields = Record<string, unknown>;

/** Line formats: logfmt (default), JSON objects, or klog text lines. */
export type LogFormat = "logfmt" | "json" | "klog";

const FORMATS: readonly LogFormat[] = ["logfmt", "json", "klog"];

/** Where formatted lines go (with their level, for klog's per-severity files); replaceable. */
export type LogWriter = (line: string, level: LogLevel) => void;

interface LogState {
  level: number;
  format: LogFormat;
  writer: LogWriter;
}

const encoder = new TextEncoder();

/** Writes one line to stderr (the default writer). */
export function writeStderr(line: string): void {
  try {
    Deno.stderr.writeSync(encoder.encode(line + "\n"));
  } catch {
    // stderr closed: nothing sensible left to do with a log line.
  }
}

const state: LogState = { level: LEVELS.info, format: "logfmt", writer: writeStderr };

/**
 * Hands a formatted line to the writer (a worker thread's lines arrive this way); a writer
 * that throws must not take the caller down with it.
 */
export function writeLogLine(line: string, level: LogLevel): void {
  try {
    state.writer(line, level);
  } catch (err) {
    writeStderr(line);
    writeStderr(`log writer failed: ${err instanceof Error ? err.message : String(err)}`);
  }
}
const PID = Deno.pid;

/** Returns true if `s` is a valid level name. */
export function isLogLevel(s: string): s is LogLevel {
  return s in LEVELS;
}

/** Sets the most verbose level that is written. */
export function setLogLevel(level: LogLevel): void {
  state.level = LEVELS[level];
}

/**
 * klog verbosity from which our debug lines are written (upstream's per-minute counters and
 * Pod store events, what our debug level holds, are V(4) lines): `--v` and `/loglevel` alike.
 */
export const DEBUG_VERBOSITY = 4;

/** The klog verbosity last set (`--v`, `/loglevel`). */
let verbosity = 0;

/** Sets the klog verbosity: debug lines from {@linkcode DEBUG_VERBOSITY} on. */
export function setVerbosity(v: number): void {
  verbosity = v;
  setLogLevel(v >= DEBUG_VERBOSITY ? "debug" : "info");
}

/**
 * The klog verbosity in force: the number last set while the level agrees with it, else the
 * level's (`--log-level debug` reads as {@linkcode DEBUG_VERBOSITY}).
 */
export function logVerbosity(): number {
  const debug = state.level === LEVELS.debug;
  if (debug === verbosity >= DEBUG_VERBOSITY) return verbosity;
  return debug ? DEBUG_VERBOSITY : 0;
}

/** Returns true if `s` is a line format name. */
export function isLogFormat(s: string): s is LogFormat {
  return (FORMATS as readonly string[]).includes(s);
}

/** The level and format in force (handed to worker threads, which have their own logger). */
export function logSettings(): { level: LogLevel; format: LogFormat } {
  const level = (Object.keys(LEVELS) as LogLevel[]).find((l) => LEVELS[l] === state.level);
  return { level: level ?? "info", format: state.format };
}

/** Chooses the line format. */
export function setLogFormat(format: LogFormat): void {
  state.format = format;
}

/** Redirects log lines (tests capture them); returns the previous writer. */
export function setLogWriter(writer: LogWriter): LogWriter {
  const prev = state.writer;
  state.writer = writer;
  return prev;
}

function renderValue(v: unknown): string {
  if (v instanceof Error) return v.message;
  if (typeof v === "string") return v;
  if (typeof v === "object" && v !== null) {
    return JSON.stringify(v, (_k, x) => typeof x === "bigint" ? x.toString() : x);
  }
  return String(v);
}

/**
 * The characters no line of text this process writes carries raw, as a RegExp character-class
 * body: the C0 and C1 controls and DEL (terminal escapes, line breaks), the line and paragraph
 * separators U+2028/U+2029 (lines to JavaScript and Python readers), and the bidirectional marks
 * and overrides U+200E/U+200F, U+202A–U+202E, U+2066–U+2069 (they reorder text on a terminal).
 * Shared by the log lines (logfmt, below) and the line-based sinks (`exporters/text.ts`).
 */
export const UNSAFE_CHARS = "\\x00-\\x1f\\x7f-\\x9f\\u200e\\u200f\\u2028-\\u202e\\u2066-\\u2069";

/** `c`'s code unit as `\uHHHH`. */
export function unicodeEscape(c: string): string {
  return "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0");
}

// \s covers U+2028/U+2029 and some C0 controls; the class the rest.
const LOGFMT_PLAIN = new RegExp(`^[^\\s"=\\\\${UNSAFE_CHARS}]+$`);
// JSON.stringify writes the C0 controls as escapes already; these are the others.
const LOGFMT_UNESCAPED = new RegExp(`[${UNSAFE_CHARS}]`, "g");

/**
 * A logfmt value: as is when plain, else JSON-quoted with every control character escaped (a
 * value such as `x\x1b[2Jy` was written raw, reaching the terminal of whoever tails the log).
 */
function quoteLogfmt(s: string): string {
  if (LOGFMT_PLAIN.test(s)) return s;
  return JSON.stringify(s).replace(LOGFMT_UNESCAPED, unicodeEscape);
}

/** A named logger; `component` is written as the first field of every event. */
export class Logger {
  readonly #component: string;

  /** Creates a logger for one component (use {@linkcode logger}). */
  constructor(component: string) {
    this.#component = component;
  }

  /** Returns true if events at `level` are currently written (skip building costly fields). */
  enabled(level: LogLevel): boolean {
    return LEVELS[level] <= state.level;
  }

  /** Logs an error event. */
  error(msg: string, fields?: LogFields): void {
    this.#emit("error", msg, fields);
  }

  /** Logs a warning event. */
  warn(msg: string, fields?: LogFields): void {
    this.#emit("warn", msg, fields);
  }

  /** Logs an informational event. */
  info(msg: string, fields?: LogFields): void {
    this.#emit("info", msg, fields);
  }

  /** Logs a debug event. */
  debug(msg: string, fields?: LogFields): void {
    this.#emit("debug", msg, fields);
  }

  #emit(level: LogLevel, msg: string, fields?: LogFields): void {
    if (LEVELS[level] > state.level) return;
    const at = new Date();
    if (state.format === "klog") {
      const line = formatKlogLine({ level, component: this.#component, msg, fields }, {
        at,
        pid: PID,
      });
      writeLogLine(line, level);
      return;
    }
    const time = at.toISOString();
    if (state.format === "json") {
      const obj: Record<string, unknown> = { time, level, component: this.#component, msg };
      for (const [k, v] of Object.entries(fields ?? {})) obj[k] = renderValue(v);
      writeLogLine(JSON.stringify(obj), level);
      return;
    }
    let line = `time=${time} level=${level} component=${this.#component} msg=${quoteLogfmt(msg)}`;
    for (const [k, v] of Object.entries(fields ?? {})) {
      line += ` ${k}=${quoteLogfmt(renderValue(v))}`;
    }
    writeLogLine(line, level);
  }
}

/** Returns a logger for `component`. */
export function logger(component: string): Logger {
  return new Logger(component);
}

/** Lines a {@linkcode RateLimitedLog} writes per interval and kind over all peers, by default. */
export const RATE_LOG_LINES_PER_INTERVAL = 20;

/** Keys a {@linkcode RateLimitedLog} remembers before it starts over. */
const RATE_LOG_MAX_KEYS = 10_000;

/** Kinds a {@linkcode RateLimitedLog} remembers before it starts over (kinds come from code). */
const RATE_LOG_MAX_KINDS = 256;

/** A rate-limit key's kind: its text up to the first `|`, or all of it. */
function kindOf(key: string): string {
  const bar = key.indexOf("|");
  return bar < 0 ? key : key.slice(0, bar);
}

/** The process's monotonic time in milliseconds. */
function monotonicNow(): number {
  return performance.now();
}

/** Whether `elapsed` ms is still inside an interval of `intervalMs`; time gone back is not. */
export function inInterval(elapsed: number, intervalMs: number): boolean {
  return elapsed >= 0 && elapsed < intervalMs;
}

/** The lines of one kind of event in the current interval. */
interface KindWindow {
  start: number;
  lines: number;
  /** Events of the kind held back by its limit, not reported yet. */
  suppressed: number;
}

/**
 * Limits how often a repeated event is logged: at most one line per `intervalMs` per key, and at
 * most `linesPerInterval` lines per `intervalMs` per kind of event over all its keys (a key per
 * peer must not let thousands of peers, or spoofed UDP sources, write a line each). A key's kind
 * is its text up to the first `|` (`miss|10.0.0.1` is of kind `miss`), or all of it. Used for
 * per-packet errors. The number a written line reports is the events of its key suppressed
 * since that key's last line plus those of its kind the limit held back since the kind's last
 * line, so the numbers of a kind's lines add up to every suppressed event of that kind (a key
 * held back stays due and is written once the limit allows).
 *
 * Time is monotonic (`performance.now()` unless a clock's `nowMs` is injected): with the wall
 * clock, a backward step (NTP, a VM resumed) muted every key that had logged until wall time
 * caught up (a step of −1 h muted an IPFIX exporter's "records dropped" warnings for an hour).
 * A `now` that goes back anyway counts as the interval passed: a limiter never mutes a key or
 * a kind for longer than its interval.
 */
export class RateLimitedLog {
  readonly #intervalMs: number;
  readonly #linesPerInterval: number;
  readonly #last = new Map<string, { at: number; suppressed: number }>();
  readonly #kinds = new Map<string, KindWindow>();
  readonly #now: () => number;

  /** Creates a limiter on monotonic time `now` (milliseconds; a clock's `nowMs`, for tests). */
  constructor(
    intervalMs: number,
    now: () => number = monotonicNow,
    linesPerInterval: number = RATE_LOG_LINES_PER_INTERVAL,
  ) {
    this.#intervalMs = intervalMs;
    this.#now = now;
    this.#linesPerInterval = linesPerInterval;
  }

  /**
   * Returns the number of events suppressed (see the class) when this event should be written
   * (>= 0), or -1 when it should be suppressed.
   */
  allow(key: string): number {
    const t = this.#now();
    const e = this.#last.get(key);
    if (e !== undefined && inInterval(t - e.at, this.#intervalMs)) {
      e.suppressed++;
      return -1;
    }
    const kind = kindOf(key);
    let w = this.#kinds.get(kind);
    if (w === undefined) {
      if (this.#kinds.size >= RATE_LOG_MAX_KINDS) this.#kinds.clear();
      w = { start: t, lines: 0, suppressed: 0 };
      this.#kinds.set(kind, w);
    } else if (!inInterval(t - w.start, this.#intervalMs)) {
      w.start = t;
      w.lines = 0;
    }
    if (w.lines >= this.#linesPerInterval) {
      w.suppressed++;
      return -1;
    }
    w.lines++;
    const suppressed = (e?.suppressed ?? 0) + w.suppressed;
    w.suppressed = 0;
    if (e === undefined && this.#last.size >= RATE_LOG_MAX_KEYS) {
      // Start over; what the forgotten keys suppressed is reported by their kinds' next lines.
      for (const [k, f] of this.#last) {
        const fw = f.suppressed === 0 ? undefined : this.#kinds.get(kindOf(k));
        if (fw !== undefined) fw.suppressed += f.suppressed;
      }
      this.#last.clear();
    }
    this.#last.set(key, { at: t, suppressed: 0 });
    return suppressed;
  }
}
