import assert from "node:assert/strict";
import { isUint, num, okBig } from "../../src/aggregation/values.ts";

Deno.test("num reads a u32 value and anything else as 0", () => {
  assert.equal(num(4739), 4739);
  assert.equal(num(0xffffffff), 0xffffffff);
  assert.equal(num(undefined), 0);
  assert.equal(num(-1), 0);
  assert.equal(num(2 ** 32), 0);
  assert.equal(num("7" as unknown as number), 0);
});

Deno.test("isUint checks integer range", () => {
  assert.equal(isUint(0, 255), true);
  assert.equal(isUint(255, 255), true);
  assert.equal(isUint(256, 255), false);
  assert.equal(isUint(1.5, 255), false);
  assert.equal(isUint(-1, 255), false);
  assert.equal(isUint(NaN, 255), false);
});

Deno.test("okBig accepts a bigint, and absence only when not required", () => {
  assert.equal(okBig(1n, true), true);
  assert.equal(okBig(undefined, false), true);
  assert.equal(okBig(undefined, true), false);
  assert.equal(okBig(1 as unknown as bigint, false), false);
});
