/**
 * The HTTP library client-node's requests go through (and the checks our watch shares): it
 * sends them as client-node's own does, with undici's fetch, but
 *
 * - reads an answer up to a bound ({@linkcode MAX_ANSWER_BYTES} for an object,
 *   {@linkcode MAX_LIST_PAGE_BYTES} for a page of the Pod list) and refuses it past that:
 *   client-node's own read the whole body, however large (a 256 MiB ConfigMap grew memory by a
 *   gigabyte);
 * - never follows a redirect (an API server sends none): a 307 sent a POST, our CA's private key
 *   in its body, to another origin;
 * - fails the call when its signal aborts while the body is still coming: undici's fetch closes
 *   the connection then, but the body read it left pending never settled (a server that sent its
 *   headers and then nothing more kept `set` waiting until Deno ended it with "Top-level await
 *   promise never resolved", and left each timed-out attempt of the aggregator's retries pending
 *   for good).
 *
 * The first two fail the call (its caller retries, as for any failure) and are counted.
 */

import type * as k8s from "@kubernetes/client-node";
import { concatBytes } from "../bytes.ts";
import type { fetch as undiciFetch } from "undici";

/** Counters of the HTTP library. */
export interface HttpStats {
  /** Answers refused for their size (over {@linkcode MAX_ANSWER_BYTES} or a list page's). */
  answersTooLarge: number;
  /** Redirects refused (a call, or a watch, answered 301/302/303/307/308). */
  redirectsRefused: number;
}

/**
 * Most bytes of an answer to a get, create or replace (an object, or a `Status`): etcd keeps
 * objects under 1.5 MiB.
 */
export const MAX_ANSWER_BYTES = 4 << 20;

/**
 * Most bytes of one page of the Pod list (`LIST_PAGE_SIZE`, 500 Pods): 16 KiB a Pod on average,
 * about a usual Pod with a sidecar's worth of annotations (past it the page is asked again with
 * half the Pods, and that size is kept). A page is parsed in one piece on the main thread, every
 * flow waiting: 39 MiB took 1.5 s (a review's measurement), 16 MiB of label-heavy Pods
 * 0.4-1.3 s with the machine busy; at 8 MiB about half that. A watch line (one Pod) is bounded
 * apart, at 4 MiB.
 */
export const MAX_LIST_PAGE_BYTES = 8 << 20;

/** Thrown for an answer over its bound: the call fails (its caller retries), counted. */
export class AnswerTooLarge extends Error {
  /** Creates the error. */
  constructor(bytes: number | undefined, max: number) {
    super(
      `k8s: the API server's answer ${
        bytes === undefined ? "passed" : `is ${bytes} bytes, over`
      } ${max} bytes: refused`,
    );
    this.name = "AnswerTooLarge";
  }
}

/**
 * Thrown for a redirect: an API server does not send them, and following one sent the request,
 * its body (our CA's private key) and headers to wherever it pointed.
 */
export class RedirectRefused extends Error {
  /** The redirect's status. */
  readonly statusCode: number;
  /** Creates the error. */
  constructor(status: number, location: string | null) {
    super(`k8s: the API server answered ${status}, a redirect to ${where(location)}: refused`);
    this.name = "RedirectRefused";
    this.statusCode = status;
  }
}

/**
 * Thrown when the call's signal aborts while its answer's body is still being read (a server
 * that sent the headers and then stalled): the request timed out, or was cancelled. For a
 * request that changes something (a PUT, a POST) the server may or may not have applied it.
 */
export class AnswerAborted extends Error {
  /** True when the signal's reason is a timeout (not a cancellation). */
  readonly timedOut: boolean;
  /** Creates the error; `reason` is the signal's. */
  constructor(method: string, reason: unknown) {
    const name = (reason as { name?: unknown } | undefined)?.name;
    const timedOut = name !== "AbortError" && name !== "RetryAborted";
    super(
      `k8s: the request ${timedOut ? "timed out" : "was cancelled"} while its answer was coming ` +
        `(the API server sent the headers of its answer to the ${method}, not all of its body)`,
      { cause: reason },
    );
    this.name = "AnswerAborted";
    this.timedOut = timedOut;
  }
}

/**
 * The reader's next chunk, or a rejection with {@linkcode AnswerAborted} as soon as `signal`
 * aborts (the reader is then cancelled, not awaited: a stalled stream may not answer that either).
 */
async function readOrAbort(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  signal: AbortSignal | undefined,
  method: string,
): Promise<ReadableStreamReadResult<Uint8Array>> {
  if (signal === undefined) return await reader.read();
  const aborted = (): AnswerAborted => {
    reader.cancel().catch(() => {});
    return new AnswerAborted(method, signal.reason);
  };
  if (signal.aborted) throw aborted();
  let onAbort = (): void => {};
  const abort = new Promise<never>((_, reject) => {
    onAbort = () => reject(aborted());
    signal.addEventListener("abort", onAbort, { once: true });
  });
  try {
    const read = await Promise.race([reader.read(), abort]);
    // undici may also end the body early on an abort, as if it were whole: it is not.
    if (signal.aborted) throw aborted();
    return read;
  } catch (err) {
    if (err instanceof AnswerAborted) throw err;
    // The read itself failed because of the abort (the connection closed under it).
    if (signal.aborted) throw new AnswerAborted(method, signal.reason);
    throw err;
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
}

/** Where a redirect points, for a message: its origin only (a path or query may be anything). */
function where(location: string | null): string {
  if (location === null) return "nowhere";
  try {
    const origin = new URL(location, "http://same-origin").origin;
    return origin === "http://same-origin" ? "the same origin" : origin;
  } catch {
    return "an unreadable location";
  }
}

/** True for the statuses of a redirect. */
export function isRedirect(status: number): boolean {
  return status === 301 || status === 302 || status === 303 || status === 307 || status === 308;
}

/**
 * An HTTP library for client-node, sending as its own does (undici's fetch) but reading the
 * answer itself, at most `maxBytes` of it: the declared length is checked first, then the
 * bytes as they come, and past the bound the answer is cancelled (its connection closed) and
 * the call fails with {@linkcode AnswerTooLarge}. A redirect is not followed: the call fails
 * with {@linkcode RedirectRefused}.
 */
export function boundedHttpLibrary(
  client: { lib: typeof k8s; fetch: typeof undiciFetch },
  options: { maxBytes: number; stats: HttpStats },
): k8s.HttpLibrary {
  return client.lib.wrapHttpLibrary({ send: boundedSend(client, options) });
}

/**
 * The send of {@linkcode boundedHttpLibrary}, as a promise: for a request made by us rather
 * than by client-node (whose answer we parse ourselves).
 */
export function boundedSend(
  client: { lib: typeof k8s; fetch: typeof undiciFetch },
  options: { maxBytes: number; stats: HttpStats },
): (request: k8s.RequestContext) => Promise<k8s.ResponseContext> {
  const { lib, fetch } = client;
  const { maxBytes, stats } = options;
  const tooLarge = (bytes: number | undefined): AnswerTooLarge => {
    stats.answersTooLarge++;
    return new AnswerTooLarge(bytes, maxBytes);
  };
  return async function send(request) {
    const method = request.getHttpMethod().toString();
    const signal = request.getSignal();
    const res = await fetch(request.getUrl(), {
      method,
      body: request.getBody(),
      headers: request.getHeaders(),
      signal,
      // deno-lint-ignore no-explicit-any
      dispatcher: request.getDispatcher() as any,
      // Never followed (see RedirectRefused).
      redirect: "manual",
    });
    if (isRedirect(res.status)) {
      await res.body?.cancel().catch(() => {});
      stats.redirectsRefused++;
      throw new RedirectRefused(res.status, res.headers.get("location"));
    }
    const declared = Number(res.headers.get("content-length") ?? NaN);
    if (declared > maxBytes) {
      await res.body?.cancel().catch(() => {});
      throw tooLarge(declared);
    }
    const chunks: Uint8Array[] = [];
    let bytes = 0;
    if (res.body !== null) {
      const reader = res.body.getReader();
      for (;;) {
        const { value, done } = await readOrAbort(reader, signal, method);
        if (done) break;
        bytes += value.byteLength;
        if (bytes > maxBytes) {
          await reader.cancel().catch(() => {});
          throw tooLarge(undefined);
        }
        chunks.push(value);
      }
    }
    const headers: Record<string, string> = {};
    res.headers.forEach((value, name) => headers[name] = value);
    const body = concatBytes(chunks);
    return new lib.ResponseContext(res.status, headers, {
      text: () => Promise.resolve(new TextDecoder().decode(body)),
      // Node.js modules only in a cluster, and this one only if asked (our calls read text).
      binary: async () => (await import("node:buffer")).Buffer.from(body),
      stream: () => null,
    });
  };
}
