import assert from "node:assert/strict";
import { FlowTable, hashKey, KEY_WORDS } from "../../src/aggregation/flow_table.ts";
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
    const h = hashKey(k);
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
    assert.equal(t.find(k, hashKey(k)), slot);
  }
});

Deno.test("flow table: IPv4 and IPv6 keys with equal low words are distinct", () => {
  const store = new SlotStore();
  const t = new FlowTable(store);
  const k4 = key(1, false);
  const k6 = key(1, false);
  k6[11] = 6;
  const s4 = store.alloc();
  t.insert(s4, k4, hashKey(k4));
  assert.equal(t.find(k6, hashKey(k6)), -1);
  const s6 = store.alloc();
  t.insert(s6, k6, hashKey(k6));
  assert.equal(t.find(k4, hashKey(k4)), s4);
  assert.equal(t.find(k6, hashKey(k6)), s6);
  assert.equal(t.remove(s4), true);
  assert.equal(t.remove(s4), false);
  assert.equal(t.find(k6, hashKey(k6)), s6);
});
