import assert from "node:assert/strict";
import {
  canonicalAddress,
  canonicalAnyAddress,
  formatFlowKey,
  formatIPv4Word,
  formatIPv6Words,
  parseIPv4Word,
  parseIPv6Words,
} from "../../src/aggregation/flow_key.ts";
import { K4, newCore } from "./fixtures.ts";
import { baseRecord, counters } from "./fixtures.ts";
import type { FlowInput } from "../../src/aggregation/mod.ts";

Deno.test("canonicalAddress: IPv6 per RFC 5952 (lower case, zeros, longest run, first tie)", () => {
  const cases: [string, string][] = [
    ["2001:0:3238:DFE1:63::FEFB", "2001:0:3238:dfe1:63::fefb"],
    ["2001:0db8:0000:0000:0000:0000:0000:0001", "2001:db8::1"],
    ["2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"], // tie: first run
    ["2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"], // a single zero group stays
    ["0:0:0:0:0:0:0:0", "::"],
    ["::1", "::1"],
    ["fe80::", "fe80::"],
    ["1:0:0:2:0:0:0:3", "1:0:0:2::3"], // longest run wins over the first
    ["::ffff:10.0.0.1", "10.0.0.1"], // Go's IPv4-mapped quirk
    ["::FFFF:0a00:0001", "10.0.0.1"],
    ["64:ff9b::192.0.2.33", "64:ff9b::c000:221"],
  ];
  for (const [i, o] of cases) assert.equal(canonicalAddress(i, false), o, i);
});

Deno.test("canonicalAddress: IPv4 canonical text kept, leading zeros removed, bad text rejected", () => {
  assert.equal(canonicalAddress("10.0.0.1", true), "10.0.0.1");
  assert.equal(canonicalAddress("255.255.255.255", true), "255.255.255.255");
  assert.equal(canonicalAddress("010.000.000.001", true), "10.0.0.1");
  for (const bad of ["256.0.0.1", "1.2.3", "1.2.3.4.5", "a.b.c.d", "", "1..2.3"]) {
    assert.equal(canonicalAddress(bad, true), undefined, bad);
  }
  for (const bad of ["1:2:3", "1::2::3", "12345::", "g::1", "1:2:3:4:5:6:7:8:9", ":"]) {
    assert.equal(canonicalAddress(bad, false), undefined, bad);
  }
  assert.equal(canonicalAnyAddress("2001:DB8::1"), "2001:db8::1");
  assert.equal(canonicalAnyAddress("10.0.0.01"), "10.0.0.1");
  assert.equal(canonicalAnyAddress("nonsense"), undefined);
});

Deno.test("address words: IPv4/IPv6 text to u32 words and back", () => {
  assert.equal(parseIPv4Word("10.0.0.1"), 0x0a000001);
  assert.equal(parseIPv4Word("255.255.255.255"), 0xffffffff);
  assert.equal(parseIPv4Word("010.0.0.1"), 0x0a000001);
  for (const bad of ["256.0.0.1", "1.2.3", "1.2.3.4.5", "1..2.3", "1.2.3.a", "1.2.3.1000"]) {
    assert.equal(parseIPv4Word(bad), -1, bad);
  }
  assert.equal(formatIPv4Word(0xc0a80001), "192.168.0.1");
  const w = parseIPv6Words("2001:0:3238:DFE1:63::FEFB")!;
  assert.deepEqual([...w], [0x20010000, 0x3238dfe1, 0x00630000, 0x0000fefb]);
  assert.equal(formatIPv6Words(w[0], w[1], w[2], w[3]), "2001:0:3238:dfe1:63::fefb");
  assert.equal(formatIPv6Words(0, 0, 0xffff, 0x0a000001), "10.0.0.1");
  assert.equal(parseIPv6Words("1::2::3"), undefined);
  assert.equal(parseIPv6Words("10.0.0.1"), undefined);
  assert.deepEqual([...parseIPv6Words("::ffff:10.0.0.1")!], [0, 0, 0xffff, 0x0a000001]);
});

Deno.test("canonicalAddress: IPv4 text is kept as is unless a part has a leading zero", () => {
  const text = ["10.0.0.", "1"].join("");
  assert.equal(canonicalAddress(text, true), text);
  assert.equal(canonicalAddress("0.0.0.0", true), "0.0.0.0");
  assert.equal(canonicalAddress("100.20.3.0", true), "100.20.3.0");
  assert.equal(canonicalAddress("10.0.0.01", true), "10.0.0.1");
  assert.equal(canonicalAddress("00.0.0.0", true), "0.0.0.0");
});

Deno.test("canonicalAddress: an IPv6 dotted-quad tail follows Go (no leading zeros, like ip.ts)", () => {
  assert.equal(canonicalAddress("::ffff:10.0.0.1", false), "10.0.0.1");
  assert.equal(canonicalAddress("::ffff:010.0.0.1", false), undefined);
  assert.equal(canonicalAddress("10.0.0.1", false), undefined);
});

Deno.test("formatFlowKey brackets IPv6 addresses", () => {
  assert.equal(formatFlowKey(K4), "10.0.0.1:1234->10.0.0.2:5678/6");
  assert.equal(
    formatFlowKey({
      sourceAddress: "2001:db8::1",
      destinationAddress: "2001:db8::2",
      protocol: 17,
      sourcePort: 0,
      destinationPort: 53,
    }),
    "[2001:db8::1]:0->[2001:db8::2]:53/17",
  );
});

function rec(over: Partial<FlowInput>): FlowInput {
  return {
    ...baseRecord(),
    flowType: 1,
    flowStartSeconds: 0,
    flowEndSeconds: 1,
    flowEndReason: 2,
    tcpState: "",
    ...counters(1n, 1n, 100n, 100n),
    ...over,
  };
}

Deno.test("key: IPv4 IE wins when both families are present; ICMP ports 0 are valid", () => {
  const { core } = newCore();
  assert.equal(
    core.addRecord(rec({ sourceIPv6Address: "::1", destinationIPv6Address: "::2" })),
    true,
  );
  assert.equal(core.query(K4).length, 1);
  assert.equal(core.entryState(K4)!.isIPv4, true);
  assert.equal(
    core.addRecord(
      rec({ protocolIdentifier: 1, sourceTransportPort: 0, destinationTransportPort: 0 }),
    ),
    true,
  );
  assert.equal(core.query({ protocol: 1 }).length, 1);
});

Deno.test("key improved (L24): a mixed IPv4/IPv6 record is rejected and counted", () => {
  const { core } = newCore();
  const r = rec({ destinationIPv6Address: "2001:db8::2" });
  delete r.destinationIPv4Address;
  assert.equal(core.addRecord(r), false);
  assert.equal(core.stats().recordsRejected.mixedAddressFamily, 1);
  assert.equal(core.flowCount, 0);
});

Deno.test("key: IPv4-mapped IPv6 addresses print as IPv4 but keep the IPv6 family", () => {
  const { core } = newCore();
  const r = rec({
    sourceIPv6Address: "::ffff:10.0.0.1",
    destinationIPv6Address: "::ffff:10.0.0.2",
  });
  delete r.sourceIPv4Address;
  delete r.destinationIPv4Address;
  assert.equal(core.addRecord(r), true);
  const st = core.entryState(K4)!;
  assert.equal(st.isIPv4, false);
  assert.equal(core.query(K4)[0].sourceIPv6Address, "10.0.0.1");
});

Deno.test("key: bad addresses and missing key fields are rejected and counted", () => {
  const { core } = newCore();
  assert.equal(core.addRecord(rec({ sourceIPv4Address: "10.0.0.300" })), false);
  const noPort = rec({});
  delete noPort.destinationTransportPort;
  assert.equal(core.addRecord(noPort), false);
  const noAddr = rec({});
  delete noAddr.sourceIPv4Address;
  assert.equal(core.addRecord(noAddr), false);
  const s = core.stats();
  assert.equal(s.recordsRejected.badAddress, 1);
  assert.equal(s.recordsRejected.missingKeyField, 2);
  assert.equal(s.recordsIn, 3);
  assert.equal(core.flowCount, 0);
});
