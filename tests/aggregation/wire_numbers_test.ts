/**
 * Wire-number mode (the decoder option the collector uses for the core: u64 counters below 2^53
 * and IPv4 addresses as numbers): the core must export exactly what it exports from the same
 * messages decoded as text and bigints. Checked on the replay sender's realistic stream (4
 * Agents, inter/intra/external flows, IPv4 and IPv6, ClusterIPs, policy fields), over several
 * export rounds so that updates, correlation and throughputs all run.
 */

import assert from "node:assert/strict";
import { AggregationCore, type ExportedFlow } from "../../src/aggregation/mod.ts";
import { ManualClock } from "../../src/clock.ts";
import { replayRecords } from "./replay_records.ts";

function exported(wireNumbers: boolean, seed: number): { flows: ExportedFlow[]; in: number } {
  const core = new AggregationCore({
    activeTimeoutMs: 3_600_000,
    inactiveTimeoutMs: 3_600_000,
    clock: new ManualClock(),
  });
  let records = 0;
  for (const round of replayRecords({ seed, wireNumbers })) {
    for (const f of round) {
      records++;
      if (wireNumbers) {
        // The mode is on: counters and IPv4 addresses really come as numbers.
        assert.equal(typeof f.octetTotalCount, "number");
        if (f.sourceIPv4Address !== undefined) {
          assert.equal(typeof f.sourceIPv4Address, "number");
        }
      }
      core.addRecord(f);
    }
  }
  const flows: ExportedFlow[] = [];
  core.flushAll((f) => flows.push(f));
  return { flows, in: records };
}

function byKey(flows: ExportedFlow[]): Map<string, ExportedFlow> {
  const m = new Map<string, ExportedFlow>();
  for (const f of flows) {
    const k = f.key;
    m.set(
      `${k.sourceAddress}|${k.destinationAddress}|${k.protocol}|${k.sourcePort}|${k.destinationPort}`,
      f,
    );
  }
  return m;
}

Deno.test("wire-number mode: the core exports the same flows as from text and bigints", () => {
  for (const seed of [1, 2, 3]) {
    const text = exported(false, seed);
    const wire = exported(true, seed);
    assert.equal(wire.in, text.in);
    assert.ok(text.flows.length > 1_000, `${text.flows.length} flows`);
    assert.equal(wire.flows.length, text.flows.length);
    const a = byKey(text.flows);
    const b = byKey(wire.flows);
    assert.equal(b.size, a.size);
    let v6 = 0;
    let cluster = 0;
    for (const [k, f] of a) {
      const g = b.get(k);
      assert.ok(g !== undefined, `flow ${k} missing in wire-number mode`);
      assert.deepEqual(g.record, f.record, `flow ${k}`);
      assert.equal(g.uncorrelated, f.uncorrelated);
      if (f.isIPv6) v6++;
      if (f.record.destinationClusterIPv4) cluster++;
    }
    // The stream exercises what the mode changes.
    assert.ok(v6 > 0 && cluster > 0, `IPv6 flows ${v6}, ClusterIP flows ${cluster}`);
  }
});
