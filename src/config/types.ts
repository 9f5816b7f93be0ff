/**
 * The typed Flow Aggregator configuration (Antrea v1.13 keys, control-plane.md §1.4). Every
 * key is present after parsing: defaults are applied, and durations are kept as written (for
 * diffs and logs) next to their parsed millisecond value.
 *
 * @module
 */

import type { LimitsConfig } from "./limits.ts";

/** The IPFIX collecting-process transport, upper-cased as upstream normalises it. */
export type TransportProtocol = "TLS" | "TCP" | "UDP";

/** `recordContents` section. */
export interface RecordContentsConfig {
  /** Add `sourcePodLabels` / `destinationPodLabels` to aggregated records (applied live). */
  podLabels: boolean;
}

/** `apiServer` section (all restart-only). */
export interface ApiServerConfig {
  /** HTTPS port (0 in the file means the default 10348). */
  apiPort: number;
  /** Comma-separated IANA cipher-suite names; "" = TLS library defaults. */
  tlsCipherSuites: string;
  /** `VersionTLS10`..`VersionTLS13`; "" = TLS 1.2. */
  tlsMinVersion: string;
}

/**
 * The keys the config layer owns itself, defaults applied; the exporter sections are owned by
 * their components and assembled next to these (`src/components.ts`).
 */
export interface GlobalConfig {
  /** Export period of an active flow, as written. */
  activeFlowRecordTimeout: string;
  /** Parsed active timeout in ms (> 0). */
  activeFlowRecordTimeoutMs: number;
  /** Idle timeout of a flow, as written. */
  inactiveFlowRecordTimeout: string;
  /** Parsed inactive timeout in ms (> 0). */
  inactiveFlowRecordTimeoutMs: number;
  /** Collecting-process transport (normalised to upper case). */
  aggregatorTransportProtocol: TransportProtocol;
  /** Extra SAN for the collector server certificate. */
  flowAggregatorAddress: string;
  /**
   * Cluster UUID to use instead of the discovered one (newer Antrea's key; `""`: discover it,
   * see `src/k8s/cluster_uuid.ts`). The sinks that carry the UUID are rebuilt when it changes.
   */
  clusterID: string;
  /** Optional record contents. */
  recordContents: RecordContentsConfig;
  /** API server. */
  apiServer: ApiServerConfig;
  /** Resource bounds of the collecting process and the core (our addition). */
  limits: LimitsConfig;
}
