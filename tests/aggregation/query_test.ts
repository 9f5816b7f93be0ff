import assert from "node:assert/strict";
import { addRecord } from "../../src/aggregation/ingest.ts";
import { entryState, query } from "../../src/aggregation/query.ts";
import { K4, newState, s1 } from "./fixtures.ts";

Deno.test("query by complete key finds the IPv4 flow and the IPv4-mapped IPv6 one", () => {
  const { s } = newState();
  addRecord(s, s1({ flowType: 1 }));
  const v6 = s1({
    flowType: 1,
    sourceIPv6Address: "::ffff:10.0.0.1",
    destinationIPv6Address: "::ffff:10.0.0.2",
  });
  delete v6.sourceIPv4Address;
  delete v6.destinationIPv4Address;
  addRecord(s, v6);
  const found = query(s, K4, Infinity);
  assert.equal(found.length, 2);
  assert.equal(found[0].sourceIPv4Address, "10.0.0.1");
  assert.equal(found[1].sourceIPv6Address, "10.0.0.1");
  assert.equal(query(s, K4, 1).length, 1);
});

Deno.test("query with wildcards and unparsable addresses", () => {
  const { s } = newState();
  addRecord(s, s1({ flowType: 1 }));
  assert.equal(query(s, { protocol: 6, destinationAddress: "10.0.0.02" }, Infinity).length, 1);
  assert.equal(query(s, { protocol: 17 }, Infinity).length, 0);
  assert.equal(query(s, { sourceAddress: "nonsense" }, Infinity).length, 0);
  assert.equal(query(s, null, 0).length, 0);
});

Deno.test("entryState reports flags and expiry times; unknown key gives undefined", () => {
  const { s } = newState();
  addRecord(s, s1({ flowType: 1 }));
  const st = entryState(s, K4)!;
  assert.equal(st.readyToSend, true);
  assert.equal(st.isIPv4, true);
  assert.equal(st.activeExpireMs, 60_000);
  assert.equal(st.inactiveExpireMs, 90_000);
  assert.equal(entryState(s, { ...K4, sourcePort: 1 }), undefined);
});
