import assert from "node:assert/strict";
import { addRecord } from "../../src/aggregation/ingest.ts";
import { FL_READY, G_DST_POD, G_SRC_POD, POD_NAME } from "../../src/aggregation/layout.ts";
import type { FlowInput } from "../../src/aggregation/mod.ts";
import { U32 } from "../../src/aggregation/slot_store.ts";
import { d1, flagsOf, groupText, liveSlots, newState, s1, text } from "./fixtures.ts";

Deno.test("addRecord rejects a non-object without throwing", () => {
  const { s } = newState();
  assert.equal(addRecord(s, null as unknown as FlowInput), false);
  assert.equal(s.counters.rejected.invalidRecord, 1);
  assert.equal(s.counters.recordsIn, 1);
});

Deno.test("addRecord: the second InterNode half correlates the stored one", () => {
  const { s } = newState();
  assert.equal(addRecord(s, s1()), true);
  const [slot] = liveSlots(s);
  assert.equal(flagsOf(s, slot) & FL_READY, 0);
  assert.equal(addRecord(s, d1()), true);
  assert.equal(flagsOf(s, slot) & FL_READY, FL_READY);
  assert.equal(groupText(s, slot, G_SRC_POD, POD_NAME), "pod1");
  assert.equal(groupText(s, slot, G_DST_POD, POD_NAME), "pod2");
  assert.equal(text(s, slot, U32.CLUSTER_V4), "192.168.0.1");
  assert.equal(s.counters.correlated, 1);
  assert.equal(s.table.size, 1);
});

Deno.test("addRecord: a second record from the same Node does not correlate", () => {
  const { s } = newState();
  addRecord(s, s1());
  addRecord(s, s1({ flowEndSeconds: 2, tcpState: "ESTABLISHED" }));
  assert.equal(s.counters.correlated, 0);
  assert.equal(s.counters.recordsAccepted, 2);
});
