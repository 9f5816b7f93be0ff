import assert from "node:assert/strict";
import { exporterAddress, parseListenAddress } from "../../src/collector/mod.ts";

Deno.test("address: wildcards (empty, ::, 0.0.0.0) bind dual-stack ::", () => {
  for (const a of ["[::]:4739", ":4739", "0.0.0.0:4739"]) {
    assert.deepEqual(parseListenAddress(a), { hostname: "::", port: 4739, wildcard: true }, a);
  }
});

Deno.test("address: explicit hosts keep their family; port 0 is allowed", () => {
  assert.deepEqual(parseListenAddress("127.0.0.1:0"), {
    hostname: "127.0.0.1",
    port: 0,
    wildcard: false,
  });
  assert.deepEqual(parseListenAddress("[::1]:4739"), {
    hostname: "::1",
    port: 4739,
    wildcard: false,
  });
});

Deno.test("address: a missing or invalid port is an error naming the address", () => {
  assert.throws(() => parseListenAddress("localhost"), /"localhost": missing port/);
  assert.throws(() => parseListenAddress("[::]:70000"), /invalid port "70000"/);
  assert.throws(() => parseListenAddress("[::]:x1"), /invalid port "x1"/);
  assert.throws(() => parseListenAddress("[::]:"), /invalid port ""/);
});

Deno.test("address: exporter address strips brackets and normalises IPv4-mapped IPv6", () => {
  assert.equal(exporterAddress("::ffff:10.0.0.5"), "10.0.0.5");
  assert.equal(exporterAddress("::FFFF:192.168.1.1"), "192.168.1.1");
  assert.equal(exporterAddress("[fd00::5]"), "fd00::5");
  assert.equal(exporterAddress("fd00::5"), "fd00::5");
  assert.equal(exporterAddress("10.1.2.3"), "10.1.2.3");
  // Only the mapped prefix is special.
  assert.equal(exporterAddress("::10.0.0.5"), "::10.0.0.5");
});
