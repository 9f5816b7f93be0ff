/**
 * A {@linkcode ManualClock} whose wall time can also be stepped alone, as an NTP step or a VM
 * resume does: monotonic time and timers are untouched by the step.
 */

import { ManualClock } from "../../src/clock.ts";

/** Manual time with wall-clock steps. */
export class WallStepClock extends ManualClock {
  #offset = 0;

  /** Wall time: the manual clock's, plus every step so far. */
  override wallMs(): number {
    return super.wallMs() + this.#offset;
  }

  /** Steps the wall clock by `ms` (negative: back); monotonic time does not move. */
  stepWall(ms: number): void {
    this.#offset += ms;
  }
}
