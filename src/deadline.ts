/**
 * A call bounded in wall-clock time whatever its peer does: the sinks' requests to ClickHouse
 * and S3, whose libraries stop watching their abort signal once an answer's headers are in (a
 * server trickling its answer's body would otherwise hold the call, its connection and the
 * sink's stop forever).
 *
 * @module
 */

/** A call given up by {@linkcode withDeadline}: its deadline passed, or its caller aborted it. */
export class CallGivenUp extends Error {
  /** True when the deadline passed (false: the caller's signal aborted). */
  readonly timedOut: boolean;

  /** `what` was given up: `timedOut`, or aborted for `reason`. */
  constructor(what: string, timedOut: boolean, detail: string) {
    super(`${what}: ${detail}`);
    this.name = timedOut ? "TimeoutError" : "AbortError";
    this.timedOut = timedOut;
  }
}

/**
 * Runs `run` with a signal aborted after `ms` or when `outer` aborts, and settles by then at the
 * latest, rejecting with {@linkcode CallGivenUp}, whether or not `run` heeds its signal (`run`
 * is expected to abort its requests and destroy its streams on it). A late settlement of `run`
 * is ignored.
 */
export async function withDeadline<T>(
  what: string,
  ms: number,
  outer: AbortSignal | undefined,
  run: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const ctl = new AbortController();
  const gaveUp = new Promise<never>((_, reject) => {
    ctl.signal.addEventListener("abort", () => reject(ctl.signal.reason), { once: true });
  });
  gaveUp.catch(() => {}); // (a call that ends in time never reads it)
  const timer = setTimeout(
    () => ctl.abort(new CallGivenUp(what, true, `no complete answer within ${ms} ms`)),
    ms,
  );
  const onAbort = () => {
    const r = outer?.reason;
    ctl.abort(
      new CallGivenUp(what, false, r instanceof Error ? r.message : String(r ?? "aborted")),
    );
  };
  if (outer?.aborted) onAbort();
  else outer?.addEventListener("abort", onAbort, { once: true });
  try {
    if (ctl.signal.aborted) return await gaveUp;
    const running = run(ctl.signal);
    running.catch(() => {}); // a late rejection of a call given up is not unhandled
    return await Promise.race([running, gaveUp]);
  } finally {
    clearTimeout(timer);
    outer?.removeEventListener("abort", onAbort);
  }
}
