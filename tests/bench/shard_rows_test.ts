import assert from "node:assert/strict";
import { benchShardRows } from "../../scripts/bench/shard_rows.ts";

Deno.test("bench shard_rows: measures every pass on a small stream", () => {
  const r = benchShardRows(200, 1);
  assert.ok(r.records > 200, `${r.records} records`);
  for (const k of ["ipfixDecode", "encode", "decode", "ringRoundTrip"] as const) {
    assert.ok(Number.isFinite(r[k]) && r[k] > 0, `${k} ${r[k]}`);
  }
  assert.ok(r.bytesPerRecord > 50 && r.bytesPerRecord < 400, `${r.bytesPerRecord} bytes/record`);
});
