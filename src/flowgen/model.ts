/**
 * The flow model of the traffic generator: a deterministic (seeded) population of Kubernetes
 * flows between Pods spread over N simulated Antrea Agents, each flow following one scenario of
 * `spec/ipfix.md` §6.4. Every call to {@linkcode FlowModel.next} advances one flow by one export
 * interval and returns the Agent records that interval produces (two for an inter-node flow: one
 * from each Node with the same 5-tuple). Pure: no I/O and no clock, so tests and benchmarks can
 * use it in process and the same seed always yields the same records.
 */

import type { DataRecord } from "../ipfix/types.ts";
import { fnv1_32 } from "../ipfix/fnv.ts";

/** The traffic scenarios of `ipfix.md` §6.4. */
export type Scenario =
  | "intraNode"
  | "interNode"
  | "interNodeService"
  | "toExternal"
  | "denied"
  | "ipv6";

/** All scenarios, in reporting order. */
export const SCENARIOS: readonly Scenario[] = [
  "intraNode",
  "interNode",
  "interNodeService",
  "toExternal",
  "denied",
  "ipv6",
];

/** Relative weights of the default scenario mix. */
export const DEFAULT_MIX: Readonly<Record<Scenario, number>> = {
  intraNode: 25,
  interNode: 30,
  interNodeService: 15,
  toExternal: 10,
  denied: 10,
  ipv6: 10,
};

/** One simulated Antrea Agent (one Node). */
export interface Agent {
  /** Node name, `k8s-node-<i>`. */
  readonly nodeName: string;
  /** Observation domain id: FNV-1 32-bit of the node name (ipfix.md §6.1). */
  readonly observationDomainId: number;
  /** Zero-based index. */
  readonly index: number;
}

/** A record one Agent sends, with the template that describes it. */
export interface AgentRecord {
  /** Index of the sending Agent in {@linkcode FlowModel.agents}. */
  readonly agent: number;
  /** 256 for IPv4 flows, 257 for IPv6 flows (dual-stack Agent). */
  readonly templateId: 256 | 257;
  /** The scenario of the flow the record belongs to. */
  readonly scenario: Scenario;
  /** Values keyed by IE name, all 39 Agent IEs of the family set. */
  readonly record: DataRecord;
}

declare const flowRef: unique symbol;

/** Opaque identity of one simulated flow (never reused by a later flow). */
export type FlowRef = { readonly [flowRef]: true };

/**
 * One Agent record reduced to the values that change from one export of its flow to the next.
 * Every other field of the record is constant for a given (`flow`, `side`).
 */
export interface AgentUpdate {
  /** Index of the sending Agent in {@linkcode FlowModel.agents}. */
  readonly agent: number;
  /** 256 for IPv4 flows, 257 for IPv6 flows. */
  readonly templateId: 256 | 257;
  /** The scenario of the flow. */
  readonly scenario: Scenario;
  /** Exporting side: 0 the source Node, 1 the destination Node of an inter-node flow. */
  readonly side: 0 | 1;
  /** The flow this record belongs to. */
  readonly flow: FlowRef;
  /** The flow's final export: nothing more will come for this flow. */
  readonly last: boolean;
  /** flowEndSeconds. */
  readonly flowEndSeconds: number;
  /** flowEndReason: 2 active timeout, 1 idle (UDP end), 3 end of TCP flow. */
  readonly flowEndReason: number;
  /** tcpState ("" for UDP). */
  readonly tcpState: string;
  /** packetTotalCount. */
  readonly packetTotalCount: bigint;
  /** octetTotalCount. */
  readonly octetTotalCount: bigint;
  /** packetDeltaCount. */
  readonly packetDeltaCount: bigint;
  /** octetDeltaCount. */
  readonly octetDeltaCount: bigint;
  /** reversePacketTotalCount. */
  readonly reversePacketTotalCount: bigint;
  /** reverseOctetTotalCount. */
  readonly reverseOctetTotalCount: bigint;
  /** reversePacketDeltaCount. */
  readonly reversePacketDeltaCount: bigint;
  /** reverseOctetDeltaCount. */
  readonly reverseOctetDeltaCount: bigint;
}

/** Options of {@linkcode FlowModel}. */
export interface FlowModelOptions {
  /** Number of Agents (Nodes), at least 1 (inter-node scenarios need 2; they fall back). */
  agents: number;
  /** Number of concurrent flows kept alive. */
  flows: number;
  /** PRNG seed; the same seed yields the same records. */
  seed?: number;
  /** Scenario weights; defaults to {@linkcode DEFAULT_MIX}. */
  mix?: Partial<Record<Scenario, number>>;
  /** Unix seconds of the simulated start; default 1_700_000_000. */
  startSeconds?: number;
  /**
   * Probability that an update reports a counter that went backwards, so the Agent's unsigned
   * delta wraps to a value close to 2^64 (ipfix.md §6.3 edge case). Default 0.
   */
  wrapProbability?: number;
  /**
   * Share of Pods (0..1) that get a name of their own (`frontend-1x2y3`); the others take one of
   * 16 names per app, shared with other flows, so the collector sees the same strings again.
   * Default 1: every flow its own Pod names (the PRNG sequence of earlier versions).
   */
  uniqueNames?: number;
}

/** Returns the observation domain id an Agent on `nodeName` uses. */
export function agentObservationDomainId(nodeName: string): number {
  return fnv1_32(nodeName);
}

/**
 * A seeded generator of floats in [0, 1) (mulberry32): tiny, fast and good enough for traffic
 * shapes and test inputs; the same seed yields the same sequence.
 */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const U64 = 1n << 64n;
const TCP = 6;
const UDP = 17;

interface Counters {
  packets: bigint;
  octets: bigint;
  rpackets: bigint;
  roctets: bigint;
}

interface Flow {
  scenario: Scenario;
  ipv6: boolean;
  srcAgent: number;
  dstAgent: number; // -1 when the destination is outside the cluster
  srcIp: string;
  dstIp: string;
  srcPort: number;
  dstPort: number;
  proto: number;
  srcPod: string;
  dstPod: string;
  srcNs: string;
  dstNs: string;
  clusterIp: string;
  servicePort: number;
  servicePortName: string;
  egressName: string;
  denyAction: number; // 0, 2 drop, 3 reject
  denyIngress: boolean;
  start: number;
  updates: number;
  updatesLeft: number;
  // What each exporting Node last reported, for deltas (indexed 0 = source side, 1 = dest side).
  last: [Counters, Counters];
  total: Counters;
}

function zero(): Counters {
  return { packets: 0n, octets: 0n, rpackets: 0n, roctets: 0n };
}

/** A seeded population of flows producing realistic Antrea Agent records. */
export class FlowModel {
  /** The simulated Agents. */
  readonly agents: readonly Agent[];
  readonly #rand: () => number;
  readonly #flows: Flow[] = [];
  readonly #mix: [Scenario, number][];
  readonly #mixTotal: number;
  readonly #start: number;
  readonly #wrap: number;
  readonly #uniqueNames: number;
  #cursor = 0;
  #portSeq = 0;

  /** Builds the Agents and the initial flows. */
  constructor(options: FlowModelOptions) {
    if (!Number.isInteger(options.agents) || options.agents < 1) {
      throw new RangeError(`flowgen: agents must be an integer >= 1, got ${options.agents}`);
    }
    if (!Number.isInteger(options.flows) || options.flows < 1) {
      throw new RangeError(`flowgen: flows must be an integer >= 1, got ${options.flows}`);
    }
    this.#rand = prng(options.seed ?? 1);
    this.#start = options.startSeconds ?? 1_700_000_000;
    this.#wrap = options.wrapProbability ?? 0;
    this.#uniqueNames = options.uniqueNames ?? 1;
    if (!(this.#uniqueNames >= 0 && this.#uniqueNames <= 1)) {
      throw new RangeError(`flowgen: uniqueNames must be in [0, 1], got ${options.uniqueNames}`);
    }
    const mix = { ...DEFAULT_MIX, ...options.mix };
    this.#mix = SCENARIOS.map((s) => [s, Math.max(0, mix[s] ?? 0)]);
    this.#mixTotal = this.#mix.reduce((a, [, w]) => a + w, 0);
    if (this.#mixTotal <= 0) throw new RangeError("flowgen: scenario mix has no positive weight");
    const agents: Agent[] = [];
    for (let i = 0; i < options.agents; i++) {
      const nodeName = `k8s-node-${i + 1}`;
      agents.push({ nodeName, observationDomainId: agentObservationDomainId(nodeName), index: i });
    }
    this.agents = agents;
    for (let i = 0; i < options.flows; i++) this.#flows.push(this.#newFlow());
  }

  /**
   * Advances the next flow (round robin) by one export interval and returns the records the
   * Agents send for it: one, or two for inter-node flows (source Node first).
   */
  next(): AgentRecord[] {
    return this.nextUpdates().map((u) => ({
      agent: u.agent,
      templateId: u.templateId,
      scenario: u.scenario,
      record: this.recordOf(u),
    }));
  }

  /**
   * Same step as {@linkcode FlowModel.next} (same PRNG draws, same records) but returns only
   * what changes between two exports of a flow; {@linkcode FlowModel.recordOf} gives the full
   * record. A sender that caches each flow's encoding uses this to skip building records.
   */
  nextUpdates(): AgentUpdate[] {
    const i = this.#cursor;
    this.#cursor = (this.#cursor + 1) % this.#flows.length;
    const f = this.#flows[i];
    const out = this.#advance(f);
    if (f.updatesLeft <= 0) this.#flows[i] = this.#newFlow();
    return out;
  }

  #int(lo: number, hi: number): number {
    return lo + Math.floor(this.#rand() * (hi - lo + 1));
  }

  #pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.#rand() * xs.length)];
  }

  #scenario(): Scenario {
    let r = this.#rand() * this.#mixTotal;
    for (const [s, w] of this.#mix) {
      if (r < w) return s;
      r -= w;
    }
    return this.#mix[this.#mix.length - 1][0];
  }

  #podName(app: string): string {
    // With the default ratio of 1 no extra PRNG draw: the seeded sequence stays what it was.
    const unique = this.#uniqueNames >= 1 || this.#rand() < this.#uniqueNames;
    return `${app}-${this.#int(0, unique ? 0xfffff : 15).toString(36)}`;
  }

  #podIp(agent: number, host: number, ipv6: boolean): string {
    // Per-Node Pod CIDRs as Antrea allocates them: 10.10.<node>.0/24 and fd00:10:<node>::/64.
    return ipv6
      ? `fd00:10:${(agent + 1).toString(16)}::${host.toString(16)}`
      : `10.10.${agent}.${host}`;
  }

  #newFlow(): Flow {
    const n = this.agents.length;
    let scenario = this.#scenario();
    if (n < 2 && (scenario === "interNode" || scenario === "interNodeService")) {
      scenario = "intraNode";
    }
    const ipv6 = scenario === "ipv6";
    const srcAgent = this.#int(0, n - 1);
    let dstAgent = srcAgent;
    const twoNodes = scenario === "interNode" || scenario === "interNodeService" ||
      (scenario === "ipv6" && n > 1) || (scenario === "denied" && n > 1 && this.#rand() < 0.5);
    if (twoNodes) dstAgent = (srcAgent + this.#int(1, n - 1)) % n;
    if (scenario === "toExternal") dstAgent = -1;
    const apps = ["frontend", "backend", "redis", "postgres", "iperf", "nginx", "api"];
    const namespaces = ["default", "antrea-test", "shop", "monitoring"];
    const proto = this.#rand() < 0.85 ? TCP : UDP;
    const srcHost = this.#int(2, 250);
    let dstHost = this.#int(2, 250);
    if (dstAgent === srcAgent && dstHost === srcHost) dstHost = srcHost === 250 ? 2 : srcHost + 1;
    const srcIp = this.#podIp(srcAgent, srcHost, ipv6);
    const dstIp = dstAgent < 0
      ? `${this.#int(1, 223)}.${this.#int(0, 255)}.${this.#int(0, 255)}.${this.#int(1, 254)}`
      : this.#podIp(dstAgent, dstHost, ipv6);
    // Source ports cycle through the ephemeral range so concurrent flows never share a 5-tuple.
    const srcPort = 32768 + (this.#portSeq++ % 28000);
    const dstPort = this.#pick(
      proto === TCP ? [80, 443, 5201, 5432, 6379, 8080] : [53, 5201, 8125],
    );
    const srcApp = this.#pick(apps);
    const dstApp = this.#pick(apps);
    const srcNs = this.#pick(namespaces);
    const dstNs = scenario === "toExternal" ? "" : this.#pick(namespaces);
    const service = scenario === "interNodeService";
    const denyAction = scenario === "denied" ? (this.#rand() < 0.5 ? 2 : 3) : 0;
    return {
      scenario,
      ipv6,
      srcAgent,
      dstAgent,
      srcIp,
      dstIp,
      srcPort,
      dstPort,
      proto,
      srcPod: this.#podName(srcApp),
      dstPod: scenario === "toExternal" ? "" : this.#podName(dstApp),
      srcNs,
      dstNs,
      clusterIp: service ? `10.96.${this.#int(0, 255)}.${this.#int(1, 254)}` : "",
      servicePort: service ? dstPort : 0,
      servicePortName: service ? `${dstNs}/${dstApp}:${proto === TCP ? "tcp" : "udp"}` : "",
      egressName: scenario === "toExternal" && this.#rand() < 0.6 ? "egress-prod" : "",
      denyAction,
      denyIngress: denyAction !== 0 && this.#rand() < 0.5,
      start: this.#start + this.#int(0, 3600),
      updates: 0,
      // Denied flows are exported once (deny store); others live a few active timeouts.
      updatesLeft: denyAction !== 0 ? 1 : this.#int(1, 8),
      last: [zero(), zero()],
      total: zero(),
    };
  }

  #advance(f: Flow): AgentUpdate[] {
    f.updates++;
    f.updatesLeft--;
    const denied = f.denyAction !== 0;
    // A denied flow never gets a reply and carries the packets that hit the rule.
    const p = denied ? BigInt(this.#int(1, 3)) : BigInt(this.#int(1, 2000));
    const rp = denied ? 0n : BigInt(this.#int(1, 2000));
    f.total.packets += p;
    f.total.octets += p * BigInt(this.#int(60, 1500));
    f.total.rpackets += rp;
    f.total.roctets += rp * BigInt(this.#int(60, 1500));
    const ending = f.updatesLeft <= 0;
    const endReason = ending ? (f.proto === TCP ? 3 : 1) : 2;
    const tcpState = f.proto !== TCP ? "" : ending ? "TIME_WAIT" : "ESTABLISHED";
    const end = f.start + 5 * f.updates;
    const templateId = f.ipv6 ? 257 : 256;
    const out: AgentUpdate[] = [];
    // Inter-node flows are reported by both Nodes; a drop on the source side never reaches the
    // destination Node, so only ingress denials are seen there.
    const sides = flowTypeOf(f) === 2 && !(denied && !f.denyIngress) ? 2 : 1;
    for (let s = 0; s < sides; s++) {
      const side = s as 0 | 1;
      const last = f.last[side];
      const t = f.total;
      out.push({
        agent: side === 0 ? f.srcAgent : f.dstAgent,
        templateId,
        scenario: f.scenario,
        side,
        flow: f as unknown as FlowRef,
        last: ending,
        flowEndSeconds: end,
        flowEndReason: endReason,
        tcpState,
        packetTotalCount: t.packets,
        octetTotalCount: t.octets,
        // Evaluated in this order (one PRNG draw each when wrapping): the seeded sequence of
        // records must not depend on which API reads it.
        packetDeltaCount: this.#delta(t.packets, last.packets),
        octetDeltaCount: this.#delta(t.octets, last.octets),
        reversePacketTotalCount: t.rpackets,
        reverseOctetTotalCount: t.roctets,
        reversePacketDeltaCount: this.#delta(t.rpackets, last.rpackets),
        reverseOctetDeltaCount: this.#delta(t.roctets, last.roctets),
      });
      f.last[side] = { ...t };
    }
    return out;
  }

  #delta(now: bigint, before: bigint): bigint {
    // A counter that went backwards: the Agent's unsigned subtraction wraps below 2^64.
    if (this.#wrap > 0 && this.#rand() < this.#wrap) return U64 - BigInt(this.#int(1, 100));
    return now - before;
  }

  /**
   * The full Agent record of an update from {@linkcode FlowModel.nextUpdates} of this model:
   * its changing values plus everything constant for its flow and side.
   */
  recordOf(u: AgentUpdate): DataRecord {
    const f = u.flow as unknown as Flow;
    const side = u.side;
    const denied = f.denyAction !== 0;
    const flowType = flowTypeOf(f);
    const agent = u.agent;
    const local = flowType === 1;
    const srcLocal = side === 0 || local;
    const dstLocal = side === 1 || (local && f.dstPod !== "");
    const r: DataRecord = {
      flowStartSeconds: f.start,
      flowEndSeconds: u.flowEndSeconds,
      flowEndReason: u.flowEndReason,
      sourceTransportPort: f.srcPort,
      destinationTransportPort: f.dstPort,
      protocolIdentifier: f.proto,
      packetTotalCount: u.packetTotalCount,
      octetTotalCount: u.octetTotalCount,
      packetDeltaCount: u.packetDeltaCount,
      octetDeltaCount: u.octetDeltaCount,
    };
    if (f.ipv6) {
      r.sourceIPv6Address = f.srcIp;
      r.destinationIPv6Address = f.dstIp;
    } else {
      r.sourceIPv4Address = f.srcIp;
      r.destinationIPv4Address = f.dstIp;
    }
    r.reversePacketTotalCount = u.reversePacketTotalCount;
    r.reverseOctetTotalCount = u.reverseOctetTotalCount;
    r.reversePacketDeltaCount = u.reversePacketDeltaCount;
    r.reverseOctetDeltaCount = u.reverseOctetDeltaCount;
    const node = this.agents[agent].nodeName;
    r.sourcePodName = srcLocal ? f.srcPod : "";
    r.sourcePodNamespace = srcLocal ? f.srcNs : "";
    r.sourceNodeName = srcLocal ? node : "";
    r.destinationPodName = dstLocal ? f.dstPod : "";
    r.destinationPodNamespace = dstLocal ? f.dstNs : "";
    r.destinationNodeName = dstLocal ? node : "";
    // Only the source Node sees the pre-DNAT destination (the Service ClusterIP).
    const svc = f.clusterIp !== "" && side === 0;
    r.destinationServicePort = svc ? f.servicePort : 0;
    r.destinationServicePortName = svc ? f.servicePortName : "";
    const ingress = side === 1 || local;
    const egress = side === 0;
    const ingressDeny = denied && f.denyIngress && ingress;
    const egressDeny = denied && !f.denyIngress && egress;
    r.ingressNetworkPolicyName = ingressDeny ? "deny-ingress" : ingress ? "allow-web" : "";
    r.ingressNetworkPolicyNamespace = ingressDeny || ingress ? f.dstNs : "";
    r.ingressNetworkPolicyType = ingressDeny ? 2 : ingress && f.dstNs !== "" ? 1 : 0;
    r.ingressNetworkPolicyRuleName = ingressDeny ? "rule-0" : "";
    r.ingressNetworkPolicyRuleAction = ingressDeny ? f.denyAction : ingress && f.dstNs ? 1 : 0;
    r.egressNetworkPolicyName = egressDeny ? "deny-egress" : "";
    r.egressNetworkPolicyNamespace = egressDeny ? f.srcNs : "";
    r.egressNetworkPolicyType = egressDeny ? 3 : 0;
    r.egressNetworkPolicyRuleName = egressDeny ? "rule-1" : "";
    r.egressNetworkPolicyRuleAction = egressDeny ? f.denyAction : 0;
    r.tcpState = u.tcpState;
    r.flowType = flowType;
    r.egressName = side === 0 ? f.egressName : "";
    r.egressIP = side === 0 && f.egressName !== "" ? `172.18.0.${f.srcAgent + 2}` : "";
    if (f.ipv6) r.destinationClusterIPv6 = "::";
    else r.destinationClusterIPv4 = svc ? f.clusterIp : "0.0.0.0";
    return r;
  }
}

function flowTypeOf(f: Flow): number {
  return f.scenario === "intraNode" || f.dstAgent === f.srcAgent ? 1 : f.dstAgent < 0 ? 3 : 2;
}
