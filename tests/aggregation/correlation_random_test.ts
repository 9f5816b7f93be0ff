/**
 * Randomized correlation test (refined E2, spec aggregation.md §2.3, SC-13d, SC-26): two to four
 * simulated Nodes report inter-node flows (IPv4 and IPv6, TCP and UDP) whose policy may change
 * mid-flow (Allow → egress Drop/Reject, ingress Drop/Reject) or deny from the start; the records
 * of all Nodes arrive in a random interleaving (usually each Node's own records in order,
 * sometimes fully shuffled), with sweeps in between and a Pod store that knows nothing or gives
 * stale (decoy) Pods. Whatever the order, every export of an entry that has seen both halves
 * carries both sides' Pod fields, the egress policy fields of the source Node's first record and
 * the ingress policy fields of the destination Node's first record; and the byte books of held
 * flows match their strings at every sweep and return to 0 once every flow is gone.
 */

import assert from "node:assert/strict";
import {
  type CoreApi,
  type ExportedFlow,
  type ExportHooks,
  type FlowInput,
  type PodInfo,
  ShardedCore,
} from "../../src/aggregation/mod.ts";
import { OVERFLOW_ENTRY_BYTES, stringBytes } from "../../src/aggregation/intern.ts";
import { FIELDS, FLOW_FIXED_BYTES, GROUPS } from "../../src/aggregation/layout.ts";
import { tupleBytes } from "../../src/aggregation/tuples.ts";
import { agentRecord } from "../_helpers/agent_record.ts";
import { prng } from "../_helpers/prng.ts";
import { at, newCore, withShards } from "./fixtures.ts";

const SEEDS = 300;
const FLOWS_PER_SEED = 16;
const T0 = 1_700_000_000;

/** The correlate fields a test record sets, per side. */
const SOURCE_FIELDS = [
  "sourcePodName",
  "sourcePodNamespace",
  "sourceNodeName",
  "egressNetworkPolicyName",
  "egressNetworkPolicyNamespace",
  "egressNetworkPolicyType",
  "egressNetworkPolicyRuleName",
  "egressNetworkPolicyRuleAction",
] as const;
const DEST_FIELDS = [
  "destinationPodName",
  "destinationPodNamespace",
  "destinationNodeName",
  "ingressNetworkPolicyName",
  "ingressNetworkPolicyNamespace",
  "ingressNetworkPolicyType",
  "ingressNetworkPolicyRuleName",
  "ingressNetworkPolicyRuleAction",
] as const;

interface Pod {
  name: string;
  namespace: string;
  node: string;
  v4: string;
  v6: string;
}

/** How a flow's policy evolves. `egressDenyStart` flows have no destination half. */
type Story =
  | "allow"
  | "egressDenyMid"
  | "ingressDropMid"
  | "ingressRejectMid"
  | "ingressRejectStart"
  | "egressDenyStart";
const STORIES: readonly Story[] = [
  "allow",
  "egressDenyMid",
  "ingressDropMid",
  "ingressRejectMid",
  "ingressRejectStart",
  "egressDenyStart",
];

/** One simulated flow: its records per Node, in each Node's order. */
interface SimFlow {
  sport: number;
  src: Pod;
  dst: Pod;
  sRecords: FlowInput[];
  dRecords: FlowInput[];
}

/** Model of one live entry: the first record ingested from each Node. */
interface Entry {
  firstS?: FlowInput;
  firstD?: FlowInput;
  verifiedExports: number;
}

function pick<T>(rand: () => number, xs: readonly T[]): T {
  return xs[Math.floor(rand() * xs.length)];
}

function policy(dir: "ingress" | "egress", name: string, action: number): FlowInput {
  const p = `${dir}NetworkPolicy`;
  return {
    [`${p}Name`]: name,
    [`${p}Namespace`]: name === "" ? "" : "policies",
    [`${p}Type`]: name === "" ? 0 : 2,
    [`${p}RuleName`]: name === "" ? "" : `${name}-rule`,
    [`${p}RuleAction`]: action,
  } as FlowInput;
}

function makeFlow(rand: () => number, pods: Pod[], sport: number): SimFlow {
  const src = pick(rand, pods);
  const others = pods.filter((p) => p.node !== src.node);
  const dst = pick(rand, others);
  const v6 = rand() < 0.5;
  const story = pick(rand, STORIES);
  const base: FlowInput = {
    ...agentRecord(
      v6
        ? { sourceIPv6Address: src.v6, destinationIPv6Address: dst.v6 }
        : { sourceIPv4Address: src.v4, destinationIPv4Address: dst.v4 },
    ),
    flowType: 2,
    protocolIdentifier: rand() < 0.7 ? 6 : 17,
    sourceTransportPort: sport,
    destinationTransportPort: 8080,
    flowStartSeconds: T0,
  };
  const nS = 1 + Math.floor(rand() * 5);
  const nD = story === "egressDenyStart" ? 0 : 1 + Math.floor(rand() * 5);
  // The record index from which the changed policy applies.
  const change = story.endsWith("Start") ? 0 : Math.floor(rand() * 4);
  const allowEgress = rand() < 0.5 ? policy("egress", "allow-out", 1) : policy("egress", "", 0);
  const allowIngress = rand() < 0.5 ? policy("ingress", "allow-in", 1) : policy("ingress", "", 0);
  const record = (i: number, side: FlowInput): FlowInput => {
    const octets = BigInt(1000 * (i + 1));
    return {
      ...base,
      flowEndSeconds: T0 + 5 * (i + 1),
      octetTotalCount: octets,
      octetDeltaCount: 1000n,
      reverseOctetTotalCount: octets,
      reverseOctetDeltaCount: 1000n,
      ...side,
    };
  };
  const sRecords: FlowInput[] = [];
  for (let i = 0; i < nS; i++) {
    const denied = (story === "egressDenyMid" || story === "egressDenyStart") && i >= change;
    const egress = denied ? policy("egress", "lockdown", rand() < 0.5 ? 2 : 3) : allowEgress;
    sRecords.push(record(i, {
      sourcePodName: src.name,
      sourcePodNamespace: src.namespace,
      sourceNodeName: src.node,
      ...egress,
    }));
  }
  const dRecords: FlowInput[] = [];
  // After an egress deny the destination Node sees no more traffic.
  const dCount = story === "egressDenyMid" ? Math.min(nD, change) : nD;
  for (let i = 0; i < dCount; i++) {
    let ingress = allowIngress;
    if (i >= change && story === "ingressDropMid") ingress = policy("ingress", "quarantine", 2);
    if (i >= change && (story === "ingressRejectMid" || story === "ingressRejectStart")) {
      ingress = policy("ingress", "quarantine", 3);
    }
    dRecords.push(record(i, {
      destinationPodName: dst.name,
      destinationPodNamespace: dst.namespace,
      destinationNodeName: dst.node,
      ...ingress,
    }));
  }
  return { sport, src, dst, sRecords, dRecords };
}

function makePods(rand: () => number): Pod[] {
  const nodes = 2 + Math.floor(rand() * 3);
  const pods: Pod[] = [];
  for (let n = 1; n <= nodes; n++) {
    for (let i = 1; i <= 3; i++) {
      pods.push({
        name: `web-${n}-${i}`,
        namespace: `ns-${i % 2}`,
        node: `node-${n}`,
        v4: `10.${n}.0.${i}`,
        v6: `fd00:${n}::${i}`,
      });
    }
  }
  return pods;
}

/** A Pod store that knows nothing, or one whose answers are stale (another Pod). */
function podStore(rand: () => number): ExportHooks {
  if (rand() < 0.5) return { lookupPod: () => undefined };
  const decoy: PodInfo = { name: "stale-pod", namespace: "stale-ns", nodeName: "stale-node" };
  return { lookupPod: () => decoy };
}

function checkExport(e: Entry, f: ExportedFlow, where: string): void {
  if (e.firstS === undefined || e.firstD === undefined) return;
  assert.equal(f.uncorrelated, false, where);
  const rec = f.record as Record<string, unknown>;
  for (const k of SOURCE_FIELDS) assert.equal(rec[k], e.firstS[k], `${where}: ${k}`);
  for (const k of DEST_FIELDS) assert.equal(rec[k], e.firstD[k], `${where}: ${k}`);
  e.verifiedExports++;
}

/**
 * The order the aggregator receives the records in: usually each Node's records of a flow in
 * order and everything else interleaved at random (one connection per Agent); in one seed of
 * four, any order at all (UDP reordering, several connections).
 */
function arrivalOrder(rand: () => number, flows: readonly SimFlow[]): FlowInput[] {
  const queues = flows.flatMap((f) => [f.sRecords, f.dRecords]).filter((q) => q.length > 0);
  const out: FlowInput[] = [];
  if (rand() < 0.25) {
    for (const q of queues) out.push(...q);
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [out[i], out[j]] = [out[j], out[i]];
    }
    return out;
  }
  const next = queues.map(() => 0);
  let live = queues.length;
  while (live > 0) {
    let qi = Math.floor(rand() * queues.length);
    while (next[qi] >= queues[qi].length) qi = (qi + 1) % queues.length;
    out.push(queues[qi][next[qi]++]);
    if (next[qi] === queues[qi].length) live--;
  }
  return out;
}

/** Address fields of a snapshot: printed from the key words, not held as strings. */
const ADDRESS_FIELDS = new Set([
  "sourceIPv4Address",
  "destinationIPv4Address",
  "sourceIPv6Address",
  "destinationIPv6Address",
]);

/** The fields of each field group (layout.ts GROUPS), in tuple order. */
const GROUP_FIELDS = GROUPS.map((_, g) =>
  FIELDS.filter((f) => "group" in f && f.group === g).sort((x, y) => x.at - y.at).map((f) => f.ie)
);

/**
 * The byte books match what the live flows hold: each flow's fixed cost, every distinct
 * field-group tuple and every distinct string they reference, each once (the upper side allows
 * for overflow entries of the intern table). A leaked reference or one given back too often
 * breaks one side.
 */
function checkBooks(core: CoreApi, where: string): void {
  // Each shard interns its own strings: the books balance shard by shard.
  if (core instanceof ShardedCore) {
    core.shards.forEach((c, i) => checkBooks(c, `${where} shard ${i}`));
    return;
  }
  const held = new Set<string>();
  const tuples = new Set<string>();
  let tupleSum = 0;
  for (const rec of core.query()) {
    for (const [k, v] of Object.entries(rec)) {
      if (typeof v === "string" && v !== "" && !ADDRESS_FIELDS.has(k)) held.add(v);
    }
    GROUP_FIELDS.forEach((fields, g) => {
      const v = fields.map((f) => rec[f]);
      const key = `${g}:${JSON.stringify(v)}`;
      if (v.some((x) => x !== "" && x !== 0) && !tuples.has(key)) {
        tuples.add(key);
        tupleSum += tupleBytes(fields.length);
      }
    });
  }
  let min = 0;
  for (const v of held) min += stringBytes(v);
  const strings = core.flowBytes - core.flowCount * FLOW_FIXED_BYTES - tupleSum;
  assert.ok(strings >= min, `${where}: ${strings} bytes of strings < ${min} held`);
  assert.ok(
    strings <= min + held.size * OVERFLOW_ENTRY_BYTES,
    `${where}: ${strings} bytes for ${held.size} strings`,
  );
}

function runSeed(seed: number): { bothHalves: number; verified: number } {
  const rand = prng(seed);
  const pods = makePods(rand);
  const flows = Array.from(
    { length: FLOWS_PER_SEED },
    (_, i) => makeFlow(rand, pods, 10_000 + i),
  );
  const { core, clock } = newCore({ activeTimeoutMs: 4000, inactiveTimeoutMs: 60_000 });
  const hooks = podStore(rand);
  const entries = new Map<number, Entry>();
  let bothHalves = 0;
  let verified = 0;
  const retire = (sport: number): void => {
    const e = entries.get(sport);
    if (e === undefined) return;
    if (e.firstS !== undefined && e.firstD !== undefined) {
      bothHalves++;
      assert.ok(e.verifiedExports > 0, `seed ${seed} flow ${sport}: both halves, never exported`);
      verified += e.verifiedExports;
    }
    entries.delete(sport);
  };
  // Checked after each sweep, not inside `emit`: the core catches and counts emit errors (L1).
  const exported: ExportedFlow[] = [];
  const onExport = (f: ExportedFlow): void => {
    exported.push(f);
  };
  const checkExports = (): void => {
    for (const f of exported) {
      const e = entries.get(f.key.sourcePort);
      assert.ok(e !== undefined, `seed ${seed}: export of an unknown flow`);
      checkExport(e, f, `seed ${seed} flow ${f.key.sourcePort}`);
    }
    exported.length = 0;
  };
  const sweep = (): void => {
    core.expire(onExport, hooks);
    checkExports();
    checkBooks(core, `seed ${seed}`);
    // A not-ready half given up on is exported uncorrelated and deleted: a later record
    // starts a new entry.
    for (const f of flows) {
      if (core.query({ sourcePort: f.sport, destinationPort: 8080 }).length === 0) retire(f.sport);
    }
  };
  for (const r of arrivalOrder(rand, flows)) {
    const sport = r.sourceTransportPort!;
    at(clock, clock.nowMs() + Math.floor(rand() * 300));
    assert.equal(core.addRecord(r), true, `seed ${seed}: record rejected`);
    let e = entries.get(sport);
    if (e === undefined) entries.set(sport, e = { verifiedExports: 0 });
    if (r.sourcePodName !== "" && e.firstS === undefined) e.firstS = r;
    if (r.destinationPodName !== "" && e.firstD === undefined) e.firstD = r;
    if (rand() < 0.15) sweep();
  }
  // Sweep until every entry is gone (ready ones at their inactive expiry, lonely halves after
  // their retries): every string reference is then given back, so no byte stays accounted.
  for (let i = 0; core.flowCount > 0 && i < 20; i++) {
    at(clock, clock.nowMs() + 30_000);
    sweep();
  }
  assert.equal(core.flowCount, 0);
  assert.equal(core.flowBytes, 0, `seed ${seed}: bytes left accounted`);
  for (const f of flows) retire(f.sport);
  assert.equal(core.stats().emitErrors, 0);
  return { bothHalves, verified };
}

/** Runs `seeds` seeds from `first`; checks the generator produced the case under test. */
function runSeeds(first: number, seeds: number): void {
  let bothHalves = 0;
  let verified = 0;
  for (let seed = first; seed < first + seeds; seed++) {
    const r = runSeed(seed);
    bothHalves += r.bothHalves;
    verified += r.verified;
  }
  // The generator must actually produce the case under test, many times over.
  assert.ok(bothHalves > seeds * FLOWS_PER_SEED / 2, `only ${bothHalves} flows had both halves`);
  assert.ok(verified >= bothHalves);
}

Deno.test("random interleavings: every flow with both halves is exported with both sides' fields", () => {
  runSeeds(1, SEEDS);
});

Deno.test("random interleavings, core sharded in 3: the same holds", async () => {
  await withShards(3, () => runSeeds(SEEDS + 1, SEEDS / 3));
});
