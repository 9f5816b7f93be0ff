/**
 * The API (control-plane.md §5): HTTPS on `apiServer.apiPort` with the loopback bearer token,
 * upstream's endpoints plus Prometheus `/metrics`, and the in-binary CLI that talks to it.
 *
 * @module
 */

import { type FlowAggregator, type FlowAggregatorStats, ledgerStages } from "../flow_aggregator.ts";
import { LiveHub, LiveView } from "./live.ts";
import { type ApiServer, startApiServer } from "./server.ts";
import type { LimitsConfig } from "../config/limits.ts";

export { apiHandler, type ApiSource, DEFAULT_RECORD_LIMIT } from "./handler.ts";
export { recordsJson } from "../aggregation/records_json.ts";
export { type ApiServer, caFileOf, DEFAULT_TOKEN_FILE, startApiServer } from "./server.ts";
export { prometheusText } from "./prometheus.ts";
export { LiveHub, LiveView } from "./live.ts";
export { runCli } from "./cli.ts";

/** The loss ledger as the live view shows it. */
export function ledgerOf(s: FlowAggregatorStats): Record<string, number> {
  const { received, aggregated, rejected, nonFlow, options, inFlight } = ledgerStages(s);
  const out: Record<string, number> = {
    received,
    aggregated,
    rejected,
    nonFlow,
    options,
    inFlight,
    exported: s.numRecordsExported,
    flowsHeld: s.numFlows,
  };
  for (const [section, e] of Object.entries(s.exporters)) out[`${section}.dropped`] = e.dropped;
  return out;
}

/** Where the API listens: `host:port` (`--api-listen`), else `[::]:<apiServer.apiPort>`. */
export function apiAddress(listen: string | undefined, apiPort: number): string {
  return listen ?? `[::]:${apiPort}`;
}

function splitAddress(address: string): { hostname: string; port: number } {
  const m = /^\[?([^\]]*)\]?:(\d+)$/.exec(address);
  if (m === null) throw new Error(`API address ${JSON.stringify(address)}: want host:port`);
  return { hostname: m[1] === "" ? "::" : m[1], port: Number(m[2]) };
}

/** Starts the API over a running aggregator. */
export function startApi(
  fa: FlowAggregator,
  opts: {
    address: string;
    tokenFile: string;
    version: string;
    tlsCipherSuites?: string;
    tlsMinVersion?: string;
    /** The `limits:` section in force at start. */
    limits: LimitsConfig;
  },
): Promise<ApiServer> {
  const { hostname, port } = splitAddress(opts.address);
  const view = new LiveView();
  fa.exportObserver = view;
  const live = new LiveHub(view, () => ledgerOf(fa.stats()));
  const l = opts.limits;
  const started = startApiServer({
    records: (filter, limit) => fa.recordsJson(filter, limit),
    stats: () => fa.stats(),
    ready: () => fa.collectorPort > 0,
    live,
  }, {
    // [::] falls back to 0.0.0.0 where IPv6 is off; an explicit address is used as given.
    hostname: hostname === "::" ? undefined : hostname,
    port,
    tokenFile: opts.tokenFile,
    version: opts.version,
    tlsCipherSuites: opts.tlsCipherSuites,
    tlsMinVersion: opts.tlsMinVersion,
    limits: {
      maxConnections: l.maxApiConnections,
      maxConnectionsPerAddress: l.maxApiConnectionsPerAddress,
      requestTimeoutMs: l.apiRequestTimeoutMs,
      idleTimeoutMs: l.apiIdleTimeoutMs,
    },
  });
  return started.then((server) => {
    fa.apiStats = () => server.stats();
    return server;
  });
}
