import assert from "node:assert/strict";
import { EMPTY_TEXT, Interner } from "../../src/aggregation/intern.ts";
import { tupleBytes, TupleTable } from "../../src/aggregation/tuples.ts";
import { prng } from "../_helpers/prng.ts";

/** Fills the scratch of `t` (width 3: two strings at 0 and 2, a number at 1) and makes it. */
function make(t: TupleTable, I: Interner, a: string, n: number, c: string): number {
  t.w[0] = I.ref(a);
  t.w[1] = n;
  t.w[2] = I.ref(c);
  return t.make();
}

Deno.test("TupleTable: equal tuples share an id; the defaults are id 0 and cost nothing", () => {
  const I = new Interner();
  const t = new TupleTable(I, 3, [0, 2]);
  assert.equal(make(t, I, "", 0, ""), 0);
  assert.equal(t.word(0, 0), EMPTY_TEXT);
  assert.equal(t.word(0, 1), 0);
  assert.equal(t.bytes, 0);
  const x = make(t, I, "np", 1, "rule");
  const y = make(t, I, "np", 1, "rule");
  assert.equal(x, y);
  assert.notEqual(x, 0);
  assert.equal(t.size, 1);
  assert.equal(t.bytes, tupleBytes(3));
  assert.equal(I.text(t.word(x, 0)), "np");
  assert.equal(t.word(x, 1), 1);
  // One reference to each string per tuple, however many flows hold it.
  const held = I.bytes;
  t.unref(x);
  assert.equal(I.bytes, held);
  t.unref(y);
  assert.equal(t.size, 0);
  assert.equal(t.bytes, 0);
  assert.equal(I.bytes, 0);
  t.unref(0); // no-op
});

Deno.test("TupleTable: random make/load/unref agree with a model and give every byte back", () => {
  for (let seed = 1; seed <= 3; seed++) {
    const r = prng(seed);
    const I = new Interner();
    const t = new TupleTable(I, 3, [0, 2]);
    const names = Array.from({ length: 40 }, (_, i) => i === 0 ? "" : `name-${i}`);
    const held: { id: number; v: [string, number, string] }[] = [];
    const idOf = new Map<string, number>();
    for (let step = 0; step < 20_000; step++) {
      const op = r();
      if (held.length > 0 && op < 0.4) {
        const i = Math.floor(r() * held.length);
        t.unref(held[i].id);
        held[i] = held[held.length - 1];
        held.pop();
      } else if (held.length > 0 && op < 0.55) {
        // A correlation: load a held tuple, change one word, make, give the old one back.
        const i = Math.floor(r() * held.length);
        const h = held[i];
        t.load(h.id);
        const v: [string, number, string] = [...h.v];
        v[0] = names[Math.floor(r() * names.length)];
        t.w[0] = I.replace(t.w[0], v[0]);
        const id = t.make();
        t.unref(h.id);
        held[i] = { id, v };
      } else {
        const v: [string, number, string] = [
          names[Math.floor(r() * names.length)],
          Math.floor(r() * 3),
          names[Math.floor(r() * 5)],
        ];
        held.push({ id: make(t, I, ...v), v });
      }
      if (step % 50 === 0) {
        idOf.clear();
        for (const h of held) {
          assert.equal(I.text(t.word(h.id, 0)), h.v[0]);
          assert.equal(t.word(h.id, 1), h.v[1]);
          assert.equal(I.text(t.word(h.id, 2)), h.v[2]);
          const k = JSON.stringify(h.v);
          assert.equal(idOf.get(k) ?? h.id, h.id, `seed ${seed} step ${step}: one id per tuple`);
          idOf.set(k, h.id);
        }
        const live = new Set(held.map((h) => h.id).filter((id) => id !== 0));
        assert.equal(t.size, live.size);
        assert.equal(t.bytes, live.size * tupleBytes(3));
      }
    }
    for (const h of held) t.unref(h.id);
    assert.equal(t.size, 0, `seed ${seed}`);
    assert.equal(I.bytes, 0, `seed ${seed}`);
  }
});

Deno.test("TupleTable: grows past its first arrays; clear forgets every tuple", () => {
  const I = new Interner();
  const t = new TupleTable(I, 3, [0, 2]);
  const ids = Array.from({ length: 1000 }, (_, i) => make(t, I, `a${i}`, i, "c"));
  assert.equal(new Set(ids).size, 1000);
  ids.forEach((id, i) => assert.equal(I.text(t.word(id, 0)), `a${i}`));
  assert.equal(make(t, I, "a500", 500, "c"), ids[500]);
  t.clear();
  assert.equal(t.size, 0);
  assert.equal(t.bytes, 0);
  assert.equal(t.word(0, 0), EMPTY_TEXT);
});
