/**
 * The ClickHouse side of the record schema (exporters.md §3.3–3.5): the 50 inserted columns
 * and their types come from `src/record/schema.ts`; this module adds the two server-default
 * columns of the v1.13 `flows` table (`timeInserted`, `trusted`), renders one JSONEachRow line
 * per flat record (u64 exact, as bare JSON numbers; DateTime as unix seconds) and writes the
 * DDL of the table and its three views, valid on ClickHouse 18.16 (Debian) and current
 * releases (TTL only where the server has it).
 *
 * @module
 */

import { CLICKHOUSE_COLUMNS, type FlatRecord, RECORD_SCHEMA } from "../../record/schema.ts";

/** The 50 columns of every INSERT, in order (exporters.md §3.4). */
export const INSERT_COLUMNS: readonly string[] = CLICKHOUSE_COLUMNS;

/** A column newer Antrea tables have; inserted (as its default) only when the table has it. */
export const EGRESS_NODE_NAME_COLUMN = "egressNodeName";

function columnType(name: string): string {
  const row = RECORD_SCHEMA.find((r) => r[0] === name);
  switch (row?.[1]) {
    case "dateTimeSeconds":
      return "DateTime";
    case "unsigned8":
      return "UInt8";
    case "unsigned16":
      return "UInt16";
    case "unsigned64":
      return "UInt64";
    case "string":
    case "ipAddress":
      return "String";
    default:
      throw new Error(`clickhouse: no column type for ${name}`);
  }
}

/** The 52 columns of the v1.13 `flows` table with their types, in table order (§3.3). */
export const FLOWS_TABLE_COLUMNS: readonly (readonly [string, string])[] = Object.freeze([
  ["timeInserted", "DateTime DEFAULT now()"] as const,
  ...INSERT_COLUMNS.flatMap((c) => {
    const col = [c, columnType(c)] as const;
    return c === "clusterUUID" ? [col, ["trusted", "UInt8 DEFAULT 0"] as const] : [col];
  }),
]);

// One JSON line per record, generated once from the column list as straight-line code (as the
// flat record is): strings through JSON.stringify, numbers and bigints as bare digits (exact
// above 2^53; ClickHouse parses JSON numbers into UInt64 without going through a double). The
// parts are joined from an array: a chain of `+` builds a rope of ~100 cons strings per row,
// which cost more in garbage collection and flattening than the rendering itself.
const renderRow = new Function(
  "S",
  `return (r) => [${
    INSERT_COLUMNS.map((c, i) => {
      const key = JSON.stringify(`${i === 0 ? "{" : ","}${JSON.stringify(c)}:`);
      const v = `r[${JSON.stringify(c)}]`;
      return `${key}, ${columnType(c) === "String" ? `S(${v})` : `String(${v})`}`;
    }).join(", ")
  }, "}"].join("");`,
)(JSON.stringify) as (r: FlatRecord) => string;

/** The JSONEachRow line (no newline) of one flat record: the 50 insert columns. */
export function rowJson(record: FlatRecord): string {
  return renderRow(record);
}

/** Server capabilities the DDL depends on. */
export interface DdlOptions {
  /** Table TTL (`TTL timeInserted + INTERVAL 1 HOUR`; ClickHouse ≥ 19.6). Default true. */
  ttl?: boolean;
}

const SUMMED_POD = [
  "octetDeltaCount",
  "reverseOctetDeltaCount",
  "throughput",
  "reverseThroughput",
  "throughputFromSourceNode",
  "throughputFromDestinationNode",
];
const SUMMED_NODE = [
  "octetDeltaCount",
  "reverseOctetDeltaCount",
  "throughput",
  "reverseThroughput",
  "throughputFromSourceNode",
  "reverseThroughputFromSourceNode",
  "throughputFromDestinationNode",
  "reverseThroughputFromDestinationNode",
];
const TIMES = [
  "timeInserted",
  "flowEndSeconds",
  "flowEndSecondsFromSourceNode",
  "flowEndSecondsFromDestinationNode",
];

/** The three materialized views of §3.3: name, group-by columns, summed columns. */
const VIEWS: readonly (readonly [string, readonly string[], readonly string[]])[] = [
  ["flows_pod_view", [
    ...TIMES,
    "sourcePodName",
    "destinationPodName",
    "destinationIP",
    "destinationServicePort",
    "destinationServicePortName",
    "flowType",
    "sourcePodNamespace",
    "destinationPodNamespace",
    "sourceTransportPort",
    "destinationTransportPort",
  ], SUMMED_POD],
  ["flows_node_view", [
    ...TIMES,
    "sourceNodeName",
    "destinationNodeName",
    "sourcePodNamespace",
    "destinationPodNamespace",
  ], SUMMED_NODE],
  ["flows_policy_view", [
    ...TIMES,
    "egressNetworkPolicyName",
    "egressNetworkPolicyNamespace",
    "egressNetworkPolicyRuleAction",
    "ingressNetworkPolicyName",
    "ingressNetworkPolicyNamespace",
    "ingressNetworkPolicyRuleAction",
    "sourcePodName",
    "sourceTransportPort",
    "sourcePodNamespace",
    "destinationPodName",
    "destinationTransportPort",
    "destinationPodNamespace",
    "destinationServicePort",
    "destinationServicePortName",
    "destinationIP",
  ], SUMMED_NODE],
];

/**
 * The statements that create the v1.13 `flows` table (52 columns) and its views, each
 * `IF NOT EXISTS`, one statement per entry.
 */
export function flowsSchemaSql(options: DdlOptions = {}): string[] {
  const ttl = options.ttl ?? true;
  const tail = ttl
    ? "\nTTL timeInserted + INTERVAL 1 HOUR\nSETTINGS merge_with_ttl_timeout = 3600"
    : "";
  const cols = FLOWS_TABLE_COLUMNS.map(([n, t]) => `    ${n} ${t}`).join(",\n");
  const out = [
    `CREATE TABLE IF NOT EXISTS flows (\n${cols}\n) ENGINE = MergeTree\n` +
    `ORDER BY (timeInserted, flowEndSeconds)${tail}`,
  ];
  for (const [name, group, summed] of VIEWS) {
    out.push(
      `CREATE MATERIALIZED VIEW IF NOT EXISTS ${name}\nENGINE = SummingMergeTree\n` +
        `ORDER BY (\n    ${group.join(",\n    ")})${tail}\nPOPULATE\nAS SELECT\n    ` +
        `${[...group, ...summed.map((c) => `sum(${c}) AS ${c}`)].join(",\n    ")}\n` +
        `FROM flows\nGROUP BY\n    ${group.join(",\n    ")}`,
    );
  }
  return out;
}

/** True when a server of `version` (`major.minor…`) has table TTL (≥ 19.6). */
export function serverHasTtl(version: string): boolean {
  return versionAtLeast(version, 19, 6);
}

/** True when a server of `version` knows `insert_deduplication_token` (≥ 22.2). */
export function serverHasDedupToken(version: string): boolean {
  return versionAtLeast(version, 22, 2);
}

function versionAtLeast(version: string, major: number, minor: number): boolean {
  const [a, b] = version.split(".").map((x) => parseInt(x, 10));
  if (!Number.isFinite(a)) return false;
  return a > major || (a === major && (b ?? 0) >= minor);
}
