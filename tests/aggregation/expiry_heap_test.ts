import assert from "node:assert/strict";
import { IndexHeap } from "../../src/aggregation/expiry_heap.ts";
import { ExpiryHeap, type HeapItem } from "../_helpers/object_heap.ts";
import { prng } from "../_helpers/prng.ts";

interface Item extends HeapItem {
  id: number;
}

Deno.test("reference heap pops in priority order", () => {
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

Deno.test("reference heap: random push/update/remove/pop keeps invariant and matches a Map", () => {
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

Deno.test("reference heap: update in place moves an item both ways; grows past the initial capacity", () => {
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

Deno.test("IndexHeap: random push/update/remove/pop matches ExpiryHeap, ties included", () => {
  // Same operations on both heaps: the core's IndexHeap must pop in the very order the object
  // heap did (equal priorities included), so expiry order is unchanged.
  const r = prng(7);
  const h = new IndexHeap();
  const ref = new ExpiryHeap<Item>();
  const items = new Map<number, Item>();
  const free: number[] = [];
  let next = 0;
  for (let step = 0; step < 20_000; step++) {
    const op = r();
    const live = [...items.keys()];
    if (op < 0.4 || live.length === 0) {
      const id = free.pop() ?? next++;
      const it = { id, heapIndex: -1 };
      const p = Math.floor(r() * 50); // many ties
      h.push(id, p);
      ref.push(it, p);
      items.set(id, it);
    } else if (op < 0.7) {
      const id = live[Math.floor(r() * live.length)];
      const p = Math.floor(r() * 50);
      h.update(id, p);
      ref.update(items.get(id)!, p);
    } else if (op < 0.85) {
      const id = live[Math.floor(r() * live.length)];
      assert.equal(h.remove(id), true);
      assert.equal(h.remove(id), false);
      ref.remove(items.get(id)!);
      items.delete(id);
      free.push(id);
    } else {
      assert.equal(h.peekPriority(), ref.peekPriority());
      assert.equal(h.peek(), ref.peek()!.id);
      const id = h.pop();
      assert.equal(id, ref.pop()!.id);
      assert.equal(h.has(id), false);
      items.delete(id);
      free.push(id);
    }
    assert.equal(h.size, ref.size);
    if (step % 97 === 0) assert.equal(h.isValid(), true);
  }
  assert.equal(h.isValid(), true);
  for (const [id, it] of items) assert.equal(h.priorityOf(id), ref.priorityOf(it));
  assert.ok(Number.isNaN(h.priorityOf(next + 5000)));
});

Deno.test("IndexHeap: empty answers, growth past the initial capacity, clear", () => {
  const h = new IndexHeap();
  assert.equal(h.pop(), -1);
  assert.equal(h.peek(), -1);
  assert.equal(h.peekPriority(), Infinity);
  assert.equal(h.remove(3), false);
  for (let id = 0; id < 3000; id++) h.push(id, 1000 + id);
  h.push(5000, 5); // an id beyond the position array
  assert.equal(h.peek(), 5000);
  h.update(2999, 0);
  assert.equal(h.peek(), 2999);
  h.update(2999, 99_999);
  h.push(5000, 99_999); // push of a queued id updates it
  assert.equal(h.peek(), 0);
  assert.equal(h.size, 3001);
  assert.equal(h.isValid(), true);
  h.clear();
  assert.equal(h.size, 0);
  assert.equal(h.has(5), false);
  assert.equal(h.isValid(), true);
});
