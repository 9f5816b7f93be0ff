/**
 * Paged queries (`AggregationCore.queryPage`, what a shard worker answers the pool's rounds
 * with): the pages of a scan, a filter or a complete key are the query's matches, each once, in
 * order, and a page says where the next starts.
 */

import assert from "node:assert/strict";
import { AggregationCore } from "../../src/aggregation/mod.ts";
import type { AggregatedRecord, FlowKey } from "../../src/aggregation/record.ts";
import { ManualClock } from "../../src/clock.ts";
import { intraNode, K4 } from "./fixtures.ts";

function pages(core: AggregationCore, filter: Partial<FlowKey> | null, size: number) {
  const out: AggregatedRecord[][] = [];
  let from = 0;
  while (from >= 0) {
    const p = core.queryPage(filter, size, from);
    assert.ok(p.records.length <= size);
    // A page that is not full is the last.
    if (p.records.length < size) assert.equal(p.next, -1);
    out.push(p.records);
    from = p.next;
  }
  return out;
}

Deno.test("queryPage: pages of a scan, a filter and a complete key are the query's matches, each once", () => {
  const core = new AggregationCore({
    activeTimeoutMs: 60_000,
    inactiveTimeoutMs: 60_000,
    clock: new ManualClock(),
  });
  for (let i = 0; i < 25; i++) {
    core.addRecord(
      intraNode({ sourceTransportPort: 1000 + i, protocolIdentifier: i % 2 ? 6 : 17 }),
    );
  }
  const ports = (rs: AggregatedRecord[]) => rs.map((r) => r.sourceTransportPort);
  for (const filter of [null, { protocol: 6 }, { protocol: 1 }]) {
    const all = core.query(filter);
    for (const size of [1, 4, 13, 25, 100]) {
      const got = pages(core, filter, size);
      assert.deepEqual(ports(got.flat()), ports(all), `filter ${JSON.stringify(filter)}, ${size}`);
      assert.equal(got.length, Math.floor(all.length / size) + 1);
    }
  }
  const key = { ...K4, protocol: 6, sourcePort: 1001 };
  assert.deepEqual(ports(pages(core, key, 1).flat()), [1001]);
  assert.deepEqual(core.queryPage(null, 0, 0), { records: [], next: -1 });
});
