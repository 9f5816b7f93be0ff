/**
 * A shard worker whose first incarnation crashes once records reach its ring; the later ones
 * are the real shard worker (the restart test).
 */

import "../../src/shard/worker.ts";
import { RingReader } from "../../src/shard/ring.ts";

// deno-lint-ignore no-explicit-any
const scope = self as any;
const real = scope.onmessage;
scope.onmessage = (e: MessageEvent<{ t: string; generation: number; ring: SharedArrayBuffer }>) => {
  if (e.data.t !== "init" || e.data.generation > 0) return real(e);
  const ring = new RingReader(e.data.ring);
  setInterval(() => {
    if (ring.next() !== undefined) throw new Error("shard crashed");
  }, 5);
  scope.postMessage({ t: "ready" });
};
