import assert from "node:assert/strict";
import {
  batchBuffer,
  batchCount,
  batchField,
  batchHas,
  batchNumber,
  batchRowBase,
  batchStringIndex,
  BatchWriter,
  openBatch,
  readBatch,
  readFlowAt,
  readFlows,
  ROW_BYTES,
} from "../../src/exporters/batch.ts";
import { fixtureFlow } from "./fixtures.ts";
import type { ExportedFlow } from "../../src/aggregation/record.ts";
import { newCore, s1 } from "../aggregation/fixtures.ts";

/** Same key and flags, and every field equal (absent and undefined alike, as sinks read them). */
function assertSameFlow(got: ExportedFlow, want: ExportedFlow): void {
  assert.deepEqual(
    { key: got.key, isIPv6: got.isIPv6, uncorrelated: got.uncorrelated },
    { key: want.key, isIPv6: want.isIPv6, uncorrelated: want.uncorrelated },
  );
  const g = got.record as unknown as Record<string, unknown>;
  const w = want.record as unknown as Record<string, unknown>;
  for (const k of new Set([...Object.keys(g), ...Object.keys(w)])) {
    assert.equal(g[k], w[k], k);
  }
  // The fixture is a whole record: the 63 FA template fields at least were compared.
  assert.ok(Object.values(w).filter((v) => v !== undefined).length >= 63);
}

Deno.test("batch: flows cross as one buffer and come back field for field", () => {
  const v4 = fixtureFlow(false, {
    octetTotalCount: 2n ** 63n + 12345n, // above 2^53: exact
    sourcePodLabels: '{"app":"a","ünï":"cödé"}',
    destinationPodLabels: "",
  });
  const v6 = fixtureFlow(true);
  const w = new BatchWriter(4);
  w.add(v4);
  w.add(v6);
  w.add({ ...v4, uncorrelated: true });
  assert.equal(w.count, 3);
  const buf = w.finish();
  assert.equal(w.count, 0, "the writer is empty after finish");
  assert.equal(batchCount(buf), 3);
  const out = readBatch(buf);
  assertSameFlow(out[0], v4);
  assertSameFlow(out[1], v6);
  assert.equal(out[2].uncorrelated, true);
  assert.equal(out[0].record.octetTotalCount, 2n ** 63n + 12345n);
  // Absent IEs stay absent (an IPv4 flow has no IPv6 address fields).
  assert.equal(out[0].record.sourceIPv6Address, undefined);
  assert.equal(out[1].record.sourceIPv6Address, v6.record.sourceIPv6Address);
});

Deno.test("batch: each distinct string is stored once per batch", () => {
  const w = new BatchWriter(100);
  for (let i = 0; i < 100; i++) w.add(fixtureFlow());
  const repeated = w.finish().byteLength;
  const one = new BatchWriter(1);
  one.add(fixtureFlow());
  const single = one.finish().byteLength;
  // 100 rows share the string table of one: only the fixed-size rows grow.
  assert.equal(repeated - 100 * ROW_BYTES, single - ROW_BYTES);
  assert.equal(new BatchWriter(2).full, false);
});

Deno.test("batch: strings come back exact, ASCII or not, short or long", () => {
  // ASCII up to 1024 bytes is built from char codes, the rest decoded as UTF-8 (openBatch).
  const values = [
    "",
    "perftest-a",
    "ctl\x00\x1b\x7f,\\",
    "ünïcödé ✓ 名前",
    "bad\ufffdutf8",
    "a".repeat(1024),
    "b".repeat(1025),
    "x".repeat(3000) + "é",
  ];
  const w = new BatchWriter(values.length);
  for (const v of values) w.add(fixtureFlow(false, { sourcePodName: v, destinationPodName: v }));
  const out = readBatch(w.finish());
  assert.deepEqual(out.map((f) => f.record.sourcePodName), values);
  assert.deepEqual(out.map((f) => f.record.destinationPodName), values);
});

Deno.test("batch: a buffer that is not a batch is refused", () => {
  assert.throws(() => readBatch(new ArrayBuffer(8)), /not a flow batch/);
  assert.throws(() => readBatch(new Uint8Array(32).buffer), /not a flow batch/);
});

Deno.test("batch: the core's address words give the same flows as the address text", () => {
  const { core } = newCore();
  const v6 = { sourceIPv6Address: "2001:db8::1", destinationIPv6Address: "::ffff:10.0.0.2" };
  const inputs = [
    s1({ sourceIPv4Address: "10.0.0.1", destinationIPv4Address: "192.168.100.200" }),
    { ...s1(v6), sourceIPv4Address: undefined, destinationIPv4Address: undefined },
  ];
  for (const r of inputs) assert.equal(core.addRecord(r), true);
  const viaWords = new BatchWriter(4);
  const viaText = new BatchWriter(4);
  const emitted: ExportedFlow[] = [];
  core.flushAll((f) => {
    assert.ok(f.addressWords !== undefined, "the core hands its address words over");
    viaWords.add(f);
    // The same flow without the words: the writer parses the text instead.
    viaText.add({ ...f, addressWords: undefined, addressAt: undefined });
    emitted.push({ ...f, addressWords: undefined, addressAt: undefined });
  });
  assert.equal(emitted.length, 2);
  const a = readBatch(viaWords.finish());
  const b = readBatch(viaText.finish());
  for (let i = 0; i < emitted.length; i++) {
    assertSameFlow(a[i], emitted[i]);
    assertSameFlow(b[i], emitted[i]);
  }
  assert.equal(a[1].key.destinationAddress, "10.0.0.2", "IPv4-mapped prints as a dotted quad");
  assert.equal(a[0].key.destinationAddress, "192.168.100.200");
});

Deno.test("batch: an address field that is not an address is refused with its name", () => {
  const w = new BatchWriter(1);
  const f = fixtureFlow(false);
  assert.throws(
    () =>
      w.add({
        ...f,
        record: { ...f.record, destinationClusterIPv4: "not-an-ip" },
      }),
    /destinationClusterIPv4 "not-an-ip" is not an IPv4 address/,
  );
  // The refused flow left no row: the next one takes its place.
  assert.equal(w.count, 0);
  assert.equal(w.full, false);
  w.add(f);
  const [back] = readBatch(w.finish());
  assertSameFlow(back, f);
});

Deno.test("batch rows read in place: numbers, 64-bit counters, strings, absent fields, a trimmed copy", () => {
  const f = fixtureFlow(false, { octetDeltaCount: 0x1_2345_6789n, sourcePodName: "p-é" });
  const bare = fixtureFlow(false);
  delete (bare.record as Partial<typeof bare.record>).sourcePodName;
  const w = new BatchWriter(4);
  w.add(f);
  w.add(bare);
  const buf = w.finish();
  const b = openBatch(buf);
  const octets = batchField("octetDeltaCount")!;
  const pod = batchField("sourcePodName")!;
  const proto = batchField("protocolIdentifier")!;
  assert.equal(batchNumber(b, batchRowBase(0), octets), 0x1_2345_6789);
  assert.equal(batchNumber(b, batchRowBase(0), proto), 6);
  assert.equal(b.strings[batchStringIndex(b, batchRowBase(0), pod)], "p-é");
  assert.equal(batchHas(b, batchRowBase(1), pod), false);
  assert.equal(batchStringIndex(b, batchRowBase(1), pod), 0, "absent: no string");
  assert.throws(() => batchStringIndex(b, batchRowBase(0), octets), /read as a string/);
  assert.deepEqual(readFlowAt(b, 1), readFlows(b)[1]);
  // Shared memory: posting it to a sink's worker neither copies nor detaches it.
  assert.ok(buf instanceof SharedArrayBuffer);
  assert.equal(batchBuffer(b), buf);
  assert.deepEqual(readBatch(batchBuffer(b)), readFlows(b));
});
