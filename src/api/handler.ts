/**
 * The API's routes (control-plane.md §5.3–5.7), as a plain `Request → Response` function over
 * what the process exposes ({@linkcode ApiSource}), so they are tested without a socket:
 * `/flowrecords`, `/recordmetrics`, `/loglevel`, `/version`, `/metrics` (bearer token), and the
 * anonymous `/healthz`, `/livez`, `/readyz`. Errors are Kubernetes `Status` JSON as upstream;
 * the token never appears in a response or a log.
 *
 * @module
 */

import { PLATFORM } from "../platform.ts";
import type { FlowKey } from "../aggregation/record.ts";
import { type FlowAggregatorStats, rejectedTotal } from "../flow_aggregator.ts";
import { logger, logVerbosity, setVerbosity } from "../log.ts";
import type { LiveHub } from "./live.ts";
import { prometheusText } from "./prometheus.ts";
import { UI_HTML } from "./ui_page.ts";
import { HEALTH_PATHS } from "./front.ts";

const log = logger("api");

/** What the routes read from the running process. */
export interface ApiSource {
  /**
   * The `/flowrecords` body (`records_json.ts`) of the held records matching `filter` (canonical
   * address text), at most `limit`; a promise when the flows are held by shard workers.
   */
  records(filter: Partial<FlowKey>, limit: number): string | Promise<string>;
  /** Every counter. */
  stats(): FlowAggregatorStats;
  /** True once the collector listens and no sink is in a fatal state. */
  ready(): boolean;
  /** The live view's event streams (`/ui/events`); absent: no live view. */
  live?: LiveHub;
}

/** Options of {@linkcode apiHandler}. */
export interface ApiHandlerOptions {
  /** The loopback bearer token (required on every path but the health checks). */
  token: string;
  /** Product version (`0.1.0`). */
  version: string;
  /** Default and maximum of `/flowrecords?limit=`; default {@linkcode DEFAULT_RECORD_LIMIT}. */
  recordLimit?: number;
  /** Called for each request refused because a cap was reached (the front counts them). */
  onBusy?: (reason: "queries" | "liveViews") => void;
  /** Called for each live view dropped because its page did not read (the front counts them). */
  onLiveViewDropped?: () => void;
}

/**
 * `/flowrecords` queries answered by the shards (asynchronous) at once; more are refused (503):
 * each gathers up to `limit` records from every shard.
 */
export const MAX_QUERIES_IN_FLIGHT = 2;

/**
 * Records `/flowrecords` returns at most (`?limit=` lowers it): a query over a million flows
 * would otherwise build a response of a gigabyte and stall ingest while it is serialised.
 */
export const DEFAULT_RECORD_LIMIT = 10_000;

function status(code: number, reason: string, message: string): Response {
  const body = {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message,
    reason,
    code,
  };
  return new Response(JSON.stringify(body) + "\n", {
    status: code,
    headers: { "content-type": "application/json" },
  });
}

function text(code: number, body: string): Response {
  return new Response(body, { status: code, headers: { "content-type": "text/plain" } });
}

function json(body: string, headers: Record<string, string> = {}): Response {
  return new Response(body + "\n", {
    headers: { "content-type": "application/json", ...headers },
  });
}

/**
 * The header of a `/flowrecords` answer naming the most records it could hold (the query's
 * `limit`, at most the cap): an answer of that many may have left records out (the CLI says so).
 */
export const RECORD_LIMIT_HEADER = "x-flow-records-limit";

/**
 * Constant-time comparison of the presented token with ours. The scheme's case is free, as the
 * Kubernetes API server's (`bearer x` was refused).
 */
function tokenMatches(header: string | null, token: string): boolean {
  if (header === null || header.slice(0, 7).toLowerCase() !== "bearer ") return false;
  const got = new TextEncoder().encode(header.slice(7).trim());
  const want = new TextEncoder().encode(token);
  let diff = got.length ^ want.length;
  for (let i = 0; i < want.length; i++) diff |= want[i] ^ (got[i] ?? 0);
  return diff === 0;
}

/** Go `strconv.ParseUint(s, 10, bits)` as upstream reports it; undefined when `s` is fine. */
function parseUint(s: string, bits: 8 | 16): { value: number } | { error: string } {
  if (!/^[0-9]+$/.test(s)) {
    return { error: `strconv.ParseUint: parsing ${JSON.stringify(s)}: invalid syntax` };
  }
  const v = Number(s);
  if (v >= 2 ** bits) {
    return { error: `strconv.ParseUint: parsing ${JSON.stringify(s)}: value out of range` };
  }
  return { value: v };
}

function flowRecords(
  url: URL,
  source: ApiSource,
  maxLimit: number,
): Response | Promise<Response> {
  const p = url.searchParams;
  const filter: { -readonly [K in keyof FlowKey]?: FlowKey[K] } = {};
  const src = p.get("srcip") ?? "";
  const dst = p.get("dstip") ?? "";
  if (src !== "") filter.sourceAddress = src;
  if (dst !== "") filter.destinationAddress = dst;
  const numeric: [string, "protocol" | "sourcePort" | "destinationPort", 8 | 16, string][] = [
    ["proto", "protocol", 8, "protocol"],
    ["srcport", "sourcePort", 16, "source port"],
    ["dstport", "destinationPort", 16, "destination port"],
  ];
  for (const [param, key, bits, what] of numeric) {
    const v = p.get(param) ?? "";
    if (v === "") continue;
    const r = parseUint(v, bits);
    // Upstream answers 404 (sic) with this text; we answer 400, keeping the message.
    if ("error" in r) return text(400, `Error when parsing ${what}: ${r.error}`);
    if (r.value !== 0) filter[key] = r.value;
  }
  let limit = maxLimit;
  const l = p.get("limit");
  if (l !== null && l !== "") {
    // Decimal digits only (as the ports): Number() would also take "0x2", "2e0", " 2".
    const n = /^\d+$/.test(l) ? Number(l) : NaN;
    if (!Number.isInteger(n) || n < 1) return text(400, `limit must be a positive integer`);
    limit = Math.min(n, maxLimit);
  }
  const got = source.records(filter, limit);
  const headers = { [RECORD_LIMIT_HEADER]: String(limit) };
  return got instanceof Promise ? got.then((b) => json(b, headers)) : json(got, headers);
}

/**
 * `/recordmetrics`: upstream's four counters, newer Antrea's dropped count and sink flags,
 * each omitted when zero or false, as upstream's `omitempty`.
 */
export function recordMetricsJson(s: FlowAggregatorStats): string {
  const sinkDropped = Object.values(s.exporters).reduce((n, e) => n + e.dropped, 0);
  const with_ = (section: string) => s.exporters[section] !== undefined;
  const all: Record<string, number | boolean> = {
    numRecordsExported: s.numRecordsExported,
    numRecordsReceived: s.numRecordsReceived,
    numFlows: s.numFlows,
    numConnToCollector: s.numConnToCollector,
    numRecordsDropped: rejectedTotal(s) + s.nonFlowRecords + sinkDropped,
    withClickHouseExporter: with_("clickHouse"),
    withS3Exporter: with_("s3Uploader"),
    withLogExporter: with_("flowLogger"),
    withIPFIXExporter: with_("flowCollector"),
  };
  const out: Record<string, number | boolean> = {};
  for (const [k, v] of Object.entries(all)) if (v !== 0 && v !== false) out[k] = v;
  return JSON.stringify(out);
}

/** Largest `/loglevel?level=` (klog's verbosity is an int32). */
const MAX_VERBOSITY = 2 ** 31 - 1;

function logLevel(url: URL): Response {
  const current = logVerbosity();
  const level = url.searchParams.get("level");
  if (level === null || level === "") return json(String(current));
  const next = /^[0-9]+$/.test(level) ? Number(level) : NaN;
  if (!(next <= MAX_VERBOSITY)) return text(400, "log level must be a positive integer");
  if (next !== current) {
    // The number set is what is read back (was 4 for any level above 0).
    setVerbosity(next);
    log.info("Changed log level", { from: current, to: next });
  }
  return new Response(null, { status: 200 });
}

function version(v: string): Response {
  const [major = "", minor = ""] = v.split(".");
  return json(JSON.stringify({
    major,
    minor,
    gitVersion: v,
    gitCommit: "",
    gitTreeState: "",
    buildDate: "",
    goVersion: "",
    compiler: "deno",
    platform: PLATFORM,
  }));
}

/** The API as one request handler. */
export function apiHandler(
  source: ApiSource,
  options: ApiHandlerOptions,
): (req: Request) => Response | Promise<Response> {
  const maxLimit = options.recordLimit ?? DEFAULT_RECORD_LIMIT;
  let queries = 0;
  return (req: Request): Response | Promise<Response> => {
    const url = new URL(req.url);
    const path = url.pathname;
    // The page holds no data (the token stays in the URL fragment): its data needs the token.
    if (path === "/ui" && source.live !== undefined) {
      return new Response(UI_HTML, {
        headers: {
          "content-type": "text/html; charset=utf-8",
          "content-security-policy":
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
        },
      });
    }
    // Anyone may read the health checks (upstream's always-allowed paths).
    if (HEALTH_PATHS.has(path)) {
      if (path === "/readyz" && !source.ready()) return text(503, "not ready\n");
      return text(200, "ok");
    }
    if (!tokenMatches(req.headers.get("authorization"), options.token)) {
      return req.headers.has("authorization")
        ? status(401, "Unauthorized", "Unauthorized")
        : status(
          403,
          "Forbidden",
          `forbidden: User "system:anonymous" cannot get path "${path}"`,
        );
    }
    switch (path) {
      case "/flowrecords": {
        if (queries >= MAX_QUERIES_IN_FLIGHT) {
          options.onBusy?.("queries");
          return status(503, "ServiceUnavailable", "too many flow record queries in progress");
        }
        const answer = flowRecords(url, source, maxLimit);
        if (!(answer instanceof Promise)) return answer;
        queries++;
        return answer.finally(() => queries--);
      }
      case "/recordmetrics":
        return json(recordMetricsJson(source.stats()));
      case "/loglevel":
        return logLevel(url);
      case "/version":
        return version(options.version);
      case "/ui/events": {
        const stream = source.live?.open(() => options.onLiveViewDropped?.());
        if (stream === undefined) {
          options.onBusy?.("liveViews");
          return status(429, "TooManyRequests", "too many live views are open");
        }
        return new Response(stream, {
          headers: { "content-type": "text/event-stream", "cache-control": "no-store" },
        });
      }
      case "/metrics":
        return new Response(prometheusText(source.stats()), {
          headers: { "content-type": "text/plain; version=0.0.4" },
        });
      default:
        return status(404, "NotFound", `the server could not find the requested resource`);
    }
  };
}
