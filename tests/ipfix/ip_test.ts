import assert from "node:assert/strict";
import { canonicalIP, formatIPv4, formatIPv6, parseIP } from "../../src/ipfix/mod.ts";
import { parseIPv6 } from "../../src/ipfix/ip.ts";

function v6(text: string): string {
  const b = parseIP(text);
  assert.ok(b && b.length === 16, text);
  return formatIPv6(b, 0);
}

Deno.test("formatIPv4 reads 4 bytes at an offset", () => {
  const view = new DataView(new Uint8Array([9, 10, 10, 0, 79, 255]).buffer);
  assert.equal(formatIPv4(view, 1), "10.10.0.79");
});

Deno.test("formatIPv6 follows RFC 5952", () => {
  assert.equal(v6("2001:0:3238:DFE1:63::FEFB"), "2001:0:3238:dfe1:63::fefb");
  assert.equal(v6("2001:db8:0:0:1:0:0:1"), "2001:db8::1:0:0:1"); // first run on ties
  assert.equal(v6("2001:db8:0:1:1:1:1:1"), "2001:db8:0:1:1:1:1:1"); // single zero group kept
  assert.equal(v6("0:0:0:0:0:0:0:0"), "::");
  assert.equal(v6("0:0:0:0:0:0:0:1"), "::1");
  assert.equal(v6("fe80:0:0:0:0:0:0:0"), "fe80::");
  assert.equal(v6("2001:0db8:0000:0000:0000:ff00:0042:8329"), "2001:db8::ff00:42:8329");
  assert.equal(v6("1:0:0:2:0:0:0:3"), "1:0:0:2::3"); // longest run wins
});

Deno.test("IPv4-mapped IPv6 prints as dotted quad; IPv4-compatible does not", () => {
  assert.equal(v6("::ffff:10.0.0.1"), "10.0.0.1");
  assert.equal(v6("::ffff:a00:1"), "10.0.0.1");
  assert.equal(v6("::10.0.0.1"), "::a00:1");
});

Deno.test("formatIPv6 reads at an offset", () => {
  const buf = new Uint8Array(20);
  buf.set(parseIP("fd00::5")!, 3);
  assert.equal(formatIPv6(buf, 3), "fd00::5");
});

Deno.test("parseIP accepts IPv4 and IPv6 forms and rejects junk", () => {
  assert.deepEqual(parseIP("10.1.2.3"), new Uint8Array([10, 1, 2, 3]));
  assert.equal(parseIP("1:2:3:4:5:6:7:8")?.length, 16);
  assert.deepEqual(parseIP("::ffff:1.2.3.4")?.subarray(10), new Uint8Array([255, 255, 1, 2, 3, 4]));
  for (
    const bad of [
      "",
      "1.2.3",
      "1.2.3.4.5",
      "256.1.1.1",
      "01.2.3.4",
      "1.2.3.-4",
      "a.b.c.d",
      "1::2::3",
      "1:2:3:4:5:6:7:8:9",
      "1:2:3:4:5:6:7",
      "12345::",
      "fe80::1%eth0",
      "[::1]",
      "::ffff:1.2.3",
      ":",
      "1:2:3:4:5:6:7::8:9",
    ]
  ) {
    assert.equal(parseIP(bad), undefined, bad);
  }
});

Deno.test("canonicalIP normalises text", () => {
  assert.equal(canonicalIP("2001:0DB8::0001"), "2001:db8::1");
  assert.equal(canonicalIP("::ffff:192.168.0.1"), "192.168.0.1");
  assert.equal(canonicalIP("10.0.0.1"), "10.0.0.1");
  assert.equal(canonicalIP("nope"), undefined);
});

Deno.test("parseIPv6 parses IPv6 text only, with an optional dotted-quad tail", () => {
  assert.deepEqual(
    parseIPv6("2001:db8::ff00:42:8329"),
    new Uint8Array([0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0xff, 0, 0, 0x42, 0x83, 0x29]),
  );
  assert.deepEqual(
    parseIPv6("::ffff:10.0.0.1")?.subarray(10),
    new Uint8Array([255, 255, 10, 0, 0, 1]),
  );
  for (const bad of ["10.0.0.1", "", ":", "1::2::3", "::ffff:010.0.0.1", "[::1]", "fe80::1%eth0"]) {
    assert.equal(parseIPv6(bad), undefined, bad);
  }
});
