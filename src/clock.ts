/**
 * Injected time. Pure components (aggregation, template expiry, rotation by age) never read the
 * global clock, and components that wait (reconnect backoff, timeouts) never arm a global timer:
 * they take a {@linkcode Clock}, and tests drive a {@linkcode ManualClock}, whose timers fire
 * when the test advances it.
 */

/** A timer armed with {@linkcode Clock.setTimer}. */
export interface ClockTimer {
  /** Disarms the timer; idempotent, and harmless once it has fired. */
  cancel(): void;
}

/** Options of {@linkcode Clock.setTimer}. */
export interface ClockTimerOptions {
  /** The timer alone does not keep the process alive (`Deno.unrefTimer`). */
  unref?: boolean;
}

/** A source of time in milliseconds, and timers on that time. */
export interface Clock {
  /** Monotonic milliseconds, for timeouts and expiry. */
  nowMs(): number;
  /** Wall-clock milliseconds since the Unix epoch, for timestamps. */
  wallMs(): number;
  /** Calls `fn` once, when `ms` milliseconds of monotonic time have passed. */
  setTimer(ms: number, fn: () => void, options?: ClockTimerOptions): ClockTimer;
}

/**
 * Longest delay a JS timer takes (2^31-1 ms, about 24.8 days): past it Deno fires the timer at
 * once (after 1 ms), so an interval or timeout configured longer would run continuously. The
 * configuration's durations are capped at it (`parseWaitDuration`), and so is every timer of
 * {@linkcode systemClock}.
 */
export const MAX_TIMER_DELAY_MS = 2 ** 31 - 1;

/** The process clock. */
export const systemClock: Clock = {
  nowMs: () => performance.now(),
  wallMs: () => Date.now(),
  setTimer(ms: number, fn: () => void, options?: ClockTimerOptions): ClockTimer {
    const id = setTimeout(fn, Math.min(Math.max(0, ms), MAX_TIMER_DELAY_MS));
    if (options?.unref) Deno.unrefTimer(id);
    return { cancel: () => clearTimeout(id) };
  },
};

/**
 * Waits for `work` at most `ms` on `clock` (default the process clock): "timeout" when it did not
 * settle in time (a rejection of `work` within the time rejects). The timer is cancelled either
 * way.
 */
export async function within(
  work: Promise<unknown>,
  ms: number,
  clock: Clock = systemClock,
): Promise<"done" | "timeout"> {
  let timer: ClockTimer | undefined;
  const timedOut = new Promise<"timeout">((resolve) => {
    timer = clock.setTimer(ms, () => resolve("timeout"));
  });
  try {
    return await Promise.race([work.then(() => "done" as const), timedOut]);
  } finally {
    timer?.cancel();
  }
}

interface ManualTimer {
  readonly due: number;
  readonly fn: () => void;
}

/** A clock that moves only when told to; for tests. */
export class ManualClock implements Clock {
  #mono: number;
  #wall: number;
  /** Pending timers in arming order (timers due at the same time fire in that order). */
  #timers: ManualTimer[] = [];
  #waiters: { count: number; resolve: () => void }[] = [];

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

  /** Arms a timer that fires when {@linkcode ManualClock.advance} reaches its due time. */
  setTimer(ms: number, fn: () => void, _options?: ClockTimerOptions): ClockTimer {
    const t: ManualTimer = { due: this.#mono + Math.max(0, ms), fn };
    this.#timers.push(t);
    const waiters = this.#waiters;
    this.#waiters = waiters.filter((w) => w.count > this.#timers.length);
    for (const w of waiters) if (w.count <= this.#timers.length) w.resolve();
    return {
      cancel: () => {
        const i = this.#timers.indexOf(t);
        if (i >= 0) this.#timers.splice(i, 1);
      },
    };
  }

  /** Time left on each pending timer (armed, not fired or cancelled), soonest first. */
  pendingTimers(): number[] {
    return this.#timers.map((t) => t.due - this.#mono).sort((a, b) => a - b);
  }

  /**
   * Resolves once at least `count` timers are pending: lets a test wait until the code under
   * test has reached its next wait (after real I/O) without sleeping itself.
   */
  whenTimersPending(count = 1): Promise<void> {
    if (this.#timers.length >= count) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ count, resolve }));
  }

  /**
   * Moves both clocks forward by `ms`, firing every timer that falls due on the way, in due
   * order; each runs with the clock at its due time (timers it arms fire too if due by then).
   */
  advance(ms: number): void {
    const target = this.#mono + ms;
    for (;;) {
      let next: ManualTimer | undefined;
      for (const t of this.#timers) {
        if (t.due <= target && (next === undefined || t.due < next.due)) next = t;
      }
      if (next === undefined) break;
      this.#timers.splice(this.#timers.indexOf(next), 1);
      this.#moveTo(Math.max(this.#mono, next.due));
      next.fn();
    }
    this.#moveTo(target);
  }

  #moveTo(mono: number): void {
    this.#wall += mono - this.#mono;
    this.#mono = mono;
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

  /** A timer of the source clock. */
  setTimer(ms: number, fn: () => void, options?: ClockTimerOptions): ClockTimer {
    return this.#source.setTimer(ms, fn, options);
  }
}
