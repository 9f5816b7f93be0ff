/**
 * Live reload of the configuration file (control-plane.md §2). The file's **directory** is
 * watched, not the file: kubelet updates a ConfigMap volume by renaming a new `..data` symlink
 * over the old one, and a watch on the file or its inode dies after the first swap. Bursts of
 * events are debounced, the file is re-read through its symlinks, byte-identical content is
 * ignored, and invalid or unreadable content is logged and ignored (the previous configuration
 * stays in force, unlike upstream which exited). A slow poll backs up inotify, which can miss
 * swaps on some volume types, and a watcher that dies is re-created with backoff.
 *
 * A file is applied only once its content is **stable**: new content is read a second time
 * `stableMs` later and must be byte-identical. A slow, non-atomic write (an editor or `cat >`
 * writing half the file, pausing, writing the rest) is otherwise often valid YAML with keys
 * missing, whose defaults then replace the operator's settings (the collector's transport
 * falling back to TLS disconnects every Agent). Content that changed between the two reads is
 * rejected for now and re-checked after the next debounce. Every rejection (unstable, invalid,
 * unreadable, larger than `MAX_CONFIG_FILE_BYTES` of file.ts, a change handler that throws)
 * keeps the last good configuration and is counted (`configReloadsRejected`).
 *
 * The configuration in force is the one the handler **applied**: when it throws (or rejects),
 * the previous one stays the baseline, so the next change is diffed against what runs. (It was
 * stored before the handler ran: a handler that failed on B left the process on A while the
 * watcher held B, and C, diffed against B, never applied a key that B and C share.)
 * All waiting runs on the injected {@linkcode Clock}.
 *
 * Deno's watch thread can hang: for an event on a FIFO in the directory it opens the path (to
 * compare files), and that `open(2)` blocks until a writer comes; from then on no event arrives
 * (the poll still sees changes) and `FsWatcher.close()` blocks the **main thread** (found by
 * review: a SIGTERM then never finished, a second signal was not handled, the flows held were
 * lost at SIGKILL). The process's exit path therefore stops with `leaveWatchOpen` (see
 * {@linkcode ConfigWatcherStopOptions}): the watch is never closed, the exit ends it. Each check
 * holds the directory's FIFOs open for reading and writing, which releases such an open and
 * keeps later ones from blocking (`#holdFifos`); a watch stuck on a FIFO removed before that
 * cannot be released, nor re-created (`Deno.watchFs` blocks the main thread meanwhile): the poll
 * that finds a change no event announced logs it, once.
 *
 * A file that is not UTF-8 text is invalid (its bytes were replaced with U+FFFD and used). A
 * new file whose settings are all the same (comments, unknown keys) is no reload: it becomes the
 * baseline, logged at debug level.
 *
 * Permissions: `--allow-read` on the config directory.
 */

import { basename, dirname, relative, resolve, sep as SEPARATOR } from "node:path";
import { type Clock, type ClockTimer, systemClock, within } from "../clock.ts";
import { logger } from "../log.ts";
import type { ConfigDiff } from "./diff.ts";
import { ConfigFileNotUtf8, readConfigFile } from "./file.ts";

const log = logger("config");

/** Outcome of one re-read of the file. */
export type CheckResult =
  | "changed"
  | "unchanged"
  | "invalid"
  | "unreadable"
  | "unstable"
  /** The change handler threw or rejected: nothing applied, counted as a rejection. */
  | "rejected"
  /** {@linkcode ConfigWatcherOptions.admit} deferred it: not applied, not counted. */
  | "deferred";

/** Counters of a {@linkcode ConfigWatcher}. */
export interface ConfigWatcherStats {
  /** New configurations applied (the handler was called and did not throw). */
  configReloads: number;
  /**
   * Re-reads that found new content and kept the last good configuration instead: the content
   * was still changing (`unstable`), did not parse or validate (`invalid`, counted once per
   * edit: re-reading the same bad bytes is not a new rejection), could not be read
   * (`unreadable`) or made the change handler throw (`rejected`, once per edit likewise).
   */
  configReloadsRejected: number;
}

/**
 * Callback for an accepted new configuration. May be async; reloads are serialised. A throw (or
 * rejection) means "not applied": the previous configuration stays in force for the watcher.
 */
export type ConfigChangeHandler<C> = (
  newConfig: C,
  oldConfig: C,
  diff: ConfigDiff,
) => void | Promise<void>;

/** Options of {@linkcode ConfigWatcher}. */
export interface ConfigWatcherOptions<C> {
  /** Called once per real change, after validation. */
  onChange: ConfigChangeHandler<C>;
  /**
   * Asked before a valid change is logged and handed to `onChange`: false defers it (the
   * consumer will not apply it in this process, e.g. it stops to be restarted with it). A
   * deferred change is logged by the consumer, counted neither as a reload nor as a rejection,
   * and the previous configuration stays in force. A throw rejects the change (counted).
   * Default: every change is admitted.
   */
  admit?: (newConfig: C, oldConfig: C) => boolean;
  /** Quiet time after the last event before the file is re-read. Default 200 ms. */
  debounceMs?: number;
  /**
   * New content must read the same again after this long before it is applied; 0 applies it
   * on the first read (no protection against a half-written file). Default 1000 ms.
   */
  stableMs?: number;
  /** Time source of the debounce, the stability wait, the poll and the restart backoff. */
  clock?: Clock;
  /** Safety-net poll period; 0 disables it. Default 30 s. */
  pollIntervalMs?: number;
  /** Observes every re-read (metrics, tests). */
  onCheck?: (result: CheckResult) => void;
  /** Parses and validates the file's text (throws on invalid content). */
  parse: (text: string) => C;
  /** Compares two parsed configurations. */
  diff: (oldConfig: C, newConfig: C) => ConfigDiff;
}

/** Options of {@linkcode ConfigWatcher.stop}. */
export interface ConfigWatcherStopOptions {
  /**
   * Do not close the directory watch (the process is about to exit, which ends it): closing it
   * blocks the main thread for good when Deno's watch thread hangs in a FIFO's open (module
   * doc). The watch loop is then left pending, not awaited. Default false (closed).
   */
  leaveWatchOpen?: boolean;
  /**
   * Wait at most this long (on the clock) for a reload in progress, then resolve anyway (the
   * reload may still finish later). Default: until it ends.
   */
  reloadWaitMs?: number;
}

/** Watches a configuration file and reports validated changes. */
export class ConfigWatcher<C> {
  readonly #path: string;
  readonly #dir: string;
  readonly #onChange: ConfigChangeHandler<C>;
  readonly #admit?: (newConfig: C, oldConfig: C) => boolean;
  readonly #diff: (oldConfig: C, newConfig: C) => ConfigDiff;
  readonly #onCheck?: (result: CheckResult) => void;
  readonly #parse: (text: string) => C;
  readonly #debounceMs: number;
  readonly #stableMs: number;
  readonly #pollIntervalMs: number;
  readonly #clock: Clock;
  #baseline = "";
  /** The last content rejected as invalid: re-reading it again is not a new rejection. */
  #lastInvalid: string | undefined;
  #config: C | undefined;
  #fsWatcher: Deno.FsWatcher | undefined;
  #watchLoop: Promise<void> | undefined;
  #debounceTimer: ClockTimer | undefined;
  #pollTimer: ClockTimer | undefined;
  #restartTimer: ClockTimer | undefined;
  /** Ends the stability wait of a check in progress (stop() must not wait for the clock). */
  #interruptWait: (() => void) | undefined;
  #reloads = 0;
  #rejected = 0;
  #chain: Promise<unknown> = Promise.resolve();
  #running = false;
  #restartDelayMs = 1000;
  /** Bumped on every start, so a poll callback of an earlier run never re-arms itself. */
  #generation = 0;
  /** Events received from the directory watch (any file): the poll tells a live watch by it. */
  #events = 0;
  /** Set by a check that read content new to it (not the baseline, not the last rejected). */
  #sawNewContent = false;
  /** The stalled-watch warning was logged (once). */
  #stallLogged = false;
  /** FIFOs of the directory held open (see #holdFifos), by path. */
  readonly #heldFifos = new Map<string, Deno.FsFile>();
  /**
   * FIFOs that could not be held (no write permission on the directory: the printed
   * permissions grant none), warned about once each while they are there.
   */
  readonly #unheldFifos = new Set<string>();

  /** Creates a watcher for the file at `path`; nothing happens until {@linkcode start}. */
  constructor(path: string, options: ConfigWatcherOptions<C>) {
    this.#path = path;
    this.#dir = dirname(path);
    this.#onChange = options.onChange;
    this.#admit = options.admit;
    this.#onCheck = options.onCheck;
    this.#parse = options.parse;
    this.#diff = options.diff;
    this.#debounceMs = options.debounceMs ?? 200;
    this.#stableMs = options.stableMs ?? 1000;
    this.#pollIntervalMs = options.pollIntervalMs ?? 30_000;
    this.#clock = options.clock ?? systemClock;
  }

  /** The reload counters. */
  stats(): ConfigWatcherStats {
    return { configReloads: this.#reloads, configReloadsRejected: this.#rejected };
  }

  /** The configuration currently in force. Throws before {@linkcode start}. */
  get config(): C {
    if (this.#config === undefined) throw new Error("ConfigWatcher not started");
    return this.#config;
  }

  /**
   * Starts watching, then reads the initial configuration (in that order, so no update is
   * missed) and returns it. Throws if the directory cannot be watched or the file is unreadable
   * or invalid; nothing is left running in that case.
   */
  async start(): Promise<C> {
    if (this.#running) return this.config;
    try {
      this.#fsWatcher = Deno.watchFs(this.#dir, { recursive: false });
    } catch (e) {
      throw new Error(
        `error when starting file watch on configuration dir: ${(e as Error).message}`,
      );
    }
    this.#running = true;
    this.#generation++;
    try {
      const text = await readConfigFile(this.#path);
      this.#config = this.#parse(text);
      this.#baseline = text;
    } catch (e) {
      await this.stop();
      throw e;
    }
    this.#watchLoop = this.#consume(this.#fsWatcher);
    this.#schedulePoll();
    log.info("Watching configuration", { path: this.#path, dir: this.#dir });
    return this.#config;
  }

  /**
   * Stops watching; resolves after any in-flight reload has finished (or `reloadWaitMs`). No
   * timers survive; with `leaveWatchOpen` the directory watch does (see its doc).
   */
  async stop(options: ConfigWatcherStopOptions = {}): Promise<void> {
    this.#running = false;
    this.#debounceTimer?.cancel();
    this.#pollTimer?.cancel();
    this.#restartTimer?.cancel();
    this.#debounceTimer = this.#pollTimer = this.#restartTimer = undefined;
    this.#interruptWait?.();
    if (!options.leaveWatchOpen) {
      try {
        this.#fsWatcher?.close();
      } catch {
        // Already closed.
      }
      await this.#watchLoop;
    }
    this.#fsWatcher = undefined;
    this.#watchLoop = undefined;
    this.#releaseFifos();
    await this.#reloadEnd(options.reloadWaitMs);
  }

  /** Waits for the reload in progress, at most `ms` when given. */
  async #reloadEnd(ms: number | undefined): Promise<void> {
    if (ms === undefined) return void await this.#chain;
    if (await within(this.#chain, ms, this.#clock) === "timeout") {
      log.warn("A configuration reload is still in progress at stop: not waiting for it", {
        path: this.#path,
        waitedMs: ms,
      });
    }
  }

  /**
   * Re-reads the file now and applies it if it changed (what an event triggers after the
   * debounce, and what the poll does). Checks never overlap.
   */
  check(): Promise<CheckResult> {
    const run = this.#chain.then(() => this.#checkOnce());
    this.#chain = run.catch(() => undefined);
    return run;
  }

  async #checkOnce(): Promise<CheckResult> {
    const result = await this.#evaluate();
    try {
      this.#onCheck?.(result);
    } catch (e) {
      log.warn("onCheck callback failed", { err: e });
    }
    return result;
  }

  /**
   * Reads the file; a failure (logged, counted) as the check's result: "unreadable", or
   * "invalid" for a file that is no UTF-8 text (counted once per content, as invalid YAML is).
   */
  async #read(): Promise<string | { failed: "unreadable" | "invalid" }> {
    try {
      return await readConfigFile(this.#path);
    } catch (e) {
      if (e instanceof ConfigFileNotUtf8) {
        // A key no text can equal: the lossy text could be a valid file's.
        const seen = `\0not UTF-8\0${e.lossy}`;
        if (seen === this.#lastInvalid) {
          log.debug("Flow-aggregator configuration is still the one rejected before");
          return { failed: "invalid" };
        }
        this.#sawNewContent = true;
        this.#rejected++;
        this.#lastInvalid = seen;
        log.error("Error when loading configuration from config file, keeping the current one", {
          path: this.#path,
          err: e,
          configReloadsRejected: this.#rejected,
        });
        return { failed: "invalid" };
      }
      this.#rejected++;
      log.error("Cannot read FlowAggregator configuration file, keeping the current one", {
        path: this.#path,
        err: e,
        configReloadsRejected: this.#rejected,
      });
      return { failed: "unreadable" };
    }
  }

  /** Waits `ms` on the clock; false when stop() ended the wait. */
  #wait(ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = this.#clock.setTimer(ms, () => {
        this.#interruptWait = undefined;
        resolve(this.#running);
      });
      this.#interruptWait = () => {
        timer.cancel();
        this.#interruptWait = undefined;
        resolve(false);
      };
    });
  }

  async #evaluate(): Promise<CheckResult> {
    const old = this.#config;
    if (old === undefined || !this.#running) return "unchanged";
    await this.#holdFifos();
    const text = await this.#read();
    if (typeof text !== "string") return text.failed;
    if (text === this.#baseline) {
      log.debug("Flow-aggregator configuration didn't change");
      this.#lastInvalid = undefined;
      return "unchanged";
    }
    if (text === this.#lastInvalid) {
      log.debug("Flow-aggregator configuration is still the one rejected before");
      return "invalid";
    }
    this.#sawNewContent = true;
    if (this.#stableMs > 0) {
      // New content: apply it only if a second read finds the same bytes (see the module doc).
      if (!(await this.#wait(this.#stableMs))) return "unchanged";
      const again = await this.#read();
      if (typeof again !== "string") return again.failed;
      if (again !== text) {
        this.#rejected++;
        log.warn("Configuration file is still being written, keeping the current one", {
          path: this.#path,
          stableMs: this.#stableMs,
          configReloadsRejected: this.#rejected,
        });
        // The writer's last event may already have been handled: look again after it settles.
        this.#debounce();
        return "unstable";
      }
    }
    let next: C;
    try {
      next = this.#parse(text);
    } catch (e) {
      this.#rejected++;
      this.#lastInvalid = text;
      log.error("Error when loading configuration from config file, keeping the current one", {
        path: this.#path,
        err: e,
        configReloadsRejected: this.#rejected,
      });
      return "invalid";
    }
    const diff = this.#diff(old, next);
    if (!diff.changed) {
      // Comments, formatting or unknown keys only: nothing to apply, no reload to count (it
      // logged `Updating Flow Aggregator changed=""` and counted one).
      log.debug("Configuration file changed, no setting did", { path: this.#path });
      this.#baseline = text;
      this.#lastInvalid = undefined;
      this.#config = next;
      return "unchanged";
    }
    try {
      if (this.#admit !== undefined && !this.#admit(next, old)) return "deferred";
      // Which changed keys need a restart is the consumer's call (the Flow Aggregator applies
      // timeouts, Pod labels and the transport live and reports only what it really ignores),
      // so no "please restart" error is logged here.
      log.info("Updating Flow Aggregator", { changed: diff.changedKeys.join(",") });
      await this.#onChange(next, old, diff);
    } catch (e) {
      // Not applied (or not all of it): the configuration in force stays the baseline, and the
      // same bytes are not retried until the file changes.
      this.#rejected++;
      this.#lastInvalid = text;
      log.error(
        "Configuration change handler failed: the change is rejected, the current configuration " +
          "stays in force",
        {
          path: this.#path,
          changed: diff.changedKeys.join(","),
          err: e,
          configReloadsRejected: this.#rejected,
        },
      );
      return "rejected";
    }
    this.#baseline = text;
    this.#lastInvalid = undefined;
    this.#config = next;
    this.#reloads++;
    return "changed";
  }

  async #consume(watcher: Deno.FsWatcher): Promise<void> {
    // Not `for await`: leaving it (break, return) closes the watch, which must not happen on
    // the exit path (module doc); stop() closes it, or leaves it open.
    const events = watcher[Symbol.asyncIterator]();
    try {
      for (let r = await events.next(); !r.done; r = await events.next()) {
        const event = r.value;
        if (!this.#running) return;
        this.#events++;
        // Only the file and a ConfigMap's swap (`..data`, `..<timestamp>`) concern us: another
        // file in the directory (a log written there) re-read the configuration at each write,
        // and at debug level each "Event happened" line was itself a new event (88,079 lines in
        // 5 s, found by review). The poll still catches anything missed.
        if (!event.paths.some((p) => this.#concerns(p))) continue;
        log.debug("Event happened", { kind: event.kind, paths: event.paths.join(",") });
        this.#restartDelayMs = 1000;
        this.#debounce();
      }
    } catch (e) {
      if (this.#running) log.error("configWatcher err", { err: e });
    }
    if (this.#running && this.#fsWatcher === watcher) {
      log.error("ConfigWatcher event channel closed, re-creating it", {
        retryMs: this.#restartDelayMs,
      });
      this.#fsWatcher = undefined;
      this.#scheduleRecreate();
    }
  }

  /** Whether an event on `path` may change the configuration: the file, or a ConfigMap swap. */
  #concerns(path: string): boolean {
    const name = basename(path);
    return path === this.#path || name === basename(this.#path) || name.startsWith("..") ||
      name === this.#linkedVia();
  }

  /**
   * The entry of the directory the file's symlink goes through (`current` for a link to
   * `current/flow-aggregator.conf`): swapping that entry (a deploy renaming `current.new` over
   * `current`) changes the file without an event on it; for a link to a file of the directory,
   * that file. Undefined for a file that is no link or links out of the directory.
   */
  #linkedVia(): string | undefined {
    let target: string;
    try {
      target = Deno.readLinkSync(this.#path);
    } catch {
      return undefined;
    }
    const rel = relative(this.#dir, resolve(this.#dir, target));
    const first = rel.split(SEPARATOR)[0];
    return first === "" || first === ".." ? undefined : first;
  }

  #scheduleRecreate(): void {
    this.#restartTimer = this.#clock.setTimer(this.#restartDelayMs, () => this.#recreate());
    this.#restartDelayMs = Math.min(this.#restartDelayMs * 2, 30_000);
  }

  #recreate(): void {
    this.#restartTimer = undefined;
    if (!this.#running) return;
    try {
      const w = Deno.watchFs(this.#dir, { recursive: false });
      this.#fsWatcher = w;
      this.#watchLoop = this.#consume(w);
      // Anything may have changed while we were blind.
      this.#debounce();
    } catch (e) {
      log.error("error when re-creating file watch on configuration dir", { err: e });
      this.#scheduleRecreate();
    }
  }

  #debounce(): void {
    if (!this.#running) return;
    this.#debounceTimer?.cancel();
    this.#debounceTimer = this.#clock.setTimer(this.#debounceMs, () => {
      this.#debounceTimer = undefined;
      if (this.#running) void this.check();
    });
  }

  #schedulePoll(): void {
    if (this.#pollIntervalMs <= 0 || !this.#running) return;
    const generation = this.#generation;
    const events = this.#events;
    this.#pollTimer = this.#clock.setTimer(this.#pollIntervalMs, async () => {
      this.#pollTimer = undefined;
      if (!this.#running || generation !== this.#generation) return;
      this.#sawNewContent = false;
      await this.check();
      // New content that no event announced in a whole poll period: the watch is stuck (on a
      // FIFO, #holdFifos; one already removed cannot be released). Re-creating the watch is no
      // way out: Deno.watchFs blocks the main thread while another watch's thread hangs.
      if (this.#sawNewContent && this.#events === events && !this.#stallLogged) {
        this.#stallLogged = true;
        log.warn(
          "The configuration file changed with no event from the file watch in a whole poll " +
            "period: the watch may be stuck, changes are seen by the poll (restart the process " +
            "to restore it)",
          { path: this.#path, dir: this.#dir, pollIntervalMs: this.#pollIntervalMs },
        );
      }
      if (generation === this.#generation) this.#schedulePoll();
    });
  }

  /**
   * Holds every FIFO of the directory (the file's own target too) open for reading and writing,
   * which Linux never blocks on: Deno's watch thread opens the path of each event, and its
   * `open(2)` of a FIFO blocks until a writer comes; a writer held open releases a blocked open
   * and keeps later ones from blocking. A FIFO once taken for the file (refused, then removed)
   * held the watch for good: every later change waited for the poll. A FIFO no longer there is
   * let go. Errors are logged, never thrown (the check goes on).
   */
  async #holdFifos(): Promise<void> {
    const fifos = new Set<string>();
    try {
      for await (const entry of Deno.readDir(this.#dir)) {
        if (entry.isFile || entry.isDirectory || entry.isSymlink) continue;
        const path = `${this.#dir}${SEPARATOR}${entry.name}`;
        if ((await Deno.lstat(path)).isFifo) fifos.add(path);
      }
      const target = await Deno.realPath(this.#path).catch(() => undefined);
      if (target !== undefined && (await Deno.stat(target)).isFifo) fifos.add(target);
    } catch (e) {
      log.debug("Cannot look for FIFOs in the configuration directory", { err: e });
    }
    for (const [path, file] of this.#heldFifos) {
      if (fifos.has(path)) continue;
      file.close();
      this.#heldFifos.delete(path);
    }
    for (const path of this.#unheldFifos) if (!fifos.has(path)) this.#unheldFifos.delete(path);
    for (const path of fifos) {
      if (this.#heldFifos.has(path) || this.#unheldFifos.has(path)) continue;
      try {
        this.#heldFifos.set(path, await Deno.open(path, { read: true, write: true }));
        log.warn(
          "A FIFO is in the configuration directory: held open while it is there, so that the " +
            "file watch does not hang on it",
          { fifo: path },
        );
      } catch (e) {
        this.#unheldFifos.add(path);
        log.warn(
          "Cannot hold a FIFO of the configuration directory open: the file watch may hang on " +
            "it, changes are then seen by the poll",
          { fifo: path, err: e },
        );
      }
    }
  }

  /** Lets go of the FIFOs held (at stop, after the watch is closed). */
  #releaseFifos(): void {
    for (const file of this.#heldFifos.values()) {
      try {
        file.close();
      } catch {
        // Already closed.
      }
    }
    this.#heldFifos.clear();
  }
}
