/**
 * String fields of the compiled decoder: each field reuses its last value when the bytes repeat
 * and builds the others afresh, so these tests pin that every value is still exactly the UTF-8
 * decoding of its bytes (as TextDecoder gives it) on a stream where values repeat, change to
 * other bytes of the same length, are empty, long, multi-byte or invalid UTF-8, through both
 * decoder tiers and across the tier-up.
 */
import assert from "node:assert/strict";
import {
  compileTemplate,
  decoderTiers,
  generatedFillerOf,
  PRESENT,
  type RecordsDecoder,
  stringsTruncatedTotal,
  viewFactory,
} from "../../src/ipfix/compile.ts";
import {
  type DataRecord,
  decodeMessage,
  encodeDataSet,
  encodeMessage,
  encodeTemplateSet,
  fieldsFor,
  type FieldSpecifier,
  type TemplateRecord,
  TemplateStore,
} from "../../src/ipfix/mod.ts";
import { registerTestElements, spec } from "./helpers.ts";
import { prng } from "../_helpers/prng.ts";

registerTestElements();

const utf8 = new TextDecoder();
const enc = new TextEncoder();

/** One string field of the test template: its name and fixed length (undefined: variable). */
interface StringField {
  readonly name: string;
  readonly fixed?: number;
}

const STRING_FIELDS: readonly StringField[] = [
  { name: "sourcePodName" },
  { name: "destinationPodName" },
  { name: "tcpState" },
  { name: "test_string", fixed: 8 },
];

/** Variable-length string fields, a counter between them, and a fixed-length string. */
function template(): TemplateRecord {
  const fields: FieldSpecifier[] = [
    ...fieldsFor(["sourcePodName", "octetDeltaCount", "destinationPodName", "tcpState"]),
    spec("string", 8),
  ];
  return { id: 300, fields, scopeFieldCount: 0 };
}

/** Byte values that are no UTF-8 on their own, or that stop a sequence early. */
const INVALID: readonly number[][] = [
  [0xff],
  [0x80],
  [0xc3],
  [0xe6, 0x97],
  [0xed, 0xa0, 0x80], // a UTF-16 surrogate, encoded
  [0xc3, 0xa9], // "é": valid, and the code units of "Ã©" (two chars) are these bytes
  [0xf0, 0x9f, 0x98, 0x80], // an emoji: two UTF-16 code units for four bytes
];

/** Random value bytes of `n` bytes, or of a random length when `n` is undefined. */
function randomValue(rnd: () => number, n?: number): Uint8Array {
  const pick = (k: number) => Math.floor(rnd() * k);
  const kind = pick(6);
  const len = n ?? [0, 1 + pick(12), 20 + pick(50), 250 + pick(300)][pick(4)];
  const out = new Uint8Array(len);
  for (let i = 0; i < len; i++) out[i] = 0x61 + pick(26);
  if (kind === 1) {
    // multi-byte characters at random places (cut when they do not fit: invalid then)
    const text = enc.encode(["é", "日本", "ß", "😀"][pick(4)]);
    for (let at = pick(4); at < len; at += 1 + pick(8)) out.set(text.subarray(0, len - at), at);
  } else if (kind === 2) {
    // invalid or borderline sequences
    for (let at = pick(3); at < len; at += 1 + pick(6)) {
      const seq = INVALID[pick(INVALID.length)];
      out.set(seq.slice(0, len - at), at);
    }
  } else if (kind === 3) {
    for (let i = 0; i < len; i++) out[i] = pick(256); // anything
  }
  return out;
}

/**
 * The next value of a field: mostly the last one again or one of a few recurring ones (as
 * namespaces alternate), else other bytes (same length too).
 */
function nextValue(
  rnd: () => number,
  prev: Uint8Array,
  pool: readonly Uint8Array[],
  fixed?: number,
): Uint8Array {
  const r = rnd();
  if (r < 0.35) return prev;
  if (r < 0.55) return pool[Math.floor(rnd() * pool.length)];
  if (r < 0.75 && prev.length > 0) {
    // Same length, one byte different: the length check alone must not decide.
    const v = prev.slice();
    const at = Math.floor(rnd() * v.length);
    v[at] = rnd() < 0.5 ? (v[at] ^ (1 + Math.floor(rnd() * 255))) : 0x80 | (v[at] & 0x3f);
    return v;
  }
  return randomValue(rnd, fixed);
}

/**
 * A stream of `count` records (bytes), each field's value bytes kept alongside, with the
 * variable-length prefixes in both forms (the 3-byte form for some short values too).
 */
function stream(seed: number, count: number): { bytes: Uint8Array; values: Uint8Array[][] } {
  const rnd = prng(seed);
  const parts: number[] = [];
  const values: Uint8Array[][] = [];
  let last = STRING_FIELDS.map((f) => randomValue(rnd, f.fixed));
  const pools = STRING_FIELDS.map((f) =>
    Array.from({ length: 6 }, () => randomValue(rnd, f.fixed))
  );
  for (let r = 0; r < count; r++) {
    last = STRING_FIELDS.map((f, i) => nextValue(rnd, last[i], pools[i], f.fixed));
    values.push(last);
    const varField = (v: Uint8Array) => {
      if (v.length >= 255 || rnd() < 0.1) parts.push(255, v.length >> 8, v.length & 0xff);
      else parts.push(v.length);
      parts.push(...v);
    };
    varField(last[0]);
    parts.push(0, 0, 0, 0, 0, 0, 0x12, r & 0xff); // octetDeltaCount
    varField(last[1]);
    varField(last[2]);
    parts.push(...last[3]);
  }
  return { bytes: new Uint8Array(parts), values };
}

/** Decodes the whole stream with `decode`, a random number (1..5) of records per call. */
function decodeAll(decode: RecordsDecoder, bytes: Uint8Array, seed: number): DataRecord[] {
  const rnd = prng(seed);
  const out: DataRecord[] = [];
  let off = 0;
  while (off < bytes.length) off = decode(bytes, off, bytes.length, out, 1 + Math.floor(rnd() * 5));
  return out;
}

/** A value's bytes as a field of `f` holds them: a fixed-length one without its NUL padding. */
function unpadded(f: StringField, v: Uint8Array): Uint8Array {
  if (f.fixed === undefined) return v;
  let n = v.length;
  while (n > 0 && v[n - 1] === 0) n--;
  return v.subarray(0, n);
}

function assertExact(records: DataRecord[], values: Uint8Array[][], what: string): void {
  assert.equal(records.length, values.length, `${what}: record count`);
  records.forEach((rec, r) => {
    STRING_FIELDS.forEach((f, i) => {
      const want = utf8.decode(unpadded(f, values[r][i]));
      assert.equal(rec[f.name], want, `${what}: record ${r} ${f.name}`);
    });
    assert.equal(rec.octetDeltaCount, 0x1200n + BigInt(r & 0xff), `${what}: record ${r} counter`);
  });
}

Deno.test("strings: both tiers give TextDecoder's text for repeated, changed and invalid bytes", () => {
  for (const seed of [1, 2, 3, 4]) {
    const { bytes, values } = stream(seed, 1500);
    const { generic, generated } = decoderTiers(template());
    const a = decodeAll(generic, bytes, seed);
    const b = decodeAll(generated, bytes, seed + 100);
    assertExact(a, values, `seed ${seed} generic`);
    assertExact(b, values, `seed ${seed} generated`);
  }
});

Deno.test("strings: exact across the tier-up from the generic to the generated decoder", () => {
  const { bytes, values } = stream(7, 800);
  const ct = compileTemplate(template());
  assertExact(decodeAll(ct.decodeRecords, bytes, 7), values, "compiled");
});

/** The old cut of a value longer than `max` bytes: back off to a UTF-8 boundary, then decode. */
function cut(v: Uint8Array, max: number): string {
  if (v.length <= max) return utf8.decode(v);
  let k = max;
  while (k > 0 && k > max - 3 && (v[k] & 0xc0) === 0x80) k--;
  if ((v[k] & 0xc0) === 0x80) k = max;
  return utf8.decode(v.subarray(0, k));
}

Deno.test("strings: exact in wire-number mode with a string bound that cuts long values", () => {
  const { bytes, values } = stream(9, 800);
  const max = 100;
  const { generic, generated } = decoderTiers(template(), {
    wireNumbers: true,
    maxStringBytes: max,
  });
  let cuts = 0;
  for (const [tier, d] of [["generic", generic], ["generated", generated]] as const) {
    const recs = decodeAll(d, bytes, 9);
    assert.equal(recs.length, values.length);
    recs.forEach((rec, r) =>
      STRING_FIELDS.forEach((f, i) => {
        if (values[r][i].length > max) cuts++;
        const want = cut(unpadded(f, values[r][i]), max);
        assert.equal(rec[f.name], want, `${tier} record ${r} ${f.name}`);
      })
    );
  }
  assert.ok(cuts > 50, `only ${cuts} cut values`);
});

Deno.test("strings: a value equal to the last one in length but not in bytes is decoded anew", () => {
  // "é" as UTF-8 after "Ã©" (whose code units are the bytes of "é"), then invalid bytes after
  // their own replacement text's length, then ASCII differing in the last byte only.
  const seqs: Uint8Array[] = [
    enc.encode("Ã©"),
    enc.encode("é"),
    new Uint8Array([0xff]),
    new Uint8Array([0xfe]),
    enc.encode("k8s-node-1"),
    enc.encode("k8s-node-2"),
    enc.encode("k8s-node-2"),
    new Uint8Array(0),
    enc.encode("k8s-node-2"),
  ];
  const parts: number[] = [];
  for (const v of seqs) for (let i = 0; i < 3; i++) parts.push(v.length, ...v);
  const fields = fieldsFor(["sourcePodName", "destinationPodName", "tcpState"]);
  const t: TemplateRecord = { id: 301, fields, scopeFieldCount: 0 };
  for (const [tier, d] of Object.entries(decoderTiers(t))) {
    const out: DataRecord[] = [];
    d(new Uint8Array(parts), 0, parts.length, out);
    const want = seqs.map((v) => utf8.decode(v));
    for (const name of ["sourcePodName", "destinationPodName", "tcpState"]) {
      assert.deepEqual(out.map((r) => r[name]), want, `${tier} ${name}`);
    }
  }
});

Deno.test("fixed-length strings: the NUL padding is dropped by every tier, view and presence", () => {
  // Found by a differential review against tshark: sourcePodName of length 8 holding
  // 77656230 00000000 decoded as "web0\0\0\0\0"; the encoder zero-pads a shorter value, so
  // encode then decode did not give the value back.
  const [src, dst, proto] = fieldsFor([
    "sourcePodName",
    "destinationPodName",
    "protocolIdentifier",
  ]);
  const fields: FieldSpecifier[] = [{ ...src, length: 8 }, { ...dst, length: 4 }, proto];
  const t: TemplateRecord = { id: 300, fields, scopeFieldCount: 0 };
  // "web0" + 4 NULs, 4 NULs (empty), then "a\0b" + NUL (an inner NUL is kept), "abcd".
  const bytes = new Uint8Array([
    ...[0x77, 0x65, 0x62, 0x30, 0, 0, 0, 0],
    ...[0, 0, 0, 0],
    6,
    ...[0x61, 0, 0x62, 0, 0, 0, 0, 0],
    ...[0x61, 0x62, 0x63, 0x64],
    17,
  ]);
  const want = [
    { sourcePodName: "web0", destinationPodName: "", protocolIdentifier: 6 },
    { sourcePodName: "a\0b", destinationPodName: "abcd", protocolIdentifier: 17 },
  ];
  for (const [tier, d] of Object.entries(decoderTiers(t))) {
    const out: DataRecord[] = [];
    d(bytes, 0, bytes.length, out);
    assert.deepEqual(out, want, tier);
  }
  // Both tiers again after the tier-up, with the last-value memory of the generated code.
  const ct = compileTemplate(t);
  for (let i = 0; i < 12; i++) {
    const out: DataRecord[] = [];
    ct.decodeRecords(bytes, 0, bytes.length, out);
    assert.deepEqual(out, want, `compiled, data set ${i}`);
  }
  // A bound: "web0" is 4 bytes, not cut at 4 (the padding does not count); cut at 3.
  const truncated = stringsTruncatedTotal();
  for (const [max, first] of [[4, "web0"], [3, "web"]] as const) {
    for (const [tier, d] of Object.entries(decoderTiers(t, { maxStringBytes: max }))) {
      const out: DataRecord[] = [];
      d(bytes, 0, bytes.length, out);
      assert.equal(out[0].sourcePodName, first, `${tier} max ${max}`);
    }
  }
  assert.equal(
    stringsTruncatedTotal() - truncated,
    2 * 2,
    "only the cut at 3 counts (2 values, 2 tiers)",
  );
  // A view, the Pod names as presence only: NUL padding alone is empty.
  const only = ["sourcePodName", "destinationPodName"];
  const views = { only, presence: only };
  const wantViews = [
    { sourcePodName: PRESENT, destinationPodName: "" },
    { sourcePodName: PRESENT, destinationPodName: PRESENT },
  ];
  for (const [tier, d] of Object.entries(decoderTiers(t, views))) {
    const out: DataRecord[] = [];
    d(bytes, 0, bytes.length, out);
    assert.deepEqual(out.map((r) => ({ ...r })), wantViews, `view, ${tier}`);
  }
  const fill = generatedFillerOf(t, views);
  const target = viewFactory(only)();
  let off = 0;
  for (const w of wantViews) {
    off = fill(bytes, off, bytes.length, target);
    assert.deepEqual({ ...target }, w, "filler");
  }
  // Encoded by this codec (zero-padded) and decoded: the value comes back.
  const store = new TemplateStore();
  const rec = { sourcePodName: "web0", destinationPodName: "ab", protocolIdentifier: 6 };
  const m = decodeMessage(
    encodeMessage({ exportTime: 0, sequenceNumber: 0, observationDomainId: 1 }, [
      encodeTemplateSet([t]),
      encodeDataSet(300, fields, [rec]),
    ]),
    store,
  );
  assert.deepEqual(m.dataSets[0].records, [rec]);
});
