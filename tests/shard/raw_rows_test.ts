/**
 * Undecoded records routed to shards (`raw_rows.ts`, the collector's raw mode): a record read
 * from its bytes lands in the shard its decoded form would, and a shard decodes exactly the
 * records the main thread would have; field lists cross once per ring, again after a lost frame
 * or a full tid table.
 */

import assert from "node:assert/strict";
import type { AggregatedRecord, FlowInput } from "../../src/aggregation/record.ts";
import { AggregationCore } from "../../src/aggregation/core.ts";
import { ManualClock } from "../../src/clock.ts";
import { shardOf } from "../../src/aggregation/sharded.ts";
import { KEY_WORDS } from "../../src/aggregation/flow_table.ts";
import { decodeMessage, type RawRecords, TemplateStore } from "../../src/ipfix/mod.ts";
import { skimOf } from "../../src/ipfix/skim.ts";
import type { TemplateRecord } from "../../src/ipfix/types.ts";
import {
  RawRowReader,
  RawRowWriter,
  rawShardOf,
  RawTemplateIds,
  readRawKey,
} from "../../src/shard/raw_rows.ts";
import { readFlowKey } from "../../src/aggregation/flow_key.ts";
import { compileTemplate } from "../../src/ipfix/compile.ts";
import { type DataRecord, encodeDataSet, fieldsFor } from "../../src/ipfix/mod.ts";

const PORTS = ["sourceTransportPort", "destinationTransportPort", "protocolIdentifier"];
import { createRing, RingReader, RingWriter } from "../../src/shard/ring.ts";
import { replayMessages } from "../aggregation/replay_records.ts";

/** The stream's data sets in raw mode and the same decoded, per Agent session. */
function both(seed: number): { raw: RawRecords[]; decoded: FlowInput[] } {
  const { templates, rounds } = replayMessages({ seed, rounds: 2 });
  const rawStores = [0, 1, 2, 3].map(() => new TemplateStore({ wireNumbers: true }));
  const stores = [0, 1, 2, 3].map(() => new TemplateStore({ wireNumbers: true }));
  for (const m of templates) {
    decodeMessage(m.bytes, rawStores[m.agent], true);
    decodeMessage(m.bytes, stores[m.agent]);
  }
  const raw: RawRecords[] = [];
  const decoded: FlowInput[] = [];
  for (const m of rounds.flat()) {
    for (const ds of decodeMessage(m.bytes, rawStores[m.agent], true).dataSets) raw.push(ds.raw!);
    for (const ds of decodeMessage(m.bytes, stores[m.agent]).dataSets) {
      decoded.push(...(ds.records as unknown as FlowInput[]));
    }
  }
  return { raw, decoded };
}

Deno.test("raw routing: the key read from the bytes picks the shard of the decoded record", () => {
  const { raw, decoded } = both(3);
  const scratch = new Uint32Array(KEY_WORDS);
  const fromValues = new Uint32Array(KEY_WORDS);
  let i = 0;
  let v6 = 0;
  for (const r of raw) {
    const key = skimOf(r.compiled.template).key;
    assert.ok(key !== undefined, "the Agents' templates have the key at fixed offsets");
    if (key.family === 6) v6++;
    for (let s = 0; s < r.spans.length; s += 2, i++) {
      for (const n of [2, 3, 7]) {
        assert.equal(
          rawShardOf(r.bytes, r.spans[s], key, n, scratch),
          shardOf(decoded[i], n, scratch),
          `record ${i}, ${n} shards`,
        );
      }
      // The words themselves (what a shard keys the flow by): those of the decoded record.
      readRawKey(r.bytes, r.spans[s], key, scratch);
      assert.equal(readFlowKey(fromValues, decoded[i]), undefined);
      assert.deepEqual(scratch, fromValues, `record ${i}: key words`);
    }
  }
  assert.equal(i, decoded.length);
  assert.ok(i > 4_000 && v6 > 0, `${i} records, ${v6} IPv6 data sets`);
});

Deno.test("raw keys: IPv6 addresses of every form read the same from bytes and from text", () => {
  const fields = fieldsFor(["sourceIPv6Address", "destinationIPv6Address", ...PORTS]);
  const t: TemplateRecord = { id: 300, fields, scopeFieldCount: 0 };
  const key = skimOf(t).key!;
  const ct = compileTemplate(t, { wireNumbers: true });
  const addresses = [
    "::",
    "::1",
    "::ffff:10.1.2.3", // IPv4-mapped: the codec prints it as 10.1.2.3
    "::10.1.2.3", // IPv4-compatible: printed as ::a01:203
    "64:ff9b::10.1.2.3",
    "fe80::1:2:3:4",
    "2001:db8:0:0:1:0:0:1",
    "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
  ];
  const raw = new Uint32Array(KEY_WORDS);
  const text = new Uint32Array(KEY_WORDS);
  for (const a of addresses) {
    for (const b of addresses) {
      const rec = {
        sourceIPv6Address: a,
        destinationIPv6Address: b,
        sourceTransportPort: 1234,
        destinationTransportPort: 80,
        protocolIdentifier: 6,
      };
      const set = encodeDataSet(300, fields, [rec]);
      const out: DataRecord[] = [];
      ct.decodeRecords(set, 4, set.length, out);
      readRawKey(set, 4, key, raw);
      assert.equal(readFlowKey(text, out[0] as unknown as FlowInput), undefined, `${a} ${b}`);
      assert.deepEqual(raw, text, `${a} -> ${b}`);
    }
  }
});

/** Writes every raw record through a ring and reads it back in the same thread. */
function throughRing(
  raw: RawRecords[],
  writer: (ring: RingWriter) => RawRowWriter,
  between?: (w: RawRowWriter, index: number) => void,
): { records: FlowInput[]; reader: RawRowReader; frames: number } {
  const sab = createRing(1 << 20);
  const ring = new RingWriter(sab);
  const out = new RingReader(sab);
  const reader = new RawRowReader();
  const w = writer(ring);
  const records: FlowInput[] = [];
  let frames = 0;
  const drain = (): void => {
    for (let f = out.next(); f !== undefined; f = out.next()) {
      reader.read(f, (r) => records.push(r), (why) => assert.fail(why));
      out.release();
      frames++;
    }
  };
  raw.forEach((r, i) => {
    for (let s = 0; s < r.spans.length; s += 2) {
      if (!w.add(r.compiled.template, r.bytes, r.spans[s], r.spans[s + 1])) {
        drain();
        assert.ok(w.add(r.compiled.template, r.bytes, r.spans[s], r.spans[s + 1]));
      }
    }
    between?.(w, i);
  });
  assert.ok(w.flush());
  drain();
  return { records, reader, frames };
}

Deno.test("raw rows: a shard decodes exactly what the main thread would have", () => {
  const { raw, decoded } = both(5);
  const { records, reader, frames } = throughRing(
    raw,
    (ring) => new RawRowWriter(ring, new RawTemplateIds(), { maxBytes: 16_384 }),
  );
  assert.equal(records.length, decoded.length);
  assert.deepEqual(records, decoded);
  assert.ok(frames > 10, `${frames} frames`);
  // Four Agent sessions, two field lists (IPv4 and IPv6): two tids, compiled once each.
  assert.equal(reader.templates, 2);
});

Deno.test("raw rows: a discarded frame's templates are sent again; a full tid table resets", () => {
  const { raw, decoded } = both(6);
  // Every 50th data set, the pending frame is dropped (as for a stalled shard): its records are
  // lost, and the next frame must define its templates again or the reader could not decode.
  let lost = 0;
  const dropped = new Set<number>();
  const a = throughRing(
    raw,
    (ring) => new RawRowWriter(ring, new RawTemplateIds(), { maxBytes: 1 << 20 }),
    (w, i) => {
      if (i % 50 === 0) {
        const n = w.discard();
        lost += n;
        if (n > 0) dropped.add(i);
      } else if (i % 50 === 1) {
        assert.ok(w.flush());
      }
    },
  );
  assert.ok(lost > 0 && dropped.size > 5);
  assert.equal(a.records.length, decoded.length - lost);

  // A table of one field list: IPv4 and IPv6 data sets alternate, so it starts over again and
  // again, and the reader follows every reset.
  const ids = new RawTemplateIds(1);
  const b = throughRing(raw, (ring) => new RawRowWriter(ring, ids, { maxBytes: 4096 }));
  assert.deepEqual(b.records, decoded);
  assert.ok(ids.generation > 10, `${ids.generation} resets`);
  assert.equal(b.reader.templates, 1);
});

Deno.test("raw rows: one tid per field list, whichever session's template object names it", () => {
  const ids = new RawTemplateIds();
  const fields = [{ id: 8, enterprise: 0, length: 4 }, { id: 12, enterprise: 0, length: 4 }];
  const a: TemplateRecord = { id: 256, fields, scopeFieldCount: 0 };
  const b: TemplateRecord = { id: 256, fields: fields.map((f) => ({ ...f })), scopeFieldCount: 0 };
  const c: TemplateRecord = { id: 257, fields, scopeFieldCount: 0 };
  assert.equal(ids.of(a), ids.of(b));
  assert.notEqual(ids.of(a), ids.of(c));
});

Deno.test("raw rows: a new string bound (a reload) recompiles every field list", () => {
  const { raw, decoded } = both(8);
  const sab = createRing(1 << 22);
  const ring = new RingWriter(sab);
  const out = new RingReader(sab);
  const reader = new RawRowReader({ maxStringBytes: 3 });
  const w = new RawRowWriter(ring, new RawTemplateIds());
  const readAll = (): FlowInput[] => {
    const records: FlowInput[] = [];
    for (const r of raw.slice(0, 200)) {
      for (let s = 0; s < r.spans.length; s += 2) {
        assert.ok(w.add(r.compiled.template, r.bytes, r.spans[s], r.spans[s + 1]));
      }
    }
    assert.ok(w.flush());
    for (let f = out.next(); f !== undefined; f = out.next()) {
      reader.read(f, (r) => records.push(r), (why) => assert.fail(why));
      out.release();
    }
    return records;
  };
  const cut = readAll();
  const full = decoded.slice(0, cut.length);
  assert.ok(full.some((r) => (r.sourcePodName ?? "").length > 3), "names longer than the bound");
  for (const r of cut) assert.ok((r.sourcePodName ?? "").length <= 3, r.sourcePodName);
  reader.setMaxStringBytes(undefined);
  assert.deepEqual(readAll(), full);
});

Deno.test("raw rows: records read as views aggregate exactly as whole records, most never decoded whole", () => {
  const { raw } = both(9);
  const newCore = () =>
    new AggregationCore({
      activeTimeoutMs: 3_600_000,
      inactiveTimeoutMs: 3_600_000,
      clock: new ManualClock(),
    });
  const whole = newCore();
  const viewed = newCore();
  const sab = createRing(1 << 22);
  const ring = new RingWriter(sab);
  const out = new RingReader(sab);
  const w = new RawRowWriter(ring, new RawTemplateIds(), { maxBytes: 16_384 });
  const a = new RawRowReader();
  const b = new RawRowReader();
  let views = 0;
  let keyed = 0;
  let counted = 0;
  let wholeDecodes = 0;
  const drain = (): void => {
    for (let f = out.next(); f !== undefined; f = out.next()) {
      a.read(f, (r) => whole.addRecord(r), (why) => assert.fail(why));
      b.read(
        f,
        () => assert.fail("not with views"),
        (why) => assert.fail(why),
        (v, full, k, cw) => {
          views++;
          if (k !== undefined) keyed++;
          if (cw !== undefined) counted++;
          viewed.addRecordView(
            v,
            () => {
              wholeDecodes++;
              return full();
            },
            k,
            cw,
          );
        },
      );
      out.release();
    }
  };
  // The stream twice over: its second pass is all updates of known flows.
  for (const r of [...raw, ...raw]) {
    for (let s = 0; s < r.spans.length; s += 2) {
      if (!w.add(r.compiled.template, r.bytes, r.spans[s], r.spans[s + 1])) {
        drain();
        assert.ok(w.add(r.compiled.template, r.bytes, r.spans[s], r.spans[s + 1]));
      }
    }
  }
  assert.ok(w.flush());
  drain();
  const s = whole.stats();
  assert.equal(views, s.recordsIn);
  // The Agents' templates have the key and the counters at fixed offsets: every view came with
  // its key words and its counters as words (the view itself has no counters then).
  assert.equal(keyed, views);
  assert.equal(counted, views);
  assert.deepEqual(viewed.stats(), s);
  assert.ok(s.correlated > 0 && s.flowsCreated > 1000, JSON.stringify(s));
  assert.ok(wholeDecodes < views / 2, `${wholeDecodes} whole decodes of ${views} records`);
  const fa: AggregatedRecord[] = whole.query(null, 1e9);
  const fb: AggregatedRecord[] = viewed.query(null, 1e9);
  assert.deepEqual(fb, fa);
});
