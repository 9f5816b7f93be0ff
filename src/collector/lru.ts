/**
 * A map kept in order of use, least recently used first: the UDP sessions, so the one evicted
 * at the session limit is the one idle longest. A list through the entries holds the order, so
 * moving an entry to the back allocates nothing. (A `Map` re-inserted on every use, delete then
 * set, was that order too, but V8 rebuilt its table every few deletions: with Agents' datagrams
 * interleaved, one use per datagram, that was 14 % of the garbage the main thread promoted to
 * its old space at 10,000 datagrams/s, docs/udp-ingest.md.)
 *
 * @module
 */

interface Entry<V> {
  readonly key: string;
  readonly value: V;
  prev: Entry<V> | undefined;
  next: Entry<V> | undefined;
}

/** String keys to values, least recently used first. */
export class LruMap<V> {
  readonly #entries = new Map<string, Entry<V>>();
  /** Least recently used. */
  #head: Entry<V> | undefined;
  /** Most recently used. */
  #tail: Entry<V> | undefined;

  /** Entries held. */
  get size(): number {
    return this.#entries.size;
  }

  /** The value of `key`, made the most recently used; undefined when absent. */
  use(key: string): V | undefined {
    const e = this.#entries.get(key);
    if (e === undefined) return undefined;
    if (e !== this.#tail) {
      this.#unlink(e);
      this.#append(e);
    }
    return e.value;
  }

  /** Adds `key` (absent) as the most recently used. */
  add(key: string, value: V): void {
    if (this.#entries.has(key)) throw new Error(`LruMap: ${key} is already present`);
    const e: Entry<V> = { key, value, prev: undefined, next: undefined };
    this.#entries.set(key, e);
    this.#append(e);
  }

  /** Removes `key`; false when absent. */
  delete(key: string): boolean {
    const e = this.#entries.get(key);
    if (e === undefined) return false;
    this.#entries.delete(key);
    this.#unlink(e);
    return true;
  }

  /** The least recently used entry, without using it; undefined when empty. */
  oldest(): [string, V] | undefined {
    const e = this.#head;
    return e === undefined ? undefined : [e.key, e.value];
  }

  /** Every entry, least recently used first; deleting the current one while iterating is safe. */
  *entries(): IterableIterator<[string, V]> {
    for (let e = this.#head; e !== undefined;) {
      const next = e.next;
      yield [e.key, e.value];
      e = next;
    }
  }

  /** Removes everything. */
  clear(): void {
    this.#entries.clear();
    this.#head = this.#tail = undefined;
  }

  #unlink(e: Entry<V>): void {
    if (e.prev === undefined) this.#head = e.next;
    else e.prev.next = e.next;
    if (e.next === undefined) this.#tail = e.prev;
    else e.next.prev = e.prev;
    e.prev = e.next = undefined;
  }

  #append(e: Entry<V>): void {
    e.prev = this.#tail;
    if (this.#tail === undefined) this.#head = e;
    else this.#tail.next = e;
    this.#tail = e;
  }
}
