/**
 * Pacing of the senders (flowgen and the replay sender): a records/s target met by sending
 * small batches against a monotonic clock. On schedule each pass sends what came due since the
 * last one; after a stall (CPU contention, TCP back-pressure) up to {@linkcode CATCH_UP_MS}
 * worth goes out at once, so the average rate recovers without one huge burst. The clock is
 * injected so the schedule is tested without real time.
 *
 * @module
 */

/** What a {@linkcode Pacer} reads time from and sleeps on. */
export interface PaceClock {
  /** Monotonic milliseconds. */
  now(): number;
  /** Resolves after about `ms` milliseconds. */
  sleep(ms: number): Promise<void>;
}

/** `performance.now()` and a timer. */
export const SYSTEM_PACE_CLOCK: PaceClock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

/** Most traffic sent at once after a stall, in milliseconds of the target rate. */
export const CATCH_UP_MS = 50;

/** Longest sleep while waiting for the next record (timers have ~1 ms granularity). */
const MAX_SLEEP_MS = 5;

/** Largest batch of a paced sender, whatever the rate. */
const MAX_PACED_BATCH = 8192;

/** The schedule of one sender: {@linkcode Pacer.due} before each batch, {@linkcode Pacer.wait} when nothing is. */
export class Pacer {
  readonly #rate: number;
  readonly #clock: PaceClock;
  readonly #maxBatch: number;
  readonly #start: number;

  /**
   * A schedule of `rate` records/s from now (0: unpaced, every pass may send `unpacedBatch`).
   */
  constructor(rate: number, opts: { unpacedBatch: number; clock?: PaceClock }) {
    this.#rate = rate;
    this.#clock = opts.clock ?? SYSTEM_PACE_CLOCK;
    this.#maxBatch = rate > 0
      ? Math.max(1, Math.min(MAX_PACED_BATCH, Math.ceil((rate * CATCH_UP_MS) / 1000)))
      : opts.unpacedBatch;
    this.#start = this.#clock.now();
  }

  /** Milliseconds since the schedule started. */
  elapsedMs(): number {
    return this.#clock.now() - this.#start;
  }

  /**
   * Records that may go out now when `sent` went out so far: what is due (the next record is
   * due as soon as the previous one's time came), at most {@linkcode CATCH_UP_MS} worth; 0 or
   * less when the sender is ahead (then {@linkcode wait}).
   */
  due(sent: number): number {
    if (this.#rate <= 0) return this.#maxBatch;
    return Math.min(this.#maxBatch, Math.floor((this.#rate * this.elapsedMs()) / 1000) + 1 - sent);
  }

  /** Sleeps until the record after `sent` is due (at most a few milliseconds at a time). */
  wait(sent: number): Promise<void> {
    const nextAt = (sent / this.#rate) * 1000;
    return this.#clock.sleep(Math.max(0, Math.min(MAX_SLEEP_MS, nextAt - this.elapsedMs())));
  }
}
