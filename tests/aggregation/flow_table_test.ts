import assert from "node:assert/strict";
import { FlowTable, KEY_WORDS, MAX_PROBE, mix } from "../../src/aggregation/flow_table.ts";
import { SlotStore } from "../../src/aggregation/slot_store.ts";
import { prng } from "../_helpers/prng.ts";

/** Probe key for id `i`; small value ranges force hash collisions and long probe chains. */
function key(i: number, v6: boolean): Uint32Array {
  const k = new Uint32Array(KEY_WORDS);
  k[0] = 0x0a000000 + (i % 97);
  k[4] = 0x0a000000 + Math.floor(i / 97);
  if (v6) {
    k[1] = i;
    k[7] = 7;
  }
  k[8] = 6;
  k[9] = i % 3;
  k[10] = 80;
  k[11] = v6 ? 6 : 4;
  return k;
}

Deno.test("flow table: random insert/remove agrees with a Map and survives growth", () => {
  const store = new SlotStore();
  const t = new FlowTable(store);
  const ref = new Map<string, number>();
  const r = prng(7);
  for (let step = 0; step < 20_000; step++) {
    const id = Math.floor(r() * 3000);
    const v6 = id % 5 === 0;
    const k = key(id, v6);
    const h = t.hash(k);
    const name = `${id}`;
    const found = t.find(k, h);
    assert.equal(found, ref.get(name) ?? -1, `step ${step}`);
    if (found < 0) {
      const slot = store.alloc();
      t.insert(slot, k, h);
      ref.set(name, slot);
    } else if (r() < 0.6) {
      assert.equal(t.remove(found), true);
      store.free(found);
      ref.delete(name);
    }
    assert.equal(t.size, ref.size);
  }
  // Every remaining key is still reachable after all the backward shifts.
  for (const [name, slot] of ref) {
    const id = Number(name);
    const k = key(id, id % 5 === 0);
    assert.equal(t.find(k, t.hash(k)), slot);
  }
});

Deno.test("flow table: IPv4 and IPv6 keys with equal low words are distinct", () => {
  const store = new SlotStore();
  const t = new FlowTable(store);
  const k4 = key(1, false);
  const k6 = key(1, false);
  k6[11] = 6;
  const s4 = store.alloc();
  t.insert(s4, k4, t.hash(k4));
  assert.equal(t.find(k6, t.hash(k6)), -1);
  const s6 = store.alloc();
  t.insert(s6, k6, t.hash(k6));
  assert.equal(t.find(k4, t.hash(k4)), s4);
  assert.equal(t.find(k6, t.hash(k6)), s6);
  assert.equal(t.remove(s4), true);
  assert.equal(t.remove(s4), false);
  assert.equal(t.find(k6, t.hash(k6)), s6);
});

/** The inverse of `mix` (murmur3's fmix32). */
function unmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x7ed1b41d);
  h ^= (h >>> 13) ^ (h >>> 26);
  h = Math.imul(h, 0xa5cb9243);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The inverse of an odd number modulo 2^32. */
function inverse(m: number): number {
  let x = m;
  for (let i = 0; i < 5; i++) x = Math.imul(x, 2 - Math.imul(m, x));
  return x >>> 0;
}

/**
 * `n` IPv4 keys that all hash to `target` under `seed`/`mul` (what an Agent knowing a table's
 * hash key can send): each source address with the destination solved backwards through the
 * last mix.
 */
function colliding(n: number, seed: number, mul: number, target: number): Uint32Array[] {
  const keys: Uint32Array[] = [];
  for (let i = 0; i < n; i++) {
    const k = new Uint32Array(KEY_WORDS);
    k.set([0x0a000000 + i, 0, 0, 0, 0, 0, 0, 0, 6, 1234, 80, 4]);
    let h = mix((4 * 0x9e3779b1 + 6) ^ seed);
    h = mix(h ^ Math.imul((1234 << 16) | 80, mul));
    h = mix(h ^ Math.imul(k[0], mul));
    k[4] = Math.imul(unmix(target) ^ h, inverse(mul)) >>> 0;
    keys.push(k);
  }
  return keys;
}

Deno.test("flow table: keys crafted to share its hash make it rehash under a new key, once per doubling", () => {
  const store = new SlotStore();
  const keys = [{ seed: 0x1234567, mul: 0x9e3779b1 }, { seed: 0x7654321, mul: 0x85ebca6b }];
  let given = 0;
  const rekeys: [number, number][] = [];
  const t = new FlowTable(store, {
    newKey: () => keys[Math.min(given++, keys.length - 1)],
    onRekey: (probe, flows) => rekeys.push([probe, flows]),
  });
  // The attacker knows the first key (the worst case): every key hashes alike under it.
  const crafted = colliding(2000, keys[0].seed, keys[0].mul, 0xdeadbeef);
  assert.equal(new Set(crafted.map((k) => t.hash(k))).size, 1, "the keys collide under key 1");
  const slots: number[] = [];
  for (const k of crafted) {
    const slot = store.alloc();
    t.insert(slot, k, t.hash(k));
    slots.push(slot);
  }
  // The chain passed the bound once, at its MAX_PROBE + 2nd key; under the new key they spread.
  assert.deepEqual(rekeys, [[MAX_PROBE + 1, MAX_PROBE + 2]]);
  assert.equal(t.rekeys, 1);
  assert.ok(new Set(crafted.map((k) => t.hash(k))).size > 1900, "spread under key 2");
  crafted.forEach((k, i) => assert.equal(t.find(k, t.hash(k)), slots[i]));
  for (const slot of slots.slice(0, 1000)) assert.equal(t.remove(slot), true);
  crafted.slice(1000).forEach((k, i) => assert.equal(t.find(k, t.hash(k)), slots[1000 + i]));
  assert.equal(t.size, 1000);
});

Deno.test("flow table: a weakness no new key cures costs a rehash only each time the table doubles", () => {
  // Every key the table could take is the same (a hash that ignores its key), so the flood
  // outlives each rehash: they stay amortised (a pass over the table per doubling).
  const store = new SlotStore();
  const t = new FlowTable(store, { newKey: () => ({ seed: 1, mul: 1 }) });
  const crafted = colliding(3000, 1, 1, 0x42);
  for (const k of crafted) t.insert(store.alloc(), k, t.hash(k));
  // Past the bound at 258 flows, then again only at 516 and 1032 and 2064.
  assert.equal(t.rekeys, 4);
});
