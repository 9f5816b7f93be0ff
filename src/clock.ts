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
