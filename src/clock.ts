/**
 * Injected time. Pure components (aggregation, template expiry, rotation by age) never read the
 * global clock: they take a {@linkcode Clock}, and tests drive a {@linkcode ManualClock}.
 */

/** A source of time in milliseconds. */
export interface Clock {
  /** Monotonic milliseconds, for timeouts and expiry. */
  nowMs(): number;
  /** Wall-clock milliseconds since the Unix epoch, for timestamps. */
  wallMs(): number;
}

/** The process clock. */
export const systemClock: Clock = {
  nowMs: () => performance.now(),
  wallMs: () => Date.now(),
};

/** A clock that moves only when told to; for tests. */
export class ManualClock implements Clock {
  #mono: number;
  #wall: number;

  /** Starts at `wallMs` (default 2023-11-14T22:13:20Z) with a monotonic time of 0. */
  constructor(wallMs = 1_700_000_000_000) {
    this.#mono = 0;
    this.#wall = wallMs;
  }

  /** Monotonic time. */
  nowMs(): number {
    return this.#mono;
  }

  /** Wall time. */
  wallMs(): number {
    return this.#wall;
  }

  /** Moves both clocks forward by `ms`. */
  advance(ms: number): void {
    this.#mono += ms;
    this.#wall += ms;
  }
}

/**
 * The process clock read at most once per synchronous run of JavaScript: the first read caches
 * the time and queues a microtask that forgets it when the current task (one socket read and
 * every message in it, one timer callback) is done. Why: the ingest path asks for the time per
 * message and per record (session last-seen, flow expiry), and at 100k records/s the
 * `performance.now()` op alone cost ~6 % of the process's CPU; records handled in the same
 * synchronous run arrived together, so one reading serves them all. A long synchronous run sees
 * its start time throughout (a few milliseconds at most on the ingest path).
 */
export class TaskCachedClock implements Clock {
  #mono = NaN;
  #wall = NaN;
  readonly #source: Clock;
  readonly #forget = (): void => {
    this.#mono = NaN;
    this.#wall = NaN;
  };

  /** Caches `source` (default: {@linkcode systemClock}). */
  constructor(source: Clock = systemClock) {
    this.#source = source;
  }

  /** Monotonic time, read once per task. */
  nowMs(): number {
    if (this.#mono !== this.#mono) {
      if (this.#wall !== this.#wall) queueMicrotask(this.#forget);
      this.#mono = this.#source.nowMs();
    }
    return this.#mono;
  }

  /** Wall time, read once per task. */
  wallMs(): number {
    if (this.#wall !== this.#wall) {
      if (this.#mono !== this.#mono) queueMicrotask(this.#forget);
      this.#wall = this.#source.wallMs();
    }
    return this.#wall;
  }
}
