import assert from "node:assert/strict";
import { measurePodStoreInSubprocess } from "../../scripts/bench/podstore.ts";

Deno.test("bench podstore: a small fill reports bytes per Pod held and a lookup rate", async () => {
  const r = await measurePodStoreInSubprocess(3_000);
  assert.equal(r.pods, 2_970, "1 % host-network Pods are not held");
  // Trimmed entries: far from a full Pod object (several KB), but not nothing.
  assert.ok(r.bytesPerPod > 100 && r.bytesPerPod < 2_000, `bytes per Pod ${r.bytesPerPod}`);
  assert.ok(r.lookupsPerSec > 0);
});
