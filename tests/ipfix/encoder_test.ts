import assert from "node:assert/strict";
import {
  type DataType,
  decodeMessage,
  encodeDataSet,
  encodeMessage,
  encodeTemplateSet,
  fieldsFor,
  IpfixEncodeError,
  RecordEncoder,
  TemplateStore,
} from "../../src/ipfix/mod.ts";
import { AGGREGATED_IPV4_FIELDS, POD_LABEL_FIELDS } from "../../src/record/schema.ts";
import { hex } from "./golden.ts";
import { message, registerTestElements, spec, tmpl } from "./helpers.ts";

Deno.test("enterprise field specifiers are encoded as in ipfix.md §1.4", () => {
  const set = encodeTemplateSet([
    tmpl(256, fieldsFor(["sourcePodName", "reversePacketTotalCount"])),
  ]);
  assert.deepEqual(
    set,
    hex("0002 0018 0100 0002 8065ffff0000dcba 805600080000 7279"),
  );
});

Deno.test("options template set carries the scope field count", () => {
  const set = encodeTemplateSet(
    [{ id: 400, fields: fieldsFor(["sourceTransportPort"]), scopeFieldCount: 1 }],
    true,
  );
  assert.deepEqual(set, hex("0003 000e 0190 0001 0001 0007 0002"));
});

Deno.test("FA template with labels: 65 fields, 496-byte template message", () => {
  const fields = fieldsFor([...AGGREGATED_IPV4_FIELDS, ...POD_LABEL_FIELDS]);
  const msg = message([encodeTemplateSet([tmpl(256, fields)])]);
  assert.equal(fields.length, 65);
  assert.equal(msg.length, 496);
  const store = new TemplateStore();
  decodeMessage(msg, store);
  assert.equal(store.get(7, 256)?.minRecordLength, 299);
});

Deno.test("record property order does not matter: values are matched by name", () => {
  const fields = fieldsFor(["sourceTransportPort", "destinationTransportPort", "tcpState"]);
  const a = encodeDataSet(300, fields, [{
    sourceTransportPort: 1,
    destinationTransportPort: 2,
    tcpState: "X",
  }]);
  const b = encodeDataSet(300, fields, [{
    tcpState: "X",
    destinationTransportPort: 2,
    sourceTransportPort: 1,
  }]);
  assert.deepEqual(a, b);
  assert.deepEqual(a, hex("012c 000a 0001 0002 01 58"));
});

Deno.test("a string of 255 bytes or more uses the 3-byte length form", () => {
  const fields = fieldsFor(["tcpState"]);
  const s254 = encodeDataSet(300, fields, [{ tcpState: "a".repeat(254) }]);
  assert.equal(s254.length, 4 + 1 + 254);
  assert.equal(s254[4], 254);
  const s255 = encodeDataSet(300, fields, [{ tcpState: "a".repeat(255) }]);
  assert.equal(s255.length, 4 + 3 + 255);
  assert.deepEqual([...s255.subarray(4, 7)], [255, 0, 255]);
});

Deno.test("non-ASCII strings are written as UTF-8", () => {
  const set = encodeDataSet(300, fieldsFor(["tcpState"]), [{ tcpState: "é😀" }]);
  assert.deepEqual([...set.subarray(4)], [6, 0xc3, 0xa9, 0xf0, 0x9f, 0x98, 0x80]);
});

Deno.test("negative bigint deltas wrap to unsigned64 like Go's cast", () => {
  const set = encodeDataSet(300, fieldsFor(["octetDeltaCount"]), [{ octetDeltaCount: -5n }]);
  assert.deepEqual(set.subarray(4), hex("fffffffffffffffb"));
});

Deno.test("IPv4 into an IPv6 field is IPv4-mapped; IPv6 into IPv4 throws", () => {
  const set = encodeDataSet(300, fieldsFor(["sourceIPv6Address"]), [{
    sourceIPv6Address: "10.0.0.1",
  }]);
  assert.deepEqual(set.subarray(4), hex("00000000000000000000ffff0a000001"));
  assert.throws(
    () => encodeDataSet(300, fieldsFor(["sourceIPv4Address"]), [{ sourceIPv4Address: "::1" }]),
    IpfixEncodeError,
  );
  assert.throws(
    () =>
      encodeDataSet(300, fieldsFor(["sourceIPv4Address"]), [{ sourceIPv4Address: "10.0.0.256" }]),
    IpfixEncodeError,
  );
});

Deno.test("size limits: message, set and values over 65535 bytes throw", () => {
  const f = fieldsFor(["tcpState"]);
  assert.throws(() => encodeDataSet(300, f, [{ tcpState: "a".repeat(65536) }]), IpfixEncodeError);
  assert.throws(
    () => encodeDataSet(300, f, [{ tcpState: "a".repeat(40000) }, { tcpState: "b".repeat(40000) }]),
    IpfixEncodeError,
  );
  const big = encodeDataSet(300, f, [{ tcpState: "a".repeat(65000) }]);
  assert.throws(
    () => encodeMessage({ exportTime: 0, sequenceNumber: 0, observationDomainId: 0 }, [big, big]),
    IpfixEncodeError,
  );
});

Deno.test("template ids outside 256..65535 are refused by the encoder", () => {
  assert.throws(() => encodeTemplateSet([tmpl(255, fieldsFor(["flowType"]))]), IpfixEncodeError);
  assert.throws(() => encodeDataSet(0, fieldsFor(["flowType"]), [{}]), IpfixEncodeError);
  assert.throws(() => new RecordEncoder(70000, []), IpfixEncodeError);
});

Deno.test("RecordEncoder reuses one buffer for many records", () => {
  const fields = fieldsFor(["sourceTransportPort", "sourcePodName", "octetTotalCount"]);
  const enc = new RecordEncoder(300, fields);
  const recs = [
    { sourceTransportPort: 1, sourcePodName: "a", octetTotalCount: 1n },
    { sourceTransportPort: 2, sourcePodName: "bb".repeat(200), octetTotalCount: 2n ** 63n },
  ];
  const buf = new Uint8Array(2000);
  const view = new DataView(buf.buffer, 4);
  let off = 0;
  for (const r of recs) {
    const len = enc.encodedLength(r);
    const next = enc.write(view, off, r);
    assert.equal(next - off, len);
    off = next;
  }
  const set = new Uint8Array(4 + off);
  set.set([1, 44, (4 + off) >> 8, (4 + off) & 0xff]);
  set.set(buf.subarray(4, 4 + off), 4);
  assert.deepEqual(set, encodeDataSet(300, fields, recs));
  const store = new TemplateStore();
  const m = decodeMessage(message([encodeTemplateSet([tmpl(300, fields)]), set]), store);
  assert.deepEqual(m.dataSets[0].records, recs);
});

/** The encoding of `value` for element `name` in `length` bytes, or the encode error's message. */
function encoded(name: string, length: number, value: unknown): string {
  const [f] = fieldsFor([name]);
  try {
    const set = encodeDataSet(300, [{ ...f, length }], [{ [name]: value as bigint }]);
    return [...set.subarray(4)].map((b) => b.toString(16).padStart(2, "0")).join("");
  } catch (e) {
    assert.ok(e instanceof IpfixEncodeError, String(e));
    return "error";
  }
}

Deno.test("an integer that does not fit its field throws instead of wrapping", () => {
  // Found by a differential review against tshark: each was written modulo 2^(8 × length),
  // e.g. unsigned8 300 as 2c, unsigned16 70000 as 1170, dateTimeSeconds 2^32 + 7 as 7.
  const cases: [string, number, unknown][] = [
    ["protocolIdentifier", 1, 300], // unsigned8
    ["protocolIdentifier", 1, -1],
    ["sourceTransportPort", 2, 70000], // unsigned16
    ["octetDeltaCount", 4, 2n ** 40n + 1n], // unsigned64 in 4 bytes (reduced size)
    ["octetDeltaCount", 4, -1n],
    ["octetDeltaCount", 8, 2n ** 64n],
    ["octetDeltaCount", 8, -(2n ** 63n) - 1n],
    ["flowEndSeconds", 4, 2 ** 32 + 7], // dateTimeSeconds
    ["flowEndSeconds", 4, 2n ** 64n + 7n], // a bigint that asIntN(64) brought back to 7
    ["protocolIdentifier", 1, 1.7], // a fraction was truncated to 1
    ["ingressNetworkPolicyRulePriority", 4, 2 ** 31], // signed32
    ["ingressNetworkPolicyRulePriority", 2, -32769], // signed32 in 2 bytes
  ];
  for (const [name, length, value] of cases) {
    assert.equal(encoded(name, length, value), "error", `${name}/${length} ${value}`);
  }
});

Deno.test("integers at the edges of their field's range are written exactly", () => {
  const cases: [string, number, unknown, string][] = [
    ["protocolIdentifier", 1, 255, "ff"],
    ["protocolIdentifier", 1, 0n, "00"],
    ["sourceTransportPort", 2, 65535, "ffff"],
    ["octetDeltaCount", 4, 2n ** 32n - 1n, "ffffffff"],
    ["octetDeltaCount", 3, 2 ** 24 - 1, "ffffff"],
    ["octetDeltaCount", 8, 2n ** 64n - 1n, "ffffffffffffffff"],
    // The documented wrap kept: a negative unsigned64 in 8 bytes, as Go's uint64(int64) cast.
    ["octetDeltaCount", 8, -(2n ** 63n), "8000000000000000"],
    ["octetDeltaCount", 8, -5, "fffffffffffffffb"],
    ["flowEndSeconds", 4, 2 ** 32 - 1, "ffffffff"],
    ["ingressNetworkPolicyRulePriority", 4, -(2 ** 31), "80000000"],
    ["ingressNetworkPolicyRulePriority", 4, 2 ** 31 - 1, "7fffffff"],
    ["ingressNetworkPolicyRulePriority", 2, -32768, "8000"],
  ];
  for (const [name, length, value, want] of cases) {
    assert.equal(encoded(name, length, value), want, `${name}/${length} ${value}`);
  }
});

Deno.test("signed64 and dateTimeMilliseconds: their own ranges (no negative wrap but unsigned64's)", () => {
  registerTestElements();
  const cases: [DataType, number, bigint, string][] = [
    ["signed64", 8, 2n ** 63n - 1n, "7fffffffffffffff"],
    ["signed64", 8, -(2n ** 63n), "8000000000000000"],
    ["signed64", 8, 2n ** 63n, "error"],
    ["signed64", 8, -(2n ** 63n) - 1n, "error"],
    ["signed64", 3, -(2n ** 23n), "800000"],
    ["signed64", 3, 2n ** 23n, "error"],
    ["dateTimeMilliseconds", 8, 2n ** 64n - 1n, "ffffffffffffffff"],
    ["dateTimeMilliseconds", 8, -1n, "error"],
  ];
  for (const [type, length, value, want] of cases) {
    const f = spec(type, length);
    let got: string;
    try {
      const set = encodeDataSet(300, [f], [{ [`test_${type}`]: value }]);
      got = [...set.subarray(4)].map((b) => b.toString(16).padStart(2, "0")).join("");
    } catch (e) {
      assert.ok(e instanceof IpfixEncodeError, String(e));
      got = "error";
    }
    assert.equal(got, want, `${type}/${length} ${value}`);
  }
});
