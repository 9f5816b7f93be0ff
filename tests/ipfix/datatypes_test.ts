import assert from "node:assert/strict";
import {
  type DataType,
  decodeMessage,
  type FieldSpecifier,
  type FieldValue,
  IpfixEncodeError,
  TemplateStore,
} from "../../src/ipfix/mod.ts";
import { registerTestElements, spec, templateAndData, tmpl, TYPES } from "./helpers.ts";

registerTestElements();

function roundTrip(
  fields: FieldSpecifier[],
  rec: Record<string, FieldValue>,
): Record<string, FieldValue> {
  const store = new TemplateStore();
  const m = decodeMessage(templateAndData(tmpl(300, fields), [rec]), store);
  assert.deepEqual(m.setErrors, []);
  return m.dataSets[0].records[0];
}

const VALUES: Record<DataType, FieldValue[]> = {
  octetArray: [new Uint8Array([]), new Uint8Array([0, 1, 255]), new Uint8Array(300).fill(7)],
  unsigned8: [0, 255],
  unsigned16: [0, 65535, 4739],
  unsigned32: [0, 4294967295, 2147483648],
  unsigned64: [0n, 2n ** 64n - 5n, 2n ** 53n + 1n, 4294967296n],
  signed8: [-128, 127, -1],
  signed16: [-32768, 32767, -2],
  signed32: [-2147483648, 2147483647, -1],
  signed64: [-(2n ** 63n), 2n ** 63n - 1n, -1n],
  float32: [0, 1.5, -3.25, Infinity],
  float64: [Math.PI, -1e300, 5e-324],
  boolean: [true, false],
  macAddress: [new Uint8Array([0, 0x1b, 0x21, 0xaa, 0xbb, 0xff])],
  string: ["", "ESTABLISHED", "ünïcødé ✓ 😀", "x".repeat(254), "y".repeat(255), "z".repeat(70)],
  dateTimeSeconds: [1700000000, 4294967295],
  dateTimeMilliseconds: [1700000000123n, 2n ** 64n - 1n],
  dateTimeMicroseconds: [0xe8b1c2d3_00000001n],
  dateTimeNanoseconds: [0xffffffff_ffffffffn],
  ipv4Address: ["10.10.0.79", "0.0.0.0", "255.255.255.255"],
  ipv6Address: ["fd00:10:244:1::5", "::", "2001:db8::1", "::1", "1:2:3:4:5:6:7:8", "10.0.0.1"],
  basicList: [new Uint8Array([1, 2, 3, 4, 5])],
  subTemplateList: [new Uint8Array([3, 1, 0])],
  subTemplateMultiList: [new Uint8Array([])],
};

for (const [type] of TYPES) {
  Deno.test(`round trip of ${type}`, () => {
    for (const v of VALUES[type]) {
      const got = roundTrip([spec(type)], { [`test_${type}`]: v });
      assert.deepEqual(got, { [`test_${type}`]: v }, `${type} ${String(v)}`);
    }
  });
}

Deno.test("round trip of all types in one record", () => {
  const rec: Record<string, FieldValue> = {};
  for (const [type] of TYPES) rec[`test_${type}`] = VALUES[type][VALUES[type].length - 1];
  assert.deepEqual(roundTrip(TYPES.map(([t]) => spec(t)), rec), rec);
});

Deno.test("float64 in 4 bytes (reduced size) reads as float32", () => {
  assert.deepEqual(roundTrip([spec("float64", 4)], { test_float64: 0.5 }), { test_float64: 0.5 });
  const got = roundTrip([spec("float64", 4)], { test_float64: 0.1 }).test_float64;
  assert.equal(got, Math.fround(0.1));
});

Deno.test("reduced-size integers of every length round trip (zero/sign extension)", () => {
  for (let n = 1; n <= 8; n++) {
    const max = 2n ** BigInt(8 * n) - 1n;
    assert.deepEqual(roundTrip([spec("unsigned64", n)], { test_unsigned64: max }), {
      test_unsigned64: max,
    });
    const min = -(2n ** BigInt(8 * n - 1));
    assert.deepEqual(roundTrip([spec("signed64", n)], { test_signed64: min }), {
      test_signed64: min,
    });
  }
  for (let n = 1; n <= 4; n++) {
    const max = 2 ** (8 * n) - 1;
    assert.deepEqual(roundTrip([spec("unsigned32", n)], { test_unsigned32: max }), {
      test_unsigned32: max,
    });
    const min = -(2 ** (8 * n - 1));
    assert.deepEqual(roundTrip([spec("signed32", n)], { test_signed32: min }), {
      test_signed32: min,
    });
  }
});

Deno.test("fixed-length string and octetArray fields round trip", () => {
  assert.deepEqual(roundTrip([spec("string", 5)], { test_string: "abcde" }), {
    test_string: "abcde",
  });
  const raw = new Uint8Array([9, 8, 7]);
  assert.deepEqual(roundTrip([spec("octetArray", 3)], { test_octetArray: raw }), {
    test_octetArray: raw,
  });
});

Deno.test("boolean byte other than 1 or 2 reads as false", () => {
  const store = new TemplateStore();
  const msg = templateAndData(tmpl(300, [spec("boolean")]), [{ test_boolean: true }]);
  msg[msg.length - 1] = 7;
  assert.equal(decodeMessage(msg, store).dataSets[0].records[0].test_boolean, false);
});

Deno.test("IPv4-mapped IPv6 value decodes to dotted-quad text (Go's rendering)", () => {
  const got = roundTrip([spec("ipv6Address")], { test_ipv6Address: "::ffff:192.168.1.1" });
  assert.deepEqual(got, { test_ipv6Address: "192.168.1.1" });
});

Deno.test("encoder rejects an IPv6 value for an ipv4Address field and strings over 65535 bytes", () => {
  assert.throws(
    () => templateAndData(tmpl(300, [spec("ipv4Address")]), [{ test_ipv4Address: "fd00::1" }]),
    IpfixEncodeError,
  );
  assert.throws(
    () => templateAndData(tmpl(300, [spec("string")]), [{ test_string: "a".repeat(65536) }]),
    IpfixEncodeError,
  );
  assert.throws(
    () => templateAndData(tmpl(300, [spec("unsigned16")]), [{ test_unsigned16: "80" }]),
    IpfixEncodeError,
  );
});

Deno.test("wire-number mode: u64 below 2^53 and IPv4 as numbers, the rest as by default", () => {
  const cases: [number, bigint][] = [
    [8, 0n],
    [8, 2n ** 53n - 1n],
    [8, 2n ** 53n],
    [8, 2n ** 64n - 1n],
    [4, 2n ** 32n - 1n],
    [6, 2n ** 48n - 1n],
    [7, 2n ** 53n - 1n],
    [7, 2n ** 56n - 1n],
  ];
  for (const [length, v] of cases) {
    const t = tmpl(300, [
      spec("unsigned64", length),
      spec("ipv4Address"),
      spec("dateTimeMilliseconds"),
      spec("ipv6Address"),
    ]);
    const msg = templateAndData(t, [{
      test_unsigned64: v,
      test_ipv4Address: "10.244.1.7",
      test_dateTimeMilliseconds: 1700000000123n,
      test_ipv6Address: "2001:db8::1",
    }]);
    const wire = decodeMessage(msg, new TemplateStore({ wireNumbers: true })).dataSets[0]
      .records[0];
    const plain = decodeMessage(msg, new TemplateStore()).dataSets[0].records[0];
    assert.equal(plain.test_unsigned64, v);
    assert.equal(wire.test_unsigned64, v < 2n ** 53n ? Number(v) : v, `length ${length}: ${v}`);
    assert.equal(plain.test_ipv4Address, "10.244.1.7");
    assert.equal(wire.test_ipv4Address, 0x0af40107);
    assert.equal(wire.test_dateTimeMilliseconds, 1700000000123n);
    assert.equal(wire.test_ipv6Address, "2001:db8::1");
  }
});
