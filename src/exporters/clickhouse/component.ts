/**
 * The ClickHouse exporter component (exporters.md §3): the `clickHouse` section, the sink's
 * permissions, its factory and its worker entry.
 *
 * Permissions: `net` to the database URL's host and HTTP port (the native `tcp://h:9000` of
 * Theia installs maps to `http://h:8123`, `tls://h:9440` to `https://h:8443`), `env`
 * `CH_USERNAME` and `CH_PASSWORD`, `read` and `write` of the spool directory, `read` of the
 * custom CA when `tls.caCert` is set.
 *
 * The sink itself (`exporter.ts`) is imported by `create`, so a process or worker without
 * the ClickHouse sink never loads it; the registry (src/components.ts) imports this file, not `mod.ts`.
 *
 * @module
 */

import { type ExporterComponent, HTTPS_CLIENT_PERMISSIONS } from "../component.ts";
import { CLICKHOUSE_CA_PATH, type ClickHouseConfig, clickHouseSection } from "./config.ts";
import { parseDatabaseUrl } from "./url.ts";
import { workerModule } from "../../worker_module.ts";
import { spoolPermissionPaths } from "../spool_config.ts";

/** The `host:port` the HTTP client reaches for a `databaseURL` (native ports mapped). */
export function clickHouseHttpHostPort(databaseURL: string): string {
  try {
    return parseDatabaseUrl(databaseURL).httpHostPort;
  } catch {
    return "";
  }
}

/** Whether the sink speaks HTTPS (`https://` or `tls://`); false for a URL that does not parse. */
function clickHouseIsHttps(databaseURL: string): boolean {
  try {
    return parseDatabaseUrl(databaseURL).secure;
  } catch {
    return false;
  }
}

/** The ClickHouse exporter component. */
export const clickHouseComponent: ExporterComponent<"clickHouse", ClickHouseConfig> = {
  name: "clickhouse",
  section: clickHouseSection,
  permissions(config) {
    const hostPort = clickHouseHttpHostPort(config.databaseURL);
    const spool = spoolPermissionPaths(config.spool);
    const https = clickHouseIsHttps(config.databaseURL);
    return {
      net: hostPort === "" ? [] : [hostPort],
      read: config.tls.caCert ? [...spool, CLICKHOUSE_CA_PATH] : spool,
      write: spool,
      env: ["CH_USERNAME", "CH_PASSWORD", ...(https ? HTTPS_CLIENT_PERMISSIONS.env : [])],
      ...(https ? { sys: HTTPS_CLIENT_PERMISSIONS.sys } : {}),
    };
  },
  async create(config, ctx) {
    const { ClickHouseExporter } = await import("./exporter.ts");
    return new ClickHouseExporter(config, ctx.clusterUuid);
  },
  workerModule: workerModule("clickhouse"),
};
