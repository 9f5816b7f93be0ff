/**
 * The `flowCollector` section, owned by the IPFIX exporter: its types, defaults, validation
 * (upstream texts) and reload rule. The address is parsed once here; the exporter dials the
 * parsed form.
 *
 * @module
 */

import {
  checkFormat,
  durationOrDefault,
  durationOrThrow,
  fail,
  minOneSecond,
  type Raw,
  str,
} from "../../config/schema.ts";
import type { ConfigSection } from "../../config/section.ts";
import { parseCollectorAddress } from "./address.ts";
import { DEFAULT_TEMPLATE_REFRESH_MS } from "./refresh.ts";
import { addressProblem } from "../../permission_entry.ts";

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

/** `flowCollector` section: the external IPFIX/JSON collector sink. */
export interface FlowCollectorConfig {
  /**
   * Sink enabled.
   * @default {false}
   */
  enable: boolean;
  /**
   * `host[:port][:proto]` as written (port 4739 and proto `tcp` when omitted).
   * @default {""}
   */
  address: string;
  /** Parsed address; present only when `enable` is true (it is validated only then). */
  collector?: CollectorAddress;
  /** Explicit Observation Domain ID; absent ⇒ derived from the cluster UUID. */
  observationDomainID?: number;
  /**
   * `IPFIX` or `JSON` (validated only when enabled).
   * @default {"IPFIX"}
   */
  recordFormat: string;
  /**
   * Our addition (TCP/TLS): a session idle this long while holding records not yet proven read
   * by the collector is ended cleanly, and the collector's close proves them `exported`; the
   * next record opens a new session. `0s` never does (records stay `unacknowledged` until the
   * delivery window moves on or the exporter stops). Go duration.
   * @default {"0s"}
   */
  idleSessionTimeout: string;
  /** {@linkcode FlowCollectorConfig.idleSessionTimeout} in milliseconds. */
  idleSessionTimeoutMs: number;
  /**
   * Our addition to v1.13, under newer Antrea's name (whose default is 600 s): over UDP both
   * templates are sent again this often, so a collector that starts after us or restarts
   * decodes records again within this time. At least 1 s; ignored over TCP/TLS (templates go
   * once per connection) and for JSON. Go duration.
   * @default {"60s"}
   */
  templateRefreshTimeout: string;
  /** {@linkcode FlowCollectorConfig.templateRefreshTimeout} in milliseconds. */
  templateRefreshTimeoutMs: number;
}

/** Defaults of the section (Antrea v1.13 `default.go`). */
export const FLOW_COLLECTOR_DEFAULTS = {
  enable: false,
  recordFormat: "IPFIX",
  idleSessionTimeout: "0s",
  templateRefreshTimeout: `${DEFAULT_TEMPLATE_REFRESH_MS / 1000}s`,
} as const;

/** The `flowCollector` configuration section. */
export const flowCollectorSection: ConfigSection<"flowCollector", FlowCollectorConfig> = {
  key: "flowCollector",
  schema: {
    enable: "bool",
    address: "str",
    observationDomainID: "u32",
    recordFormat: "str",
    idleSessionTimeout: "str",
    templateRefreshTimeout: "str",
  },
  build(raw: Raw): FlowCollectorConfig {
    const idle = str(raw, "idleSessionTimeout", FLOW_COLLECTOR_DEFAULTS.idleSessionTimeout);
    const refresh = str(
      raw,
      "templateRefreshTimeout",
      FLOW_COLLECTOR_DEFAULTS.templateRefreshTimeout,
    );
    const c: FlowCollectorConfig = {
      enable: raw.enable === true,
      address: str(raw, "address"),
      recordFormat: str(raw, "recordFormat", FLOW_COLLECTOR_DEFAULTS.recordFormat),
      idleSessionTimeout: idle,
      idleSessionTimeoutMs: durationOrDefault(idle, FLOW_COLLECTOR_DEFAULTS.idleSessionTimeout),
      templateRefreshTimeout: refresh,
      templateRefreshTimeoutMs: durationOrDefault(
        refresh,
        FLOW_COLLECTOR_DEFAULTS.templateRefreshTimeout,
      ),
    };
    if (typeof raw.observationDomainID === "number") {
      c.observationDomainID = raw.observationDomainID;
    }
    return c;
  },
  required(c): void {
    if (c.enable && c.address === "") {
      fail("flowCollector.address", "external flow collector enabled without providing address");
    }
  },
  validate(c): void {
    if (!c.enable) return;
    try {
      c.collector = parseCollectorAddress(c.address);
    } catch (e) {
      fail("flowCollector.address", `${JSON.stringify(c.address)}: ${(e as Error).message}`);
    }
    const problem = addressProblem(c.collector.hostPort);
    if (problem !== undefined) {
      fail("flowCollector.address", `${JSON.stringify(c.address)}: ${problem}`);
    }
    checkFormat("flowCollector.recordFormat", c.recordFormat, ["IPFIX", "JSON"]);
    c.idleSessionTimeoutMs = durationOrThrow(
      "flowCollector.idleSessionTimeout",
      c.idleSessionTimeout,
    );
    // `0s` is the documented "never"; a negative value is a typo, not a second way to say it.
    if (c.idleSessionTimeoutMs < 0) {
      fail(
        "flowCollector.idleSessionTimeout",
        `${JSON.stringify(c.idleSessionTimeout)}: must not be negative (0s: never)`,
      );
    }
    // Below a second the refresh would precede nearly every datagram; 0 would never re-send,
    // which is what left a collector started after us without templates for 30 minutes.
    c.templateRefreshTimeoutMs = minOneSecond(
      "flowCollector.templateRefreshTimeout",
      "templateRefreshTimeout",
      c.templateRefreshTimeout,
    );
  },
  // Every key rebuilds the exporter (new connection, new templates); the templates carry the
  // Pod label fields or not, so the labels switch rebuilds it too.
  reload: { live: [], dependsOn: ["recordContents.podLabels", "clusterID"] },
};
