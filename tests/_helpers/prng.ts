/**
 * The one seeded pseudo-random generator of the tests: flowgen's mulberry32, deterministic so a
 * failure reproduces from its seed.
 */

export { prng } from "../../src/flowgen/model.ts";
