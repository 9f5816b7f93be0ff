/**
 * The drain at stop and at a transport switch, shared by every listener: input the kernel has
 * already acknowledged (TCP/TLS bytes, queued datagrams) is read and decoded before a socket
 * closes. A source counts as drained once a quiet period passes without a read; the whole
 * drain is bounded by a deadline. Both are real time: a stop must end whatever clock the
 * sessions run on.
 *
 * @module
 */

/** Bounds of a drain. */
export interface DrainOptions {
  /** Longest the drain may take (ms). */
  readonly deadlineMs: number;
  /** A source without a read for this long (ms, the event loop not lagging) is drained. */
  readonly quietMs: number;
}

/**
 * Default bounds: 2 s in all (a SIGTERM's grace period is 30 s in Kubernetes, and the held
 * flows still have to be exported after it); 100 ms of silence means the kernel holds nothing
 * more for a peer (what it acknowledged is read at once unless the process is busy, which a
 * lagging round detects).
 */
export const DEFAULT_DRAIN: DrainOptions = Object.freeze({ deadlineMs: 2000, quietMs: 100 });

/** Outcome of one {@linkcode drainRound}. */
export type DrainRound = "deadline" | "judge" | "lagging";

/**
 * Waits one quiet period before `deadline` (a `performance.now()` time): `lagging` when the
 * wait took much longer than asked (the event loop was busy decoding: silence in that round
 * proves nothing), else `judge`: a source with no read since the previous round is drained.
 * When less than a quiet period is left, waits out the rest and says `deadline`: a shorter
 * round proves nothing either. The timers' lateness can leave the last round a fraction of a
 * millisecond (0.2 ms measured under load), in which a peer still sending, read every 20 ms,
 * would look quiet and be closed as drained instead of cut at the deadline and counted.
 */
export async function drainRound(options: DrainOptions, deadline: number): Promise<DrainRound> {
  const left = deadline - performance.now();
  if (left < options.quietMs) {
    if (left > 0) await new Promise((r) => setTimeout(r, left));
    return "deadline";
  }
  const wait = options.quietMs;
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, wait));
  return performance.now() - t0 < wait * 1.5 ? "judge" : "lagging";
}
