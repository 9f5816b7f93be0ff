/** The real shard worker, except that shard 0 throws when asked to stop (the stop test). */

import "../../src/shard/worker.ts";

// deno-lint-ignore no-explicit-any
const scope = self as any;
const real = scope.onmessage;
let index = -1;
scope.onmessage = (e: MessageEvent<{ t: string; index: number }>) => {
  if (e.data.t === "init") index = e.data.index;
  if (e.data.t === "stop" && index === 0) throw new Error("shard 0 crashed on stop");
  return real(e);
};
