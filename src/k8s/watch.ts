/**
 * A Kubernetes watch stream read by us instead of client-node's `Watch`, which splits lines with
 * `node:readline` without a bound (a line without newline from the API server, or anything in
 * between, grew memory by 628 MiB in 2 s until an uncaught `RangeError: Invalid string length`
 * ended the process) and drops lines it cannot parse without a trace. Here a line is at most
 * {@linkcode MAX_WATCH_LINE_BYTES}: past it the watch ends with an error (its caller backs off
 * and watches again); a line that is no watch event goes to `onMalformed`. The request itself is
 * client-node's (authentication, TLS), sent with undici as client-node sends it; the watch ends
 * when its credentials take longer than `authMs` (an exec plugin, say), the answer's headers
 * longer than `headersMs` from then on, after `inactivityMs` without a whole line that is not
 * blank (whitespace alone is no sign of life), or `maxMs` after it began. The
 * bounds follow each other: a slow credential used to eat into the headers' bound, and a plugin
 * taking 8 s of its 10 made every watch fail.
 *
 * @module
 */

import type * as k8s from "@kubernetes/client-node";
import type { fetch as undiciFetch } from "undici";
import { isRedirect, RedirectRefused } from "./http.ts";

/** Longest watch line taken (a Pod is at most ~1.5 MiB, the object size etcd allows). */
export const MAX_WATCH_LINE_BYTES = 4 << 20;

/** One event of a watch stream. */
export interface WatchEvent {
  /** ADDED, MODIFIED, DELETED, BOOKMARK or ERROR. */
  type: string;
  /** The object (a `Status` for ERROR). */
  // deno-lint-ignore no-explicit-any
  object: any;
}

/** An open watch. */
export interface WatchHandle {
  /** Closes the stream. */
  abort(): void;
}

/** What a watch calls. */
export interface WatchHandlers {
  /** Each event, in order. */
  onEvent(ev: WatchEvent): void;
  /** Once, when the stream ended: null for a clean end or an abort we asked for. */
  onDone(err: unknown): void;
  /** A line that is no watch event (not JSON, no type), skipped. */
  onMalformed?(detail: string): void;
}

/** What {@linkcode watchStream} needs: client-node, a loaded configuration and undici's fetch. */
export interface WatchClient {
  readonly lib: typeof k8s;
  readonly kc: k8s.KubeConfig;
  readonly fetch: typeof undiciFetch;
}

/** Watches `path` with `query` (`watch=true` added); see the module doc. */
export function watchStream(
  client: WatchClient,
  path: string,
  query: Record<string, string | number | boolean | undefined>,
  handlers: WatchHandlers,
  opts: {
    authMs: number;
    headersMs: number;
    inactivityMs: number;
    maxLineBytes?: number;
    /** Longest a watch stays open from its start, whatever it sends (none when absent). */
    maxMs?: number;
  },
): WatchHandle {
  const maxLine = opts.maxLineBytes ?? MAX_WATCH_LINE_BYTES;
  const controller = new AbortController();
  let finished = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let cap: ReturnType<typeof setTimeout> | undefined;
  const finish = (err: unknown): void => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    clearTimeout(cap);
    controller.abort();
    handlers.onDone(err);
  };
  const arm = (ms = opts.inactivityMs, what = `no event for ${ms} ms`): void => {
    clearTimeout(timer);
    timer = setTimeout(() => finish(new DOMException(what, "TimeoutError")), ms);
    Deno.unrefTimer(timer as unknown as number);
  };
  const decoder = new TextDecoder();
  /** Handles one line; false when it was blank (no sign of life: see `arm`). */
  const line = (bytes: Uint8Array): boolean => {
    const text = decoder.decode(bytes).trim();
    if (text === "") return false;
    let data: { type?: unknown; object?: unknown } | null;
    try {
      data = JSON.parse(text);
    } catch {
      handlers.onMalformed?.("a line that is not JSON");
      return true;
    }
    if (data === null || typeof data !== "object" || typeof data.type !== "string") {
      handlers.onMalformed?.("a line without an event type");
      return true;
    }
    handlers.onEvent({ type: data.type, object: data.object });
    return true;
  };
  if (opts.maxMs !== undefined) {
    const maxMs = opts.maxMs;
    cap = setTimeout(
      () => finish(new DOMException(`watch open longer than ${maxMs} ms`, "TimeoutError")),
      maxMs,
    );
    Deno.unrefTimer(cap as unknown as number);
  }
  (async () => {
    arm(opts.authMs, `no credentials within ${opts.authMs} ms`);
    const cluster = client.kc.getCurrentCluster();
    if (!cluster) throw new Error("no current cluster in the Kubernetes configuration");
    const url = new URL(cluster.server + path);
    url.searchParams.set("watch", "true");
    for (const [k, v] of Object.entries(query)) {
      if (v !== undefined) url.searchParams.set(k, String(v));
    }
    const ctx = new client.lib.RequestContext(url.toString(), client.lib.HttpMethod.GET);
    await client.kc.applySecurityAuthentication(ctx);
    if (finished) return;
    arm(opts.headersMs, `no answer within ${opts.headersMs} ms`);
    const res = await client.fetch(url, {
      method: "GET",
      headers: ctx.getHeaders(),
      // deno-lint-ignore no-explicit-any
      dispatcher: ctx.getDispatcher() as any,
      signal: controller.signal,
      // Never followed: an API server sends none, and the request would go where it points.
      redirect: "manual",
    });
    if (isRedirect(res.status)) {
      await res.body?.cancel().catch(() => {});
      throw new RedirectRefused(res.status, res.headers.get("location"));
    }
    if (res.status !== 200) {
      await res.body?.cancel().catch(() => {});
      const e = new Error(res.statusText || `HTTP ${res.status}`) as Error & {
        statusCode: number;
        headers: Record<string, string>;
      };
      e.statusCode = res.status;
      // Its Retry-After, for the caller's pause (a 429).
      e.headers = { "retry-after": res.headers.get("retry-after") ?? "" };
      throw e;
    }
    arm();
    const reader = res.body!.getReader();
    let parts: Uint8Array[] = [];
    let partBytes = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done || finished) break;
      // Only a whole line that is not blank is a sign of life: any byte used to be, and a
      // space every 20 s kept a dead watch (and a stale store) open for good.
      let from = 0;
      for (let nl = value.indexOf(10); nl >= 0 && !finished; nl = value.indexOf(10, from)) {
        if (line(join(parts, partBytes, value.subarray(from, nl))) && !finished) arm();
        parts = [];
        partBytes = 0;
        from = nl + 1;
      }
      if (from < value.length && !finished) {
        partBytes += value.length - from;
        if (partBytes > maxLine) {
          throw new Error(`watch line longer than ${maxLine} bytes: stream dropped`);
        }
        parts.push(value.slice(from));
      }
    }
    if (partBytes > 0 && !finished) line(join(parts, partBytes, new Uint8Array(0)));
    finish(null);
  })().catch((err) => finish(finished ? null : err));
  return { abort: () => finish(null) };
}

/** `parts` (`bytes` long in all) followed by `tail`, as one array. */
function join(parts: readonly Uint8Array[], bytes: number, tail: Uint8Array): Uint8Array {
  if (parts.length === 0) return tail;
  const out = new Uint8Array(bytes + tail.length);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  out.set(tail, at);
  return out;
}
