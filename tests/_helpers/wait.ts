/**
 * Polling with a deadline for tests that wait on I/O (sockets, files, child processes): the
 * condition is checked at once and then every `intervalMs` until it holds, and a timeout
 * throws an error naming what was awaited, so a failing test says what never happened.
 */

/** How long and how often to poll, and what the wait is for (used in the timeout error). */
export interface WaitOptions {
  /** Deadline in milliseconds; default 5000. */
  timeoutMs?: number;
  /** Pause between two checks in milliseconds; default 10 (0 yields to the event loop only). */
  intervalMs?: number;
  /** What is awaited, for the error message; default "condition". */
  what?: string;
}

/**
 * Polls `check` until it returns a value other than `undefined` and resolves with it; throws
 * `timeout after N ms waiting for <what>` at the deadline.
 */
export async function pollUntil<T>(
  check: () => T | undefined | Promise<T | undefined>,
  options: WaitOptions = {},
): Promise<T> {
  const { timeoutMs = 5000, intervalMs = 10, what = "condition" } = options;
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (performance.now() > deadline) {
      throw new Error(`timeout after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** Polls `predicate` until it is true; throws naming `what` at the deadline. */
export async function waitFor(
  predicate: () => boolean | Promise<boolean>,
  options: WaitOptions = {},
): Promise<void> {
  await pollUntil(async () => (await predicate()) ? true : undefined, options);
}

/** Options of {@linkcode settleDriving}. */
export interface DriveOptions extends WaitOptions {
  /** Timers due further away than this are never fired by the drive (timeouts); default 60 s. */
  maxFireMs?: number;
}

/**
 * Awaits `work` while firing the clock's pending timers that are due within `maxFireMs` (the
 * pauses of a retry with backoff), one per real poll so I/O happens in between; longer timers
 * (attempt timeouts) are left alone. Throws naming `what` if `work` is still pending at the
 * (real-time) deadline.
 */
export async function settleDriving<T>(
  clock: { advance(ms: number): void; pendingTimers(): number[] },
  work: Promise<T>,
  options: DriveOptions = {},
): Promise<T> {
  let done = false;
  const tracked = work.finally(() => done = true);
  tracked.catch(() => {}); // observed below
  const maxFire = options.maxFireMs ?? 60_000;
  await waitFor(() => {
    const next = clock.pendingTimers()[0];
    if (!done && next !== undefined && next <= maxFire) clock.advance(next);
    return done;
  }, { timeoutMs: 10_000, intervalMs: 5, ...options });
  return await tracked;
}

/**
 * `p`, or a rejection `timeout after N ms waiting for <what>` if it is still pending after `ms`:
 * for a promise that must settle (a stop, a close), so a test that would hang fails instead.
 */
export async function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timeout after ${ms} ms waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
