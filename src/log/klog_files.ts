/**
 * klog's log files (control-plane.md §6.1, §6.4), for operators who collect them from the node
 * (`--log_dir=/var/log/antrea/flow-aggregator` in the upstream Deployment): one file per
 * severity named `<program>.<host>.<user>.log.<SEVERITY>.<yyyymmdd-hhmmss>.<pid>`, each holding
 * its severity and the higher ones (INFO has every line), a `<program>.<SEVERITY>` link to the
 * current one, a new file once the current one would exceed `--log_file_max_size`, and at most
 * `--log_file_max_num` files per severity kept in the directory (oldest removed first, files of
 * earlier runs and other hosts included; see "Which files are the oldest" below).
 *
 * Lines are buffered in memory and written by {@linkcode KlogFiles.flush}: on a timer (klog's
 * `--log-flush-frequency`), when 64 KiB are pending, after an error line (flags.ts) and when
 * the process exits, so logging does not wait for the disk. A failing write is counted and
 * reported on stderr (at most once a minute), never thrown: a full disk must not stop
 * collection. The lines it could not write are dropped and counted (`linesDropped`), and a line
 * it wrote only in part is cut off the file, so the next line starts on a line of its own. A
 * file that cannot be created drops its lines (counted) and is tried again a second later. The
 * minute and the second are monotonic time: on the wall clock (Date.now), a step back of an
 * hour muted the reports of failing writes for the hour.
 *
 * At most once a second a flush checks that each file is still at its path (device and inode):
 * when the directory was removed or the file deleted or replaced, the file is closed (its disk
 * space freed) and a new one created, the directory first (`mkdir -p`). Lines written in the
 * second before the check went with the removed file.
 *
 * Improvements on klog: a file name is never reused (klog truncates its previous file when two
 * rotations fall in the same second): a second file within the same second gets a `.N` suffix,
 * N counting up for the whole run. Pruning happens at each new file instead of every 10
 * minutes. Where the process may not create symlinks (Deno allows them only with unscoped
 * `--allow-read` and `--allow-write`), the `<program>.<SEVERITY>` link is a hard link, which
 * `tail -F` follows just as well.
 *
 * Which files are the oldest: the names keep klog's format (ops tooling parses it), but their
 * time is the local wall clock, which goes back at a DST fall-back or a clock step. Ordered by
 * name, pruning then deleted the newest files and kept stale ones (measured: with
 * `--log_file_max_num=3` and a 1 h step back, the five files written after the step went and
 * two from before it stayed; with TZ=America/New_York across the 2024-11-03 fall-back, the two
 * newest rotated files went). So the files this process created are ordered by when it created
 * them (a sequence kept in memory), and all are newer than any other file of the directory
 * (earlier runs, other hosts); those others are ordered among themselves by the time in their
 * names, then by name, then by their `.N` suffix (numerically: `.10` is newer than `.9`).
 * klog orders by modification time, which a step moves the same way.
 *
 * Permissions: `--allow-read` and `--allow-write` on the log directory.
 *
 * @module
 */

import { inInterval, type LogFormat, type LogLevel, logSettings } from "../log.ts";
import { type Clock, systemClock } from "../clock.ts";
import { concatBytes, wholePieces } from "../bytes.ts";
import { PLATFORM } from "../platform.ts";
import { formatKlogLine } from "./klog_format.ts";

/**
 * The header's "Log line format" for each line format: klog's own for `--log-format klog`; the
 * others say what the lines are, as log shippers read the header (it claimed klog's for all).
 */
const LINE_FORMATS: Record<LogFormat, string> = {
  klog: "[IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg",
  logfmt:
    "logfmt: time=<RFC 3339> level=<level> component=<name> msg=<text> key=value ... (quoted when needed)",
  json: "JSON, one object a line: time, level, component, msg, then the fields",
};

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
/**
 * How often (monotonic time) a flush checks that the open file is still at its path, and how
 * long a severity whose file could not be created drops its lines before trying again.
 */
const CHECK_MS = 1000;
/** Names tried per new file: only files of another process with our pid can take them. */
const NAME_ATTEMPTS = 16;
const encoder = new TextEncoder();

/** The part of `Deno.FsFile` the log files use (tests wrap it to inject write faults). */
export interface KlogFileHandle {
  /** Writes some of `p`, returning how many bytes (as `Deno.FsFile.writeSync`). */
  writeSync(p: Uint8Array): number;
  /** Cuts the file to `len` bytes (ftruncate). */
  truncateSync(len?: number): void;
  /** File metadata (device and inode). */
  statSync(): Deno.FileInfo;
  /** Releases the handle. */
  close(): void;
}

/** Options of {@linkcode KlogFiles}. */
export interface KlogFilesOptions {
  /** The log directory (created if missing, and again if removed while running). */
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
  /**
   * Time: its monotonic `nowMs` paces the once-a-second checks and the once-a-minute error
   * reports, its `wallMs` names the files and dates their headers (unless `now` is given).
   * Default the system clock.
   */
  clock?: Clock;
  /** Wall time for file names and headers; default `clock`'s `wallMs`. */
  now?: () => Date;
  /** Where write failures are reported; default stderr. */
  report?: (line: string) => void;
  /** Wraps each opened file (tests inject write faults); default the file itself. */
  wrapFile?: (file: Deno.FsFile) => KlogFileHandle;
  /**
   * klog's `--log_file`: every line, whatever its severity, goes to this one file of `dir`
   * (appended to at start; when it would exceed `maxSizeBytes` it is started again empty, as
   * klog truncates it), with no per-severity files, links or pruning. Default: none.
   */
  singleFile?: string;
}

/** Counters of the log files. */
export interface KlogFilesStats {
  /** Files created. */
  filesCreated: number;
  /** Old files removed by `--log_file_max_num`. */
  filesRemoved: number;
  /**
   * Files found gone from their path (directory or file removed or replaced under the process):
   * each was closed and a new one created, the directory first when missing.
   */
  filesReopened: number;
  /**
   * Lines that reached no file: a failed write (disk full), a file that could not be created.
   * Counted per file: a warning lost from both the INFO and the WARNING file counts 2.
   */
  linesDropped: number;
  /** Failed creations, writes or removals (each reported on stderr, rate-limited). */
  errors: number;
}

interface SeverityFile {
  readonly severity: KlogSeverity;
  file: KlogFileHandle | undefined;
  name: string;
  /** Device and inode of the open file, to see it gone from its path. */
  dev: number;
  ino: number | null;
  /** Bytes in the current file, pending ones included. */
  size: number;
  /** Bytes of the current file on disk: whole lines only (a torn one is cut off). */
  written: number;
  /** Size of the header alone (a file holding only it is never rotated). */
  headerSize: number;
  /** The header while it is pending (it is no line of the dropped count). */
  header: Uint8Array | undefined;
  pending: Uint8Array[];
  /** Time stamp of the current name, and the last `.N` suffix used (never reused). */
  stamp: string;
  seq: number;
  /** Monotonic time of the last path check or creation attempt. */
  checkedAt: number;
  /**
   * Lines of this severity that reached no file since its last good write: the first write that
   * succeeds after them says so in the file (a warning line) and on stderr.
   */
  gap: { lines: number; sinceMs: number; why: string } | undefined;
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
  #pendingBytes = 0;
  /** Monotonic time of the last error report on stderr. */
  #lastReport = -Infinity;
  /** Monotonic time of the last "written again" report on stderr. */
  #lastRecoveryReport = -Infinity;
  /**
   * The files this process created that may still be in the directory, by name: their order of
   * creation (see the module doc: pruning's order) and severity. A name leaves when pruning
   * removes it or finds it gone.
   */
  readonly #created = new Map<string, { order: number; severity: KlogSeverity }>();
  #createdCount = 0;
  #timer: ReturnType<typeof setInterval> | undefined;
  readonly #stats: KlogFilesStats = {
    filesCreated: 0,
    filesRemoved: 0,
    filesReopened: 0,
    linesDropped: 0,
    errors: 0,
  };

  /** Prepares the files of `options.dir`; nothing is created before the first line. */
  constructor(options: KlogFilesOptions) {
    const clock = options.clock ?? systemClock;
    this.#opts = {
      ...options,
      program: options.program ?? "flow-aggregator",
      clock,
      now: options.now ?? (() => new Date(clock.wallMs())),
      report: options.report ?? ((line) => {
        try {
          Deno.stderr.writeSync(encoder.encode(line + "\n"));
        } catch {
          // stderr closed too: the error count is all that is left.
        }
      }),
      wrapFile: options.wrapFile ?? ((file) => file),
      singleFile: options.singleFile ?? "",
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
    if (this.#opts.singleFile !== "") this.#append("INFO", bytes);
    else for (const severity of FILES_OF[level]) this.#append(severity, bytes);
    if (this.#pendingBytes >= FLUSH_AT_BYTES) this.flush();
  }

  /**
   * Writes every pending line now (synchronously: also safe in an unload handler). At most once
   * a second, a file is first checked to still be at its path, and replaced when it is not.
   */
  flush(): void {
    for (const f of this.#files.values()) this.#flushFile(f, true);
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
    for (const f of this.#files.values()) this.#closeFile(f);
  }

  #append(severity: KlogSeverity, bytes: Uint8Array): void {
    let f = this.#files.get(severity);
    if (f === undefined) {
      f = {
        severity,
        file: undefined,
        name: "",
        dev: 0,
        ino: null,
        size: 0,
        written: 0,
        headerSize: 0,
        header: undefined,
        pending: [],
        stamp: "",
        seq: 0,
        checkedAt: 0,
        gap: undefined,
      };
      this.#files.set(severity, f);
      this.#open(f);
    } else if (f.file === undefined) {
      // Its creation failed: tried again once a second, not for every line.
      if (this.#due(f)) this.#open(f);
    } else {
      const max = this.#opts.maxSizeBytes;
      if (max > 0 && f.size + bytes.length > max && f.size > f.headerSize) {
        this.#flushFile(f, false);
        this.#open(f, true);
      }
    }
    if (f.file === undefined) {
      this.#lost(f, 1, "no file could be created");
      return;
    }
    f.pending.push(bytes);
    f.size += bytes.length;
    this.#pendingBytes += bytes.length;
  }

  /** True, and noted, when a second has passed since `f` was last checked. */
  #due(f: SeverityFile): boolean {
    const t = this.#opts.clock.nowMs();
    if (inInterval(t - f.checkedAt, CHECK_MS)) return false;
    f.checkedAt = t;
    return true;
  }

  /** Takes `f`'s pending chunks: the bytes and the number of lines (the header is none). */
  #takePending(f: SeverityFile): { chunks: Uint8Array[]; lines: number } {
    const chunks = f.pending;
    f.pending = [];
    let lines = 0;
    for (const c of chunks) {
      this.#pendingBytes -= c.length;
      if (c !== f.header) lines++;
    }
    return { chunks, lines };
  }

  #flushFile(f: SeverityFile, check: boolean): void {
    if (f.pending.length === 0) return;
    if (check && f.file !== undefined && this.#due(f) && !this.#atPath(f)) this.#reopen(f);
    const { chunks, lines } = this.#takePending(f);
    if (f.file === undefined) {
      this.#lost(f, lines, "no file could be created");
      return;
    }
    // The note of a gap goes first in a file that goes on; a new file gets it after this
    // flush's lines (its header comes first, and is written with them).
    const newFile = f.header !== undefined;
    if (!newFile) this.#noteGap(f);
    const buf = concatBytes(chunks);
    let off = 0;
    try {
      while (off < buf.length) {
        const n = f.file.writeSync(buf.subarray(off));
        if (n <= 0) throw new Error(`write returned ${n}`);
        off += n;
      }
      f.written += buf.length;
      f.header = undefined;
      if (newFile) this.#noteGap(f);
    } catch (err) {
      this.#failedWrite(f, chunks, off, err);
    }
  }

  /** Counts `n` lines of `f` that reached no file, for `why`, and remembers the gap. */
  #lost(f: SeverityFile, n: number, why: string): void {
    if (n <= 0) return;
    this.#stats.linesDropped += n;
    f.gap ??= { lines: 0, sinceMs: this.#opts.now().getTime(), why };
    f.gap.lines += n;
    f.gap.why = why;
  }

  /**
   * After lines of `f` were dropped, writes a warning line saying how many, since when and why
   * into its file, and says on stderr that the file is written again (the error reports are
   * rate-limited: without it a file's reader saw a gap and nothing else). Left for the next
   * write when this one fails (nothing of it stays in the file).
   */
  #noteGap(f: SeverityFile): void {
    const g = f.gap;
    const file = f.file;
    if (g === undefined || file === undefined) return;
    const since = new Date(g.sinceMs).toISOString();
    const note = encoder.encode(
      formatKlogLine({
        level: "warn",
        component: "log-files",
        msg: "log lines were not written to this file",
        fields: { dropped: g.lines, since, reason: g.why },
      }, { at: this.#opts.now(), pid: this.#opts.pid }) + "\n",
    );
    let off = 0;
    try {
      while (off < note.length) {
        const n = file.writeSync(note.subarray(off));
        if (n <= 0) throw new Error(`write returned ${n}`);
        off += n;
      }
    } catch {
      if (off > 0) {
        try {
          file.truncateSync(f.written);
        } catch {
          // the next write's failure handling closes it
        }
      }
      return;
    }
    f.written += note.length;
    f.size += note.length;
    f.gap = undefined;
    // At most once a minute, as the error reports (a disk that fills and frees in turn).
    const t = this.#opts.clock.nowMs();
    if (inInterval(t - this.#lastRecoveryReport, ERROR_REPORT_MS)) return;
    this.#lastRecoveryReport = t;
    this.#opts.report(
      `log files: writing to ${f.name} again: ${g.lines} lines were dropped since ${since} ` +
        `(${g.why})`,
    );
  }

  /**
   * After a write of `chunks` failed with `off` bytes written: the lines not written whole are
   * dropped and counted, and a partial one is cut off the file, so the next write does not glue
   * a line onto its fragment. A header not written whole is queued again.
   */
  #failedWrite(f: SeverityFile, chunks: Uint8Array[], off: number, err: unknown): void {
    const { count, bytes: whole } = wholePieces(chunks.map((c) => c.length), off);
    // Those after a partial line did not reach the file either.
    const lost = chunks.slice(count);
    const headerLost = f.header !== undefined && lost.includes(f.header);
    const dropped = lost.length - (headerLost ? 1 : 0);
    this.#lost(f, dropped, err instanceof Error ? err.message : String(err));
    this.#error(`cannot write log file ${f.name} (${dropped} lines dropped)`, err);
    f.written += whole;
    f.size = f.written;
    if (off > whole) {
      try {
        f.file!.truncateSync(f.written);
      } catch (e) {
        // The fragment stays in that file; the next line goes to a new one, after a second.
        this.#error(`cannot cut a partial line off log file ${f.name}`, e);
        this.#closeFile(f);
        return;
      }
    }
    if (headerLost && f.header !== undefined) {
      f.pending.push(f.header);
      f.size += f.header.length;
      this.#pendingBytes += f.header.length;
    } else {
      f.header = undefined;
    }
  }

  /** True unless `f`'s path now leads to no file or another one (directory removed, say). */
  #atPath(f: SeverityFile): boolean {
    try {
      const st = Deno.statSync(`${this.#opts.dir}/${f.name}`);
      return st.ino === f.ino && st.dev === f.dev;
    } catch (err) {
      // Only a missing path is known to be gone; otherwise keep the file we have.
      return !(err instanceof Deno.errors.NotFound || err instanceof Deno.errors.NotADirectory);
    }
  }

  /** Replaces `f`'s file, gone from its path, by a new one; its pending lines go there. */
  #reopen(f: SeverityFile): void {
    this.#stats.filesReopened++;
    const { chunks } = this.#takePending(f);
    const oldHeader = f.header;
    this.#open(f);
    let lost = 0;
    for (const c of chunks) {
      if (c === oldHeader) continue;
      if (f.file === undefined) {
        lost++;
        continue;
      }
      f.pending.push(c);
      f.size += c.length;
      this.#pendingBytes += c.length;
    }
    this.#lost(f, lost, "no file could be created");
  }

  #closeFile(f: SeverityFile): void {
    try {
      f.file?.close();
    } catch {
      // already closed
    }
    f.file = undefined;
  }

  /**
   * Closes `f`'s file and creates the next one (the directory too, when missing). Its name is
   * klog's; a second file within the same second (or a name taken) gets a `.N` suffix, N never
   * used before for this severity in this process, so no name is reused and none is searched
   * for. On failure `f` has no file: its lines are dropped (counted) until a retry a second later.
   */
  /** (`full`: the current file is full; the single file is then started again empty.) */
  #open(f: SeverityFile, full = false): void {
    this.#closeFile(f);
    // Only a header can be left (its write failed): the new file gets its own.
    this.#lost(f, this.#takePending(f).lines, "its file was replaced");
    const { dir, program, host, user, pid } = this.#opts;
    const now = this.#opts.now();
    f.checkedAt = this.#opts.clock.nowMs();
    f.name = "";
    f.size = f.written = f.headerSize = 0;
    f.header = undefined;
    const stamp = klogFileStamp(now);
    const single = this.#opts.singleFile;
    const base = single !== ""
      ? single
      : `${program}.${host}.${user}.log.${f.severity}.${stamp}.${pid}`;
    let file: Deno.FsFile | undefined;
    let name = "";
    try {
      Deno.mkdirSync(dir, { recursive: true });
      if (single !== "") {
        // klog's single file: appended to when first opened (or found gone), started again
        // empty when it is full.
        name = single;
        file = Deno.openSync(
          `${dir}/${name}`,
          full ? { create: true, write: true, truncate: true } : { create: true, append: true },
        );
      }
      for (let attempt = 0; file === undefined && attempt < NAME_ATTEMPTS; attempt++) {
        name = attempt === 0 && stamp !== f.stamp ? base : `${base}.${++f.seq}`;
        try {
          file = Deno.openSync(`${dir}/${name}`, { createNew: true, append: true });
        } catch (err) {
          if (!(err instanceof Deno.errors.AlreadyExists)) throw err;
        }
      }
      if (file === undefined) throw new Error(`${NAME_ATTEMPTS} names taken, up to ${name}`);
    } catch (err) {
      this.#error(`cannot create log file ${dir}/${name || base}`, err);
      return;
    }
    f.stamp = stamp;
    const handle = this.#opts.wrapFile(file);
    try {
      const st = handle.statSync();
      f.dev = st.dev;
      f.ino = st.ino;
      // The single file may hold an earlier run's lines (appended to): its sizes count from
      // its start, so a cut after a failed write never reaches back into them.
      if (single !== "") f.written = f.size = st.size;
    } catch {
      f.ino = null; // never matches: the first check reopens
    }
    f.file = handle;
    f.name = name;
    this.#stats.filesCreated++;
    const header = encoder.encode(
      `Log file created at: ${now.getFullYear()}/${two(now.getMonth() + 1)}/${two(now.getDate())} ${
        two(now.getHours())
      }:${two(now.getMinutes())}:${two(now.getSeconds())}\n` +
        `Running on machine: ${host}\n` +
        `Binary: ${program} on Deno ${Deno.version.deno} for ${PLATFORM}\n` +
        `Log line format: ${LINE_FORMATS[logSettings().format]}\n`,
    );
    f.header = header;
    f.pending.push(header);
    f.headerSize = f.size + header.length;
    f.size += header.length;
    this.#pendingBytes += header.length;
    if (single !== "") return;
    if (this.#opts.maxFiles > 0) {
      this.#created.set(name, { order: ++this.#createdCount, severity: f.severity });
    }
    this.#link(f.severity, name);
    this.#prune(f.severity, name);
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

  /**
   * Keeps at most `maxFiles` files of `severity`, the newest as the module doc orders them: this
   * process's by creation, after every other file, those by the time in their names.
   */
  #prune(severity: KlogSeverity, current: string): void {
    const max = this.#opts.maxFiles;
    if (max <= 0) return;
    const re = new RegExp(
      `^(${escapeRegExp(this.#opts.program)}\\..*\\.log\\.${severity}\\.(\\d{8}-\\d{6})\\.\\d+)` +
        `(?:\\.(\\d+))?$`,
    );
    const found: { name: string; base: string; stamp: string; seq: number; order: number }[] = [];
    const listed = new Set<string>();
    try {
      for (const e of Deno.readDirSync(this.#opts.dir)) {
        const m = e.isFile ? re.exec(e.name) : null;
        if (m && e.name !== current) {
          listed.add(e.name);
          // 0: not created by this process, older than all it created.
          const order = this.#created.get(e.name)?.order ?? 0;
          found.push({ name: e.name, base: m[1], stamp: m[2], seq: Number(m[3] ?? 0), order });
        }
      }
    } catch (err) {
      this.#error(`cannot list log directory ${this.#opts.dir}`, err);
      return;
    }
    // Names of ours found gone (removed by hand) are forgotten: the map holds what is on disk.
    for (const [name, c] of this.#created) {
      if (c.severity === severity && name !== current && !listed.has(name)) {
        this.#created.delete(name);
      }
    }
    found.sort((a, b) =>
      a.order - b.order || a.stamp.localeCompare(b.stamp) || a.base.localeCompare(b.base) ||
      a.seq - b.seq
    );
    for (const old of found.slice(0, Math.max(0, found.length - (max - 1)))) {
      try {
        Deno.removeSync(`${this.#opts.dir}/${old.name}`);
        this.#created.delete(old.name);
        this.#stats.filesRemoved++;
      } catch (err) {
        this.#error(`cannot remove old log file ${old.name}`, err);
      }
    }
  }

  #error(what: string, err: unknown): void {
    this.#stats.errors++;
    const t = this.#opts.clock.nowMs();
    if (inInterval(t - this.#lastReport, ERROR_REPORT_MS)) return;
    this.#lastReport = t;
    this.#opts.report(
      `log files: ${what}: ${err instanceof Error ? err.message : String(err)} ` +
        `(errors so far: ${this.#stats.errors})`,
    );
  }
}
