/**
 * String interning for the flow objects, with reference counts so that the bytes of held
 * strings are known (`limits.maxFlowBytes`). Many flows share Pod, namespace, Node and policy
 * names and tcpState, so each flow points at one shared copy, and a shared string is charged
 * **once**: when its first reference is taken, and released with its last reference. A string
 * no flow references any more is forgotten, so the table never keeps memory alive on its own.
 *
 * A direct-mapped table (slot from the length and a few sampled characters; a hit compares the
 * whole string) instead of a Map on the hit path: no full-string hash per record. A text whose
 * slot holds another live text goes to an overflow Map. Invariant: a text is held in its slot
 * or in the overflow, never both, so `unref` finds the entry `ref` charged.
 */

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
  refs: number;
  readonly bytes: number;
}

/** A reference-counted intern table: {@linkcode Interner.ref} returns a shared copy. */
export class Interner {
  #text: (string | undefined)[] = Interner.#empty();
  #refs = new Int32Array(INTERN_SLOTS);
  #cost = new Int32Array(INTERN_SLOTS);
  #over = new Map<string, OverflowEntry>();
  #bytes = 0;

  static #empty(): (string | undefined)[] {
    return new Array<string | undefined>(INTERN_SLOTS).fill(undefined);
  }

  /** Bytes of the strings held (each charged once, see {@linkcode stringBytes}). */
  get bytes(): number {
    return this.#bytes;
  }

  /**
   * The shared copy of `s`, counting one more reference to it (charged when it is the first).
   * Absent and empty text give `""`, which is not counted; a non-string value (bad input) its
   * `String()` text. Every reference taken must be given back with {@linkcode unref}.
   */
  ref(s: string | undefined): string {
    if (s === undefined || s === "") return "";
    if (typeof s !== "string") s = String(s);
    const slot = internSlot(s);
    const k = this.#text[slot];
    if (k === s) { // equal text: the shared copy (the hot path, kept small for inlining)
      this.#refs[slot]++;
      return k;
    }
    return this.#refMiss(s, slot, k);
  }

  #refMiss(s: string, slot: number, k: string | undefined): string {
    if (k === undefined) {
      const e = this.#over.size > 0 ? this.#over.get(s) : undefined;
      if (e !== undefined) {
        e.refs++;
        return e.text;
      }
      const c = stringBytes(s);
      this.#text[slot] = s;
      this.#refs[slot] = 1;
      this.#cost[slot] = c;
      this.#bytes += c;
      return s;
    }
    let e = this.#over.get(s);
    if (e === undefined) {
      e = { text: s, refs: 0, bytes: stringBytes(s) + OVERFLOW_ENTRY_BYTES };
      this.#over.set(s, e);
      this.#bytes += e.bytes;
    }
    e.refs++;
    return e.text;
  }

  /**
   * The shared copy of `next`, giving back the reference to `prev`. The new reference is taken
   * first, so text equal to `prev` stays held.
   */
  replace(prev: string | undefined, next: string | undefined): string {
    const v = this.ref(next);
    this.unref(prev);
    return v;
  }

  /** Gives back one reference taken by {@linkcode ref}; the last one releases the string. */
  unref(s: string | undefined): void {
    if (s === undefined || s === "") return;
    const slot = internSlot(s);
    if (this.#text[slot] === s) {
      if (--this.#refs[slot] === 0) {
        this.#text[slot] = undefined;
        this.#bytes -= this.#cost[slot];
      }
      return;
    }
    const e = this.#over.get(s);
    if (e !== undefined && --e.refs === 0) {
      this.#over.delete(s);
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
    const k = this.#text[internSlot(s)];
    if (k === s || (this.#over.size > 0 && this.#over.has(s))) return 0;
    return stringBytes(s) + (k === undefined ? 0 : OVERFLOW_ENTRY_BYTES);
  }

  /** Forgets every held string and reference (their memory can then be reclaimed). */
  clear(): void {
    this.#text = Interner.#empty();
    this.#refs.fill(0);
    this.#cost.fill(0);
    this.#over.clear();
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
