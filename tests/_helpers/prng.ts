/**
 * The one seeded pseudo-random generator of the tests (mulberry32): small, fast and good
 * enough to drive fuzzing, mutations and randomised property tests, and deterministic so a
 * failure reproduces from its seed.
 */

/** Returns a generator of floats in [0, 1) that yields the same sequence for the same seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
