/**
 * Interned tuples of slot values: a group of fields that vary together (a network policy's
 * name, namespace, rule name, type and action) is kept as one shared tuple, and each flow holds
 * the tuple's id in one slot word instead of one word per field. Many flows share a policy,
 * so a tuple is stored once and reference counted like the strings (intern.ts); a tuple no
 * flow references any more is forgotten. Words at the string positions are intern ids: a
 * tuple holds one reference to each of its strings while it lives.
 *
 * Id 0 is the tuple of defaults (every string `""`, every number 0): a zeroed slot word reads
 * as it, it is never counted, and a group left empty costs nothing. The others live in
 * typed arrays (open addressing with backward-shift deletion, as the flow table).
 */

import { EMPTY_TEXT, type Interner } from "./intern.ts";
import { mix, randomHashKey } from "./flow_table.ts";

/**
 * Bytes charged for one live tuple of `width` words (`limits.maxFlowBytes`): its words and
 * reference count, and its table share at a load of 1/4 or more (16 bytes).
 */
export function tupleBytes(width: number): number {
  return 4 * width + 4 + 16;
}

const INITIAL = 64;

/** A reference-counted intern table of fixed-width tuples of u32 words. */
export class TupleTable {
  /** Words per tuple. */
  readonly width: number;
  /** Bytes charged per live tuple ({@linkcode tupleBytes}). */
  readonly tupleBytes: number;
  /**
   * Scratch tuple: fill it (references taken for its strings), then {@linkcode make}. One
   * per table; the core is synchronous, so it is never shared by two callers at once.
   */
  readonly w: Uint32Array;
  readonly #intern: Interner;
  /** Positions of the string words. */
  readonly #strs: readonly number[];
  /** The defaults: EMPTY_TEXT at string positions, 0 elsewhere (tuple 0). */
  readonly #defaults: Uint32Array;
  #words: Uint32Array;
  #refs: Int32Array;
  #free: number[] = [];
  #next = 1;
  /** id, 0 = empty cell. */
  #tbl = new Int32Array(INITIAL);
  #mask = INITIAL - 1;
  #size = 0;
  #bytes = 0;
  /**
   * This table's random hash key (as the flow table's): a tuple's words are values an Agent
   * sends and string ids it can steer, so a fixed hash could be made to put every tuple in one
   * probe chain.
   */
  readonly #seed: number;
  readonly #mul: number;

  /** A table of `width`-word tuples whose words at `strs` are intern ids of `intern`. */
  constructor(intern: Interner, width: number, strs: readonly number[]) {
    const key = randomHashKey();
    this.#seed = key.seed;
    this.#mul = key.mul;
    this.#intern = intern;
    this.width = width;
    this.tupleBytes = tupleBytes(width);
    this.#strs = strs;
    this.w = new Uint32Array(width);
    this.#defaults = new Uint32Array(width);
    for (const i of strs) this.#defaults[i] = EMPTY_TEXT;
    this.#words = new Uint32Array(INITIAL * width);
    this.#words.set(this.#defaults);
    this.#refs = new Int32Array(INITIAL);
  }

  /** Live tuples (tuple 0 not counted). */
  get size(): number {
    return this.#size;
  }

  /** Bytes of the live tuples (their strings are charged by the intern table). */
  get bytes(): number {
    return this.#bytes;
  }

  /** Word `i` of tuple `id`. */
  word(id: number, i: number): number {
    return this.#words[id * this.width + i];
  }

  /** Copies tuple `id` into the scratch {@linkcode w}, taking a reference to each string. */
  load(id: number): void {
    const n = this.width;
    const w = this.w;
    const words = this.#words;
    for (let i = 0; i < n; i++) w[i] = words[id * n + i];
    for (const i of this.#strs) this.#intern.retain(w[i]);
  }

  /**
   * The id of the tuple in the scratch {@linkcode w}, counting one more reference to it. The
   * scratch's string references go to a new tuple, or are given back when it exists already.
   */
  make(): number {
    const w = this.w;
    const n = this.width;
    let dflt = true;
    for (let i = 0; i < n; i++) {
      if (w[i] !== this.#defaults[i]) {
        dflt = false;
        break;
      }
    }
    if (dflt) return 0;
    const h = this.#hash(w, 0);
    const words = this.#words;
    const tbl = this.#tbl;
    const mask = this.#mask;
    for (let i = h & mask;; i = (i + 1) & mask) {
      const id = tbl[i];
      if (id === 0) break;
      let eq = true;
      for (let j = 0; j < n; j++) {
        if (words[id * n + j] !== w[j]) {
          eq = false;
          break;
        }
      }
      if (eq) {
        this.#refs[id]++;
        for (const j of this.#strs) this.#intern.unref(w[j]);
        return id;
      }
    }
    return this.#add(h);
  }

  /** Gives back one reference to tuple `id`; the last one releases it and its strings. */
  unref(id: number): void {
    if (id === 0 || --this.#refs[id] !== 0) return;
    const n = this.width;
    const words = this.#words;
    for (const j of this.#strs) this.#intern.unref(words[id * n + j]);
    this.#remove(id);
    words.fill(0, id * n, id * n + n);
    this.#free.push(id);
    this.#size--;
    this.#bytes -= this.tupleBytes;
  }

  /** Forgets every tuple (the intern table is cleared by its owner). */
  clear(): void {
    this.#words = new Uint32Array(INITIAL * this.width);
    this.#words.set(this.#defaults);
    this.#refs = new Int32Array(INITIAL);
    this.#free = [];
    this.#next = 1;
    this.#tbl = new Int32Array(INITIAL);
    this.#mask = INITIAL - 1;
    this.#size = 0;
    this.#bytes = 0;
  }

  #hash(a: Uint32Array, at: number): number {
    let h = this.#seed;
    for (let i = 0; i < this.width; i++) h = mix(h ^ Math.imul(a[at + i], this.#mul));
    return h;
  }

  #add(h: number): number {
    let id = this.#free.pop();
    if (id === undefined) {
      id = this.#next++;
      if (id >= this.#refs.length) {
        const refs = new Int32Array(this.#refs.length * 2);
        refs.set(this.#refs);
        this.#refs = refs;
        const words = new Uint32Array(refs.length * this.width);
        words.set(this.#words);
        this.#words = words;
      }
    }
    this.#words.set(this.w, id * this.width);
    this.#refs[id] = 1;
    if ((this.#size + 1) * 2 > this.#tbl.length) this.#grow();
    this.#place(id, h);
    this.#size++;
    this.#bytes += this.tupleBytes;
    return id;
  }

  #place(id: number, h: number): void {
    const tbl = this.#tbl;
    const mask = this.#mask;
    let i = h & mask;
    while (tbl[i] !== 0) i = (i + 1) & mask;
    tbl[i] = id;
  }

  #grow(): void {
    const old = this.#tbl;
    this.#tbl = new Int32Array(old.length * 2);
    this.#mask = this.#tbl.length - 1;
    for (let i = 0; i < old.length; i++) {
      const id = old[i];
      if (id !== 0) this.#place(id, this.#hash(this.#words, id * this.width));
    }
  }

  #remove(id: number): void {
    const tbl = this.#tbl;
    const mask = this.#mask;
    let i = this.#hash(this.#words, id * this.width) & mask;
    while (tbl[i] !== id) i = (i + 1) & mask;
    // Backward-shift deletion, as in the flow table.
    let j = i;
    for (;;) {
      j = (j + 1) & mask;
      const e = tbl[j];
      if (e === 0) break;
      const home = this.#hash(this.#words, e * this.width) & mask;
      const stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
      if (!stays) {
        tbl[i] = e;
        i = j;
      }
    }
    tbl[i] = 0;
  }
}
