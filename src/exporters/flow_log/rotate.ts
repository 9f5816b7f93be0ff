/**
 * A size-rotated log file with lumberjack v2.2 semantics (exporters.md §5.5), improved to
 * rotate only between lines: a line is never split across two files. Rotated files are named
 * `<name>-<UTC YYYY-MM-DDTHH-MM-SS.mmm><ext>`; after each rotation, in the background and
 * serialised, backups beyond `maxBackups` or older than `maxAgeDays` are removed and the rest
 * gzipped. The file is reopened when it disappears or is replaced underneath us (removed
 * directory, external logrotate) and after any write error, so an error never sticks.
 *
 * Backups keep lumberjack's names (tools read them), but pruning does not trust the wall-clock
 * time in them, which an NTP step or a VM resume moves either way: see
 * {@linkcode pruneOrder} for the rule.
 *
 * A write that fails part-way (disk full: a short write, then ENOSPC) never leaves a torn line
 * for the next write to be glued to. The file's size at its last complete line is tracked;
 * on a write error the lines that reached the file whole are reported written (the exporter
 * counts them exported, the rest of the batch dropped), and the file is truncated back to that
 * size at once, or, if that fails too, right after it is reopened and before anything else is
 * written to it (only if it is still the same file and longer than that size). So the lines on
 * disk and the exporter's `exported` counter agree.
 *
 * Permissions: `--allow-read --allow-write` on the log directory.
 */

import { basename, dirname, extname, join, resolve } from "node:path";
import { type Clock, systemClock } from "../../clock.ts";
import { logger, RateLimitedLog } from "../../log.ts";
import { fileKind, NotRegularFile, wholePieces, writeAll } from "../../bytes.ts";

const log = logger("log-exporter");
const encoder = new TextEncoder();

/**
 * The encoded lines of a write are built in a buffer kept for the next write up to this size:
 * a fresh one (or one joined string, which V8 puts in pages of its own) has its pages faulted
 * in on every write, about 1.3 ms per 500 KB here.
 */
const SCRATCH_KEEP_BYTES = 4 * 1024 * 1024;

/** Where flow log lines go: a rotating file or standard output. */
export interface LineSink {
  /** Writes whole lines in order; never throws. */
  writeLines(lines: readonly string[]): Promise<WriteResult>;
  /** Closes the file and waits for background work (compression, cleanup). */
  close(): Promise<void>;
}

/** Outcome of {@linkcode LineSink.writeLines}. */
export interface WriteResult {
  /** Lines fully written (the first `written + tooLong` lines of the batch were handled). */
  written: number;
  /** Lines skipped because a single line is larger than the maximum file size. */
  tooLong: number;
  /** The I/O error that stopped the batch (lines after `written + tooLong` were not written). */
  error?: Error;
}

/** The part of `Deno.FsFile` the rotating file uses (tests wrap it to inject write faults). */
export interface LogFileHandle {
  /** Writes some of `p`, returning how many bytes (as `Deno.FsFile.write`). */
  write(p: Uint8Array): Promise<number>;
  /** Cuts the file to `len` bytes (ftruncate). */
  truncate(len?: number): Promise<void>;
  /** File metadata (inode, size, mode). */
  stat(): Promise<Deno.FileInfo>;
  /** Releases the handle. */
  close(): void;
}

/**
 * `lines` encoded back to back into `buf` (or a larger buffer, when it is too small): the bytes
 * written, a view of the buffer used.
 */
export function encodeLines(lines: readonly string[], buf: Uint8Array): Uint8Array {
  let at = 0;
  for (const line of lines) {
    // UTF-8 takes at most 3 bytes per UTF-16 code unit.
    if (buf.length - at < line.length * 3) {
      const bigger = new Uint8Array(Math.max(buf.length * 2, at + line.length * 3));
      bigger.set(buf.subarray(0, at));
      buf = bigger;
    }
    at += encoder.encodeInto(line, buf.subarray(at)).written;
  }
  return buf.subarray(0, at);
}

/** Options of {@linkcode RotatingFile}. */
export interface RotatingFileOptions {
  /** Rotate before a write would make the file larger than this. */
  maxSizeBytes: number;
  /** Backups kept (newest first); 0 = keep all. */
  maxBackups: number;
  /** Backups older than this many days are removed; 0 = never. */
  maxAgeDays: number;
  /** gzip backups. */
  compress: boolean;
  /** Time source for backup names and age. Default: system clock. */
  clock?: Clock;
  /** Called for every background (maintenance) error, so the owner can count it. */
  onError?: (err: Error) => void;
  /**
   * Wraps every file this writer opens (the log and compressed backups, named by `path`); a
   * test seam for write faults. Default: none.
   */
  wrapFile?: (file: Deno.FsFile, path: string) => LogFileHandle;
}

/** A write that failed after `lines` lines of its buffer had reached the file whole. */
class PartialWrite extends Error {
  constructor(readonly error: Error, readonly lines: number) {
    super(error.message, { cause: error });
  }
}

/** The UTF-8 sizes of `lines[first..]`, computed as read. */
function* lineSizes(lines: readonly string[], first: number): Generator<number> {
  for (let i = first; i < lines.length; i++) yield encoder.encode(lines[i]).length;
}

function pad(n: number, width = 2): string {
  return String(n).padStart(width, "0");
}

/** `2023-07-25T10-00-00.000` for a wall-clock time (UTC). */
export function backupTimestamp(ms: number): string {
  const d = new Date(ms);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())}T` +
    `${pad(d.getUTCHours())}-${pad(d.getUTCMinutes())}-${pad(d.getUTCSeconds())}.` +
    pad(d.getUTCMilliseconds(), 3);
}

const TS_RE = /^(\d{4})-(\d{2})-(\d{2})T(\d{2})-(\d{2})-(\d{2})\.(\d{3})$/;

function parseBackupTimestamp(s: string): number | undefined {
  const m = TS_RE.exec(s);
  if (m === null) return undefined;
  const [y, mo, d, h, mi, se, ms] = m.slice(1).map(Number);
  return Date.UTC(y, mo - 1, d, h, mi, se, ms);
}

/**
 * What this process knows of a backup beyond its name. Kept per backup while it is on disk, in
 * {@linkcode knownBackups}.
 */
interface BackupMemo {
  /** Place in creation order, for a backup this process rotated; undefined for one found on disk. */
  readonly seq?: number;
  /** Monotonic time (of `clock`) when this process rotated it, or first saw it on disk. */
  readonly sinceMono: number;
  /** The clock `sinceMono` was read on (the writer's). */
  readonly clock: Clock;
}

/**
 * Backups of each log path (resolved directory, name prefix and extension), by name without
 * `.gz`. Process-wide rather than per {@linkcode RotatingFile}: a live reload of the flow log
 * section replaces the writer, and the backups it rotated must keep their place.
 */
const knownBackups = new Map<string, Map<string, BackupMemo>>();
/** Next creation sequence number (process-wide, so one path's writers never reuse one). */
let nextBackupSeq = 0;

/**
 * The pruning rule. Backups are ordered newest first, and `maxBackups` keeps the first ones:
 *
 * 1. those this process rotated, by creation order (a sequence in memory), all newer than
 * 2. those it did not (found on disk: an earlier process's), by the time in their names.
 *
 * `maxAge` judges a backup this process rotated by the monotonic time since it rotated it; one
 * found on disk by the time in its name, or by the monotonic time since this process first saw
 * it when that is longer (a name stamped in the future, by a clock that has since been set back,
 * then ages out `maxAge` after this process found it, not `maxAge` after its stamp). A backup
 * past `maxAge` is removed with every backup after it in the order: pruning never removes a
 * backup newer than one it keeps, whatever the wall clock did.
 *
 * What a restart cannot know: the names are the only record of an earlier process's backups,
 * and a step of the wall clock leaves them in the wrong order for good (after a step back, a
 * later backup has an earlier name, and is removed first by `maxBackups`), and a clock still
 * stepped forward makes them look old to `maxAge`. Monotonic time does not count a suspended
 * host's sleep: a backup may then outlive `maxAge` by that long, never the other way.
 *
 * Sorts `backups` (as listed, a backup and its `.gz` twin side by side) newest first.
 */
function pruneOrder<T extends { name: string; base: string; t: number }>(
  backups: T[],
  memos: Map<string, BackupMemo>,
): T[] {
  const seq = (b: T) => memos.get(b.base)?.seq ?? -1;
  return backups.sort((a, b) => seq(b) - seq(a) || b.t - a.t || a.name.localeCompare(b.name));
}

async function exists(p: string): Promise<boolean> {
  try {
    await Deno.lstat(p);
    return true;
  } catch {
    return false;
  }
}

/** A size-rotated file. Not safe for concurrent `writeLines` calls: the caller serialises. */
export class RotatingFile implements LineSink {
  readonly #path: string;
  readonly #dir: string;
  readonly #prefix: string;
  readonly #ext: string;
  readonly #opts: RotatingFileOptions;
  readonly #clock: Clock;
  #file: LogFileHandle | undefined;
  #ino: number | null = null;
  /** Size of the file at its last complete line: everything we wrote whole. */
  #size = 0;
  /** A failed write left a partial line past `size` in file `ino` that is not yet cut off. */
  #torn: { ino: number | null; size: number } | undefined;
  #maintenance: Promise<void> = Promise.resolve();
  #rotations = 0;
  /** This path's entry of {@linkcode knownBackups}. */
  readonly #memos: Map<string, BackupMemo>;
  #nameConflicts = 0;
  readonly #conflictLog: RateLimitedLog;
  /** True until the first write into an existing, non-empty file we just opened. */
  #freshExisting = false;
  /**
   * See {@linkcode SCRATCH_KEEP_BYTES}; taken while a write uses it (an overlapping one gets a
   * buffer of its own).
   */
  #scratch: Uint8Array | undefined = new Uint8Array(64 * 1024);

  /** Creates the writer; the file is opened on the first write. */
  constructor(path: string, options: RotatingFileOptions) {
    this.#path = path;
    this.#dir = dirname(path);
    const base = basename(path);
    this.#ext = extname(base);
    this.#prefix = base.slice(0, base.length - this.#ext.length) + "-";
    this.#opts = options;
    this.#clock = options.clock ?? systemClock;
    const key = `${resolve(this.#dir)}\0${this.#prefix}\0${this.#ext}`;
    let memos = knownBackups.get(key);
    if (memos === undefined) knownBackups.set(key, memos = new Map());
    this.#memos = memos;
    this.#conflictLog = new RateLimitedLog(60_000, () => this.#clock.nowMs());
  }

  /** Number of rotations done. */
  get rotations(): number {
    return this.#rotations;
  }

  /**
   * Pruning decisions that went against the time in a backup's name (the wall clock stepped;
   * see {@linkcode pruneOrder}): a backup removed that its name alone would have kept, or kept
   * that its name alone would have removed. Counted at every pruning that decides so.
   */
  get nameConflicts(): number {
    return this.#nameConflicts;
  }

  /** Waits for background cleanup and compression to finish. */
  settled(): Promise<void> {
    return this.#maintenance;
  }

  /** Writes lines, rotating between lines when the next one would overflow the file. */
  async writeLines(lines: readonly string[]): Promise<WriteResult> {
    let written = 0;
    let tooLong = 0;
    const max = this.#opts.maxSizeBytes;
    try {
      await this.#ensureOpen();
      if (lines.length > 0) {
        // Common case, the whole batch fits in the current file: the lines encoded into one
        // reused buffer and one write instead of a buffer per line. Else (rotation due, or a
        // line too long) the exact line-by-line path below decides where to cut.
        const scratch = this.#scratch;
        this.#scratch = undefined;
        const all = encodeLines(lines, scratch ?? new Uint8Array(0));
        try {
          if (this.#size + all.length < max) {
            this.#freshExisting = false;
            await this.#append(all, lines, 0);
            return { written: lines.length, tooLong: 0 };
          }
        } finally {
          if (scratch !== undefined) {
            this.#scratch = all.buffer.byteLength <= SCRATCH_KEEP_BYTES
              ? new Uint8Array(all.buffer)
              : scratch;
          }
        }
      }
      let chunk: Uint8Array[] = [];
      let chunkBytes = 0;
      let chunkLines = 0;
      // Index in `lines` of the chunk's first line (lines skipped as too long come before it).
      let chunkFirst = 0;
      const flushChunk = async () => {
        if (chunkBytes === 0) return;
        const buf = new Uint8Array(chunkBytes);
        let off = 0;
        for (const c of chunk) {
          buf.set(c, off);
          off += c.length;
        }
        await this.#append(buf, lines, chunkFirst);
        written += chunkLines;
        chunk = [];
        chunkBytes = chunkLines = 0;
      };
      for (let i = 0; i < lines.length; i++) {
        const line = lines[i];
        const bytes = encoder.encode(line);
        if (bytes.length > max) {
          // Upstream fails the write; we skip just this line and report it.
          await flushChunk();
          tooLong++;
          log.warn("Flow log line longer than the maximum file size, dropped", {
            bytes: bytes.length,
            maxSizeBytes: max,
          });
          continue;
        }
        // lumberjack: a file found on disk is rotated if this write would fill it exactly too.
        const full = this.#freshExisting && chunkBytes === 0
          ? this.#size + bytes.length >= max
          : this.#size + chunkBytes + bytes.length > max;
        this.#freshExisting = false;
        if (full) {
          await flushChunk();
          await this.#rotate();
        }
        if (chunkLines === 0) chunkFirst = i;
        chunk.push(bytes);
        chunkBytes += bytes.length;
        chunkLines++;
      }
      await flushChunk();
      return { written, tooLong };
    } catch (e) {
      if (e instanceof PartialWrite) {
        written += e.lines;
        await this.#cutTornTail();
      }
      this.#closeQuietly();
      return { written, tooLong, error: e instanceof PartialWrite ? e.error : e as Error };
    }
  }

  /**
   * Appends `buf`, the encoding of the lines from `lines[first]` on, and accounts its size. On
   * an error, keeps the lines that reached the file whole (a short write before the error),
   * records any partial line past them as torn, and throws a {@linkcode PartialWrite}.
   */
  async #append(buf: Uint8Array, lines: readonly string[], first: number): Promise<void> {
    let off = 0;
    try {
      while (off < buf.length) {
        const n = await this.#file!.write(buf.subarray(off));
        if (n <= 0) throw new Error(`write returned ${n}`);
        off += n;
      }
    } catch (e) {
      const whole = off === 0 ? { count: 0, bytes: 0 } : wholePieces(lineSizes(lines, first), off);
      this.#size += whole.bytes;
      if (off > whole.bytes) this.#torn = { ino: this.#ino, size: this.#size };
      throw new PartialWrite(e as Error, whole.count);
    }
    this.#size += buf.length;
  }

  /** Cuts a torn line off the open file now; if that fails, it is cut after the reopen. */
  async #cutTornTail(): Promise<void> {
    if (this.#torn === undefined || this.#file === undefined) return;
    try {
      await this.#file.truncate(this.#torn.size);
      this.#torn = undefined;
    } catch (e) {
      log.warn("Cannot truncate the flow log after a failed write; retrying on reopen", {
        err: e,
      });
    }
  }

  /** Closes the file and waits for background work. */
  async close(): Promise<void> {
    this.#closeQuietly();
    await this.#maintenance;
  }

  #closeQuietly(): void {
    try {
      this.#file?.close();
    } catch {
      // Closing a broken handle can fail; it is gone either way.
    }
    this.#file = undefined;
    this.#ino = null;
  }

  async #ensureOpen(): Promise<void> {
    if (this.#file !== undefined) {
      // Reopen if the file was removed or replaced (e.g. its directory was deleted).
      let st: Deno.FileInfo | undefined;
      try {
        st = await Deno.stat(this.#path);
      } catch {
        st = undefined;
      }
      if (st !== undefined && st.ino === this.#ino) return;
      this.#closeQuietly();
    }
    await Deno.mkdir(this.#dir, { recursive: true });
    // Only a regular file is opened: a FIFO's open blocks until a reader comes, and rotation
    // would rename a device node away (`/dev/null` replaced by a regular file). The lines are
    // dropped, counted, and the path looked at again at the next write.
    let existing: Deno.FileInfo | undefined;
    try {
      existing = await Deno.stat(this.#path);
    } catch {
      existing = undefined;
    }
    if (existing !== undefined && !existing.isFile) {
      throw new NotRegularFile(fileKind(existing), false, "not written to, not rotated");
    }
    const file = this.#wrap(
      await Deno.open(this.#path, {
        append: true,
        create: true,
        mode: 0o600,
      }),
    );
    this.#file = file; // closed by writeLines' error path if anything below fails
    const st = await file.stat();
    let size = st.size;
    const torn = this.#torn;
    if (torn !== undefined) {
      // The partial line of an earlier failed write is cut off before anything else is written.
      // A different file (replaced, rotated by someone else) or a shorter one is left alone.
      if (st.ino === torn.ino && size > torn.size) {
        await file.truncate(torn.size);
        size = torn.size;
      }
      this.#torn = undefined;
    }
    this.#ino = st.ino;
    this.#size = size;
    this.#freshExisting = size > 0;
  }

  #wrap(file: Deno.FsFile, path = this.#path): LogFileHandle {
    return this.#opts.wrapFile?.(file, path) ?? file;
  }

  async #rotate(): Promise<void> {
    let mode: number | null = null;
    try {
      mode = (await this.#file!.stat()).mode;
    } catch {
      mode = null;
    }
    this.#closeQuietly();
    let t = this.#clock.wallMs();
    let backup: string;
    for (;;) {
      backup = join(this.#dir, `${this.#prefix}${backupTimestamp(t)}${this.#ext}`);
      // Two rotations in the same millisecond must not overwrite a backup.
      if (!(await exists(backup)) && !(await exists(backup + ".gz"))) break;
      t++;
    }
    await Deno.rename(this.#path, backup);
    this.#memos.set(basename(backup), {
      seq: nextBackupSeq++,
      sinceMono: this.#clock.nowMs(),
      clock: this.#clock,
    });
    this.#rotations++;
    const file = this.#wrap(
      await Deno.open(this.#path, {
        write: true,
        create: true,
        truncate: true,
        mode: 0o600,
      }),
    );
    if (mode !== null) {
      try {
        await Deno.chmod(this.#path, mode & 0o777);
      } catch {
        // Keeping the owner-only default is acceptable.
      }
    }
    this.#file = file;
    this.#ino = (await file.stat()).ino;
    this.#size = 0;
    this.#maintenance = this.#maintenance.then(() => this.#mill()).catch((e) => {
      this.#opts.onError?.(e as Error);
      log.error("Flow log backup maintenance failed", { err: e });
    });
  }

  async #mill(): Promise<void> {
    // A rotation while this runs registers its backup, maybe after the listing below: only the
    // memos of backups rotated before it may be forgotten for not being listed.
    const seqBefore = nextBackupSeq;
    const backups: { name: string; base: string; t: number; gz: boolean }[] = [];
    for await (const entry of Deno.readDir(this.#dir)) {
      if (!entry.isFile || !entry.name.startsWith(this.#prefix)) continue;
      let base = entry.name;
      const gz = base.endsWith(".gz");
      if (gz) base = base.slice(0, -3);
      if (!base.endsWith(this.#ext)) continue;
      const ts = base.slice(this.#prefix.length, base.length - this.#ext.length);
      const t = parseBackupTimestamp(ts);
      if (t === undefined) continue;
      backups.push({ name: entry.name, base, t, gz });
    }
    const memos = this.#memos;
    const listed = new Set(backups.map((b) => b.base));
    for (const [base, m] of memos) {
      if (!listed.has(base) && (m.seq === undefined || m.seq < seqBefore)) memos.delete(base);
    }
    const mono = this.#clock.nowMs();
    for (const b of backups) {
      if (!memos.has(b.base)) memos.set(b.base, { sinceMono: mono, clock: this.#clock });
    }
    const wall = this.#clock.wallMs();
    const remove = this.#pruned(pruneOrder(backups, memos), (b) => {
      const m = memos.get(b.base)!;
      const held = m.clock.nowMs() - m.sinceMono;
      return m.seq !== undefined ? held : Math.max(wall - b.t, held);
    });
    // What the names alone would have decided (lumberjack): a difference is a clock step.
    const byName = this.#pruned(
      [...backups].sort((a, b) => b.t - a.t || a.name.localeCompare(b.name)),
      (b) => wall - b.t,
    );
    const names = new Set(backups.map((b) => b.name));
    const removedAgainstNames: string[] = [];
    const keptAgainstNames: string[] = [];
    for (const b of backups) {
      if (b.gz && names.has(b.base)) continue; // a backup and its compressed twin count once
      if (remove.has(b.name) && !byName.has(b.name)) removedAgainstNames.push(b.name);
      if (!remove.has(b.name) && byName.has(b.name)) keptAgainstNames.push(b.name);
    }
    if (removedAgainstNames.length + keptAgainstNames.length > 0) {
      this.#nameConflicts += removedAgainstNames.length + keptAgainstNames.length;
      const suppressed = this.#conflictLog.allow("name conflict");
      if (suppressed >= 0) {
        log.warn(
          "Flow log backups pruned by the order and age this process saw, not by the time in " +
            "their names: the wall clock stepped",
          {
            dir: this.#dir,
            removed: removedAgainstNames.join(" "),
            kept: keptAgainstNames.join(" "),
            maxBackups: this.#opts.maxBackups,
            maxAgeDays: this.#opts.maxAgeDays,
            suppressed,
          },
        );
      }
    }
    const keptBases = new Set(backups.filter((b) => !remove.has(b.name)).map((b) => b.base));
    for (const name of remove) {
      await Deno.remove(join(this.#dir, name)).catch((e) => {
        if (!(e instanceof Deno.errors.NotFound)) throw e;
      });
      const base = name.endsWith(".gz") ? name.slice(0, -3) : name;
      if (!keptBases.has(base)) memos.delete(base);
    }
    if (!this.#opts.compress) return;
    for (const b of backups) {
      if (b.gz || remove.has(b.name) || names.has(b.name + ".gz")) continue;
      await this.#gzip(join(this.#dir, b.name));
    }
  }

  /**
   * Names of `ordered` (newest first) that `maxBackups` and `maxAge` remove, `ageMs` giving a
   * backup's age. Past the first backup too old, all are removed (they come after it).
   */
  #pruned<T extends { name: string; base: string }>(
    ordered: readonly T[],
    ageMs: (b: T) => number,
  ): Set<string> {
    const remove = new Set<string>();
    if (this.#opts.maxBackups > 0) {
      // A backup and its compressed twin count once.
      const kept = new Set<string>();
      for (const b of ordered) {
        if (!kept.has(b.base) && kept.size < this.#opts.maxBackups) kept.add(b.base);
      }
      for (const b of ordered) if (!kept.has(b.base)) remove.add(b.name);
    }
    if (this.#opts.maxAgeDays > 0) {
      const maxAgeMs = this.#opts.maxAgeDays * 86_400_000;
      let expired = false;
      for (const b of ordered) {
        expired ||= ageMs(b) > maxAgeMs;
        if (expired) remove.add(b.name);
      }
    }
    return remove;
  }

  async #gzip(src: string): Promise<void> {
    const dst = src + ".gz";
    const mode = (await Deno.stat(src)).mode ?? 0o600;
    const input = await Deno.open(src, { read: true });
    let output: LogFileHandle;
    try {
      output = this.#wrap(
        await Deno.open(dst, { write: true, create: true, truncate: true, mode: mode & 0o777 }),
        dst,
      );
    } catch (e) {
      input.close();
      throw e;
    }
    // Written chunk by chunk and the result's size checked before the source goes: piped into
    // the file's writable, a disk filling up mid-way went unreported (a truncated .gz kept, its
    // source removed, its lines gone).
    let written = 0;
    try {
      try {
        for await (const chunk of input.readable.pipeThrough(new CompressionStream("gzip"))) {
          await writeAll(output, chunk);
          written += chunk.length;
        }
        const size = (await output.stat()).size;
        if (size !== written) {
          throw new Error(`${dst}: ${size} of ${written} compressed bytes written`);
        }
      } finally {
        output.close();
      }
    } catch (e) {
      await Deno.remove(dst).catch(() => undefined);
      throw e;
    }
    await Deno.remove(src);
  }
}

/** Bytes a pipe takes atomically (POSIX PIPE_BUF on Linux). */
export const PIPE_BUF = 4096;

/**
 * Where the piece of `buf` written from `off` ends: after the last line that ends within
 * {@linkcode PIPE_BUF} bytes, or after the line at `off` when that one is longer.
 */
function pieceEnd(buf: Uint8Array, off: number): number {
  const limit = off + PIPE_BUF;
  if (limit >= buf.length) return buf.length;
  const last = buf.lastIndexOf(0x0a, limit - 1);
  if (last >= off) return last + 1;
  const next = buf.indexOf(0x0a, limit);
  return next < 0 ? buf.length : next + 1;
}

/** What {@linkcode StdoutSink} writes to: `Deno.stdout`, or a test's stand-in. */
export interface StdoutWriter {
  write(p: Uint8Array): Promise<number>;
}

/** Writes lines to standard output (flow log path `-` or `/dev/stdout`); never rotates. */
export class StdoutSink implements LineSink {
  readonly #out: StdoutWriter;

  constructor(out: StdoutWriter = Deno.stdout) {
    this.#out = out;
  }

  /**
   * Writes lines to stdout. On an error (the reader went away: EPIPE), the lines that reached
   * it whole before the error count as written, the rest (a line cut short included) as not.
   * Written in pieces of whole lines of at most {@linkcode PIPE_BUF} bytes (a longer line
   * alone), which a pipe takes whole or not at all, so what reached it is known to the byte
   * (one large write that fails says nothing of its part that went through). Whole lines,
   * because Deno writes stdout through a line buffer: a piece ending mid-line went out as two
   * writes, its lines then the tail, and when the tail's write failed the call threw although
   * its lines had reached the reader (up to 10 flow log lines counted dropped, yet read).
   */
  async writeLines(lines: readonly string[]): Promise<WriteResult> {
    const buf = encoder.encode(lines.join(""));
    let off = 0;
    try {
      while (off < buf.length) {
        const n = await this.#out.write(buf.subarray(off, pieceEnd(buf, off)));
        if (n <= 0) throw new Error(`write returned ${n}`);
        off += n;
      }
      return { written: lines.length, tooLong: 0 };
    } catch (e) {
      return {
        written: wholePieces(lineSizes(lines, 0), off).count,
        tooLong: 0,
        error: e as Error,
      };
    }
  }

  /** Nothing to close: stdout belongs to the process. */
  close(): Promise<void> {
    return Promise.resolve();
  }
}
