/**
 * The ClickHouse exporter component (exporters.md §3). This build owns the `clickHouse`
 * section (defaults, validation, reload rule) and the sink's permissions, but has no sink yet:
 * enabling it is reported as an error and records are counted, not sent.
 *
 * Permissions (for the sink): `net` to the database URL's host and HTTP port (the native
 * `tcp://h:9000` of Theia installs maps to `http://h:8123`, `tls://h:9440` to `https://h:8443`),
 * `env` `CH_USERNAME` and `CH_PASSWORD`, `read` of the custom CA when `tls.caCert` is set.
 *
 * @module
 */

import type { ExporterComponent } from "../component.ts";
import { type ClickHouseConfig, clickHouseSection } from "./config.ts";

export * from "./config.ts";

/** Where the custom ClickHouse CA is mounted (upstream path). */
export const CLICKHOUSE_CA_PATH = "/etc/flow-aggregator/certs/ca.crt";

/** The `host:port` the HTTP client reaches for a `databaseURL` (native ports mapped). */
export function clickHouseHttpHostPort(databaseURL: string): string {
  let url: URL;
  try {
    url = new URL(databaseURL);
  } catch {
    return "";
  }
  const secure = url.protocol === "tls:" || url.protocol === "https:";
  const native = url.protocol === "tcp:" || url.protocol === "tls:";
  const port = native || url.port === "" ? (secure ? "8443" : "8123") : url.port;
  return `${url.hostname}:${port}`;
}

/** The ClickHouse exporter component (configuration and permissions only in this build). */
export const clickHouseComponent: ExporterComponent<"clickHouse", ClickHouseConfig> = {
  name: "clickhouse",
  section: clickHouseSection,
  permissions(config) {
    const hostPort = clickHouseHttpHostPort(config.databaseURL);
    return {
      net: hostPort === "" ? [] : [hostPort],
      read: config.tls.caCert ? [CLICKHOUSE_CA_PATH] : [],
      write: [],
      env: ["CH_USERNAME", "CH_PASSWORD"],
    };
  },
};
