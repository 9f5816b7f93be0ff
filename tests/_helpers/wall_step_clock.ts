/**
 * A {@linkcode ManualClock} whose wall time can also be stepped on its own, as NTP steps a
 * system clock that was wrong: monotonic time (and the timers on it) does not move.
 */

import {
  type Clock,
  type ClockTimer,
  type ClockTimerOptions,
  ManualClock,
} from "../../src/clock.ts";

/** A manual clock with wall-clock steps ({@linkcode WallStepClock.stepWall}). */
export class WallStepClock implements Clock {
  /** The clock under it: timers and {@linkcode ManualClock.pendingTimers}. */
  readonly manual: ManualClock;
  #offsetMs = 0;

  /** Wall time starts at `wallMs`, monotonic time at 0. */
  constructor(wallMs: number) {
    this.manual = new ManualClock(wallMs);
  }

  /** Monotonic time. */
  nowMs(): number {
    return this.manual.nowMs();
  }

  /** Wall time, with the steps. */
  wallMs(): number {
    return this.manual.wallMs() + this.#offsetMs;
  }

  /** A timer on monotonic time. */
  setTimer(ms: number, fn: () => void, options?: ClockTimerOptions): ClockTimer {
    return this.manual.setTimer(ms, fn, options);
  }

  /** Moves both clocks forward by `ms`, firing the timers due. */
  advance(ms: number): void {
    this.manual.advance(ms);
  }

  /** Steps the wall clock alone by `ms` (negative: back). */
  stepWall(ms: number): void {
    this.#offsetMs += ms;
  }
}
