import assert from "node:assert/strict";
import { clearArray } from "../src/arrays.ts";

Deno.test("clearArray empties short and long arrays, keeping the array object", () => {
  for (const n of [0, 1, 2, 32, 33, 1000]) {
    const a = Array.from({ length: n }, (_, i) => i);
    const same = a;
    clearArray(a);
    assert.equal(a.length, 0, `${n} elements`);
    assert.equal(a, same);
    a.push(7);
    assert.deepEqual(a, [7]);
  }
});
