/**
 * `clickHouse.databaseURL` (exporters.md §3.1, test table §8.2 C8): parsed with upstream's
 * checks and error texts, and mapped to the HTTP(S) interface that `@clickhouse/client` speaks.
 * The native schemes of every Theia install map to ClickHouse's HTTP ports on the same host:
 * `tcp://h:9000` → `http://h:8123`, `tls://h:9440` → `https://h:8443` (any native port maps to
 * 8123 / 8443); `http` / `https` are used as given (port 8123 / 8443 when absent).
 *
 * @module
 */

/** A parsed database URL. */
export interface DatabaseUrl {
  /** `tcp`, `tls`, `http` or `https`. */
  scheme: "tcp" | "tls" | "http" | "https";
  /** Host as written (IPv6 in brackets). */
  host: string;
  /** Port as written ("" when absent). */
  port: string;
  /** Native protocol (`tcp` / `tls`) in upstream, mapped to HTTP here. */
  native: boolean;
  /** TLS on. */
  secure: boolean;
  /** The HTTP(S) URL the client uses. */
  httpUrl: string;
  /** `host:port` of {@linkcode httpUrl} (the worker's net permission). */
  httpHostPort: string;
}

/** Parses `databaseURL`; throws with upstream's error texts. */
export function parseDatabaseUrl(databaseURL: string): DatabaseUrl {
  let url: URL;
  try {
    url = new URL(databaseURL);
  } catch (err) {
    throw new Error(`failed to parse ClickHouse database URL: ${(err as Error).message}`);
  }
  const path = url.pathname === "/" ? "" : url.pathname;
  if (path !== "" || url.search !== "" || url.username !== "" || url.password !== "") {
    throw new Error(
      `invalid ClickHouse database URL '${databaseURL}': path, query string or user info ` +
        "should not be set",
    );
  }
  const scheme = url.protocol.slice(0, -1);
  if (scheme !== "tcp" && scheme !== "tls" && scheme !== "http" && scheme !== "https") {
    throw new Error(`connection over ${scheme} transport protocol is not supported`);
  }
  const native = scheme === "tcp" || scheme === "tls";
  const secure = scheme === "tls" || scheme === "https";
  const httpPort = native || url.port === "" ? (secure ? "8443" : "8123") : url.port;
  const httpHostPort = `${url.hostname}:${httpPort}`;
  return {
    scheme,
    host: url.hostname,
    port: url.port,
    native,
    secure,
    httpUrl: `${secure ? "https" : "http"}://${httpHostPort}`,
    httpHostPort,
  };
}
