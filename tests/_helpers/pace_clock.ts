/**
 * A {@linkcode PaceClock} that moves only when slept on or advanced: a sender's schedule
 * (src/flowgen/pace.ts) runs on it as fast as the sender can go, and its figures are exact.
 */

import type { PaceClock } from "../../src/flowgen/pace.ts";

/** Manual time for the senders' pacing. */
export class ManualPaceClock implements PaceClock {
  /** Milliseconds now. */
  t = 1_000;
  /** Sleeps so far. */
  slept = 0;

  /** The current time. */
  now(): number {
    return this.t;
  }

  /** Moves the time by `ms` (at least a microsecond, so a zero sleep still progresses). */
  sleep(ms: number): Promise<void> {
    this.t += Math.max(ms, 0.001);
    this.slept++;
    return Promise.resolve();
  }
}
