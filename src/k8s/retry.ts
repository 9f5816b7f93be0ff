/**
 * Retries with exponential backoff on an injected clock, for every Kubernetes step: the API
 * server being down or slow must delay a step, never fail the process or stop collection. Each
 * attempt is bounded by a timeout (a hung connection counts as a failed attempt) and gets its own
 * `AbortSignal`, aborted when it times out or the retrying stops, so that its request is
 * cancelled and its connection closed (a trickling server must not pile up connections), each
 * failure is counted and logged (at most once per backoff period, since the period is the rate
 * limit).
 */

import type { Clock } from "../clock.ts";
import type { Logger } from "../log.ts";

/** Backoff of {@linkcode retrying}. */
export interface Backoff {
  /** First pause after a failure, ms; default 500. */
  initialMs?: number;
  /** Longest pause, ms; default 30 000. */
  maxMs?: number;
  /**
   * Longest wait for one attempt, ms, before it counts as failed; default
   * {@linkcode ATTEMPT_TIMEOUT_MS}.
   */
  attemptTimeoutMs?: number;
}

/** Default longest wait for one API call, ms. */
export const ATTEMPT_TIMEOUT_MS = 10_000;

/** Options of {@linkcode retrying}. */
export interface RetryOptions extends Backoff {
  /** Time source of the pauses and the attempt timeout. */
  clock: Clock;
  /** Where failures are logged. */
  log: Logger;
  /** Stops retrying: the promise rejects with {@linkcode RetryAborted}. */
  signal?: AbortSignal;
  /** Called after each failed attempt (counters). */
  onFailure?: (err: unknown) => void;
}

/** Thrown by {@linkcode retrying} and {@linkcode sleep} when their signal aborts. */
export class RetryAborted extends Error {
  /** Creates the error. */
  constructor() {
    super("k8s: stopped");
    this.name = "RetryAborted";
  }
}

/** Resolves after `ms` on `clock`; rejects with {@linkcode RetryAborted} when `signal` aborts. */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<void> {
  if (signal?.aborted) return Promise.reject(new RetryAborted());
  return new Promise((resolve, reject) => {
    const onAbort = (): void => {
      timer.cancel();
      reject(new RetryAborted());
    };
    const timer = clock.setTimer(ms, () => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, { unref: true });
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * `work`, or a rejection when it has not settled after `ms` on `clock`; `onTimeout` is called
 * then (to cancel the work).
 */
export function withTimeout<T>(
  work: Promise<T>,
  ms: number,
  clock: Clock,
  onTimeout?: (err: Error) => void,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = clock.setTimer(ms, () => {
      const err = new Error(`no answer from the Kubernetes API within ${ms} ms`);
      onTimeout?.(err);
      reject(err);
    }, { unref: true });
    work.then(
      (v) => {
        timer.cancel();
        resolve(v);
      },
      (err) => {
        timer.cancel();
        reject(err);
      },
    );
  });
}

/** `work`, or a rejection with `signal`'s reason as soon as it aborts (stop never waits). */
function abortable<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** Default longest pause of a backoff, ms. */
export const MAX_PAUSE_MS = 30_000;

/** Next pause: doubled, capped. */
export function nextBackoff(ms: number, backoff: Backoff = {}): number {
  return Math.min(ms * 2, backoff.maxMs ?? MAX_PAUSE_MS);
}

/**
 * The pause after `err`: the backoff's `pause`, or the server's `Retry-After` when longer (at
 * most the backoff's cap).
 */
export function pauseAfter(err: unknown, pause: number, backoff: Backoff = {}): number {
  return Math.max(pause, Math.min(retryAfterMs(err) ?? 0, backoff.maxMs ?? MAX_PAUSE_MS));
}

/**
 * The wait a `429 Too Many Requests` (or a 503) asks for in its `Retry-After` header, ms
 * (seconds, or an HTTP date), or undefined: another status, no header, or one unreadable. The
 * caller bounds it.
 */
export function retryAfterMs(err: unknown, nowMs: number = Date.now()): number | undefined {
  const code = statusOf(err);
  if (code !== 429 && code !== 503) return undefined;
  // deno-lint-ignore no-explicit-any
  const headers = (err as any)?.headers;
  let value: unknown;
  if (headers instanceof Headers) value = headers.get("retry-after");
  else if (typeof headers === "object" && headers !== null) {
    for (const [k, v] of Object.entries(headers)) {
      if (k.toLowerCase() === "retry-after") value = v;
    }
  }
  if (typeof value !== "string" || value.trim() === "") return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - nowMs);
}

/**
 * Runs `attempt` until it succeeds, pausing with exponential backoff after each failure; `what`
 * names the step in the log. Each attempt is given a signal, aborted when the attempt times out
 * or `options.signal` aborts: pass it to the attempt's requests.
 */
export async function retrying<T>(
  what: string,
  attempt: (signal: AbortSignal) => Promise<T>,
  options: RetryOptions,
): Promise<T> {
  const { clock, log, signal } = options;
  let pause = options.initialMs ?? 500;
  for (let n = 1;; n++) {
    if (signal?.aborted) throw new RetryAborted();
    const cancel = new AbortController();
    const onStop = (): void => cancel.abort(new RetryAborted());
    signal?.addEventListener("abort", onStop, { once: true });
    try {
      const timed = withTimeout(
        attempt(cancel.signal),
        options.attemptTimeoutMs ?? ATTEMPT_TIMEOUT_MS,
        clock,
        (err) => cancel.abort(err),
      );
      // The attempt's own signal: aborted by the stop (RetryAborted) or the timeout (its error).
      return await abortable(timed, cancel.signal);
    } catch (err) {
      if (err instanceof RetryAborted) throw err;
      options.onFailure?.(err);
      // A 429's Retry-After is honoured (the API server's priority and fairness sheds load
      // so), never past the backoff's cap: a server asking for an hour does not get it.
      const wait = pauseAfter(err, pause, options);
      log.warn(`${what} failed, retrying`, { attempt: n, retryInMs: wait, err: describe(err) });
      await sleep(clock, wait, signal);
      pause = nextBackoff(pause, options);
    } finally {
      signal?.removeEventListener("abort", onStop);
    }
  }
}

/** A short description of an API error (status and message; never a request body or token). */
export function describe(err: unknown): string {
  const code = statusOf(err);
  // deno-lint-ignore no-explicit-any
  let body = (err as any)?.body;
  if (typeof body === "string") {
    try {
      body = JSON.parse(body); // client-node keeps the Status as text
    } catch {
      // not JSON: used as is when short
    }
  }
  const message = typeof body === "object" && body !== null && typeof body.message === "string"
    ? body.message
    : typeof body === "string" && body.length < 300
    ? body
    : err instanceof Error
    ? err.message.split("\n")[0]
    : String(err);
  // undici's fetch says only "fetch failed": why (a TLS error, a refused connection) is in its
  // cause, as are the reasons of other wrapped errors.
  const why = causeOf(err);
  const text = why === undefined || message.includes(why) ? message : `${message}: ${why}`;
  if (code === 401) return GENERIC_401.test(text) ? `401 ${REFUSED}` : `401 ${REFUSED}: ${text}`;
  // client-node's ApiException for an answer without a body: its first line is only the code.
  if (code !== undefined && /^HTTP-Code: \d+$/.test(text)) {
    return `${code}: the API server's answer said nothing more`;
  }
  return code === undefined ? text : `${code}: ${text}`;
}

/** What a 401 means, for the logs: client-node's said only "HTTP-Code: 401". */
const REFUSED = "Unauthorized: the token or credential was refused";

/**
 * The messages a 401 comes with that say nothing more than its code (client-node's
 * ApiException has no body for one, the API server's Status says "Unauthorized").
 */
const GENERIC_401 = /^(HTTP-Code: 401|HTTP 401|Unauthorized|)$/i;

/** The first line of the messages of `err`'s causes (at most 3 deep), joined, or undefined. */
function causeOf(err: unknown): string | undefined {
  const parts: string[] = [];
  // deno-lint-ignore no-explicit-any
  let e = (err as any)?.cause;
  for (let depth = 0; e !== undefined && e !== null && depth < 3; depth++) {
    const m = e instanceof Error ? e.message : typeof e === "string" ? e : undefined;
    const code = typeof e?.code === "string" ? e.code : undefined;
    const line = m?.split("\n")[0].slice(0, 300);
    if (line) parts.push(code !== undefined && !line.includes(code) ? `${line} (${code})` : line);
    e = e?.cause;
  }
  return parts.length === 0 ? undefined : parts.join(": ");
}

/**
 * The HTTP status of an API error (client-node's `ApiException.code`, our watch's
 * `statusCode`), if it has one. A `DOMException`'s numeric `code` (23 for a timeout) is no HTTP
 * status, nor is any number outside 100–599.
 */
export function statusOf(err: unknown): number | undefined {
  if (err instanceof DOMException) return undefined;
  // deno-lint-ignore no-explicit-any
  const e = err as any;
  const code = e?.code ?? e?.statusCode;
  return typeof code === "number" && code >= 100 && code <= 599 ? code : undefined;
}
