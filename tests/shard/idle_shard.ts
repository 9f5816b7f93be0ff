/** A shard worker that starts and never reads its ring (the stall test). */

// deno-lint-ignore no-explicit-any
const scope = self as any;
scope.onmessage = (e: MessageEvent<{ t: string }>) => {
  if (e.data.t === "init") scope.postMessage({ t: "ready" });
};
