import assert from "node:assert/strict";
import { summarize } from "../../scripts/bench/cpuprofile_summary.ts";

Deno.test("cpuprofile summary: self time per function and per file, largest first", () => {
  const frame = (functionName: string, url: string, lineNumber: number) => ({
    functionName,
    url,
    lineNumber,
  });
  const s = summarize({
    nodes: [
      { id: 1, callFrame: frame("(root)", "", -1) },
      { id: 2, callFrame: frame("str", "file:///x/repo/src/ipfix/compile.ts", 58) },
      { id: 3, callFrame: frame("u64", "file:///x/repo/src/ipfix/compile.ts", 126) },
      { id: 4, callFrame: frame("find", "file:///x/repo/src/aggregation/flow_table.ts", 62) },
    ],
    samples: [2, 2, 3, 4, 2, 4],
    timeDeltas: [10, 10, 40, 5, 10, 5],
  });
  assert.equal(s.totalUs, 80);
  assert.deepEqual(s.byFunction.map((r) => [r.key, r.selfUs]).slice(0, 3), [
    ["u64 src/ipfix/compile.ts:127", 40],
    ["str src/ipfix/compile.ts:59", 30],
    ["find src/aggregation/flow_table.ts:63", 10],
  ]);
  assert.deepEqual(s.byUrl[0], { key: "src/ipfix/compile.ts", selfUs: 70, share: 70 / 80 });
});
