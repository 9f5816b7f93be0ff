import assert from "node:assert/strict";
import { Interner } from "../../src/aggregation/intern.ts";

Deno.test("Interner returns the first copy of equal text", () => {
  const I = new Interner();
  const a = ["pod", "-1"].join("");
  const b = ["po", "d-1"].join("");
  assert.equal(I.str(a), a);
  assert.equal(I.str(b), a);
  assert.equal(I.str("other-name"), "other-name");
});

Deno.test("Interner: absent and empty text give an empty string, bad input its text", () => {
  const I = new Interner();
  assert.equal(I.str(undefined), "");
  assert.equal(I.str(""), "");
  assert.equal(I.str(42 as unknown as string), "42");
});

Deno.test("Interner keeps correct text when many names share slots", () => {
  const I = new Interner();
  const names = Array.from({ length: 200_000 }, (_, i) => `pod-${i}`);
  for (const n of names) assert.equal(I.str(n), n);
  for (const n of names) assert.equal(I.str(n.slice(0)), n);
});

Deno.test("Interner.clear forgets held strings", () => {
  const I = new Interner();
  I.str("a-name");
  I.clear();
  const again = ["a-", "name"].join("");
  assert.equal(I.str(again), "a-name");
});
