/** firstDuplicateKey: npm:yaml's uniqueKeys semantics, in one pass, never through an alias. */

import assert from "node:assert/strict";
import { parseDocument } from "yaml";
import { firstDuplicateKey } from "../../src/config/unique_keys.ts";

function dup(text: string): [string, number] | undefined {
  const doc = parseDocument(text, { version: "1.1", uniqueKeys: false });
  const d = firstDuplicateKey(doc.contents);
  return d === undefined ? undefined : [d.text, d.key.range[0]];
}

Deno.test("unique keys: the first repeated key in the text, at any depth", () => {
  assert.equal(dup("a: 1\nb: {c: 1, d: [ {e: 1} ]}\n"), undefined);
  assert.deepEqual(dup("a: 1\na: 2\n"), ["a", 5]);
  assert.deepEqual(dup("x:\n  - {e: 1, e: 2}\ny: 1\ny: 2\n"), ["e", 14]);
  assert.deepEqual(dup("yes: 1\ntrue: 2\n"), ["true", 7]);
  // A number and a string are different keys (as npm:yaml's check has it); `<<` may repeat.
  assert.equal(dup("1: a\n'1': b\n"), undefined);
  assert.equal(dup("a: &a {x: 1}\nb: &b {y: 1}\nc:\n  <<: *a\n  <<: *b\n"), undefined);
});

Deno.test("unique keys: aliases are not followed (an alias bomb is one pass)", () => {
  let bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (let i = 1; i < 30; i++) bomb += `a${i}: &a${i} [${Array(9).fill(`*a${i - 1}`).join(",")}]\n`;
  assert.equal(dup(bomb), undefined);
});
