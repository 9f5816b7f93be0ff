/**
 * Shared fixtures for the aggregation tests: the S1/D1/S2/D2 records of spec aggregation.md
 * §3.7 (key K4 = 10.0.0.1:1234 → 10.0.0.2:5678/6), a clock helper and snapshot accessors.
 */

import { ManualClock } from "../../src/clock.ts";
import {
  type AggregatedRecord,
  AggregationCore,
  type AggregationOptions,
  type CoreApi,
  type ExportedFlow,
  type FlowInput,
  type FlowKey,
  ShardedCore,
} from "../../src/aggregation/mod.ts";
import { unsetMetadata } from "../_helpers/agent_record.ts";
import { CoreState } from "../../src/aggregation/state.ts";
import { U32, u32Base } from "../../src/aggregation/slot_store.ts";
import { GROUPS } from "../../src/aggregation/layout.ts";

/** K4 of §9. */
export const K4: FlowKey = {
  sourceAddress: "10.0.0.1",
  destinationAddress: "10.0.0.2",
  protocol: 6,
  sourcePort: 1234,
  destinationPort: 5678,
};

/** An Agent record with every correlate IE present and unset (§3.7 fixture base). */
export function baseRecord(): FlowInput {
  return {
    sourceIPv4Address: "10.0.0.1",
    destinationIPv4Address: "10.0.0.2",
    sourceTransportPort: 1234,
    destinationTransportPort: 5678,
    protocolIdentifier: 6,
    flowType: 2,
    ...unsetMetadata(),
    destinationClusterIPv4: "0.0.0.0",
  };
}

/** Sets the 8 counters with reverse = forward. */
export function counters(
  pktTotal: bigint,
  pktDelta: bigint,
  octTotal: bigint,
  octDelta: bigint,
): Partial<FlowInput> {
  return {
    packetTotalCount: pktTotal,
    packetDeltaCount: pktDelta,
    octetTotalCount: octTotal,
    octetDeltaCount: octDelta,
    reversePacketTotalCount: pktTotal,
    reversePacketDeltaCount: pktDelta,
    reverseOctetTotalCount: octTotal,
    reverseOctetDeltaCount: octDelta,
  };
}

/** An intra-node record (pod1 → pod2, one Node reports both): 1 s, 500 packets, 1000 octets. */
export function intraNode(over: Partial<FlowInput> = {}): FlowInput {
  return {
    ...baseRecord(),
    flowType: 1,
    sourcePodName: "pod1",
    destinationPodName: "pod2",
    flowStartSeconds: 0,
    flowEndSeconds: 1,
    flowEndReason: 2,
    tcpState: "ESTABLISHED",
    ...counters(500n, 500n, 1000n, 1000n),
    ...over,
  };
}

/** §3.7 S1. */
export function s1(over: Partial<FlowInput> = {}): FlowInput {
  return {
    ...baseRecord(),
    sourcePodName: "pod1",
    destinationClusterIPv4: "192.168.0.1",
    destinationServicePort: 4739,
    flowStartSeconds: 0,
    flowEndSeconds: 1,
    flowEndReason: 2,
    tcpState: "ESTABLISHED",
    ...counters(500n, 0n, 1000n, 0n),
    ...over,
  };
}

/** §3.7 D1. */
export function d1(over: Partial<FlowInput> = {}): FlowInput {
  return {
    ...baseRecord(),
    destinationPodName: "pod2",
    flowStartSeconds: 0,
    flowEndSeconds: 1,
    flowEndReason: 2,
    tcpState: "ESTABLISHED",
    ...counters(502n, 0n, 1020n, 0n),
    ...over,
  };
}

/** §3.7 S2. */
export function s2(over: Partial<FlowInput> = {}): FlowInput {
  return {
    ...s1(),
    flowEndSeconds: 10,
    flowEndReason: 3,
    tcpState: "TIME_WAIT",
    ...counters(1000n, 500n, 2000n, 1000n),
    ...over,
  };
}

/** §3.7 D2. */
export function d2(over: Partial<FlowInput> = {}): FlowInput {
  return {
    ...d1(),
    flowEndSeconds: 10,
    flowEndReason: 3,
    tcpState: "TIME_WAIT",
    ...counters(1005n, 503n, 2050n, 1030n),
    ...over,
  };
}

/** A core with the §9 defaults (A = 60s, I = 90s) on a fresh ManualClock. */
export function newCore(
  opts: Partial<AggregationOptions> = {},
): { core: CoreApi; clock: ManualClock } {
  const clock = new ManualClock();
  const o: AggregationOptions = {
    activeTimeoutMs: 60_000,
    inactiveTimeoutMs: 90_000,
    clock,
    ...opts,
  };
  const core = shardCount === 1 ? new AggregationCore(o) : new ShardedCore(o, shardCount);
  return { core, clock };
}

/** {@linkcode newCore} always unsharded, for the tests that look inside the core's state. */
export function newSingleCore(
  opts: Partial<AggregationOptions> = {},
): { core: AggregationCore; clock: ManualClock } {
  const { core, clock } = newCore(opts);
  if (!(core instanceof AggregationCore)) throw new Error("newSingleCore inside withShards");
  return { core, clock };
}

/** Shards of the cores {@linkcode newCore} makes (see {@linkcode withShards}). */
let shardCount = 1;

/**
 * Runs `fn` with {@linkcode newCore} making cores of `n` shards (`ShardedCore`), then back to
 * one; a test suite runs its scenarios both ways to show sharding changes no result.
 */
export async function withShards(n: number, fn: () => void | Promise<void>): Promise<void> {
  shardCount = n;
  try {
    await fn();
  } finally {
    shardCount = 1;
  }
}

/** Moves the clock to absolute monotonic time `ms` (never backwards). */
export function at(clock: ManualClock, ms: number): void {
  const d = ms - clock.nowMs();
  if (d < 0) throw new Error(`clock cannot go back from ${clock.nowMs()} to ${ms}`);
  clock.advance(d);
}

/** The one stored flow of `key` (throws if not exactly one). */
export function one(core: CoreApi, key: FlowKey = K4): AggregatedRecord {
  const r = core.query(key);
  if (r.length !== 1) throw new Error(`expected 1 flow, got ${r.length}`);
  return r[0];
}

/** [common, fromSource, fromDestination] of a counter name. */
export function csd(rec: AggregatedRecord, name: string): unknown[] {
  const o = rec as unknown as Record<string, unknown>;
  return [o[name], o[name + "FromSourceNode"], o[name + "FromDestinationNode"]];
}

/** Collects exported flows, optionally throwing for some. */
export function collector(
  fail?: (f: ExportedFlow) => boolean,
): { out: ExportedFlow[]; emit: (f: ExportedFlow) => void } {
  const out: ExportedFlow[] = [];
  return {
    out,
    emit: (f) => {
      if (fail?.(f)) throw new Error("exporter failed");
      out.push(f);
    },
  };
}

/** The slots of the live flows of `s`, in slot order. */
export function liveSlots(s: CoreState): number[] {
  const out: number[] = [];
  for (let slot = 0; slot < s.store.end; slot++) if (s.live(slot)) out.push(slot);
  return out;
}

/** Word `at` (a `U32` position) of `slot`. */
export function word(s: CoreState, slot: number, at: number): number {
  return s.store.u32(slot)[u32Base(slot) + at];
}

/** The text of the string whose intern id is in word `at` of `slot`. */
export function text(s: CoreState, slot: number, at: number): string | undefined {
  return s.intern.text(word(s, slot, at));
}

/** The text of string position `i` of field group `g` (layout.ts GROUPS) of `slot`. */
export function groupText(s: CoreState, slot: number, g: number, i: number): string | undefined {
  return s.intern.text(s.groups[g].word(word(s, slot, GROUPS[g].at), i));
}

/** The `FL_*` flags of `slot`. */
export function flagsOf(s: CoreState, slot: number): number {
  return word(s, slot, U32.FLAGS);
}

/** The internal state of a core with the §9 defaults, for tests of the verb modules. */
export function newState(
  opts: Partial<AggregationOptions> = {},
): { s: CoreState; clock: ManualClock } {
  const clock = new ManualClock();
  const s = new CoreState({ activeTimeoutMs: 60_000, inactiveTimeoutMs: 90_000, clock, ...opts });
  return { s, clock };
}
