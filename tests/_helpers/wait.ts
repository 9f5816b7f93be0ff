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
