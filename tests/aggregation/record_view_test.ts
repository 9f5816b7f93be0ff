/**
 * `addRecordView` (what the shards run): a record given as its view (only
 * `UPDATE_VIEW_FIELDS`) and its full decoding on demand must give exactly what `addRecord` of
 * the full record gives, reading nothing outside the view on the paths that use it.
 */

import assert from "node:assert/strict";
import { AggregationCore, type ExportedFlow, type FlowInput } from "../../src/aggregation/mod.ts";
import { UPDATE_VIEW_FIELDS, UPDATE_VIEW_PRESENCE } from "../../src/aggregation/ingest.ts";
import { PRESENT } from "../../src/ipfix/compile.ts";
import { ManualClock } from "../../src/clock.ts";
import { replayRecords } from "./replay_records.ts";
import { COUNTER_WORDS, counterWords } from "../../src/aggregation/flow_stats.ts";
import { STATS_FIELDS } from "../../src/record/schema.ts";

const VIEW = new Set(UPDATE_VIEW_FIELDS);
/** What the view may be read for when its counters come as words: no counter. */
const VIEW_BUT_COUNTERS = new Set(UPDATE_VIEW_FIELDS.filter((n) => !STATS_FIELDS.includes(n)));
let allowed = VIEW;
const PRESENCE = new Set(UPDATE_VIEW_PRESENCE);

/**
 * The view of `r` as the shards give it: its fields of the list (the presence-only ones as ""
 * or the marker), in one object refilled for every record (so a reader keeping it would see the
 * next record's values), and an error on reading any other field.
 */
const viewTarget: Record<string, unknown> = {};
const viewProxy = new Proxy(viewTarget, {
  get(target, p) {
    if (typeof p === "string" && !allowed.has(p)) {
      throw new Error(`the view's reader read ${p}, not in its fields`);
    }
    return Reflect.get(target, p);
  },
}) as unknown as FlowInput;
function viewOf(r: FlowInput): FlowInput {
  const src = r as unknown as Record<string, unknown>;
  for (const k of VIEW) {
    const x = src[k];
    viewTarget[k] = PRESENCE.has(k) && typeof x === "string" && x !== "" ? PRESENT : x;
  }
  return viewProxy;
}

function newCore(): AggregationCore {
  return new AggregationCore({
    activeTimeoutMs: 3_600_000,
    inactiveTimeoutMs: 3_600_000,
    clock: new ManualClock(),
  });
}

/**
 * The records of the stream, with some made bad or late the same way for both cores: every
 * 53rd update loses its tcpState (rejected), every 71st goes back in time (stale).
 */
function records(seed: number): FlowInput[] {
  const out: FlowInput[] = [];
  replayRecords({ seed, wireNumbers: true, rounds: 4 }).forEach((round, r) => {
    round.forEach((f, i) => {
      const g: FlowInput = { ...f };
      if (r > 0 && i % 53 === 0) delete (g as Partial<FlowInput>).tcpState;
      if (r > 0 && i % 71 === 0) g.flowEndSeconds = (g.flowEndSeconds as number) - 100;
      out.push(g);
    });
  });
  return out;
}

function byKey(flows: ExportedFlow[]): Map<string, ExportedFlow> {
  return new Map(flows.map((f) => [JSON.stringify(f.key), f]));
}

/** Flushes both cores and checks they held the same flows; returns the whole core's. */
function assertSameFlows(whole: AggregationCore, viewed: AggregationCore): ExportedFlow[] {
  const a: ExportedFlow[] = [];
  const b: ExportedFlow[] = [];
  whole.flushAll((f) => a.push(f));
  viewed.flushAll((f) => b.push(f));
  const ma = byKey(a);
  const mb = byKey(b);
  assert.equal(mb.size, ma.size);
  for (const [k, f] of ma) assert.deepEqual(mb.get(k)?.record, f.record, k);
  return a;
}

Deno.test("record views: the same flows, counters and rejections as whole records, nothing else read", () => {
  for (const seed of [1, 2]) {
    const input = records(seed);
    const whole = newCore();
    const viewed = newCore();
    let fullDecodes = 0;
    input.forEach((r, i) => {
      const a = whole.addRecord(r);
      const b = viewed.addRecordView(viewOf(r), () => {
        fullDecodes++;
        return r;
      });
      assert.equal(b, a, `record ${i}: accepted ${a} whole, ${b} as a view`);
    });
    assert.deepEqual(viewed.stats(), whole.stats());
    const s = whole.stats();
    assert.ok(s.recordsStale > 0 && s.correlated > 0, JSON.stringify(s));
    assert.ok(s.recordsRejected.missingField > 0, "some updates were rejected");
    // Views did most of the work: only new flows and the other Node's first records were
    // decoded whole (and the rejected ones, whose checks read the same fields).
    assert.ok(
      fullDecodes > 0 && fullDecodes < input.length / 2,
      `${fullDecodes} of ${input.length}`,
    );
    assertSameFlows(whole, viewed);
  }
});

Deno.test("record views with counter words: the same as whole records, no counter read from the view, up to 2^64", () => {
  const big = [2n ** 32n, 2n ** 53n - 1n, 2n ** 53n + 3n, 2n ** 64n - 1n];
  const input = records(3).map((r, i) => {
    // Every 7th record's counters cross 2^32, 2^53 and 2^64 (a delta sum wraps as a u64).
    if (i % 7 !== 0) return r;
    const g = { ...r } as unknown as Record<string, unknown>;
    STATS_FIELDS.forEach((n, j) => g[n] = big[(i + j) % big.length]);
    return g as unknown as FlowInput;
  });
  const whole = newCore();
  const viewed = newCore();
  const words = new Uint32Array(COUNTER_WORDS);
  let withWords = 0;
  try {
    input.forEach((r, i) => {
      const a = whole.addRecord(r);
      // Words only for a record with its 8 counters, as a template that has them gives.
      const hasAll = STATS_FIELDS.every((n) =>
        (r as unknown as Record<string, unknown>)[n] !== undefined
      );
      if (hasAll) {
        counterWords(r, words);
        withWords++;
      }
      allowed = hasAll ? VIEW_BUT_COUNTERS : VIEW;
      const b = viewed.addRecordView(viewOf(r), () => r, undefined, hasAll ? words : undefined);
      assert.equal(b, a, `record ${i}: accepted ${a} whole, ${b} as a view`);
    });
  } finally {
    allowed = VIEW;
  }
  assert.ok(withWords > input.length / 2);
  assert.deepEqual(viewed.stats(), whole.stats());
  const a = assertSameFlows(whole, viewed);
  // The big values made it into the flows: some counter at or above 2^53.
  assert.ok(a.some((f) => (f.record.octetTotalCount as bigint) >= 2n ** 53n));
});
