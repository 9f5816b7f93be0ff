/**
 * The `limits:` section (our addition; upstream has no equivalent): every resource an input on
 * port 4739 (or on the API port) can make the process hold has a bound here. Reaching one is
 * counted by reason and logged (rate-limited), never a crash. Each key is declared once in
 * {@linkcode LIMIT_KEYS} (kind, default, reload rule, what it bounds); the decode schema, the
 * typed config, the defaults, the reload rules and the README table are derived from it.
 *
 * @module
 */

import type { MapSchema, Raw } from "./schema.ts";
import { durationOrThrow, fail } from "./schema.ts";
import type { ReloadRule } from "./section.ts";
import { MAX_TABLE_SLOTS } from "../aggregation/flow_table.ts";

/** Declaration of one limit. */
interface LimitKey {
  /** `count`: a positive integer; `bytes`: a positive integer of bytes; `duration`: Go text. */
  readonly kind: "count" | "bytes" | "duration";
  /** The default (a number, or Go duration text). */
  readonly default: number | string;
  /** How a change takes effect on reload. */
  readonly reload: ReloadRule;
  /** The largest value accepted (a count or byte limit), when there is one. */
  readonly max?: number;
  /** What it bounds (README, `--help`). */
  readonly doc: string;
}

/**
 * Every limit, its default and why. Defaults are sized for a 5,000-Node cluster on the default
 * `maxFlows` with a few GiB of memory; the README explains each choice.
 */
export const LIMIT_KEYS = {
  maxFieldsPerTemplate: {
    kind: "count",
    default: 1024,
    reload: "collector",
    doc: "fields in one template (an Antrea Agent's has 60); a wider template is refused and " +
      "its data records counted as dropped",
  },
  maxTemplatesPerSession: {
    kind: "count",
    default: 1024,
    reload: "collector",
    doc: "templates held for one exporter session (an Agent uses 2-4)",
  },
  maxTemplates: {
    kind: "count",
    default: 65_536,
    reload: "collector",
    doc: "templates held in total, over all sessions",
  },
  maxTemplateLayoutFields: {
    kind: "count",
    default: 65_536,
    reload: "collector",
    doc: "fields of the distinct template field lists held, over all sessions, each list " +
      "counting 16 more for its decoder (templates with the same list, as every Agent's, share " +
      "it and count once; about 120 bytes a field); a template with a new list over it is " +
      "refused",
  },
  maxStringBytes: {
    kind: "bytes",
    default: 4096,
    reload: "collector",
    doc: "bytes kept of one variable-length string field; longer values are truncated " +
      "(on a UTF-8 boundary) and counted",
  },
  maxFlows: {
    kind: "count",
    default: 1_000_000,
    reload: "live",
    // An aggregation shard's flow table numbers its slots in 24 bits (flow_table.ts).
    max: MAX_TABLE_SLOTS,
    doc: "flows held by the aggregation core; a record for a new flow over it is dropped and " +
      `counted (at most ${MAX_TABLE_SLOTS.toLocaleString("en-US")})`,
  },
  maxFlowBytes: {
    kind: "bytes",
    default: 1_073_741_824,
    reload: "live",
    doc: "bytes of held flows, strings included; a record for a new flow over it is dropped " +
      "and counted",
  },
  maxConnections: {
    kind: "count",
    default: 4096,
    reload: "collector",
    doc: "open TCP/TLS connections in total; a connection over it is closed at accept and " +
      "counted",
  },
  maxConnectionsPerAddress: {
    kind: "count",
    default: 16,
    reload: "collector",
    doc: "open TCP/TLS connections from one source address (an Agent opens one)",
  },
  maxReadBufferBytes: {
    kind: "bytes",
    default: 67_108_864,
    reload: "collector",
    doc: "bytes of read buffers grown beyond the idle ones, over all TCP/TLS connections (a " +
      "busy connection reads into up to 256 KiB); over it busy connections read in smaller " +
      "pieces, counted, nothing dropped",
  },
  readTimeout: {
    kind: "duration",
    default: "30s",
    reload: "collector",
    doc: "time to receive the rest of a message once its header arrived; the connection is " +
      "closed and counted after it",
  },
  idleTimeout: {
    kind: "duration",
    default: "5m",
    reload: "collector",
    doc: "time a TCP/TLS connection may stay silent (Agents send at least every active " +
      "timeout); closed and counted after it",
  },
  maxTlsHandshakes: {
    kind: "count",
    default: 128,
    reload: "collector",
    doc: "TLS handshakes in progress at once; a connection over it is closed and counted",
  },
  tlsHandshakeTimeout: {
    kind: "duration",
    default: "10s",
    reload: "collector",
    doc: "time a TLS handshake may take; the connection is closed and counted after it",
  },
  maxUdpSessions: {
    kind: "count",
    default: 65_536,
    reload: "collector",
    doc: "UDP exporter sessions (source address and port); the oldest is evicted and counted",
  },
  maxPods: {
    kind: "count",
    default: 200_000,
    reload: "restart",
    doc: "Pods the Pod store holds, deleted ones kept for late records included (the largest " +
      "clusters Kubernetes supports run 150,000); over it the oldest deleted one is forgotten " +
      "early, else a new Pod is not held (its flows get no Pod fields), counted",
  },
  maxPodLabelBytes: {
    kind: "bytes",
    default: 16_384,
    reload: "restart",
    doc: "bytes of one Pod's labels, keys and values (the API server allows 63-byte values); a " +
      "Pod over it is held without its labels, counted",
  },
  maxApiConnections: {
    kind: "count",
    default: 256,
    reload: "restart",
    doc: "connections to the API port at once (antctl, the live view, Prometheus); a " +
      "connection over it is closed at accept and counted",
  },
  maxApiConnectionsPerAddress: {
    kind: "count",
    default: 32,
    reload: "restart",
    doc: "the same, by source address",
  },
  apiRequestTimeout: {
    kind: "duration",
    default: "10s",
    reload: "restart",
    doc: "time an API connection's TLS handshake, or a request's head once begun, may take; " +
      "closed and counted after it",
  },
  apiIdleTimeout: {
    kind: "duration",
    default: "2m",
    reload: "restart",
    doc: "time an API connection may pass no byte either way (a live view gets one every " +
      "second); closed and counted after it",
  },
} as const satisfies Record<string, LimitKey>;

/** A limit's name. */
export type LimitName = keyof typeof LIMIT_KEYS;

type DurationLimit = {
  [K in LimitName]: typeof LIMIT_KEYS[K]["kind"] extends "duration" ? K : never;
}[LimitName];

/**
 * The `limits` section, defaults applied. Counts and bytes are numbers; each duration is kept
 * as written next to its parsed milliseconds (`readTimeout`, `readTimeoutMs`).
 */
export type LimitsConfig =
  & { -readonly [K in Exclude<LimitName, DurationLimit>]: number }
  & { -readonly [K in DurationLimit]: string }
  & { -readonly [K in DurationLimit as `${K}Ms`]: number };

/** Every limit name, in declaration order. */
export const LIMIT_NAMES = Object.keys(LIMIT_KEYS) as LimitName[];

/** Decode schema of the `limits` mapping. */
export const LIMITS_SCHEMA: MapSchema = Object.fromEntries(
  LIMIT_NAMES.map((k) => [k, LIMIT_KEYS[k].kind === "duration" ? "str" : "int"]),
);

/** Reload rules of the `limits.*` keys. */
export const LIMITS_RELOAD: Readonly<Record<string, ReloadRule>> = Object.fromEntries(
  LIMIT_NAMES.map((k) => [`limits.${k}`, LIMIT_KEYS[k].reload]),
);

/**
 * The `limits` section with defaults applied and validated: a count or byte limit must be
 * positive (0 or absent means the default, as for upstream's integer keys), a duration must be
 * positive. Throws a ConfigError naming `limits.<key>`.
 */
export function buildLimits(raw: Raw): LimitsConfig {
  const out: Record<string, number | string> = {};
  for (const k of LIMIT_NAMES) {
    const decl: LimitKey = LIMIT_KEYS[k];
    const path = `limits.${k}`;
    const v = raw[k];
    if (decl.kind === "duration") {
      const text = typeof v === "string" && v !== "" ? v : decl.default as string;
      const ms = durationOrThrow(path, text);
      if (ms <= 0) fail(path, `${JSON.stringify(text)}: must be positive`);
      out[k] = text;
      out[`${k}Ms`] = ms;
    } else {
      const n = typeof v === "number" && v !== 0 ? v : decl.default as number;
      if (n < 0) fail(path, `must be positive, got ${n}`);
      if (decl.max !== undefined && n > decl.max) fail(path, `at most ${decl.max}, got ${n}`);
      out[k] = n;
    }
  }
  return out as LimitsConfig;
}

/** The defaults, as {@linkcode buildLimits} gives them for an absent section. */
export function defaultLimits(): LimitsConfig {
  return buildLimits({});
}
