/**
 * klog's command-line flags, as the upstream Deployment passes them (`--logtostderr=false
 * --log_dir=/var/log/antrea/flow-aggregator --alsologtostderr --log_file_max_size=100
 * --log_file_max_num=4`), parsed with Go's `flag` rules (a bool flag takes its value only
 * inline: `--logtostderr=false`), and the log output they select (control-plane.md §6.1):
 *
 * - `--logtostderr` (default true): stderr only; the file flags have no effect;
 * - `--logtostderr=false`: klog files in `--log_dir` (default the temp directory), plus stderr
 *   for every line with `--alsologtostderr`, else only for lines at or above
 *   `--stderrthreshold` (default ERROR);
 * - `--log_file_max_size` (MB, default 1800, 0 = unlimited; above 102400 ignored with an
 *   error, as klog; unlike klog a fraction is accepted), `--log_file_max_num` (0 = keep all),
 *   `--log-flush-frequency` (5s).
 *
 * `--log_file` writes every line to that one file instead of the per-severity files (its
 * directory instead of `--log_dir`), started again empty when it would pass
 * `--log_file_max_size`, as klog's. `--vmodule`, `--log_backtrace_at`, `--add_dir_header`,
 * `--skip_headers`, `--skip_log_headers` and `--one_output` are accepted and have no effect.
 *
 * @module
 */

import { goBool, parseWaitDuration } from "../config/duration.ts";
import { envOrUnset } from "../permission_entry.ts";
import { type LogLevel, setLogWriter, writeStderr } from "../log.ts";
import { KlogFiles } from "./klog_files.ts";
import { basename, dirname } from "node:path";

/** The klog flags that change the output. */
export interface KlogFlags {
  /** Log to stderr only (no files). */
  logtostderr: boolean;
  /** With files: every line to stderr as well. */
  alsologtostderr: boolean;
  /** Directory of the log files; "" = the temp directory. */
  logDir: string;
  /** `--log_file`: one file for every severity (see the module doc). */
  logFile: string;
  /** New file above this many MB (1 MB = 2^20 bytes; fractions allowed); 0 = unlimited. */
  logFileMaxSizeMB: number;
  /** Files kept per severity; 0 = all. */
  logFileMaxNum: number;
  /** How often buffered lines reach the files. */
  flushFrequencyMs: number;
  /** With files: lines of this klog severity (0 INFO … 3 FATAL) or higher also go to stderr. */
  stderrThreshold: number;
}

/** klog's defaults. */
export const KLOG_DEFAULTS: Readonly<KlogFlags> = {
  logtostderr: true,
  alsologtostderr: false,
  logDir: "",
  logFile: "",
  logFileMaxSizeMB: 1800,
  logFileMaxNum: 0,
  flushFrequencyMs: 5000,
  stderrThreshold: 2,
};

/** Largest `--log_file_max_size` klog accepts (MB). */
const MAX_SIZE_LIMIT_MB = 102400;

const SEVERITY_NUMBERS: Readonly<Record<string, number>> = {
  INFO: 0,
  WARNING: 1,
  ERROR: 2,
  FATAL: 3,
};
const LEVEL_SEVERITY: Readonly<Record<LogLevel, number>> = {
  debug: 0,
  info: 0,
  warn: 1,
  error: 2,
};

const IGNORED_VALUE_FLAGS = new Set(["vmodule", "log_backtrace_at"]);
const IGNORED_BOOL_FLAGS = new Set([
  "add_dir_header",
  "skip_headers",
  "skip_log_headers",
  "one_output",
]);

/** One flag occurrence on the command line. */
export interface FlagOccurrence {
  /** Name without dashes. */
  name: string;
  /** The value after `=`, if any. */
  inline?: string;
  /** Takes the next argument as the value (throws when there is none). */
  next: () => string;
}

/**
 * A boolean flag as Go's flag package reads it: set by its name alone, or `--name=false` (any
 * of `strconv.ParseBool`'s spellings); any other value is refused, naming the flag.
 */
export function boolFlag(name: string, inline: string | undefined): boolean {
  const on = goBool(inline ?? "true");
  if (on === undefined) throw new Error(`invalid boolean value "${inline}" for flag --${name}`);
  return on;
}

function natural(name: string, text: string): number {
  const n = Number(text);
  if (text.trim() === "" || !Number.isSafeInteger(n) || n < 0) {
    throw new Error(`--${name} needs a non-negative integer, got "${text}"`);
  }
  return n;
}

/**
 * Applies `flag` to `flags` if it is a klog flag and returns true; false for any other flag.
 * Throws an Error naming the flag for a bad value.
 */
export function parseKlogFlag(flags: KlogFlags, flag: FlagOccurrence): boolean {
  const { name } = flag;
  const value = (): string => flag.inline ?? flag.next();
  const bool = (): boolean => boolFlag(name, flag.inline);
  switch (name) {
    case "logtostderr":
      flags.logtostderr = bool();
      return true;
    case "alsologtostderr":
      flags.alsologtostderr = bool();
      return true;
    case "log_dir":
      flags.logDir = value();
      return true;
    case "log_file":
      flags.logFile = value();
      return true;
    case "log_file_max_size": {
      // klog takes whole MB; a fraction (`0.01`) is our extension, for small disks and tests.
      const text = value();
      const mb = Number(text);
      if (text.trim() === "" || !Number.isFinite(mb) || mb < 0) {
        throw new Error(`--${name} needs a non-negative number of MB, got "${text}"`);
      }
      flags.logFileMaxSizeMB = mb;
      return true;
    }
    case "log_file_max_num":
      flags.logFileMaxNum = natural(name, value());
      return true;
    case "log-flush-frequency": {
      const text = value();
      let ms: number;
      try {
        ms = parseWaitDuration(text);
      } catch (e) {
        throw new Error(`--${name} "${text}": ${(e as Error).message}`);
      }
      if (ms <= 0) throw new Error(`--${name} "${text}": must be positive`);
      flags.flushFrequencyMs = ms;
      return true;
    }
    case "stderrthreshold": {
      const text = value();
      const n = SEVERITY_NUMBERS[text.toUpperCase()] ?? Number(text);
      if (!Number.isInteger(n) || n < 0 || n > 3) {
        throw new Error(`--${name} "${text}": use INFO, WARNING, ERROR, FATAL or 0..3`);
      }
      flags.stderrThreshold = n;
      return true;
    }
  }
  if (IGNORED_VALUE_FLAGS.has(name)) {
    value();
    return true;
  }
  if (IGNORED_BOOL_FLAGS.has(name)) {
    bool();
    return true;
  }
  return false;
}

/** A variable, unset when empty or when this process may not read it. */
function env(name: string): string | undefined {
  return envOrUnset(name) || undefined;
}

/** The directory the files go to, or undefined when logging to stderr only. */
export function klogFileDir(flags: KlogFlags): string | undefined {
  if (flags.logtostderr) return undefined;
  // `--log_file` wins over `--log_dir`, as klog's.
  if (flags.logFile !== "") return dirname(flags.logFile);
  return flags.logDir || (env("TMPDIR")?.replace(/\/+$/, "") || "/tmp");
}

/** Environment variables read for the file names (host and user), when files are written. */
export const KLOG_FILE_ENV: readonly string[] = ["HOSTNAME", "USER", "LOGNAME"];

function hostName(): string {
  let h = env("HOSTNAME");
  if (h === undefined) {
    try {
      h = Deno.hostname();
    } catch {
      // no --allow-sys=hostname
    }
  }
  // klog uses the short host name.
  return h?.split(".")[0] || "unknownhost";
}

/** Something about the log set-up the caller should log (an ignored flag, a fallback). */
export interface LogNote {
  /** Level to log it at. */
  level: "warn" | "error";
  /** The message. */
  msg: string;
  /** Its fields. */
  fields: Record<string, unknown>;
}

/** The log output in force; {@linkcode LogOutput.close} flushes and closes the files. */
export interface LogOutput {
  /** The files, when `--logtostderr=false`. */
  readonly files?: KlogFiles;
  /** What the caller should log once logging is set up (ignored flags, fallbacks). */
  readonly notes: readonly LogNote[];
  /** Flushes and closes the files (also done when the process exits). */
  close(): void;
}

/**
 * Sets the process's log writer as `flags` select (see the module doc) and returns it. Never
 * throws: a log directory that cannot be created leaves logging on stderr, with a note.
 */
export function startLogOutput(
  flags: KlogFlags,
  options: { now?: () => Date; pid?: number } = {},
): LogOutput {
  const notes: LogNote[] = [];
  const dir = klogFileDir(flags);
  if (dir === undefined) return { notes, close: () => {} };
  let maxMB = flags.logFileMaxSizeMB;
  if (maxMB > MAX_SIZE_LIMIT_MB) {
    notes.push({
      level: "error",
      msg: `--log_file_max_size above ${MAX_SIZE_LIMIT_MB} MB is ignored`,
      fields: { log_file_max_size: maxMB, using: KLOG_DEFAULTS.logFileMaxSizeMB },
    });
    maxMB = KLOG_DEFAULTS.logFileMaxSizeMB;
  }
  let files: KlogFiles;
  try {
    files = new KlogFiles({
      dir,
      host: hostName(),
      user: env("USER") ?? env("LOGNAME") ?? "unknownuser",
      pid: options.pid ?? Deno.pid,
      maxSizeBytes: Math.floor(maxMB * 1024 * 1024),
      maxFiles: flags.logFileMaxNum,
      now: options.now,
      singleFile: flags.logFile === "" ? undefined : basename(flags.logFile),
    });
  } catch (err) {
    notes.push({
      level: "error",
      msg: "cannot create the log directory: logging to stderr only",
      fields: { log_dir: dir, err },
    });
    return { notes, close: () => {} };
  }
  const toStderr = flags.alsologtostderr ? -1 : flags.stderrThreshold;
  setLogWriter((line, level) => {
    files.write(line, level);
    // An error may come just before a crash that skips the exit flush: write it at once.
    if (level === "error") files.flush();
    if (LEVEL_SEVERITY[level] >= toStderr) writeStderr(line);
  });
  files.startFlushing(flags.flushFrequencyMs);
  const close = (): void => files.close();
  // Deno.exit() and the end of the event loop both dispatch "unload": no line is lost at exit.
  globalThis.addEventListener("unload", close);
  return { files, notes, close };
}
