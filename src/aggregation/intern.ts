/**
 * String interning for the flows, with reference counts so that the bytes of held strings are
 * known (`limits.maxFlowBytes`). Many flows share Pod, namespace, Node and policy names and
 * tcpState, so each flow holds the small integer **id** of one shared copy (a u32 word of its
 * slot, not a property of a per-flow object), and a shared string is charged **once**: when its
 * first reference is taken, and released with its last reference. A string no flow references
 * any more is forgotten, so the table never keeps memory alive on its own.
 *
 * A direct-mapped table (slot from the length and a few sampled characters; a hit compares the
 * whole string) instead of a Map on the hit path: no full-string hash per record. A text whose
 * slot holds another live text goes to an overflow Map. Invariant: a text is held in its slot
 * or in the overflow, never both, so `unref` finds the entry `ref` charged.
 *
 * Ids: {@linkcode NO_TEXT} (0) stands for no value (`undefined`), {@linkcode EMPTY_TEXT} (1)
 * for `""` (neither counted), direct slot `k` is id `k + 2`, overflow entries take the ids
 * above the direct slots (reused once released). {@linkcode Interner.text} reads an id back.
 */

/** Id of no value: {@linkcode Interner.text} gives `undefined`. A zeroed slot word reads so. */
export const NO_TEXT = 0;
/** Id of the empty string (absent or empty text given to {@linkcode Interner.ref}). */
export const EMPTY_TEXT = 1;
/** Ids below the direct slots' (0 and 1). */
const FIXED_IDS = 2;

const INTERN_SLOTS = 1 << 16;

/**
 * Bytes charged for one held string beyond its characters: the V8 string header (map, hash,
 * length) rounded to the allocation granule. An overflow entry adds its Map entry and record.
 */
export const STRING_HEADER_BYTES = 24;
/** Bytes charged for an overflow entry (Map entry and its record), on top of the string. */
export const OVERFLOW_ENTRY_BYTES = 64;
const TWO_BYTE = /[\u0100-\uffff]/;

/**
 * Bytes one held copy of `s` costs: header plus one byte per character when every character
 * is Latin-1 (V8 keeps such strings one byte per character), two otherwise.
 */
export function stringBytes(s: string): number {
  return STRING_HEADER_BYTES + (TWO_BYTE.test(s) ? 2 * s.length : s.length);
}

/**
 * An upper bound of what taking a reference to `v` can add to {@linkcode Interner.bytes}
 * (nothing for an absent or empty value): no scan of the characters, for admission checks.
 */
export function maxStringBytes(v: string | undefined): number {
  if (v === undefined || v === "") return 0;
  const n = typeof v === "string" ? v.length : String(v).length;
  return STRING_HEADER_BYTES + OVERFLOW_ENTRY_BYTES + 2 * n;
}

interface OverflowEntry {
  readonly text: string;
  /** Its id, above the direct slots' ids. */
  readonly id: number;
  refs: number;
  readonly bytes: number;
}

/** A reference-counted intern table: {@linkcode Interner.ref} returns the id of a shared copy. */
export class Interner {
  /** Text of each id: 0 and 1 fixed, then the direct slots, then the overflow ids. */
  #text: (string | undefined)[] = Interner.#empty();
  #refs = new Int32Array(INTERN_SLOTS);
  #cost = new Int32Array(INTERN_SLOTS);
  #over = new Map<string, OverflowEntry>();
  /** Released overflow ids, reused first. */
  #freeIds: number[] = [];
  #bytes = 0;

  static #empty(): (string | undefined)[] {
    const t = new Array<string | undefined>(FIXED_IDS + INTERN_SLOTS).fill(undefined);
    t[EMPTY_TEXT] = "";
    return t;
  }

  /** Bytes of the strings held (each charged once, see {@linkcode stringBytes}). */
  get bytes(): number {
    return this.#bytes;
  }

  /**
   * The text of id `id` (from {@linkcode ref}): `undefined` for {@linkcode NO_TEXT}, `""` for
   * {@linkcode EMPTY_TEXT}. Valid while a reference to it is held.
   */
  text(id: number): string | undefined {
    return this.#text[id];
  }

  /**
   * The id of the shared copy of `s`, counting one more reference to it (charged when it is
   * the first). Absent and empty text give {@linkcode EMPTY_TEXT}, which is not counted; a
   * non-string value (bad input) its `String()` text. Every reference taken must be given back
   * with {@linkcode unref}.
   */
  ref(s: string | undefined): number {
    if (s === undefined || s === "") return EMPTY_TEXT;
    if (typeof s !== "string") s = String(s);
    const slot = internSlot(s);
    if (this.#text[slot + FIXED_IDS] === s) { // equal text: the shared copy (the hot path)
      this.#refs[slot]++;
      return slot + FIXED_IDS;
    }
    return this.#refMiss(s, slot);
  }

  #refMiss(s: string, slot: number): number {
    const id = slot + FIXED_IDS;
    if (this.#text[id] === undefined) {
      const e = this.#over.size > 0 ? this.#over.get(s) : undefined;
      if (e !== undefined) {
        e.refs++;
        return e.id;
      }
      const c = stringBytes(s);
      this.#text[id] = s;
      this.#refs[slot] = 1;
      this.#cost[slot] = c;
      this.#bytes += c;
      return id;
    }
    let e = this.#over.get(s);
    if (e === undefined) {
      const oid = this.#freeIds.pop() ?? this.#text.length;
      e = { text: s, id: oid, refs: 0, bytes: stringBytes(s) + OVERFLOW_ENTRY_BYTES };
      this.#text[oid] = s;
      this.#over.set(s, e);
      this.#bytes += e.bytes;
    }
    e.refs++;
    return e.id;
  }

  /**
   * Takes one more reference to the text of `id` (held: from {@linkcode ref}); returns `id`.
   * Nothing for {@linkcode NO_TEXT} and {@linkcode EMPTY_TEXT}.
   */
  retain(id: number): number {
    if (id < FIXED_IDS) return id;
    const slot = id - FIXED_IDS;
    if (slot < INTERN_SLOTS) {
      this.#refs[slot]++;
    } else {
      this.#over.get(this.#text[id]!)!.refs++;
    }
    return id;
  }

  /**
   * The id of the shared copy of `next`, giving back the reference `prev`. The new reference is
   * taken first, so text equal to `prev`'s stays held.
   */
  replace(prev: number, next: string | undefined): number {
    const v = this.ref(next);
    this.unref(prev);
    return v;
  }

  /**
   * Gives back one reference taken by {@linkcode ref} (nothing for {@linkcode NO_TEXT} and
   * {@linkcode EMPTY_TEXT}); the last one releases the string.
   */
  unref(id: number): void {
    if (id < FIXED_IDS) return;
    const slot = id - FIXED_IDS;
    if (slot < INTERN_SLOTS) {
      if (--this.#refs[slot] === 0) {
        this.#text[id] = undefined;
        this.#bytes -= this.#cost[slot];
      }
      return;
    }
    const s = this.#text[id];
    const e = s === undefined ? undefined : this.#over.get(s);
    if (e !== undefined && --e.refs === 0) {
      this.#over.delete(e.text);
      this.#text[id] = undefined;
      this.#freeIds.push(id);
      this.#bytes -= e.bytes;
    }
  }

  /**
   * What taking a reference to `s` would add to {@linkcode bytes} now: 0 when it is held,
   * its cost otherwise.
   */
  addedBytes(s: string | undefined): number {
    if (s === undefined || s === "") return 0;
    if (typeof s !== "string") s = String(s);
    const k = this.#text[internSlot(s) + FIXED_IDS];
    if (k === s || (this.#over.size > 0 && this.#over.has(s))) return 0;
    return stringBytes(s) + (k === undefined ? 0 : OVERFLOW_ENTRY_BYTES);
  }

  /** Forgets every held string and reference (their memory can then be reclaimed). */
  clear(): void {
    this.#text = Interner.#empty();
    this.#refs.fill(0);
    this.#cost.fill(0);
    this.#over.clear();
    this.#freeIds = [];
    this.#bytes = 0;
  }
}

function internSlot(s: string): number {
  const n = s.length;
  let h = Math.imul(2166136261 ^ n, 16777619);
  h = Math.imul(h ^ s.charCodeAt(0), 16777619);
  h = Math.imul(h ^ s.charCodeAt(n - 1), 16777619);
  if (n > 2) {
    h = Math.imul(h ^ s.charCodeAt(1), 16777619);
    h = Math.imul(h ^ s.charCodeAt(n - 2), 16777619);
    h = Math.imul(h ^ s.charCodeAt(n >> 1), 16777619);
    if (n > 5) {
      h = Math.imul(h ^ s.charCodeAt(2), 16777619);
      h = Math.imul(h ^ s.charCodeAt(n - 3), 16777619);
      h = Math.imul(h ^ s.charCodeAt(n - 4), 16777619);
    }
  }
  return (h ^ (h >>> 15)) & (INTERN_SLOTS - 1);
}
