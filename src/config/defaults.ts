/**
 * Default values of the global configuration keys (Antrea v1.13 `default.go`,
 * control-plane.md §1.4; each exporter section's defaults live in its component) and the
 * configuration used by `deno task start` when no file is given.
 */

/** Default values applied to unset global keys. */
export const DEFAULTS = {
  activeFlowRecordTimeout: "60s",
  inactiveFlowRecordTimeout: "90s",
  aggregatorTransportProtocol: "TLS",
  apiPort: 10348,
} as const;

/**
 * The configuration `deno task start` runs with when no `--config` is given: upstream defaults
 * except for two choices that let a first run work on a laptop with no Kubernetes and no
 * certificates.
 */
export const EMBEDDED_DEFAULT_CONFIG: string =
  `# flow-aggregator embedded default configuration (used when no --config file is given).
activeFlowRecordTimeout: 60s
inactiveFlowRecordTimeout: 90s
# Upstream defaults to TLS, whose CA and certificates are published to Kubernetes for the
# Agents to fetch. Standalone there is nobody to fetch them, so a first run uses plain TCP and
# needs no certificates. Set TLS when running next to Antrea Agents.
aggregatorTransportProtocol: TCP
flowCollector:
  enable: false
clickHouse:
  enable: false
s3Uploader:
  enable: false
flowLogger:
  # Upstream would fail validation here (no sink enabled). The flow log is the one sink that
  # needs no external service, so it is on, writing next to where the process was started
  # (./flows.log) rather than into the temp dir, where a first-time user would not look.
  enable: true
  path: ./flows.log
  maxSize: 100
  maxBackups: 3
  compress: true
  prettyPrint: true
`;
