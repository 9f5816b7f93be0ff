/**
 * Sharding the core by flow key (`ShardedCore`, the reference of the shard workers): on the
 * replay sender's realistic stream, N shards export exactly what one core exports (per flow, in
 * the same order of sweeps), count the same, and bound flows for the process as a whole.
 */

import assert from "node:assert/strict";
import {
  AggregationCore,
  type AggregationOptions,
  type CoreApi,
  type ExportedFlow,
  type FlowInput,
  ShardedCore,
  shardOf,
  shardOfKey,
} from "../../src/aggregation/mod.ts";
import { ManualClock } from "../../src/clock.ts";
import { FlowTable, KEY_WORDS } from "../../src/aggregation/flow_table.ts";
import { SlotStore } from "../../src/aggregation/slot_store.ts";
import { replayRecords } from "./replay_records.ts";
import { intraNode } from "./fixtures.ts";

const OPTS = { activeTimeoutMs: 60_000, inactiveTimeoutMs: 90_000 };

/** Text of a flow key (sweeps of the sharded core may interleave flows differently). */
function keyText(f: ExportedFlow): string {
  const k = f.key;
  return `${k.sourceAddress}|${k.destinationAddress}|${k.protocol}|${k.sourcePort}|${k.destinationPort}`;
}

interface Run {
  /** Per flow key, every export in order, tagged with its sweep. */
  exports: Map<string, unknown[]>;
  core: CoreApi;
}

/** Feeds the stream's rounds with a sweep after each, then flushes; collects the exports. */
function run(make: (o: AggregationOptions) => CoreApi, seed: number): Run {
  const clock = new ManualClock();
  const core = make({ ...OPTS, clock });
  const exports = new Map<string, unknown[]>();
  let sweep = 0;
  const emit = (f: ExportedFlow): void => {
    const k = keyText(f);
    let list = exports.get(k);
    if (list === undefined) exports.set(k, list = []);
    list.push([sweep, f.uncorrelated, f.isIPv6, f.record]);
  };
  for (const round of replayRecords({ seed, wireNumbers: true, rounds: 4 })) {
    for (const r of round) core.addRecord(r);
    clock.advance(61_000);
    sweep++;
    core.expire(emit);
  }
  sweep++;
  core.flushAll(emit);
  return { exports, core };
}

Deno.test("sharded core: N shards export and count exactly what one core does", () => {
  for (const [seed, n] of [[1, 2], [2, 3], [3, 4]]) {
    const one = run((o) => new AggregationCore(o), seed);
    const many = run((o) => new ShardedCore(o, n), seed);
    assert.ok(one.exports.size > 1_000, `${one.exports.size} flows`);
    assert.equal(many.exports.size, one.exports.size);
    for (const [k, list] of one.exports) {
      assert.deepEqual(many.exports.get(k), list, `flow ${k}, ${n} shards`);
    }
    const a = one.core.stats();
    const b = many.core.stats();
    // A string used in two shards is charged in each: bytes may differ, nothing else.
    assert.ok(b.flowBytes >= a.flowBytes);
    assert.deepEqual({ ...b, flowBytes: 0 }, { ...a, flowBytes: 0 });
    assert.ok(a.correlated > 0 && a.exported > 3_000, JSON.stringify(a));
    // Every shard got its share of the flows.
    const sharded = many.core as ShardedCore;
    const created = sharded.shards.map((c) => c.stats().flowsCreated);
    for (const c of created) {
      assert.ok(c > a.flowsCreated / n / 2, `flows per shard ${created}`);
    }
  }
});

Deno.test("sharded core: maxFlows and maxFlowBytes bound all shards together", () => {
  const records: FlowInput[] = [];
  for (let i = 0; i < 300; i++) {
    records.push(intraNode({ sourceTransportPort: 10_000 + i }));
  }
  const opts = { ...OPTS, clock: new ManualClock(), maxFlows: 100 };
  const one = new AggregationCore(opts);
  const many = new ShardedCore(opts, 3);
  for (const r of records) {
    assert.equal(many.addRecord(r), one.addRecord(r), `port ${r.sourceTransportPort}`);
  }
  assert.equal(many.flowCount, 100);
  assert.equal(many.stats().recordsRejected.maxFlows, 200);
  assert.ok(many.shards.every((c) => c.flowCount > 10), "the flows spread over the shards");

  const bytes = new ShardedCore({ ...OPTS, clock: new ManualClock() }, 3);
  for (const r of records.slice(0, 50)) bytes.addRecord(r);
  const bound = bytes.flowBytes;
  const capped = new ShardedCore({ ...OPTS, clock: new ManualClock(), maxFlowBytes: bound }, 3);
  for (const r of records) capped.addRecord(r);
  assert.ok(capped.flowBytes <= bound, `${capped.flowBytes} > ${bound}`);
  assert.ok(capped.flowCount >= 45 && capped.flowCount <= 50, `${capped.flowCount} flows`);
  assert.equal(capped.stats().recordsRejected.maxFlowBytes, 300 - capped.flowCount);
});

Deno.test("shard routing: both address forms agree, bad records go to shard 0", () => {
  const scratch = new Uint32Array(KEY_WORDS);
  const text = intraNode({ sourceIPv4Address: "10.1.2.3" });
  const word = intraNode({ sourceIPv4Address: 0x0a010203 as unknown as string });
  const seen = new Set<number>();
  for (let p = 0; p < 64; p++) {
    const s = shardOf({ ...text, sourceTransportPort: p + 1 }, 4, scratch);
    assert.equal(shardOf({ ...word, sourceTransportPort: p + 1 }, 4, scratch), s);
    seen.add(s);
  }
  assert.equal(seen.size, 4, "64 keys reach every one of 4 shards");
  const bad = intraNode({ sourceIPv4Address: "not an address" });
  assert.equal(shardOf(bad, 4, scratch), 0);
  const core = new ShardedCore({ ...OPTS, clock: new ManualClock() }, 4);
  assert.equal(core.addRecord(bad), false);
  assert.equal(core.shards[0].stats().recordsRejected.badAddress, 1);
  assert.equal(core.stats().recordsRejected.badAddress, 1);
  // The shard's hash is not the table's: one shard's keys still fill every bucket of the low
  // bits of a power-of-two table.
  const low = new Set<number>();
  const table = new FlowTable(new SlotStore());
  for (let p = 0; p < 256; p++) {
    scratch.fill(0);
    scratch[0] = 0x0a000001;
    scratch[4] = 0x0a000002;
    scratch[8] = 6;
    scratch[9] = p;
    scratch[10] = 80;
    scratch[11] = 4;
    if (shardOfKey(scratch, 2) === 0) low.add(table.hash(scratch) & 3);
  }
  assert.equal(low.size, 4);
});

Deno.test("shard routing: keys spread evenly whichever key word varies", () => {
  const k = new Uint32Array(KEY_WORDS);
  /** Shares of 4,000 keys over `n` shards, `vary(i)` setting key i's words from a base key. */
  const shares = (n: number, family: 4 | 6, vary: (i: number) => void): number[] => {
    const count = new Array(n).fill(0);
    for (let i = 0; i < 4000; i++) {
      k.fill(0);
      k[0] = family === 4 ? 0x0a000001 : 0xfd000000;
      k[4] = family === 4 ? 0x0a000002 : 0xfd000000;
      if (family === 6) k[3] = 1, k[7] = 2;
      k[8] = 6;
      k[9] = 40000;
      k[10] = 443;
      k[11] = family;
      vary(i);
      count[shardOfKey(k, n)]++;
    }
    return count.map((c) => c / 4000);
  };
  const cases: [string, 4 | 6, (i: number) => void][] = [
    ["source port", 4, (i) => k[9] = 1024 + i],
    ["destination port", 4, (i) => k[10] = i],
    ["IPv4 source", 4, (i) => k[0] = 0x0a000000 + i],
    ["IPv4 destination", 4, (i) => k[4] = 0x0a000000 + i],
    ["IPv6 source, last word", 6, (i) => k[3] = i],
    ["IPv6 destination, last word", 6, (i) => k[7] = i],
    ["IPv6 source, second word", 6, (i) => k[1] = i],
    ["IPv6 destination, third word", 6, (i) => k[6] = i << 8],
  ];
  for (const n of [2, 3, 4]) {
    for (const [what, family, vary] of cases) {
      for (const share of shares(n, family, vary)) {
        assert.ok(Math.abs(share - 1 / n) < 0.05, `${what}, ${n} shards: ${share}`);
      }
    }
  }
});

Deno.test("sharded core: queries and entry states cover every shard", () => {
  const clock = new ManualClock();
  const core = new ShardedCore({ ...OPTS, clock }, 3);
  for (let p = 1; p <= 30; p++) core.addRecord(intraNode({ sourceTransportPort: p }));
  assert.equal(core.query().length, 30);
  assert.equal(core.query(null, 7).length, 7);
  assert.equal(core.query({ destinationPort: 5678 }).length, 30);
  const key = {
    sourceAddress: "10.0.0.1",
    destinationAddress: "10.0.0.2",
    protocol: 6,
    sourcePort: 17,
    destinationPort: 5678,
  };
  assert.equal(core.query(key).length, 1);
  assert.equal(core.query(key)[0].sourceTransportPort, 17);
  assert.ok(core.entryState(key)?.isIPv4);
  assert.equal(core.entryState({ ...key, sourcePort: 31 }), undefined);
  assert.equal(core.queueLength, 30);
  assert.equal(core.earliestExpiryMs, 60_000);
  clock.advance(60_000);
  assert.ok(core.hasExpired());
  // `limit` counts due flows over all shards.
  const got: ExportedFlow[] = [];
  assert.equal(core.expire((f) => got.push(f), { limit: 12 }), 12);
  assert.equal(core.expire((f) => got.push(f)), 18);
  assert.equal(new Set(got.map(keyText)).size, 30);
});

Deno.test("shard routing: IPv6 keys chosen so that their words fold alike under known multipliers still spread", () => {
  // Under the fixed routing multipliers (0x9e3779b1 for a source's second word, 0x85ebca6b for
  // its third), choosing the third word from the second folds every key to one value: one shard.
  const inverse = (m: number): number => {
    let x = m;
    for (let i = 0; i < 5; i++) x = Math.imul(x, 2 - Math.imul(m, x));
    return x >>> 0;
  };
  const k = new Uint32Array(KEY_WORDS);
  const count = [0, 0, 0, 0];
  for (let i = 0; i < 4000; i++) {
    k.set([0xfd000000, i * 7919, 0, 1, 0xfd000000, 0, 0, 2, 6, 40000, 443, 6]);
    k[2] = Math.imul(0x12345678 ^ Math.imul(k[1], 0x9e3779b1), inverse(0x85ebca6b)) >>> 0;
    count[shardOfKey(k, 4)]++;
  }
  for (const c of count) assert.ok(c > 800 && c < 1200, `shares ${count}`);
});
