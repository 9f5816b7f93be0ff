import assert from "node:assert/strict";
import { fnv1_32 } from "../../src/ipfix/mod.ts";

Deno.test("FNV-1 32-bit vectors of ipfix.md §6.1", () => {
  assert.equal(fnv1_32("k8s-node-1"), 870192098);
  assert.equal(fnv1_32("k8s-node-1"), 0x33de13e2);
  assert.equal(fnv1_32("kind-worker"), 801257890);
  assert.equal(fnv1_32("kind-control-plane"), 2016776422);
  assert.equal(fnv1_32(""), 2166136261);
  assert.equal(fnv1_32(new TextEncoder().encode("kind-worker")), 0x2fc239a2);
});

Deno.test("FNV-1 is not FNV-1a", () => {
  // FNV-1a of "a" is 0xe40c292c; FNV-1 of "a" is 0x050c5d7e.
  assert.equal(fnv1_32("a"), 0x050c5d7e);
});
