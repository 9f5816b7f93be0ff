/**
 * A {@linkcode ManualClock} whose wall time can also be stepped on its own, as NTP steps it or a
 * VM resumed sets it, or as local time goes back at a DST fall-back: monotonic time never moves
 * but forward, with {@linkcode JumpClock.advance}.
 */

import {
  type Clock,
  type ClockTimer,
  type ClockTimerOptions,
  ManualClock,
} from "../../src/clock.ts";

/** Manual time with wall-clock steps. */
export class JumpClock implements Clock {
  readonly #inner: ManualClock;
  #step = 0;

  /** Starts at `wallMs` (default ManualClock's) with a monotonic time of 0. */
  constructor(wallMs?: number) {
    this.#inner = new ManualClock(wallMs);
  }

  /** Monotonic time: only {@linkcode advance} moves it. */
  nowMs(): number {
    return this.#inner.nowMs();
  }

  /** Wall time: moved by {@linkcode advance} and {@linkcode stepWall}. */
  wallMs(): number {
    return this.#inner.wallMs() + this.#step;
  }

  /** A timer on monotonic time. */
  setTimer(ms: number, fn: () => void, options?: ClockTimerOptions): ClockTimer {
    return this.#inner.setTimer(ms, fn, options);
  }

  /** Moves both clocks forward by `ms`, firing the timers due. */
  advance(ms: number): void {
    this.#inner.advance(ms);
  }

  /** Steps the wall clock alone by `ms` (negative: back). */
  stepWall(ms: number): void {
    this.#step += ms;
  }

  /** Resolves once at least `count` timers are pending (as ManualClock's). */
  whenTimersPending(count = 1): Promise<void> {
    return this.#inner.whenTimersPending(count);
  }
}
