/**
 * The expiry priority queue (spec aggregation.md §4.2): a binary min-heap of items ordered by a
 * numeric priority (the core uses min(activeExpire, inactiveExpire)). Each item remembers its
 * own position (`heapIndex`) so that an update re-heapifies it in place in O(log n) instead of
 * searching. Priorities live in a parallel Float64Array: comparisons then touch one compact
 * array rather than chasing item objects, and cost no per-item allocation.
 *
 * {@linkcode IndexHeap} queues small non-negative integers (the flows' slots) and keeps their
 * positions in an Int32Array, so a queued flow costs 16 bytes of typed arrays and no object. (The
 * object heap it replaced is the tests' pop-order reference: tests/_helpers/object_heap.ts.)
 */

const INITIAL = 1024;

/**
 * A binary min-heap of non-negative integer ids keyed by a number, with in-place updates: the
 * same algorithm as the object heap it replaced (ties pop in the same order), the items, their
 * priorities and each id's position in typed arrays. Ids should be dense (the position array
 * is indexed by id).
 */
export class IndexHeap {
  #items: Int32Array = new Int32Array(INITIAL);
  #prio: Float64Array = new Float64Array(INITIAL);
  /** Position + 1 of each id; 0 when not queued. */
  #pos: Int32Array = new Int32Array(INITIAL);
  #n = 0;

  /** Number of queued ids. */
  get size(): number {
    return this.#n;
  }

  /** The id with the smallest priority, or -1 when empty. */
  peek(): number {
    return this.#n === 0 ? -1 : this.#items[0];
  }

  /** The smallest priority, or +Infinity when empty. */
  peekPriority(): number {
    return this.#n === 0 ? Infinity : this.#prio[0];
  }

  /** True when `id` is queued. */
  has(id: number): boolean {
    return id < this.#pos.length && this.#pos[id] !== 0;
  }

  /** Priority of a queued id (NaN if it is not queued). */
  priorityOf(id: number): number {
    return this.has(id) ? this.#prio[this.#pos[id] - 1] : NaN;
  }

  /** Adds an id (updates its priority when it is queued already). */
  push(id: number, priority: number): void {
    if (this.has(id)) {
      this.update(id, priority);
      return;
    }
    const i = this.#n;
    if (i >= this.#items.length) {
      const items = new Int32Array(this.#items.length * 2);
      items.set(this.#items);
      this.#items = items;
      const prio = new Float64Array(this.#prio.length * 2);
      prio.set(this.#prio);
      this.#prio = prio;
    }
    if (id >= this.#pos.length) {
      let n = this.#pos.length * 2;
      while (n <= id) n *= 2;
      const pos = new Int32Array(n);
      pos.set(this.#pos);
      this.#pos = pos;
    }
    this.#n = i + 1;
    this.#items[i] = id;
    this.#prio[i] = priority;
    this.#pos[id] = i + 1;
    this.#up(i);
  }

  /** Removes and returns the id with the smallest priority, or -1 when empty. */
  pop(): number {
    const n = this.#n;
    if (n === 0) return -1;
    const items = this.#items;
    const top = items[0];
    const m = n - 1;
    this.#n = m;
    if (m > 0) {
      const last = items[m];
      items[0] = last;
      this.#prio[0] = this.#prio[m];
      this.#pos[last] = 1;
      this.#down(0);
    }
    this.#pos[top] = 0;
    return top;
  }

  /** Changes the priority of a queued id (queues it when it is not) and restores heap order. */
  update(id: number, priority: number): void {
    if (!this.has(id)) {
      this.push(id, priority);
      return;
    }
    const i = this.#pos[id] - 1;
    const old = this.#prio[i];
    this.#prio[i] = priority;
    if (priority < old) this.#up(i);
    else if (priority > old) this.#down(i);
  }

  /** Removes a queued id; returns false if it was not queued. */
  remove(id: number): boolean {
    if (!this.has(id)) return false;
    const i = this.#pos[id] - 1;
    const items = this.#items;
    const n = this.#n - 1;
    this.#n = n;
    if (i < n) {
      const last = items[n];
      items[i] = last;
      const old = this.#prio[i];
      this.#prio[i] = this.#prio[n];
      this.#pos[last] = i + 1;
      if (this.#prio[i] < old) this.#up(i);
      else this.#down(i);
    }
    this.#pos[id] = 0;
    return true;
  }

  /** Removes every id and releases the memory behind them. */
  clear(): void {
    this.#items = new Int32Array(INITIAL);
    this.#prio = new Float64Array(INITIAL);
    this.#pos = new Int32Array(INITIAL);
    this.#n = 0;
  }

  /** Checks the heap invariant and the stored positions (for tests). */
  isValid(): boolean {
    const items = this.#items;
    const n = this.#n;
    let queued = 0;
    for (let id = 0; id < this.#pos.length; id++) if (this.#pos[id] !== 0) queued++;
    if (queued !== n) return false;
    for (let i = 0; i < n; i++) {
      if (this.#pos[items[i]] !== i + 1) return false;
      const l = 2 * i + 1;
      const r = l + 1;
      if (l < n && this.#prio[l] < this.#prio[i]) return false;
      if (r < n && this.#prio[r] < this.#prio[i]) return false;
    }
    return true;
  }

  #up(i: number): void {
    const items = this.#items;
    const prio = this.#prio;
    const pos = this.#pos;
    const it = items[i];
    const p = prio[i];
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const pp = prio[parent];
      if (pp <= p) break;
      const e = items[parent];
      items[i] = e;
      prio[i] = pp;
      pos[e] = i + 1;
      i = parent;
    }
    items[i] = it;
    prio[i] = p;
    pos[it] = i + 1;
  }

  #down(i: number): void {
    const items = this.#items;
    const prio = this.#prio;
    const pos = this.#pos;
    const n = this.#n;
    const it = items[i];
    const p = prio[i];
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && prio[r] < prio[l] ? r : l;
      const pc = prio[c];
      if (pc >= p) break;
      const e = items[c];
      items[i] = e;
      prio[i] = pc;
      pos[e] = i + 1;
      i = c;
    }
    items[i] = it;
    prio[i] = p;
    pos[it] = i + 1;
  }
}
