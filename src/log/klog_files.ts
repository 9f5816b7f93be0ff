/**
 * klog's log files (control-plane.md §6.1, §6.4), for operators who collect them from the node
 * (`--log_dir=/var/log/antrea/flow-aggregator` in the upstream Deployment): one file per
 * severity named `<program>.<host>.<user>.log.<SEVERITY>.<yyyymmdd-hhmmss>.<pid>`, each holding
 * its severity and the higher ones (INFO has every line), a `<program>.<SEVERITY>` link to the
 * current one, a new file once the current one would exceed `--log_file_max_size`, and at most
 * `--log_file_max_num` files per severity kept in the directory (oldest removed first, by the
 * time in their names, files of earlier runs and other hosts included).
 *
 * Lines are buffered in memory and written by {@linkcode KlogFiles.flush}: on a timer (klog's
 * `--log-flush-frequency`), when 64 KiB are pending, after an error line (flags.ts) and when
 * the process exits, so logging does not wait for the disk. A failing write is counted and reported on stderr (at most once a
 * minute), never thrown: a full disk must not stop collection.
 *
 * Improvements on klog: a file name is never reused (klog truncates its previous file when two
 * rotations fall in the same second), and pruning happens at each new file instead of every
 * 10 minutes. Where the process may not create symlinks (Deno allows them only with unscoped
 * `--allow-read` and `--allow-write`), the `<program>.<SEVERITY>` link is a hard link, which
 * `tail -F` follows just as well.
 *
 * Permissions: `--allow-read` and `--allow-write` on the log directory.
 *
 * @module
 */

import type { LogLevel } from "../log.ts";

/** klog's file severities. */
export type KlogSeverity = "INFO" | "WARNING" | "ERROR";

/** The files a line of each level goes to: a severity's file also holds the higher ones. */
const FILES_OF: Readonly<Record<LogLevel, readonly KlogSeverity[]>> = {
  debug: ["INFO"],
  info: ["INFO"],
  warn: ["INFO", "WARNING"],
  error: ["INFO", "WARNING", "ERROR"],
};

const FLUSH_AT_BYTES = 64 * 1024;
const ERROR_REPORT_MS = 60_000;
const encoder = new TextEncoder();

/** Options of {@linkcode KlogFiles}. */
export interface KlogFilesOptions {
  /** The log directory (created if missing). */
  dir: string;
  /** Program name in the file names. Default `flow-aggregator`. */
  program?: string;
  /** Host name in the file names. */
  host: string;
  /** User name in the file names. */
  user: string;
  /** Process id in the file names and headers. */
  pid: number;
  /** Start a new file when the current one would exceed this many bytes; 0: never. */
  maxSizeBytes: number;
  /** Files kept per severity, the current one included; 0: all. */
  maxFiles: number;
  /** Clock for file names and headers; default the system clock. */
  now?: () => Date;
  /** Where write failures are reported; default stderr. */
  report?: (line: string) => void;
}

/** Counters of the log files. */
export interface KlogFilesStats {
  /** Files created. */
  filesCreated: number;
  /** Old files removed by `--log_file_max_num`. */
  filesRemoved: number;
  /** Failed creations, writes or removals (each reported on stderr, rate-limited). */
  errors: number;
}

interface SeverityFile {
  file: Deno.FsFile | undefined;
  name: string;
  /** Bytes in the current file, pending ones included. */
  size: number;
  /** Size of the header alone (a file holding only it is never rotated). */
  headerSize: number;
  pending: Uint8Array[];
}

function two(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

/** klog's file name time stamp: `yyyymmdd-hhmmss`, local time. */
export function klogFileStamp(at: Date): string {
  return `${at.getFullYear()}${two(at.getMonth() + 1)}${two(at.getDate())}-` +
    `${two(at.getHours())}${two(at.getMinutes())}${two(at.getSeconds())}`;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** klog's per-severity log files in one directory. */
export class KlogFiles {
  readonly #opts: Required<KlogFilesOptions>;
  readonly #files = new Map<KlogSeverity, SeverityFile>();
  readonly #usedNames = new Set<string>();
  #pendingBytes = 0;
  #lastReport = -Infinity;
  #timer: ReturnType<typeof setInterval> | undefined;
  readonly #stats: KlogFilesStats = { filesCreated: 0, filesRemoved: 0, errors: 0 };

  /** Prepares the files of `options.dir`; nothing is created before the first line. */
  constructor(options: KlogFilesOptions) {
    this.#opts = {
      ...options,
      program: options.program ?? "flow-aggregator",
      now: options.now ?? (() => new Date()),
      report: options.report ?? ((line) => {
        try {
          Deno.stderr.writeSync(encoder.encode(line + "\n"));
        } catch {
          // stderr closed too: the error count is all that is left.
        }
      }),
    };
    Deno.mkdirSync(this.#opts.dir, { recursive: true });
  }

  /** Counters so far. */
  stats(): KlogFilesStats {
    return { ...this.#stats };
  }

  /** The current file name of `severity` ("" before its first line). */
  currentName(severity: KlogSeverity): string {
    return this.#files.get(severity)?.name ?? "";
  }

  /** Queues one formatted line (no newline) for the files of its level. */
  write(line: string, level: LogLevel): void {
    const bytes = encoder.encode(line + "\n");
    for (const severity of FILES_OF[level]) this.#append(severity, bytes);
    if (this.#pendingBytes >= FLUSH_AT_BYTES) this.flush();
  }

  /** Writes every pending line now (synchronously: also safe in an unload handler). */
  flush(): void {
    for (const f of this.#files.values()) this.#flushFile(f);
  }

  /** Flushes every `intervalMs` until {@linkcode close} (the timer does not keep the process up). */
  startFlushing(intervalMs: number): void {
    if (this.#timer !== undefined) return;
    const timer = setInterval(() => this.flush(), intervalMs);
    Deno.unrefTimer(timer);
    this.#timer = timer;
  }

  /** Flushes and closes every file. */
  close(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.flush();
    for (const f of this.#files.values()) {
      try {
        f.file?.close();
      } catch {
        // already closed
      }
      f.file = undefined;
    }
  }

  #append(severity: KlogSeverity, bytes: Uint8Array): void {
    let f = this.#files.get(severity);
    const max = this.#opts.maxSizeBytes;
    if (
      f === undefined || f.file === undefined ||
      (max > 0 && f.size + bytes.length > max && f.size > f.headerSize)
    ) {
      if (f !== undefined) this.#flushFile(f);
      f = this.#open(severity, f);
      if (f.file === undefined) return; // reported; the line is lost for this severity only
    }
    f.pending.push(bytes);
    f.size += bytes.length;
    this.#pendingBytes += bytes.length;
  }

  #flushFile(f: SeverityFile): void {
    if (f.pending.length === 0) return;
    const chunks = f.pending;
    f.pending = [];
    let total = 0;
    for (const c of chunks) total += c.length;
    this.#pendingBytes -= total;
    const buf = new Uint8Array(total);
    let at = 0;
    for (const c of chunks) {
      buf.set(c, at);
      at += c.length;
    }
    try {
      let off = 0;
      while (off < buf.length) off += f.file!.writeSync(buf.subarray(off));
    } catch (err) {
      this.#error(`cannot write log file ${f.name}`, err);
    }
  }

  #open(severity: KlogSeverity, prev: SeverityFile | undefined): SeverityFile {
    try {
      prev?.file?.close();
    } catch {
      // already closed
    }
    const { dir, program, host, user, pid } = this.#opts;
    const now = this.#opts.now();
    let file: Deno.FsFile | undefined;
    let name = "";
    // A name is never reused: two files in the same second get the next second's stamp.
    for (let bump = 0; file === undefined && bump < 1000; bump++) {
      const at = new Date(now.getTime() + bump * 1000);
      name = `${program}.${host}.${user}.log.${severity}.${klogFileStamp(at)}.${pid}`;
      if (this.#usedNames.has(name)) continue;
      try {
        file = Deno.openSync(`${dir}/${name}`, { createNew: true, write: true });
      } catch (err) {
        if (err instanceof Deno.errors.AlreadyExists) continue;
        this.#error(`cannot create log file ${dir}/${name}`, err);
        break;
      }
    }
    const f: SeverityFile = prev ??
      { file: undefined, name: "", size: 0, headerSize: 0, pending: [] };
    this.#files.set(severity, f);
    f.file = file;
    f.name = name;
    f.size = 0;
    f.headerSize = 0;
    if (file === undefined) return f;
    this.#usedNames.add(name);
    this.#stats.filesCreated++;
    const header = encoder.encode(
      `Log file created at: ${now.getFullYear()}/${two(now.getMonth() + 1)}/${two(now.getDate())} ${
        two(now.getHours())
      }:${two(now.getMinutes())}:${two(now.getSeconds())}\n` +
        `Running on machine: ${host}\n` +
        `Binary: ${program} on Deno ${Deno.version.deno} for ${Deno.build.os}/${Deno.build.arch}\n` +
        "Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg\n",
    );
    f.pending.push(header);
    f.size = f.headerSize = header.length;
    this.#pendingBytes += header.length;
    this.#link(severity, name);
    this.#prune(severity, name);
    return f;
  }

  /** Points `<program>.<SEVERITY>` at `name`: a symlink as klog, else a hard link. */
  #link(severity: KlogSeverity, name: string): void {
    const link = `${this.#opts.dir}/${this.#opts.program}.${severity}`;
    try {
      Deno.removeSync(link);
    } catch {
      // absent
    }
    try {
      Deno.symlinkSync(name, link);
    } catch {
      try {
        Deno.linkSync(`${this.#opts.dir}/${name}`, link);
      } catch (err) {
        this.#error(`cannot link ${link} to ${name}`, err);
      }
    }
  }

  /** Keeps at most `maxFiles` files of `severity`, the newest by the time in their names. */
  #prune(severity: KlogSeverity, current: string): void {
    const max = this.#opts.maxFiles;
    if (max <= 0) return;
    const re = new RegExp(
      `^${escapeRegExp(this.#opts.program)}\\..*\\.log\\.${severity}\\.(\\d{8}-\\d{6})\\.\\d+$`,
    );
    const found: { name: string; stamp: string }[] = [];
    try {
      for (const e of Deno.readDirSync(this.#opts.dir)) {
        const m = e.isFile ? re.exec(e.name) : null;
        if (m && e.name !== current) found.push({ name: e.name, stamp: m[1] });
      }
    } catch (err) {
      this.#error(`cannot list log directory ${this.#opts.dir}`, err);
      return;
    }
    found.sort((a, b) => a.stamp.localeCompare(b.stamp) || a.name.localeCompare(b.name));
    for (const old of found.slice(0, Math.max(0, found.length - (max - 1)))) {
      try {
        Deno.removeSync(`${this.#opts.dir}/${old.name}`);
        this.#stats.filesRemoved++;
      } catch (err) {
        this.#error(`cannot remove old log file ${old.name}`, err);
      }
    }
  }

  #error(what: string, err: unknown): void {
    this.#stats.errors++;
    const t = Date.now();
    if (t - this.#lastReport < ERROR_REPORT_MS) return;
    this.#lastReport = t;
    this.#opts.report(
      `log files: ${what}: ${err instanceof Error ? err.message : String(err)} ` +
        `(errors so far: ${this.#stats.errors})`,
    );
  }
}
