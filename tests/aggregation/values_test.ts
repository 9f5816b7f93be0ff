import assert from "node:assert/strict";
import { ipv4Word, isUint, num, okCounter } from "../../src/aggregation/values.ts";

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

Deno.test("okCounter accepts a bigint or a safe non-negative integer, and absence only when not required", () => {
  assert.equal(okCounter(1n, true), true);
  assert.equal(okCounter(undefined, false), true);
  assert.equal(okCounter(undefined, true), false);
  assert.equal(okCounter(1, false), true);
  assert.equal(okCounter(2 ** 53 - 1, true), true);
  assert.equal(okCounter(2 ** 53, true), false);
  assert.equal(okCounter(-1, true), false);
  assert.equal(okCounter(1.5, true), false);
  assert.equal(okCounter("1" as unknown as bigint, false), false);
});

Deno.test("ipv4Word reads dotted-quad text or a u32, and anything else as -1", () => {
  assert.equal(ipv4Word("10.0.0.1"), 0x0a000001);
  assert.equal(ipv4Word(0x0a000001), 0x0a000001);
  assert.equal(ipv4Word(0xffffffff), 0xffffffff);
  assert.equal(ipv4Word(2 ** 32), -1);
  assert.equal(ipv4Word(-1), -1);
  assert.equal(ipv4Word(1.5), -1);
  assert.equal(ipv4Word("10.0.0"), -1);
  assert.equal(ipv4Word(undefined), -1);
});
