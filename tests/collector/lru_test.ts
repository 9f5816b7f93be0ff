/** LruMap: the UDP sessions' order of use (src/collector/lru.ts). */

import assert from "node:assert/strict";
import { LruMap } from "../../src/collector/lru.ts";
import { prng } from "../_helpers/prng.ts";

const keys = (m: LruMap<number>): string[] => [...m.entries()].map(([k]) => k);

Deno.test("lru: use moves an entry to the back, the oldest is the one used longest ago", () => {
  const m = new LruMap<number>();
  for (const [i, k] of ["a", "b", "c"].entries()) m.add(k, i);
  assert.deepEqual(keys(m), ["a", "b", "c"]);
  assert.equal(m.use("a"), 0);
  assert.deepEqual(keys(m), ["b", "c", "a"]);
  assert.deepEqual(m.oldest(), ["b", 1]);
  assert.equal(m.use("a"), 0, "using the newest again changes nothing");
  assert.deepEqual(keys(m), ["b", "c", "a"]);
  assert.equal(m.use("zz"), undefined);
  assert.equal(m.size, 3);
  assert.throws(() => m.add("c", 9), /already present/);
});

Deno.test("lru: delete unlinks head, middle and tail; deleting while iterating is safe", () => {
  const m = new LruMap<number>();
  for (const [i, k] of ["a", "b", "c", "d", "e"].entries()) m.add(k, i);
  assert.equal(m.delete("c"), true);
  assert.equal(m.delete("a"), true);
  assert.equal(m.delete("e"), true);
  assert.equal(m.delete("e"), false);
  assert.deepEqual(keys(m), ["b", "d"]);
  assert.deepEqual(m.oldest(), ["b", 1]);
  m.add("f", 5);
  for (const [k] of m.entries()) m.delete(k);
  assert.equal(m.size, 0);
  assert.equal(m.oldest(), undefined);
  m.add("g", 6);
  assert.deepEqual(keys(m), ["g"]);
  m.clear();
  assert.equal(m.size, 0);
  assert.deepEqual(keys(m), []);
});

Deno.test("lru: random uses, adds and deletes keep the order a re-inserted Map keeps", () => {
  // The reference is the collector's former order: a Map where each use deletes and re-sets.
  const rand = prng(15);
  const m = new LruMap<number>();
  const ref = new Map<string, number>();
  for (let i = 0; i < 20_000; i++) {
    const k = `peer-${Math.floor(rand() * 40)}`;
    const op = rand();
    if (op < 0.6) {
      const v = ref.get(k);
      if (v !== undefined) {
        ref.delete(k);
        ref.set(k, v);
      }
      assert.equal(m.use(k), v);
    } else if (op < 0.85) {
      if (!ref.has(k)) {
        ref.set(k, i);
        m.add(k, i);
      }
    } else {
      assert.equal(m.delete(k), ref.delete(k));
    }
    assert.equal(m.size, ref.size);
  }
  assert.deepEqual([...m.entries()], [...ref.entries()]);
  assert.deepEqual(m.oldest(), ref.entries().next().value);
});
