/**
 * The product's shard worker, except that while stopping each batch of flows it posts takes
 * `?ms=` of busy time first: a shard whose final export outlasts the stop timeout (the
 * stop-timeout test).
 */

import "../../src/shard/worker.ts";

// deno-lint-ignore no-explicit-any
const scope = self as any;
const real = scope.onmessage;
const realPost = scope.postMessage.bind(scope);
const ms = Number(new URL(import.meta.url).searchParams.get("ms") ?? "50");
let stopping = false;
scope.postMessage = (m: { t: string }, ...rest: unknown[]) => {
  if (stopping && m.t === "flows") {
    const end = performance.now() + ms;
    while (performance.now() < end) { /* busy */ }
  }
  realPost(m, ...rest);
};
scope.onmessage = (e: MessageEvent<{ t: string }>) => {
  if (e.data.t === "stop") stopping = true;
  return real(e);
};
