/**
 * String interning for the flow objects: many flows share Pod, namespace, Node and policy names
 * and tcpState, so each flow should point at one shared copy. A direct-mapped table (slot from
 * the length and a few sampled characters; a hit compares the whole string) instead of a Map:
 * no full-string hash, growth or rehash per new name, and bounded by construction. A collision
 * only loses sharing, never correctness.
 */

const INTERN_SLOTS = 1 << 16;

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

/** A bounded intern table: {@linkcode Interner.str} returns a shared copy of equal text. */
export class Interner {
  #slots: (string | undefined)[] = Interner.#empty();

  static #empty(): (string | undefined)[] {
    return new Array<string | undefined>(INTERN_SLOTS).fill(undefined);
  }

  /**
   * The shared copy of `s` when one is held, else `s` (remembered for the next call). Absent
   * and empty text give `""`; a non-string value (bad input) its `String()` text.
   */
  str(s: string | undefined): string {
    if (s === undefined || s === "") return "";
    if (typeof s !== "string") return String(s);
    const slot = internSlot(s);
    const k = this.#slots[slot];
    if (k === s) return k; // equal text: the shared copy
    this.#slots[slot] = s;
    return s;
  }

  /** Forgets every held string (their memory can then be reclaimed). */
  clear(): void {
    this.#slots = Interner.#empty();
  }
}
