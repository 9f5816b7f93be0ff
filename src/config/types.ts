/**
 * The typed Flow Aggregator configuration (Antrea v1.13 keys, control-plane.md §1.4). Every
 * key is present after {@linkcode parseConfig}: defaults are applied, durations are kept as
 * written (for diffs and logs) next to their parsed millisecond value, and the external
 * collector address is parsed when that sink is enabled.
 *
 * @module
 */

/** The IPFIX collecting-process transport, upper-cased as upstream normalises it. */
export type TransportProtocol = "TLS" | "TCP" | "UDP";

/** Transport to the external collector (`flowCollector.address`). `tls` is our addition. */
export type CollectorProto = "tcp" | "udp" | "tls";

/** A parsed `flowCollector.address`. */
export interface CollectorAddress {
  /** Host as written (IPv6 without brackets). Not resolved. */
  host: string;
  /** Port, 1..65535. */
  port: number;
  /** Transport. */
  proto: CollectorProto;
  /** `host:port` with IPv6-aware bracketing, ready to dial (`[::1]:4739`). */
  hostPort: string;
}

/** `recordContents` section. */
export interface RecordContentsConfig {
  /** Add `sourcePodLabels` / `destinationPodLabels` to aggregated records. Restart-only. */
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

/** `flowCollector` section: the external IPFIX/JSON collector sink. */
export interface FlowCollectorConfig {
  /** Sink enabled. */
  enable: boolean;
  /** `host[:port][:proto]` as written. */
  address: string;
  /** Parsed address; present only when `enable` is true (it is validated only then). */
  collector?: CollectorAddress;
  /** Explicit Observation Domain ID; absent ⇒ derived from the cluster UUID. */
  observationDomainID?: number;
  /** `IPFIX` or `JSON` (validated only when enabled). */
  recordFormat: string;
}

/** `clickHouse.tls` subsection. */
export interface ClickHouseTlsConfig {
  /** Skip server certificate verification. */
  insecureSkipVerify: boolean;
  /** Read a custom CA from `/etc/flow-aggregator/certs/ca.crt`. */
  caCert: boolean;
}

/** `clickHouse` section. */
export interface ClickHouseConfig {
  /** Sink enabled. */
  enable: boolean;
  /** Database name. */
  database: string;
  /** `<scheme>://<host>:<port>`; validated by the exporter when it connects. */
  databaseURL: string;
  /** Driver debug logging. */
  debug: boolean;
  /** LZ4 on the wire. */
  compress: boolean;
  /** Commit interval as written (Go duration). */
  commitInterval: string;
  /**
   * Parsed commit interval in ms. Validated (≥ 1 s) only when enabled; when the section is
   * disabled and the text does not parse, this holds the default (8000) so it is always usable.
   */
  commitIntervalMs: number;
  /** TLS options. */
  tls: ClickHouseTlsConfig;
}

/** `s3Uploader` section. */
export interface S3UploaderConfig {
  /** Sink enabled. */
  enable: boolean;
  /** Bucket (required when enabled). */
  bucketName: string;
  /** Object key prefix. */
  bucketPrefix: string;
  /** Region hint; "" = `AWS_REGION`, then `us-west-2` (resolved by the exporter). */
  region: string;
  /** Only `CSV` (validated only when enabled). */
  recordFormat: string;
  /** gzip objects. */
  compress: boolean;
  /** Records per object. */
  maxRecordsPerFile: number;
  /** Upload interval as written (Go duration). */
  uploadInterval: string;
  /** Parsed upload interval in ms (default 60000 when disabled and unparsable). */
  uploadIntervalMs: number;
}

/** One `flowLogger.filters[]` entry; action names are kept as written (unknown never match). */
export interface FlowLoggerFilter {
  /** `None`/`Allow`/`Drop`/`Reject`; empty = any. */
  ingressNetworkPolicyRuleActions: string[];
  /** `None`/`Allow`/`Drop`/`Reject`; empty = any. */
  egressNetworkPolicyRuleActions: string[];
}

/** `flowLogger` section: the local flow log file. */
export interface FlowLoggerConfig {
  /** Sink enabled. */
  enable: boolean;
  /** File path; `-` or `/dev/stdout` writes to standard output (no rotation). */
  path: string;
  /** Rotate when the file would exceed this many MiB. */
  maxSize: number;
  /** Rotated files kept; 0 = keep all (presence-aware, unlike upstream where 0 became 3). */
  maxBackups: number;
  /** Days to keep rotated files; 0 = no age-based removal. */
  maxAge: number;
  /** gzip rotated files. */
  compress: boolean;
  /** Only `CSV` (validated only when enabled). */
  recordFormat: string;
  /** OR of filters; empty = log everything. */
  filters: FlowLoggerFilter[];
  /** Human-readable protocol / rule action / policy type. */
  prettyPrint: boolean;
}

/** The whole configuration file, defaults applied. */
export interface FlowAggregatorConfig {
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
  /** Optional record contents. */
  recordContents: RecordContentsConfig;
  /** API server. */
  apiServer: ApiServerConfig;
  /** External collector sink. */
  flowCollector: FlowCollectorConfig;
  /** ClickHouse sink. */
  clickHouse: ClickHouseConfig;
  /** S3 sink. */
  s3Uploader: S3UploaderConfig;
  /** Flow log sink. */
  flowLogger: FlowLoggerConfig;
}
