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

/** One message of the stream: the Agent (0-3) that sends it and a copy of its bytes. */
export interface ReplayMessage {
  agent: number;
  bytes: Uint8Array;
}

/** The stream's messages: each Agent's templates, then each round's data messages. */
export function replayMessages(
  o: Omit<ReplayRecordsOptions, "wireNumbers">,
): { templates: ReplayMessage[]; rounds: ReplayMessage[][] } {
  const stream = new ReplayStream({
    agents: 4,
    flows: o.flows ?? 1_500,
    seed: o.seed,
    uniqueNames: 0.5,
  });
  const t0 = 1_700_000_000;
  const templates = stream.rounds.flatMap((_, agent) =>
    stream.templateMessages(agent, t0).map((m) => ({ agent, bytes: m.slice() }))
  );
  const rounds: ReplayMessage[][] = [];
  for (let round = 0; round < (o.rounds ?? 3); round++) {
    const messages: ReplayMessage[] = [];
    stream.rounds.forEach((ar, agent) => {
      ar.patch(0, ar.messages, round, t0 + 10 * round);
      for (const m of ar.views) messages.push({ agent, bytes: m.slice() });
    });
    rounds.push(messages);
  }
  return { templates, rounds };
}

/** The decoded records of each round, every Agent's messages in turn. */
export function replayRecords(o: ReplayRecordsOptions): FlowInput[][] {
  const { templates, rounds } = replayMessages(o);
  const stores = [0, 1, 2, 3].map(() => new TemplateStore({ wireNumbers: o.wireNumbers }));
  for (const m of templates) decodeMessage(m.bytes, stores[m.agent]);
  return rounds.map((messages) =>
    messages.flatMap((m) =>
      decodeMessage(m.bytes, stores[m.agent]).dataSets.flatMap((ds) =>
        ds.records as unknown as FlowInput[]
      )
    )
  );
}
