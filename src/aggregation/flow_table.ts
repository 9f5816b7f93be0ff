/**
 * The flow map: an open-addressing hash table from a numeric 5-tuple to a slot of the
 * {@linkcode SlotStore}. Why not `Map<string, Flow>`: building a string key per record and
 * hashing it cost more than the whole aggregation (measured ~0.7M/s for key+Map alone against
 * ~5M/s for this table), and the key string plus Map entry took ~130 heap bytes per flow. Here
 * the key words live in the slot itself and the table is one Int32Array (linear probing,
 * backward-shift deletion, load factor <= 1/2). An entry is the slot number (24 bits) under the
 * top byte of its key's hash: a probe passes over an entry of another tag without reading that
 * slot's key words, a cache miss each at 100k flows (+4-7 % records/s in one shard's steady
 * state with 50k flows, `ab_core.ts steady-big`, no memory added). Moving an entry (deletion,
 * growth) recomputes the home index from the slot's key words.
 */

import { FAMILY_SHIFT, type SlotStore, SPORT_SHIFT, U32, u32Base } from "./slot_store.ts";

/**
 * Scratch layout of a probe key: words 0-3 source address, 4-7 destination address (IPv4
 * uses word 0 / 4 only), 8 protocol, 9 source port, 10 destination port, 11 family (4 or 6).
 */
export const KEY_WORDS = 12;

/** A 32-bit finaliser (murmur3's fmix32): spreads every input bit over the result. */
export function mix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/**
 * A table's secret hash key: `seed` starts the hash, `mul` (odd) multiplies every key word.
 * Random per table: with a fixed hash an Agent could compute keys that all share one hash (every
 * step of the mix can be undone) and turn each look-up into a walk of every flow it made (found
 * by review: 60k crafted flows took 10.7 s to create and 11.7 s per update round, random ones
 * 288 / 50 ms). Unknown, the words reach the hash through a multiplier the sender cannot undo.
 */
export interface HashKey {
  seed: number;
  mul: number;
}

/** A new random {@linkcode HashKey}. */
export function randomHashKey(): HashKey {
  const w = crypto.getRandomValues(new Uint32Array(2));
  return { seed: w[0], mul: (w[1] | 1) >>> 0 };
}

/** Hash of a probe key (see {@linkcode KEY_WORDS}) under `key`'s `seed` and `mul`. */
export function hashKey(k: Uint32Array, seed: number, mul: number): number {
  let h = mix((k[11] * 0x9e3779b1 + k[8]) ^ seed);
  h = mix(h ^ Math.imul((k[9] << SPORT_SHIFT) | k[10], mul));
  h = mix(h ^ Math.imul(k[0], mul));
  h = mix(h ^ Math.imul(k[4], mul));
  if (k[11] === 6) {
    h = mix(h ^ Math.imul(k[1], mul));
    h = mix(h ^ Math.imul(k[2], mul));
    h = mix(h ^ Math.imul(k[3], mul));
    h = mix(h ^ Math.imul(k[5], mul));
    h = mix(h ^ Math.imul(k[6], mul));
    h = mix(h ^ Math.imul(k[7], mul));
  }
  return h;
}

/** Probe key of {@linkcode hashSlot}: a slot's key words are hashed as the probe's are. */
const slotKey = new Uint32Array(KEY_WORDS);

/**
 * {@linkcode hashKey} of the key stored in the u32 words of a slot (from `b`), through the
 * probe-key layout, so the hash is written once. Off the per-record path: removals (a flow
 * exported for good) and rebuilds.
 */
function hashSlot(u: Uint32Array, b: number, seed: number, mul: number): number {
  const k = slotKey;
  const pf = u[b + U32.PROTO];
  const ports = u[b + U32.PORTS];
  for (let i = 0; i < 4; i++) {
    k[i] = u[b + U32.SRC + i];
    k[4 + i] = u[b + U32.DST + i];
  }
  k[8] = pf & 0xff;
  k[9] = ports >>> SPORT_SHIFT;
  k[10] = ports & ((1 << SPORT_SHIFT) - 1);
  k[11] = pf >>> FAMILY_SHIFT;
  return hashKey(k, seed, mul);
}

/**
 * Probe steps of an insert past which the table takes itself for flooded (its key guessed, or a
 * weakness of the hash) and starts over under a new random key. With a good hash at load <= 1/2
 * runs this long do not happen (the longest at 1M flows is a few dozen).
 */
export const MAX_PROBE = 256;

/** An entry's high byte: the top byte of its key's hash, compared before the slot is read. */
const TAG_MASK = 0xff000000 | 0;
/** An entry's low bits: slot + 1 (0: empty). */
const SLOT_MASK = 0x00ffffff;
/** Slots the table can hold ({@linkcode SLOT_MASK}, less the empty entry). */
export const MAX_TABLE_SLOTS = SLOT_MASK - 1;

function entry(slot: number, h: number): number {
  return (h & TAG_MASK) | (slot + 1);
}

/** Hash table of live flow slots keyed by their 5-tuple words. */
export class FlowTable {
  readonly #store: SlotStore;
  /** Entries ({@linkcode entry}): the hash's top byte, then slot + 1; 0 = empty. */
  #tbl = new Int32Array(1024);
  #mask = 1023;
  #size = 0;
  #seed: number;
  #mul: number;
  readonly #newKey: () => HashKey;
  readonly #onRekey: ((probe: number, flows: number) => void) | undefined;
  /** Rekeys done; the next is allowed once the table holds this many entries (amortised). */
  #rekeys = 0;
  #rekeyAt = 0;

  /**
   * A table over the key words stored in `store`'s slots. `newKey` gives its hash keys (random
   * by default); `onRekey` is told when a long probe made it take a new one.
   */
  constructor(
    store: SlotStore,
    options: {
      newKey?: () => HashKey;
      onRekey?: (probe: number, flows: number) => void;
    } = {},
  ) {
    this.#store = store;
    this.#newKey = options.newKey ?? randomHashKey;
    this.#onRekey = options.onRekey;
    const key = this.#newKey();
    this.#seed = key.seed;
    this.#mul = key.mul;
  }

  /** The hash of probe key `k` for {@linkcode find} and {@linkcode insert}. */
  hash(k: Uint32Array): number {
    return hashKey(k, this.#seed, this.#mul);
  }

  /** Times a long probe made the table start over under a new hash key. */
  get rekeys(): number {
    return this.#rekeys;
  }

  /** Number of entries. */
  get size(): number {
    return this.#size;
  }

  /** Slot holding key `k` (hash `h`: {@linkcode hash}), or -1. */
  find(k: Uint32Array, h: number): number {
    const tbl = this.#tbl;
    const mask = this.#mask;
    const store = this.#store;
    const ports = ((k[9] << SPORT_SHIFT) | k[10]) >>> 0;
    const pf = k[8] | (k[11] << FAMILY_SHIFT);
    const tag = h & TAG_MASK;
    for (let i = h & mask;; i = (i + 1) & mask) {
      const e = tbl[i];
      if (e === 0) return -1;
      if ((e & TAG_MASK) !== tag) continue;
      const slot = (e & SLOT_MASK) - 1;
      const u = store.u32(slot);
      const b = u32Base(slot);
      if (
        u[b + U32.SRC] === k[0] && u[b + U32.DST] === k[4] && u[b + U32.PORTS] === ports &&
        u[b + U32.PROTO] === pf &&
        (k[11] !== 6 || (
          u[b + U32.SRC + 1] === k[1] && u[b + U32.SRC + 2] === k[2] &&
          u[b + U32.SRC + 3] === k[3] && u[b + U32.DST + 1] === k[5] &&
          u[b + U32.DST + 2] === k[6] && u[b + U32.DST + 3] === k[7]
        ))
      ) return slot;
    }
  }

  /**
   * Writes key `k` into `slot` and adds it under hash `h` ({@linkcode hash}; the key must not be
   * present). A hash computed before an insert is stale after it (the table may have a new key).
   */
  insert(slot: number, k: Uint32Array, h: number): void {
    const u = this.#store.u32(slot);
    const b = u32Base(slot);
    for (let j = 0; j < 4; j++) {
      u[b + U32.SRC + j] = k[j];
      u[b + U32.DST + j] = k[4 + j];
    }
    u[b + U32.PROTO] = k[8] | (k[11] << FAMILY_SHIFT);
    u[b + U32.PORTS] = (k[9] << SPORT_SHIFT) | k[10];
    if ((this.#size + 1) * 2 > this.#tbl.length) this.#grow();
    const probe = this.#place(slot, h);
    this.#size++;
    // Amortised: a rekey costs a pass over the table, allowed again once it has doubled.
    if (probe > MAX_PROBE && this.#size >= this.#rekeyAt) this.#rekey(probe);
  }

  /** Removes `slot` (its key words must still be in place). Returns false if absent. */
  remove(slot: number): boolean {
    const tbl = this.#tbl;
    const mask = this.#mask;
    const h = hashSlot(this.#store.u32(slot), u32Base(slot), this.#seed, this.#mul);
    let i = h & mask;
    const want = entry(slot, h);
    for (;; i = (i + 1) & mask) {
      const e = tbl[i];
      if (e === 0) return false;
      if (e === want) break;
    }
    // Backward-shift deletion keeps every probe chain unbroken without tombstones.
    let j = i;
    for (;;) {
      j = (j + 1) & mask;
      const e = tbl[j];
      if (e === 0) break;
      const s = (e & SLOT_MASK) - 1;
      const home = hashSlot(this.#store.u32(s), u32Base(s), this.#seed, this.#mul) & mask;
      // Move e into the hole at i unless its home lies cyclically in (i, j].
      const stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
      if (!stays) {
        tbl[i] = e;
        i = j;
      }
    }
    tbl[i] = 0;
    this.#size--;
    return true;
  }

  /** Removes every entry. */
  clear(): void {
    this.#tbl = new Int32Array(1024);
    this.#mask = 1023;
    this.#size = 0;
  }

  /** Adds `slot`'s entry under hash `h`; returns the probe steps it took. */
  #place(slot: number, h: number): number {
    const tbl = this.#tbl;
    const mask = this.#mask;
    let i = h & mask;
    let probe = 0;
    while (tbl[i] !== 0) {
      i = (i + 1) & mask;
      probe++;
    }
    tbl[i] = entry(slot, h);
    return probe;
  }

  /** Re-places every entry into a fresh table of `length` entries (under the current key). */
  #rebuild(length: number): void {
    const old = this.#tbl;
    this.#tbl = new Int32Array(length);
    this.#mask = length - 1;
    for (let i = 0; i < old.length; i++) {
      const e = old[i];
      if (e !== 0) {
        const s = (e & SLOT_MASK) - 1;
        this.#place(s, hashSlot(this.#store.u32(s), u32Base(s), this.#seed, this.#mul));
      }
    }
  }

  #grow(): void {
    this.#rebuild(this.#tbl.length * 2);
  }

  #rekey(probe: number): void {
    const key = this.#newKey();
    this.#seed = key.seed;
    this.#mul = key.mul;
    this.#rebuild(this.#tbl.length);
    this.#rekeys++;
    this.#rekeyAt = this.#size * 2;
    this.#onRekey?.(probe, this.#size);
  }
}
