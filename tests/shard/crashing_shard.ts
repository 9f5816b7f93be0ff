/** A shard worker that starts, then crashes once records reach its ring (the failure test). */

import { RingReader } from "../../src/shard/ring.ts";

// deno-lint-ignore no-explicit-any
const scope = self as any;
scope.onmessage = (e: MessageEvent<{ t: string; ring: SharedArrayBuffer }>) => {
  if (e.data.t !== "init") return;
  const ring = new RingReader(e.data.ring);
  setInterval(() => {
    if (ring.next() !== undefined) throw new Error("shard crashed");
  }, 5);
  scope.postMessage({ t: "ready" });
};
