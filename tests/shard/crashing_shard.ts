/** A shard worker that starts, then crashes on its first records (the pool's failure test). */

// deno-lint-ignore no-explicit-any
const scope = self as any;
scope.onmessage = (e: MessageEvent<{ t: string }>) => {
  if (e.data.t === "init") scope.postMessage({ t: "ready" });
  if (e.data.t === "records") throw new Error("shard crashed");
};
