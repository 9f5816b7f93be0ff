/**
 * A shard worker holding a fixed table (shard 0: 100 flows, shard 1: 3, others none) that answers
 * query pages as the product's shard does, each record naming its shard, its flow and the page
 * size the pool asked for (the paging test).
 */

import type { FromShard, ToShard } from "../../src/shard/protocol.ts";

export const HELD = [100, 3];

// deno-lint-ignore no-explicit-any
const scope = self as any;
let index = 0;
scope.onmessage = (e: MessageEvent<ToShard>) => {
  const m = e.data;
  const post = (a: FromShard) => scope.postMessage(a);
  if (m.t === "init") {
    index = m.index;
    post({ t: "ready" });
  } else if (m.t === "query") {
    const held = HELD[index] ?? 0;
    const end = Math.min(held, m.from + m.limit);
    const records = [];
    for (let flow = m.from; flow < end; flow++) {
      const r = { shard: index, flow, asked: m.limit };
      records.push(m.texts ? JSON.stringify(r) : r);
    }
    const next = end - m.from >= m.limit ? end : -1;
    // deno-lint-ignore no-explicit-any
    post({ t: "query", id: m.id, records: records as any, next });
  } else if (m.t === "stop") {
    post({ t: "stopped", id: m.id });
  }
};
