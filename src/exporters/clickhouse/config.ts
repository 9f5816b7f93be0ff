/**
 * The `clickHouse` section, owned by the ClickHouse exporter component: types, defaults,
 * validation (upstream texts) and reload rule (exporters.md §3.1).
 *
 * @module
 */

import {
  bool,
  durationOrDefault,
  fail,
  minOneSecond,
  type Raw,
  str,
  sub,
} from "../../config/schema.ts";
import type { BuildContext, ConfigSection } from "../../config/section.ts";
import {
  buildSpoolConfig,
  SPOOL_SCHEMA,
  type SpoolConfig,
  validateSpoolConfig,
} from "../spool_config.ts";
import { addressProblem } from "../../permission_entry.ts";
import { parseDatabaseUrl } from "./url.ts";

/** Where the custom ClickHouse CA is mounted (upstream path). */
export const CLICKHOUSE_CA_PATH = "/etc/flow-aggregator/certs/ca.crt";

/** `clickHouse.tls` subsection. */
export interface ClickHouseTlsConfig {
  /**
   * Skip server certificate verification.
   * @default {false}
   */
  insecureSkipVerify: boolean;
  /**
   * Read a custom CA from `/etc/flow-aggregator/certs/ca.crt`.
   * @default {false}
   */
  caCert: boolean;
}

/**
 * `clickHouse.spool` subsection (ours, not upstream): where batches wait on disk while
 * ClickHouse is slow or down, and across restarts. Shared with the S3 sink
 * (`../spool_config.ts`); the directory defaults to `$TMPDIR/flow-aggregator-spool/clickhouse`.
 */
export type ClickHouseSpoolConfig = SpoolConfig;

/** `clickHouse` section. */
export interface ClickHouseConfig {
  /**
   * Sink enabled.
   * @default {false}
   */
  enable: boolean;
  /**
   * Database name.
   * @default {"default"}
   */
  database: string;
  /**
   * `<scheme>://<host>:<port>`; validated by the exporter when it connects.
   * @default {"tcp://clickhouse-clickhouse.flow-visibility.svc:9000"}
   */
  databaseURL: string;
  /**
   * Driver debug logging.
   * @default {false}
   */
  debug: boolean;
  /**
   * Compress inserts.
   * @default {true}
   */
  compress: boolean;
  /**
   * Commit interval as written (Go duration).
   * @default {"8s"}
   */
  commitInterval: string;
  /**
   * Parsed commit interval in ms. Validated (≥ 1 s) only when enabled; when the section is
   * disabled and the text does not parse, this holds the default (8000) so it is always usable.
   */
  commitIntervalMs: number;
  /** TLS options. */
  tls: ClickHouseTlsConfig;
  /** The durable spool. */
  spool: ClickHouseSpoolConfig;
}

/** Defaults of the section (Antrea v1.13 `default.go`). */
export const CLICKHOUSE_DEFAULTS = {
  database: "default",
  databaseURL: "tcp://clickhouse-clickhouse.flow-visibility.svc:9000",
  commitInterval: "8s",
  compress: true,
} as const;

/** The `clickHouse` configuration section. */
export const clickHouseSection: ConfigSection<"clickHouse", ClickHouseConfig> = {
  key: "clickHouse",
  schema: {
    enable: "bool",
    database: "str",
    databaseURL: "str",
    debug: "bool",
    compress: "bool",
    commitInterval: "str",
    tls: { insecureSkipVerify: "bool", caCert: "bool" },
    spool: SPOOL_SCHEMA,
  },
  build(raw: Raw, ctx: BuildContext): ClickHouseConfig {
    const tls = sub(raw, "tls");
    const commitInterval = str(raw, "commitInterval", CLICKHOUSE_DEFAULTS.commitInterval);
    return {
      enable: bool(raw, "enable", false),
      database: str(raw, "database", CLICKHOUSE_DEFAULTS.database),
      databaseURL: str(raw, "databaseURL", CLICKHOUSE_DEFAULTS.databaseURL),
      debug: bool(raw, "debug", false),
      compress: bool(raw, "compress", CLICKHOUSE_DEFAULTS.compress),
      commitInterval,
      commitIntervalMs: durationOrDefault(commitInterval, CLICKHOUSE_DEFAULTS.commitInterval),
      tls: {
        insecureSkipVerify: bool(tls, "insecureSkipVerify", false),
        caCert: bool(tls, "caCert", false),
      },
      spool: buildSpoolConfig(raw, ctx, "clickhouse"),
    };
  },
  validate(c): void {
    if (!c.enable) return;
    c.commitIntervalMs = minOneSecond(
      "clickHouse.commitInterval",
      "commitInterval",
      c.commitInterval,
    );
    validateSpoolConfig("clickHouse", c.spool);
    // A URL that does not parse is reported by the sink as upstream's; a host it parses to must
    // be one the process can be granted (a comma would grant other hosts, `*` every host).
    let hostPort: string | undefined;
    try {
      hostPort = parseDatabaseUrl(c.databaseURL).httpHostPort;
    } catch {
      hostPort = undefined;
    }
    const problem = hostPort === undefined ? undefined : addressProblem(hostPort);
    if (problem !== undefined) {
      fail("clickHouse.databaseURL", `${JSON.stringify(c.databaseURL)}: ${problem}`);
    }
  },
  // The URL and the CA change the worker's permissions and the spool its files: those rebuild
  // the sink (the old one hands its queue to the spool, the new one replays it). The rest is
  // applied in place: a changed connection setting replaces the client, the interval the timer.
  reload: {
    live: ["commitInterval", "database", "debug", "compress", "tls.insecureSkipVerify"],
    // The clusterUUID column.
    dependsOn: ["clusterID"],
  },
};
