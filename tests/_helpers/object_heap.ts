/**
 * The object heap the aggregation core used before `IndexHeap` (src/aggregation/
 * expiry_heap.ts): a binary min-heap of items that carry their own position. Kept here as the
 * reference the core's heap must pop in the same order as, equal priorities included, so the
 * expiry order of flows did not change when the flow objects went.
 *
 * @module
 */

/** What the heap needs from an item: a slot for its position (-1 when not queued). */
export interface HeapItem {
  /** Position in the heap, maintained by {@linkcode ExpiryHeap}; -1 when not in the heap. */
  heapIndex: number;
}

/** A binary min-heap keyed by a number, with in-place updates by index. */
export class ExpiryHeap<T extends HeapItem> {
  #items: T[] = [];
  #prio: Float64Array = new Float64Array(1024);

  /** Number of queued items. */
  get size(): number {
    return this.#items.length;
  }

  /** The item with the smallest priority, or undefined when empty. */
  peek(): T | undefined {
    return this.#items[0];
  }

  /** The smallest priority, or +Infinity when empty. */
  peekPriority(): number {
    return this.#items.length === 0 ? Infinity : this.#prio[0];
  }

  /** Priority of a queued item (NaN if it is not queued). */
  priorityOf(item: T): number {
    const i = item.heapIndex;
    return i >= 0 && this.#items[i] === item ? this.#prio[i] : NaN;
  }

  /** Adds an item that is not queued yet. */
  push(item: T, priority: number): void {
    if (item.heapIndex >= 0 && this.#items[item.heapIndex] === item) {
      this.update(item, priority);
      return;
    }
    const i = this.#items.length;
    if (i >= this.#prio.length) {
      const bigger = new Float64Array(this.#prio.length * 2);
      bigger.set(this.#prio);
      this.#prio = bigger;
    }
    this.#items.push(item);
    this.#prio[i] = priority;
    item.heapIndex = i;
    this.#up(i);
  }

  /** Removes and returns the item with the smallest priority. */
  pop(): T | undefined {
    const items = this.#items;
    if (items.length === 0) return undefined;
    const top = items[0];
    const last = items.pop()!;
    const n = items.length;
    if (n > 0) {
      items[0] = last;
      this.#prio[0] = this.#prio[n];
      last.heapIndex = 0;
      this.#down(0);
    }
    top.heapIndex = -1;
    return top;
  }

  /** Changes the priority of a queued item and restores heap order around it. */
  update(item: T, priority: number): void {
    const i = item.heapIndex;
    if (i < 0 || this.#items[i] !== item) {
      this.push(item, priority);
      return;
    }
    const old = this.#prio[i];
    this.#prio[i] = priority;
    if (priority < old) this.#up(i);
    else if (priority > old) this.#down(i);
  }

  /** Removes a queued item; returns false if it was not queued. */
  remove(item: T): boolean {
    const i = item.heapIndex;
    const items = this.#items;
    if (i < 0 || items[i] !== item) return false;
    const last = items.pop()!;
    const n = items.length;
    if (i < n) {
      items[i] = last;
      const old = this.#prio[i];
      this.#prio[i] = this.#prio[n];
      last.heapIndex = i;
      if (this.#prio[i] < old) this.#up(i);
      else this.#down(i);
    }
    item.heapIndex = -1;
    return true;
  }

  /** Removes every item. */
  clear(): void {
    for (const it of this.#items) it.heapIndex = -1;
    this.#items = [];
    this.#prio = new Float64Array(1024);
  }

  /** Checks the heap invariant and the stored indices (for tests). */
  isValid(): boolean {
    const items = this.#items;
    for (let i = 0; i < items.length; i++) {
      if (items[i].heapIndex !== i) return false;
      const l = 2 * i + 1;
      const r = l + 1;
      if (l < items.length && this.#prio[l] < this.#prio[i]) return false;
      if (r < items.length && this.#prio[r] < this.#prio[i]) return false;
    }
    return true;
  }

  #up(i: number): void {
    const items = this.#items;
    const prio = this.#prio;
    const it = items[i];
    const p = prio[i];
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (prio[parent] <= p) break;
      this.#put(i, items[parent], prio[parent]);
      i = parent;
    }
    this.#put(i, it, p);
  }

  /** Stores `it` with priority `p` at position `i` and tells it where it is. */
  #put(i: number, it: T, p: number): void {
    this.#items[i] = it;
    this.#prio[i] = p;
    it.heapIndex = i;
  }

  #down(i: number): void {
    const items = this.#items;
    const prio = this.#prio;
    const n = items.length;
    const it = items[i];
    const p = prio[i];
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && prio[r] < prio[l] ? r : l;
      if (prio[c] >= p) break;
      this.#put(i, items[c], prio[c]);
      i = c;
    }
    this.#put(i, it, p);
  }
}
