import assert from "node:assert/strict";
import { crc32 } from "../../src/spool/crc32.ts";

const text = (s: string) => new TextEncoder().encode(s);

Deno.test("crc32 matches the IEEE check value and known vectors", () => {
  assert.equal(crc32(text("123456789")), 0xcbf43926);
  assert.equal(crc32(new Uint8Array(0)), 0);
  assert.equal(crc32(text("The quick brown fox jumps over the lazy dog")), 0x414fa339);
});

Deno.test("crc32 continues over split input", () => {
  const all = text("flow-aggregator spool frame");
  assert.equal(crc32(all.subarray(9), crc32(all.subarray(0, 9))), crc32(all));
});

Deno.test("crc32 changes when one bit flips", () => {
  const a = text("abcdefgh");
  const b = a.slice();
  b[3] ^= 0x10;
  assert.notEqual(crc32(a), crc32(b));
});
