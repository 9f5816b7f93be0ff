import assert from "node:assert/strict";
import { ExpiryHeap, type HeapItem } from "../../src/aggregation/expiry_heap.ts";
import { prng } from "../_helpers/prng.ts";

interface Item extends HeapItem {
  id: number;
}

Deno.test("heap pops in priority order", () => {
  const h = new ExpiryHeap<Item>();
  const prios = [5, 3, 9, 1, 7, 3, 0, 8];
  prios.forEach((p, id) => h.push({ id, heapIndex: -1 }, p));
  const out: number[] = [];
  while (h.size > 0) {
    out.push(h.peekPriority());
    h.pop();
  }
  assert.deepEqual(out, [...prios].sort((a, b) => a - b));
  assert.equal(h.pop(), undefined);
  assert.equal(h.peekPriority(), Infinity);
});

Deno.test("heap: random push/update/remove/pop keeps invariant and matches a reference", () => {
  const r = prng(42);
  const h = new ExpiryHeap<Item>();
  const ref = new Map<Item, number>();
  const live: Item[] = [];
  for (let step = 0; step < 5000; step++) {
    const op = r();
    if (op < 0.4 || live.length === 0) {
      const it = { id: step, heapIndex: -1 };
      const p = Math.floor(r() * 1000);
      h.push(it, p);
      ref.set(it, p);
      live.push(it);
    } else if (op < 0.7) {
      const it = live[Math.floor(r() * live.length)];
      const p = Math.floor(r() * 1000);
      h.update(it, p);
      ref.set(it, p);
    } else if (op < 0.85) {
      const idx = Math.floor(r() * live.length);
      const it = live[idx];
      assert.equal(h.remove(it), true);
      assert.equal(h.remove(it), false);
      ref.delete(it);
      live.splice(idx, 1);
    } else {
      const min = Math.min(...ref.values());
      assert.equal(h.peekPriority(), min);
      const it = h.pop()!;
      assert.equal(ref.get(it), min);
      assert.equal(it.heapIndex, -1);
      ref.delete(it);
      live.splice(live.indexOf(it), 1);
    }
    assert.equal(h.size, ref.size);
    if (step % 97 === 0) assert.equal(h.isValid(), true);
  }
  assert.equal(h.isValid(), true);
  for (const it of live) assert.equal(h.priorityOf(it), ref.get(it));
});

Deno.test("heap: update in place moves an item both ways; grows past the initial capacity", () => {
  const h = new ExpiryHeap<Item>();
  const items = Array.from({ length: 3000 }, (_, id) => ({ id, heapIndex: -1 }));
  items.forEach((it) => h.push(it, 1000 + it.id));
  h.update(items[2999], 0);
  assert.equal(h.peek(), items[2999]);
  h.update(items[2999], 99_999);
  assert.equal(h.peek(), items[0]);
  assert.equal(h.isValid(), true);
  h.clear();
  assert.equal(h.size, 0);
  assert.equal(items[5].heapIndex, -1);
});
