/**
 * A stand-in for the aggregation core, for exporter tests and benchmarks: turns one decoded
 * Agent record into an aggregated flow with all 65 export IEs set to distinct values derived
 * from the record, so a field swapped, dropped or truncated on the way out is detectable.
 */

import type { AggregatedRecord, ExportedFlow, FlowInput } from "../aggregation/record.ts";
import type { DataRecord } from "../ipfix/types.ts";

/** Builds the aggregated flow for Agent record `r`; `seq` varies the Pod labels. */
export function syntheticAggregate(r: DataRecord, seq: number): ExportedFlow {
  const g = r as unknown as FlowInput & Record<string, unknown>;
  const ipv6 = g.sourceIPv6Address !== undefined;
  const big = (n: string) => (g[n] as bigint) ?? 0n;
  const rec = { ...g } as unknown as AggregatedRecord & Record<string, unknown>;
  let k = 1n;
  for (const n of ["octetDelta", "octetTotal", "packetDelta", "packetTotal"]) {
    for (const rev of [false, true]) {
      const base = rev ? `reverse${n[0].toUpperCase()}${n.slice(1)}Count` : `${n}Count`;
      rec[`${base}FromSourceNode`] = big(base) + k++;
      rec[`${base}FromDestinationNode`] = big(base) + (1n << 60n) + k++;
    }
  }
  rec.flowEndSecondsFromSourceNode = (g.flowEndSeconds ?? 0) + 1;
  rec.flowEndSecondsFromDestinationNode = (g.flowEndSeconds ?? 0) + 2;
  rec.throughput = big("octetDeltaCount") * 8n / 5n;
  rec.throughputFromSourceNode = rec.throughput + 1n;
  rec.throughputFromDestinationNode = rec.throughput + 2n;
  rec.reverseThroughput = big("reverseOctetDeltaCount") * 8n / 5n;
  rec.reverseThroughputFromSourceNode = rec.reverseThroughput + 1n;
  rec.reverseThroughputFromDestinationNode = rec.reverseThroughput + 2n;
  rec.sourcePodLabels = `{"app":"src-${seq}","tier":"é"}`; // non-ASCII must survive (UTF-8)
  rec.destinationPodLabels = `{"app":"dst-${seq}"}`;
  return {
    key: {
      sourceAddress: String(g.sourceIPv4Address ?? g.sourceIPv6Address),
      destinationAddress: String(g.destinationIPv4Address ?? g.destinationIPv6Address),
      protocol: g.protocolIdentifier!,
      sourcePort: g.sourceTransportPort!,
      destinationPort: g.destinationTransportPort!,
    },
    record: rec,
    isIPv6: ipv6,
    uncorrelated: false,
  };
}
