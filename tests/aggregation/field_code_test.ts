import assert from "node:assert/strict";
import { compileFieldCode, FIELD_CODE } from "../../src/aggregation/field_code.ts";
import { type FieldRow, FIELDS, GROUPS } from "../../src/aggregation/layout.ts";
import { EMPTY_TEXT, Interner, NO_TEXT } from "../../src/aggregation/intern.ts";
import { U32, U32_PER_SLOT } from "../../src/aggregation/slot_store.ts";
import type { FlowInput } from "../../src/aggregation/mod.ts";
import { newCore, s1 } from "./fixtures.ts";
import { AGGREGATED_IPV4_FIELDS, POD_LABEL_FIELDS } from "../../src/record/schema.ts";

const SMALL: readonly FieldRow[] = [
  { ie: "sourcePodName", kind: "str", at: 0, correlate: true },
  { ie: "tcpState", kind: "str", at: 1, correlate: false },
  { ie: "destinationServicePort", kind: "num", at: 2, correlate: true },
  { ie: "flowEndReason", kind: "num", at: 3, correlate: false },
  { ie: "flowEndSeconds", kind: "u32", at: 4 },
  { ie: "octetTotalCount", kind: "u64", at: 1 },
];

/** Words of one slot at offset 8 (room for the fixed words the snapshot reads: U32). */
const WORDS = 8 + U32_PER_SLOT;

Deno.test("field table: every snapshot field once, then addresses, cluster IPs and labels", () => {
  const { core } = newCore();
  assert.equal(core.addRecord(s1()), true);
  const rec = core.query()[0];
  const fromTable = FIELDS.map((f) => f.ie as string);
  assert.equal(new Set(fromTable).size, fromTable.length);
  assert.deepEqual(Object.keys(rec), [
    ...fromTable,
    "sourceIPv4Address",
    "destinationIPv4Address",
    "sourceIPv6Address",
    "destinationIPv6Address",
    "destinationClusterIPv4",
    "destinationClusterIPv6",
    "sourcePodLabels",
    "destinationPodLabels",
  ]);
});

Deno.test("compiled create interns strings, sets num words and leaves the rest empty", () => {
  const code = compileFieldCode(SMALL);
  const u32 = new Uint32Array(WORDS);
  const I = new Interner();
  const r: FlowInput = {
    sourcePodName: "pod1",
    destinationServicePort: 4739,
    flowEndReason: 2,
    flowEndSeconds: 9,
  };
  code.create(r, I, [], u32, 8);
  assert.equal(I.text(u32[8]), "pod1");
  assert.equal(u32[9], EMPTY_TEXT);
  assert.equal(I.text(u32[9]), "");
  assert.deepEqual([...u32.subarray(10, 16)], [4739, 2, 0, 0, 0, 0]);
  assert.equal(u32[8 + U32.CLUSTER_V4], NO_TEXT);
});

Deno.test("compiled correlate copies only set correlate fields", () => {
  const code = compileFieldCode(SMALL);
  const u32 = new Uint32Array(WORDS);
  const I = new Interner();
  code.create({ tcpState: "ESTABLISHED", flowEndReason: 1 }, I, [], u32, 0);
  code.correlate({ sourcePodName: "", destinationServicePort: 0, tcpState: "X" }, I, [], u32, 0);
  assert.equal(I.text(u32[0]), "");
  assert.equal(I.text(u32[1]), "ESTABLISHED");
  assert.equal(u32[2], 0);
  code.correlate(
    { sourcePodName: "pod9", destinationServicePort: 53, flowEndReason: 3 },
    I,
    [],
    u32,
    0,
  );
  assert.equal(I.text(u32[0]), "pod9");
  assert.equal(u32[2], 53);
  assert.equal(u32[3], 1);
});

Deno.test("compiled release and byte bounds: strings charged while referenced, bounds hold", () => {
  const code = compileFieldCode(SMALL);
  const u32 = new Uint32Array(WORDS);
  const I = new Interner();
  const r: FlowInput = { sourcePodName: "pod-" + "a".repeat(100), tcpState: "ESTABLISHED" };
  const bound = code.createBytes(r);
  assert.equal(code.correlateBytes({ tcpState: "X" }), 0); // tcpState is not a correlate field
  code.create(r, I, [], u32, 0);
  assert.ok(I.bytes > 0 && I.bytes <= bound, `${I.bytes} <= ${bound}`);
  const more: FlowInput = { sourcePodName: "pod-" + "b".repeat(300) };
  const before = I.bytes;
  const cb = code.correlateBytes(more);
  code.correlate(more, I, [], u32, 0);
  assert.ok(I.bytes - before <= cb);
  assert.equal(I.text(u32[0]), more.sourcePodName);
  code.release(I, [], u32, 0);
  assert.equal(I.bytes, 0);
});

Deno.test("compiled snapshot reads every row from its place", () => {
  const code = compileFieldCode(SMALL);
  const u32 = new Uint32Array(WORDS);
  const u64 = new BigUint64Array(4);
  const I = new Interner();
  code.create({ sourcePodName: "p", tcpState: "S", flowEndReason: 2 }, I, [], u32, 0);
  u32[4] = 77;
  u64[1] = 2n ** 63n;
  const snap = code.snapshot(I, [], u32, 0, u64, 0, { v4: false, src: "2001:db8::1", dst: "::1" });
  assert.deepEqual(snap, {
    sourcePodName: "p",
    tcpState: "S",
    destinationServicePort: 0,
    flowEndReason: 2,
    flowEndSeconds: 77,
    octetTotalCount: 2n ** 63n,
    sourceIPv4Address: undefined,
    destinationIPv4Address: undefined,
    sourceIPv6Address: "2001:db8::1",
    destinationIPv6Address: "::1",
    destinationClusterIPv4: undefined,
    destinationClusterIPv6: undefined,
    sourcePodLabels: undefined,
    destinationPodLabels: undefined,
  });
  // One key order for every record (one hidden class): the IPv4 form has the same keys.
  const v4 = code.snapshot(I, [], u32, 0, u64, 0, { v4: true, src: "10.0.0.1", dst: "10.0.0.2" });
  assert.deepEqual(Object.keys(v4), Object.keys(snap));
  assert.equal(v4.sourceIPv4Address, "10.0.0.1");
  assert.equal(v4.sourceIPv6Address, undefined);
  // The optional strings: cluster IP and labels once their words hold ids.
  u32[U32.CLUSTER_V4] = I.ref("10.96.0.1");
  u32[U32.SRC_LABELS] = EMPTY_TEXT;
  const opt = code.snapshot(I, [], u32, 0, u64, 0, { v4: true, src: "10.0.0.1", dst: "10.0.0.2" });
  assert.equal(opt.destinationClusterIPv4, "10.96.0.1");
  assert.equal(opt.sourcePodLabels, "");
  assert.equal(opt.destinationPodLabels, undefined);
});

Deno.test("compileFieldCode rejects bad names, repeated fields and shared slot words", () => {
  const bad = (rows: FieldRow[]) => () => compileFieldCode(rows);
  assert.throws(
    bad([{ ie: "a-b" as "tcpState", kind: "str", at: 0, correlate: false }]),
    /identifier/,
  );
  assert.throws(
    bad([{ ie: "tcpState", kind: "str", at: 0, correlate: false }, {
      ie: "tcpState",
      kind: "str",
      at: 1,
      correlate: true,
    }]),
    /twice/,
  );
  assert.throws(
    bad([{ ie: "tcpState", kind: "str", at: 3, correlate: false }, {
      ie: "flowEndReason",
      kind: "num",
      at: 3,
      correlate: false,
    }]),
    /u32\[3\] already used/,
  );
  assert.throws(
    bad([{ ie: "flowEndSeconds", kind: "u32", at: 1 }, {
      ie: "flowStartSeconds",
      kind: "u32",
      at: 1,
    }]),
    /u32\[1\] already used/,
  );
  assert.throws(bad([{ ie: "throughput", kind: "u64", at: -1 }]), /bad slot word/);
  // Rows sharing a word: disjoint bits are fine, overlapping ones are refused.
  const half = (ie: "sourceTransportPort" | "destinationTransportPort", shift: number) => ({
    ie,
    kind: "u32" as const,
    at: 6,
    shift,
    bits: 16,
  });
  compileFieldCode([half("sourceTransportPort", 16), half("destinationTransportPort", 0)]);
  assert.throws(
    bad([half("sourceTransportPort", 8), half("destinationTransportPort", 0)]),
    /u32\[6\] already used/,
  );
  assert.throws(bad([half("sourceTransportPort", 20)]), /bad slot word/);
  const packed = compileFieldCode([half("sourceTransportPort", 16)]);
  const u32 = new Uint32Array(8 + U32_PER_SLOT);
  u32[6] = (4739 << 16) | 53;
  const rec = packed.snapshot(new Interner(), [], u32, 0, new BigUint64Array(1), 0, {
    v4: true,
    src: "",
    dst: "",
  });
  assert.equal(rec.sourceTransportPort, 4739);
});

Deno.test("the compiled code of FIELDS is straight-line code with constant names", () => {
  assert.match(FIELD_CODE.source, /W\[0\] = I\.ref\(r\.sourcePodName\);/);
  assert.match(FIELD_CODE.source, new RegExp(`u32\\[ub \\+ ${U32.SRC_POD}\\] = G0\\.make\\(\\);`));
  assert.match(
    FIELD_CODE.source,
    new RegExp(`u32\\[ub \\+ ${U32.TCP_STATE}\\] = I\\.ref\\(r\\.tcpState\\);`),
  );
  assert.doesNotMatch(FIELD_CODE.source, /\[\s*[a-z]+\s*\]\s*=/); // no computed property writes
});

Deno.test("field table: every u32 word is used once, inside the slot", () => {
  // compileFieldCode(FIELDS, GROUPS) at load already refused shared bits; here: inside the slot.
  const own = FIELDS.filter((f) => f.kind !== "u64" && !("group" in f));
  const words = [...own.map((f) => f.at), ...GROUPS.map((g) => g.at)];
  for (const w of words) assert.ok(w >= 0 && w < U32_PER_SLOT, `word ${w}`);
  const whole = [
    ...own.filter((f) => f.kind === "str" || f.kind === "num").map((f) => f.at),
    ...GROUPS.map((g) => g.at),
  ];
  assert.equal(new Set(whole).size, whole.length);
  const fixed: number[] = Object.values(U32);
  for (const w of whole) assert.ok(fixed.includes(w), `word ${w} is a named U32 word`);
  // Grouped rows: positions 0.. of their group's tuple, each once.
  GROUPS.forEach((_, g) => {
    const at = FIELDS.filter((f) => "group" in f && f.group === g).map((f) => f.at).sort();
    assert.deepEqual(at, at.map((_, i) => i), `group ${g}`);
  });
});

Deno.test("grouped rows: create, correlate, snapshot and release through the tuple table", () => {
  const rows: readonly FieldRow[] = [
    { ie: "tcpState", kind: "str", at: 0, correlate: false },
    { ie: "ingressNetworkPolicyName", kind: "str", at: 0, correlate: true, group: 0 },
    { ie: "ingressNetworkPolicyType", kind: "num", at: 1, correlate: true, group: 0 },
    { ie: "ingressNetworkPolicyRuleName", kind: "str", at: 2, correlate: false, group: 0 },
  ];
  const code = compileFieldCode(rows, [{ name: "ingress", at: 1 }]);
  const I = new Interner();
  const G = code.newGroupTables(I);
  const [a, b] = [new Uint32Array(WORDS), new Uint32Array(WORDS)];
  const r: FlowInput = {
    ingressNetworkPolicyName: "np",
    ingressNetworkPolicyType: 1,
    ingressNetworkPolicyRuleName: "rule",
  };
  code.create(r, I, G, a, 0);
  code.create({ ...r }, I, G, b, 0);
  assert.equal(a[1], b[1], "equal fields: one shared tuple");
  assert.equal(G[0].size, 1);
  const bytes = I.bytes + G[0].bytes;
  assert.ok(bytes <= code.createBytes(r), `${bytes} <= ${code.createBytes(r)}`);
  // Correlation changes the name only: a new tuple for `b`, the rule name kept.
  code.correlate(
    { ingressNetworkPolicyName: "np2", ingressNetworkPolicyRuleName: "x" },
    I,
    G,
    b,
    0,
  );
  assert.notEqual(a[1], b[1]);
  const snap = code.snapshot(I, G, b, 0, new BigUint64Array(1), 0, { v4: true, src: "", dst: "" });
  assert.equal(snap.ingressNetworkPolicyName, "np2");
  assert.equal(snap.ingressNetworkPolicyType, 1);
  assert.equal(snap.ingressNetworkPolicyRuleName, "rule");
  assert.deepEqual(Object.keys(snap).slice(0, 4), rows.map((f) => f.ie));
  // An empty group is tuple 0 and costs nothing; releasing everything gives every byte back.
  const c = new Uint32Array(WORDS);
  code.create({}, I, G, c, 0);
  assert.equal(c[1], 0);
  assert.equal(
    code.snapshot(I, G, c, 0, new BigUint64Array(1), 0, { v4: true, src: "", dst: "" })
      .ingressNetworkPolicyName,
    "",
  );
  for (const u of [a, b, c]) code.release(I, G, u, 0);
  assert.equal(G[0].size, 0);
  assert.equal(G[0].bytes, 0);
  assert.equal(I.bytes, 0);
  assert.throws(() => compileFieldCode(rows, []), /no group 0/);
  assert.throws(
    () => compileFieldCode(rows, [{ name: "ingress", at: 0 }]),
    /u32\[0\] already used/,
  );
});

Deno.test("field table: covers every field the record schema exports, nothing else", () => {
  // Addresses, cluster IPs and labels are written by rules of their own (see layout.ts).
  const ownRules = new Set([
    "sourceIPv4Address",
    "destinationIPv4Address",
    "destinationClusterIPv4",
    ...POD_LABEL_FIELDS,
  ]);
  const schema = [...AGGREGATED_IPV4_FIELDS, ...POD_LABEL_FIELDS].filter((n) => !ownRules.has(n));
  assert.deepEqual(new Set(FIELDS.map((f) => f.ie as string)), new Set(schema));
});
