/**
 * The replay sender's realistic stream (4 Agents, inter/intra/external flows, IPv4 and IPv6,
 * ClusterIPs, policy fields) decoded into core input, round by round, for the tests that feed
 * two cores the same records and compare what they export.
 */

import type { FlowInput } from "../../src/aggregation/record.ts";
import { ReplayStream } from "../../src/flowgen/replay.ts";
import { decodeMessage, TemplateStore } from "../../src/ipfix/mod.ts";

/** Options of {@linkcode replayRecords}. */
export interface ReplayRecordsOptions {
  /** Stream seed. */
  seed: number;
  /** Decode in wire-number mode (the collector's) instead of text and bigints. */
  wireNumbers: boolean;
  /** Export rounds of every flow (default 3). */
  rounds?: number;
  /** Flows of the stream (default 1,500). */
  flows?: number;
}

/** The decoded records of each round, every Agent's messages in turn. */
export function replayRecords(o: ReplayRecordsOptions): FlowInput[][] {
  const stream = new ReplayStream({
    agents: 4,
    flows: o.flows ?? 1_500,
    seed: o.seed,
    uniqueNames: 0.5,
  });
  const t0 = 1_700_000_000;
  const stores = stream.rounds.map((_, a) => {
    const store = new TemplateStore({ wireNumbers: o.wireNumbers });
    for (const m of stream.templateMessages(a, t0)) decodeMessage(m, store);
    return store;
  });
  const out: FlowInput[][] = [];
  for (let round = 0; round < (o.rounds ?? 3); round++) {
    const records: FlowInput[] = [];
    stream.rounds.forEach((ar, a) => {
      ar.patch(0, ar.messages, round, t0 + 10 * round);
      for (const m of ar.views) {
        for (const ds of decodeMessage(m, stores[a]).dataSets) {
          for (const r of ds.records) records.push(r as unknown as FlowInput);
        }
      }
    });
    out.push(records);
  }
  return out;
}
