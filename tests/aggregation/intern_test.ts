import assert from "node:assert/strict";
import {
  EMPTY_TEXT,
  Interner,
  maxStringBytes,
  NO_TEXT,
  STRING_HEADER_BYTES,
  stringBytes,
} from "../../src/aggregation/intern.ts";
import { prng } from "../_helpers/prng.ts";

Deno.test("Interner gives equal text one id, whose text is the first copy", () => {
  const I = new Interner();
  const a = ["pod", "-1"].join("");
  const b = ["po", "d-1"].join("");
  const id = I.ref(a);
  assert.equal(I.ref(b), id);
  assert.equal(I.text(id), a);
  const other = I.ref("other-name");
  assert.notEqual(other, id);
  assert.equal(I.text(other), "other-name");
});

Deno.test("Interner: absent and empty text give an empty string, bad input its text", () => {
  const I = new Interner();
  assert.equal(I.ref(undefined), EMPTY_TEXT);
  assert.equal(I.ref(""), EMPTY_TEXT);
  assert.equal(I.text(EMPTY_TEXT), "");
  assert.equal(I.text(NO_TEXT), undefined);
  assert.equal(I.bytes, 0);
  I.unref(EMPTY_TEXT);
  I.unref(NO_TEXT);
  assert.equal(I.bytes, 0);
  const id = I.ref(42 as unknown as string);
  assert.equal(I.text(id), "42");
  assert.equal(I.bytes, stringBytes("42"));
  I.unref(id);
  assert.equal(I.bytes, 0);
});

Deno.test("Interner keeps correct text when many names share slots", () => {
  const I = new Interner();
  const names = Array.from({ length: 200_000 }, (_, i) => `pod-${i}`);
  const ids = names.map((n) => I.ref(n));
  assert.equal(new Set(ids).size, names.length);
  names.forEach((n, i) => assert.equal(I.text(ids[i]), n));
  names.forEach((n, i) => assert.equal(I.ref(n.slice(0)), ids[i]));
});

Deno.test("Interner charges a shared string once and releases it with its last reference", () => {
  const I = new Interner();
  const name = "web-frontend-7d9c";
  const id = I.ref(name);
  I.ref(name.split("").join(""));
  assert.equal(I.bytes, STRING_HEADER_BYTES + name.length);
  I.unref(id);
  assert.equal(I.bytes, STRING_HEADER_BYTES + name.length);
  assert.equal(I.text(id), name);
  I.unref(id);
  assert.equal(I.bytes, 0);
  assert.equal(I.text(id), undefined);
  // Non-Latin-1 text costs two bytes per UTF-16 unit.
  assert.equal(stringBytes("pod-é"), STRING_HEADER_BYTES + 5);
  assert.equal(stringBytes("pod-€"), STRING_HEADER_BYTES + 10);
});

Deno.test("Interner.replace takes the new reference before giving back the old one", () => {
  const I = new Interner();
  const a = I.ref("ESTABLISHED");
  const b = I.replace(a, "ESTABLISHED");
  assert.equal(b, a);
  assert.equal(I.text(b), "ESTABLISHED");
  assert.equal(I.bytes, stringBytes("ESTABLISHED"));
  const c = I.replace(b, "TIME_WAIT");
  assert.equal(I.text(c), "TIME_WAIT");
  assert.equal(I.bytes, stringBytes("TIME_WAIT"));
  I.unref(c);
  assert.equal(I.bytes, 0);
});

Deno.test("Interner: addedBytes is 0 for held text, the cost otherwise, and bounded", () => {
  const I = new Interner();
  I.ref("node-a");
  assert.equal(I.addedBytes("node-a"), 0);
  assert.equal(I.addedBytes(""), 0);
  assert.ok(I.addedBytes("node-b") >= stringBytes("node-b"));
  assert.ok(I.addedBytes("node-b") <= maxStringBytes("node-b"));
  assert.equal(maxStringBytes(undefined), 0);
});

Deno.test("Interner: random refs and unrefs over colliding slots balance back to 0 bytes", () => {
  // 3,000 distinct names over 65,536 slots collide (overflow entries) at random; the books
  // must still balance, and every ref must return equal text.
  for (let seed = 1; seed <= 5; seed++) {
    const rand = prng(seed);
    const I = new Interner();
    const names = Array.from({ length: 3000 }, (_, i) => `n${i}-${"x".repeat(i % 50)}`);
    const held: number[] = [];
    const idOf = new Map<string, number>();
    const count = new Map<string, number>();
    for (let step = 0; step < 40_000; step++) {
      if (held.length > 0 && rand() < 0.45) {
        const i = Math.floor(rand() * held.length);
        const n = I.text(held[i])!;
        count.set(n, count.get(n)! - 1);
        I.unref(held[i]);
        held[i] = held[held.length - 1];
        held.pop();
      } else {
        const n = names[Math.floor(rand() * names.length)];
        const v = I.ref(n.slice(0));
        assert.equal(I.text(v), n);
        // A held text keeps its id; two held texts never share one.
        if ((count.get(n) ?? 0) > 0) assert.equal(v, idOf.get(n));
        idOf.set(n, v);
        count.set(n, (count.get(n) ?? 0) + 1);
        held.push(v);
      }
    }
    for (const id of held) assert.equal(idOf.get(I.text(id)!), id);
    const distinct = new Set(held);
    let min = 0;
    for (const id of distinct) min += stringBytes(I.text(id)!);
    assert.ok(I.bytes >= min, `seed ${seed}: ${I.bytes} < ${min}`);
    for (const id of held) I.unref(id);
    assert.equal(I.bytes, 0, `seed ${seed}`);
  }
});

Deno.test("Interner.clear forgets held strings", () => {
  const I = new Interner();
  I.ref("a-name");
  I.clear();
  assert.equal(I.bytes, 0);
  const again = ["a-", "name"].join("");
  assert.equal(I.text(I.ref(again)), "a-name");
});
