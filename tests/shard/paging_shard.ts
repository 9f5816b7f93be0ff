/**
 * A shard worker holding a fixed table (shard 0: 100 flows, shard 1: 3, others none) that answers
 * query pages as the product's shard does, each record naming its shard, its flow and the page
 * size the pool asked for (the paging tests); `?stuck=N` makes shard N never answer a query,
 * `?laterMs=T` answer its later pages after T ms.
 */

import type { FromShard, ToShard } from "../../src/shard/protocol.ts";

export const HELD = [100, 3];

const params = new URL(import.meta.url).searchParams;
/** With `?stuck=N`: shard N never answers a query (a stuck shard). */
const STUCK = Number(params.get("stuck") ?? "-1");
/** With `?laterMs=T`: a page after a shard's first takes T ms to answer. */
const LATER_MS = Number(params.get("laterMs") ?? "0");

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
    if (index === STUCK) return;
    const held = HELD[index] ?? 0;
    const end = Math.min(held, m.from + m.limit);
    const records: unknown[] = [];
    for (let flow = m.from; flow < end; flow++) {
      const r = { shard: index, flow, asked: m.limit };
      records.push(m.texts ? JSON.stringify(r) : r);
    }
    const next = end - m.from >= m.limit ? end : -1;
    // deno-lint-ignore no-explicit-any
    const answer = () => post({ t: "query", id: m.id, records: records as any, next });
    if (m.from > 0 && LATER_MS > 0) setTimeout(answer, LATER_MS);
    else answer();
  } else if (m.t === "stop") {
    post({ t: "stopped", id: m.id });
  }
};
