/**
 * The Information Element registry: every element of `spec/ie-registry.csv` (IANA, RFC 5103
 * reverse and Antrea PENs), indexed by (enterprise, id) for decoding and by name for building
 * records, plus the ordered element lists of the Antrea Agent and Flow Aggregator templates.
 * IDs repeat across PENs (136 is both IANA flowEndReason and Antrea tcpState), so nothing here is
 * ever keyed by id alone.
 */

import type { FieldSpecifier, InfoElement } from "./types.ts";
import { REGISTRY_ROWS } from "./registry_data.ts";

/** Every element of ie-registry.csv, in file order. */
export const ALL_ELEMENTS: readonly InfoElement[] = REGISTRY_ROWS.map(
  ([name, id, enterprise, type, length]): InfoElement =>
    Object.freeze({ name, id, enterprise, type, length }),
);

// (enterprise, id) packed into one number: pen * 2^16 + id stays below 2^48.
const byKey = new Map<number, InfoElement>();
const byName = new Map<string, InfoElement>();
let generation = 0;

/** Increases whenever {@linkcode registerElement} adds an element (invalidates compiled code). */
export function registryGeneration(): number {
  return generation;
}

function keyOf(enterprise: number, id: number): number {
  return enterprise * 65536 + id;
}

for (const ie of ALL_ELEMENTS) {
  byKey.set(keyOf(ie.enterprise, ie.id), ie);
  byName.set(ie.name, ie);
}

/** Returns the element with this (enterprise, id), or undefined when it is not registered. */
export function lookupElement(enterprise: number, id: number): InfoElement | undefined {
  return byKey.get(keyOf(enterprise, id));
}

/** Returns the element with this registry name, or undefined when it is not registered. */
export function elementByName(name: string): InfoElement | undefined {
  return byName.get(name);
}

/**
 * Adds an element beyond the CSV (custom enterprise elements, or test elements covering data
 * types the Antrea registry lacks). Re-registering an identical element is a no-op; a conflicting
 * name or (enterprise, id) throws, because decoders compiled earlier would disagree with later
 * ones. Templates compiled before the call keep treating the element as unknown.
 */
export function registerElement(ie: InfoElement): void {
  const prevKey = byKey.get(keyOf(ie.enterprise, ie.id));
  const prevName = byName.get(ie.name);
  if (prevKey !== undefined || prevName !== undefined) {
    const same = prevKey !== undefined && prevKey === prevName && prevKey.type === ie.type &&
      prevKey.length === ie.length;
    if (same) return;
    throw new Error(
      `registry: element ${ie.name} (${ie.enterprise}/${ie.id}) conflicts with ${
        (prevKey ?? prevName)?.name
      }`,
    );
  }
  if (ie.id < 0 || ie.id > 0x7fff || !Number.isInteger(ie.id)) {
    throw new Error(`registry: element ${ie.name}: id ${ie.id} outside 0..32767`);
  }
  const frozen = Object.freeze({ ...ie });
  byKey.set(keyOf(ie.enterprise, ie.id), frozen);
  byName.set(ie.name, frozen);
  generation++;
}

/** The record key of a field: its registry name, or `"<enterprise>/<id>"` when unknown. */
export function fieldName(enterprise: number, id: number): string {
  return byKey.get(keyOf(enterprise, id))?.name ?? `${enterprise}/${id}`;
}

const IANA_COMMON = [
  "flowStartSeconds",
  "flowEndSeconds",
  "flowEndReason",
  "sourceTransportPort",
  "destinationTransportPort",
  "protocolIdentifier",
  "packetTotalCount",
  "octetTotalCount",
  "packetDeltaCount",
  "octetDeltaCount",
] as const;

const IANA_REVERSE = [
  "reversePacketTotalCount",
  "reverseOctetTotalCount",
  "reversePacketDeltaCount",
  "reverseOctetDeltaCount",
] as const;

const ANTREA_COMMON = [
  "sourcePodName",
  "sourcePodNamespace",
  "sourceNodeName",
  "destinationPodName",
  "destinationPodNamespace",
  "destinationNodeName",
  "destinationServicePort",
  "destinationServicePortName",
  "ingressNetworkPolicyName",
  "ingressNetworkPolicyNamespace",
  "ingressNetworkPolicyType",
  "ingressNetworkPolicyRuleName",
  "ingressNetworkPolicyRuleAction",
  "egressNetworkPolicyName",
  "egressNetworkPolicyNamespace",
  "egressNetworkPolicyType",
  "egressNetworkPolicyRuleName",
  "egressNetworkPolicyRuleAction",
  "tcpState",
  "flowType",
  "egressName",
  "egressIP",
] as const;

/** ipfix.md §5.2 StatsElementList (aggregated on every record), in order. */
export const STATS_FIELDS: readonly string[] = Object.freeze([
  "octetDeltaCount",
  "octetTotalCount",
  "packetDeltaCount",
  "packetTotalCount",
  "reverseOctetDeltaCount",
  "reverseOctetTotalCount",
  "reversePacketDeltaCount",
  "reversePacketTotalCount",
]);

/** ipfix.md §5.2 AntreaSourceStatsElementList, paired by index with {@linkcode STATS_FIELDS}. */
export const SOURCE_STATS_FIELDS: readonly string[] = Object.freeze(
  STATS_FIELDS.map((n) => n + "FromSourceNode"),
);

/** ipfix.md §5.2 AntreaDestinationStatsElementList, paired by index with STATS_FIELDS. */
export const DESTINATION_STATS_FIELDS: readonly string[] = Object.freeze(
  STATS_FIELDS.map((n) => n + "FromDestinationNode"),
);

/** ipfix.md §5.2 AntreaLabelsElementList: appended to the FA template when labels are on. */
export const POD_LABEL_FIELDS: readonly string[] = Object.freeze([
  "sourcePodLabels",
  "destinationPodLabels",
]);

/** Antrea Agent IPv4 template (ID 256), 39 element names in wire order (ipfix.md §5.3 1–39). */
export const AGENT_IPV4_FIELDS: readonly string[] = Object.freeze([
  ...IANA_COMMON,
  "sourceIPv4Address",
  "destinationIPv4Address",
  ...IANA_REVERSE,
  ...ANTREA_COMMON,
  "destinationClusterIPv4",
]);

/** Antrea Agent IPv6 template, 39 element names in wire order. */
export const AGENT_IPV6_FIELDS: readonly string[] = Object.freeze([
  ...IANA_COMMON,
  "sourceIPv6Address",
  "destinationIPv6Address",
  ...IANA_REVERSE,
  ...ANTREA_COMMON,
  "destinationClusterIPv6",
]);

// Order the FA appends after the Agent fields (ipfix.md §5.3 positions 40–63): per-node stats
// interleaved source/destination, the two flowEnd IEs, then throughput triples.
const FA_APPENDED: readonly string[] = [
  ...STATS_FIELDS.flatMap((_, i) => [SOURCE_STATS_FIELDS[i], DESTINATION_STATS_FIELDS[i]]),
  "flowEndSecondsFromSourceNode",
  "flowEndSecondsFromDestinationNode",
  "throughput",
  "throughputFromSourceNode",
  "throughputFromDestinationNode",
  "reverseThroughput",
  "reverseThroughputFromSourceNode",
  "reverseThroughputFromDestinationNode",
];

/** FA export template for IPv4 flows: 63 names (add {@linkcode POD_LABEL_FIELDS} for 65). */
export const AGGREGATED_IPV4_FIELDS: readonly string[] = Object.freeze([
  ...AGENT_IPV4_FIELDS,
  ...FA_APPENDED,
]);

/** FA export template for IPv6 flows: 63 names (add {@linkcode POD_LABEL_FIELDS} for 65). */
export const AGGREGATED_IPV6_FIELDS: readonly string[] = Object.freeze([
  ...AGENT_IPV6_FIELDS,
  ...FA_APPENDED,
]);

/**
 * Field specifiers for registry names, with the registry's default lengths (65535 for
 * variable-length types). Throws on a name the registry does not know.
 */
export function fieldsFor(names: readonly string[]): FieldSpecifier[] {
  return names.map((name) => {
    const ie = byName.get(name);
    if (ie === undefined) throw new Error(`registry: unknown information element "${name}"`);
    return { id: ie.id, enterprise: ie.enterprise, length: ie.length };
  });
}
