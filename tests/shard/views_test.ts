/**
 * Record views (`views.ts`): a template whose 8 counters are u64s at fixed offsets (the Agents')
 * has them read as words straight from the bytes, equal to the decoded values split into words
 * over the whole u64 range; a template whose counters move with its strings decodes them in the
 * view instead, and gets no words.
 */

import assert from "node:assert/strict";
import type { FlowInput } from "../../src/aggregation/record.ts";
import { COUNTER_WORDS, counterWords } from "../../src/aggregation/flow_stats.ts";
import { compileTemplate } from "../../src/ipfix/compile.ts";
import { type DataRecord, encodeDataSet, fieldsFor } from "../../src/ipfix/mod.ts";
import type { TemplateRecord } from "../../src/ipfix/types.ts";
import { AGENT_IPV4_FIELDS, STATS_FIELDS } from "../../src/record/schema.ts";
import { compileView, RecordViews } from "../../src/shard/views.ts";
import { skimOf } from "../../src/ipfix/skim.ts";

const EDGES = [
  0n,
  1n,
  2n ** 32n - 1n,
  2n ** 32n,
  2n ** 53n - 1n,
  2n ** 53n,
  2n ** 63n,
  2n ** 64n - 1n,
];

/** Records of `fields` whose counters take every edge value, each at a different position. */
function records(): Record<string, bigint | number | string>[] {
  return EDGES.map((_, i) => {
    const r: Record<string, bigint | number | string> = {
      sourceIPv4Address: "10.0.0.1",
      destinationIPv4Address: "10.0.0.2",
      sourceTransportPort: 1000 + i,
      destinationTransportPort: 80,
      protocolIdentifier: 6,
      flowStartSeconds: 100,
      flowEndSeconds: 110,
      sourcePodName: `pod-${"x".repeat(i)}`,
      tcpState: "ESTABLISHED",
    };
    STATS_FIELDS.forEach((n, j) => r[n] = EDGES[(i + j) % EDGES.length]);
    return r;
  });
}

/** Reads the data set of `t` encoding {@linkcode records} as views; each view's words and whole record. */
function viewsOf(t: TemplateRecord): { words: Uint32Array | undefined; whole: FlowInput }[] {
  const set = encodeDataSet(t.id, t.fields, records());
  const ct = compileTemplate(t, { wireNumbers: true });
  const out: { words: Uint32Array | undefined; whole: FlowInput }[] = [];
  new RecordViews().readRun(
    compileView(t, undefined),
    ct,
    set,
    4,
    set.length,
    (_view, full, _key, words) => out.push({ words: words?.slice(), whole: full() }),
    (why) => assert.fail(why),
  );
  return out;
}

Deno.test("record views: counters at fixed offsets are read from the bytes as words, exact up to 2^64 - 1", () => {
  const t: TemplateRecord = { id: 256, fields: fieldsFor(AGENT_IPV4_FIELDS), scopeFieldCount: 0 };
  assert.ok(
    compileView(t, undefined).counters !== undefined,
    "the Agent's template has them fixed",
  );
  // The key's offsets travel with the view decoder too (the view's addresses are presence only).
  assert.deepEqual(compileView(t, undefined).key, skimOf(t).key);
  assert.ok(skimOf(t).key !== undefined);
  const views = viewsOf(t);
  assert.equal(views.length, EDGES.length);
  const expected = new Uint32Array(COUNTER_WORDS);
  for (const { words, whole } of views) {
    assert.ok(words !== undefined);
    counterWords(whole, expected);
    assert.deepEqual(words, expected);
  }
  // The last record's counters, as words: 2^64 - 1 is all ones, 2^32 a high word of 1.
  const last = views[EDGES.length - 1].words!;
  assert.deepEqual([last[0], last[1]], [0xffffffff, 0xffffffff]);
});

Deno.test("record views: counters behind a string are decoded in the view, with no words", () => {
  // The same fields with sourcePodName moved to the front: every counter's offset now depends
  // on the name's length.
  const names = ["sourcePodName", ...AGENT_IPV4_FIELDS.filter((n) => n !== "sourcePodName")];
  const t: TemplateRecord = { id: 300, fields: fieldsFor(names), scopeFieldCount: 0 };
  assert.equal(compileView(t, undefined).counters, undefined);
  const seen: DataRecord[] = [];
  const set = encodeDataSet(t.id, t.fields, records());
  new RecordViews().readRun(
    compileView(t, undefined),
    compileTemplate(t, { wireNumbers: true }),
    set,
    4,
    set.length,
    (view, _full, _key, words) => {
      assert.equal(words, undefined);
      seen.push({ ...(view as unknown as DataRecord) });
    },
    (why) => assert.fail(why),
  );
  assert.equal(seen.length, EDGES.length);
  seen.forEach((v, i) => {
    STATS_FIELDS.forEach((n, j) => {
      const e = EDGES[(i + j) % EDGES.length];
      assert.equal(BigInt(v[n] as bigint | number), e, `record ${i} ${n}`);
    });
  });
});
