/**
 * The one declaration of the aggregated flow record: one row per field, saying which IE carries
 * it, its data type, who produces it (the Agent, the Flow Aggregator, the Pod-label option or a
 * sink) and where each sink puts it. Everything else is derived from this table at module load:
 * the Agent and FA IPFIX template element lists (ipfix.md §5, exporters.md §2.4), the flat record
 * of ClickHouse/S3/log (exporters.md §1.4), the flow-log line (§5.2), the ClickHouse insert
 * columns (§3.4–3.5), the S3 CSV columns (§4.2), the aggregation stats list (ipfix.md §5.2), the
 * fields flowgen patches between exports, and the TypeScript types of the records. Adding an IE
 * is one row here (plus its expected place in the tests, which spell the spec's orders out).
 */

import type { DataType } from "../ipfix/types.ts";

/** A projection of the record onto a sink: flat record, flow log, ClickHouse insert, S3 CSV. */
export type Sink = "flat" | "log" | "ch" | "s3";

/**
 * Who produces a field: `agent` (Agent template, input of the FA), `fa` (computed by the FA,
 * exported in its template), `label` (FA template only with `recordContents.podLabels`),
 * `sink` (not an IE: a column a sink adds, such as the cluster UUID).
 */
export type FieldRole = "agent" | "fa" | "label" | "sink";

/**
 * Data type of a row: the IE's registry type, or `ipAddress` for an address field carried by an
 * `ipv4Address` IE in IPv4 templates and an `ipv6Address` IE in IPv6 templates (its `v4`/`v6`).
 */
export type FieldType = DataType | "ipAddress";

/** Optional attributes of a row. */
export interface FieldExtra {
  /** The IPv4-template IE of an `ipAddress` field. */
  readonly v4?: string;
  /** The IPv6-template IE of an `ipAddress` field. */
  readonly v6?: string;
  /** 1-based position in ipfix.md §5.2 StatsElementList (summed by the FA, sent by the Agent). */
  readonly stats?: number;
  /** In ipfix.md §5.2 NonStatsElementList (the latest Agent value wins). */
  readonly nonStats?: true;
}

/**
 * One field: `[name, type, role, FA template position (1-based; 0 = not in IPFIX), sinks,
 * extra]`. The name is the IE name, except for `ipAddress` fields (flat name, e.g. `sourceIP`)
 * and `sink` fields. Rows are in the flat record's order, which every sink's column order
 * follows; IPFIX order is given by the positions, which must run 1..n with Agent IEs first,
 * then FA-computed ones, then labels (a new FA IE takes 64 and moves the two labels up one).
 */
export type SchemaRow = readonly [
  name: string,
  type: FieldType,
  role: FieldRole,
  faPosition: number,
  sinks: readonly Sink[],
  extra?: FieldExtra,
];

const ALL = ["flat", "log", "ch", "s3"] as const;
const STORE = ["flat", "ch", "s3"] as const;
const NONE = [] as const;
// The IEs of the address fields in IPv4 / IPv6 templates.
const SOURCE_IP = { v4: "sourceIPv4Address", v6: "sourceIPv6Address" } as const;
const DESTINATION_IP = { v4: "destinationIPv4Address", v6: "destinationIPv6Address" } as const;
const CLUSTER_IP = { v4: "destinationClusterIPv4", v6: "destinationClusterIPv6" } as const;

/** The record schema: one row per field (see {@linkcode SchemaRow} for the columns). */
export const RECORD_SCHEMA = [
  ["flowStartSeconds", "dateTimeSeconds", "agent", 1, ALL],
  ["flowEndSeconds", "dateTimeSeconds", "agent", 2, ALL, { nonStats: true }],
  ["flowEndSecondsFromSourceNode", "dateTimeSeconds", "fa", 56, STORE],
  ["flowEndSecondsFromDestinationNode", "dateTimeSeconds", "fa", 57, STORE],
  ["flowEndReason", "unsigned8", "agent", 3, STORE, { nonStats: true }],
  ["sourceIP", "ipAddress", "agent", 11, ALL, SOURCE_IP],
  ["destinationIP", "ipAddress", "agent", 12, ALL, DESTINATION_IP],
  ["sourceTransportPort", "unsigned16", "agent", 4, ALL],
  ["destinationTransportPort", "unsigned16", "agent", 5, ALL],
  ["protocolIdentifier", "unsigned8", "agent", 6, ALL],
  ["packetTotalCount", "unsigned64", "agent", 7, STORE, { stats: 4 }],
  ["octetTotalCount", "unsigned64", "agent", 8, STORE, { stats: 2 }],
  ["packetDeltaCount", "unsigned64", "agent", 9, STORE, { stats: 3 }],
  ["octetDeltaCount", "unsigned64", "agent", 10, STORE, { stats: 1 }],
  ["reversePacketTotalCount", "unsigned64", "agent", 13, STORE, { stats: 8 }],
  ["reverseOctetTotalCount", "unsigned64", "agent", 14, STORE, { stats: 6 }],
  ["reversePacketDeltaCount", "unsigned64", "agent", 15, STORE, { stats: 7 }],
  ["reverseOctetDeltaCount", "unsigned64", "agent", 16, STORE, { stats: 5 }],
  ["sourcePodName", "string", "agent", 17, ALL],
  ["sourcePodNamespace", "string", "agent", 18, ALL],
  ["sourceNodeName", "string", "agent", 19, ALL],
  ["destinationPodName", "string", "agent", 20, ALL],
  ["destinationPodNamespace", "string", "agent", 21, ALL],
  ["destinationNodeName", "string", "agent", 22, ALL],
  ["destinationClusterIP", "ipAddress", "agent", 39, ALL, CLUSTER_IP],
  ["destinationServicePort", "unsigned16", "agent", 23, ALL],
  ["destinationServicePortName", "string", "agent", 24, ALL],
  ["ingressNetworkPolicyName", "string", "agent", 25, ALL],
  ["ingressNetworkPolicyNamespace", "string", "agent", 26, ALL],
  ["ingressNetworkPolicyRuleName", "string", "agent", 28, ALL],
  ["ingressNetworkPolicyRuleAction", "unsigned8", "agent", 29, ALL],
  ["ingressNetworkPolicyType", "unsigned8", "agent", 27, ALL],
  ["egressNetworkPolicyName", "string", "agent", 30, ALL],
  ["egressNetworkPolicyNamespace", "string", "agent", 31, ALL],
  ["egressNetworkPolicyRuleName", "string", "agent", 33, ALL],
  ["egressNetworkPolicyRuleAction", "unsigned8", "agent", 34, ALL],
  ["egressNetworkPolicyType", "unsigned8", "agent", 32, ALL],
  ["tcpState", "string", "agent", 35, STORE, { nonStats: true }],
  ["flowType", "unsigned8", "agent", 36, STORE],
  ["sourcePodLabels", "string", "label", 64, STORE],
  ["destinationPodLabels", "string", "label", 65, STORE],
  ["throughput", "unsigned64", "fa", 58, STORE],
  ["reverseThroughput", "unsigned64", "fa", 61, STORE],
  ["throughputFromSourceNode", "unsigned64", "fa", 59, STORE],
  ["throughputFromDestinationNode", "unsigned64", "fa", 60, STORE],
  ["reverseThroughputFromSourceNode", "unsigned64", "fa", 62, STORE],
  ["reverseThroughputFromDestinationNode", "unsigned64", "fa", 63, STORE],
  // Not in the upstream struct: the exporter's cluster UUID, and the S3 row's add time.
  ["clusterUUID", "string", "sink", 0, STORE],
  ["timeInserted", "dateTimeSeconds", "sink", 0, ["s3"]],
  ["egressName", "string", "agent", 37, ALL],
  ["egressIP", "string", "agent", 38, ALL],
  // Per-node stats: IPFIX only, interleaved source/destination in StatsElementList order.
  ["octetDeltaCountFromSourceNode", "unsigned64", "fa", 40, NONE],
  ["octetDeltaCountFromDestinationNode", "unsigned64", "fa", 41, NONE],
  ["octetTotalCountFromSourceNode", "unsigned64", "fa", 42, NONE],
  ["octetTotalCountFromDestinationNode", "unsigned64", "fa", 43, NONE],
  ["packetDeltaCountFromSourceNode", "unsigned64", "fa", 44, NONE],
  ["packetDeltaCountFromDestinationNode", "unsigned64", "fa", 45, NONE],
  ["packetTotalCountFromSourceNode", "unsigned64", "fa", 46, NONE],
  ["packetTotalCountFromDestinationNode", "unsigned64", "fa", 47, NONE],
  ["reverseOctetDeltaCountFromSourceNode", "unsigned64", "fa", 48, NONE],
  ["reverseOctetDeltaCountFromDestinationNode", "unsigned64", "fa", 49, NONE],
  ["reverseOctetTotalCountFromSourceNode", "unsigned64", "fa", 50, NONE],
  ["reverseOctetTotalCountFromDestinationNode", "unsigned64", "fa", 51, NONE],
  ["reversePacketDeltaCountFromSourceNode", "unsigned64", "fa", 52, NONE],
  ["reversePacketDeltaCountFromDestinationNode", "unsigned64", "fa", 53, NONE],
  ["reversePacketTotalCountFromSourceNode", "unsigned64", "fa", 54, NONE],
  ["reversePacketTotalCountFromDestinationNode", "unsigned64", "fa", 55, NONE],
] as const satisfies readonly SchemaRow[];

// ---- Types derived from the table -------------------------------------------------------------

type Row = (typeof RECORD_SCHEMA)[number];

/** TypeScript value of a field type (u64 counters are exact `bigint`, addresses are text). */
export type ValueOf<T extends FieldType> = T extends "unsigned64" ? bigint
  : T extends "string" | "ipAddress" | "ipv4Address" | "ipv6Address" ? string
  : number;

type WithRole<R, Role extends FieldRole> = R extends { 2: Role } ? R : never;
type InSink<R, S extends Sink> = R extends { 4: readonly (infer T)[] } ? S extends T ? R : never
  : never;
type Plain<R> = R extends { 1: "ipAddress" } ? never : R;
type AddressIEs<R> = R extends { 5: { v4: infer A extends string; v6: infer B extends string } }
  ? A | B
  : never;
type Flatten<T> = { [K in keyof T]: T[K] };

/**
 * A field value as the decoder hands it in either mode: in wire-number mode
 * (`CompileOptions.wireNumbers`, what the collector gives the core) a u64 below 2^53 is a
 * number, and an IPv4 address its u32.
 */
export type WireValueOf<T extends FieldType> = T extends "unsigned64" ? bigint | number
  : ValueOf<T>;
type AddressV4IEs<R> = R extends { 5: { v4: infer A extends string } } ? A : never;
type AddressV6IEs<R> = R extends { 5: { v6: infer B extends string } } ? B : never;

/**
 * Fields of an Antrea Agent record (Agent template, 39 IEs), as decoded in either mode (see
 * {@linkcode WireValueOf}). Absent IEs are `undefined`.
 */
export type FlowInput = Flatten<
  & { [R in Plain<WithRole<Row, "agent">> as R[0]]?: WireValueOf<R[1]> }
  & { [N in AddressV4IEs<WithRole<Row, "agent">>]?: string | number }
  & { [N in AddressV6IEs<WithRole<Row, "agent">>]?: string }
>;

/**
 * One aggregated flow as exporters and the query API see it: the 63 IEs of the FA export
 * template (65 with Pod labels), keyed by IE name. IPv4 flows carry the `…IPv4…` address IEs,
 * IPv6 flows the `…IPv6…` ones; the labels are present only when `recordContents.podLabels`
 * is enabled.
 */
export type AggregatedRecord = Flatten<
  & { [R in Plain<WithRole<Row, "agent" | "fa">> as R[0]]: ValueOf<R[1]> }
  & { [N in AddressIEs<WithRole<Row, "agent">>]?: string }
  & { [R in WithRole<Row, "label"> as R[0]]?: ValueOf<R[1]> }
>;

/**
 * One flow as a flat row (exporters.md §1.4): the 49 upstream fields plus `clusterUUID`.
 * u64 counters are `bigint` (exact above 2^53).
 */
export type FlatRecord = { [R in InSink<Row, "flat"> as R[0]]: ValueOf<R[1]> };

/** A field of the flat record. */
export type FlatField = keyof FlatRecord;

/** One of the 49 upstream flat record fields (every flat field but `clusterUUID`). */
export type UpstreamFlatField = Exclude<FlatField, WithRole<Row, "sink">[0]>;

/** A column of the S3 CSV row (the flat fields plus `timeInserted`). */
export type S3Column = InSink<Row, "s3">[0];

// ---- Projections ------------------------------------------------------------------------------

/** The ordered field lists a schema table yields (what {@linkcode projectSchema} returns). */
export interface RecordProjections {
  /** Agent IPv4 template (ID 256) element names, wire order (ipfix.md §5.3 1–39). */
  readonly agentIPv4: readonly string[];
  /** Agent IPv6 template (ID 257) element names, wire order. */
  readonly agentIPv6: readonly string[];
  /** FA export template for IPv4 flows without labels (63 names). */
  readonly aggregatedIPv4: readonly string[];
  /** FA export template for IPv6 flows without labels (63 names). */
  readonly aggregatedIPv6: readonly string[];
  /** IEs appended to the FA templates when Pod labels are on (ipfix.md §5.2 labels list). */
  readonly podLabels: readonly string[];
  /** ipfix.md §5.2 StatsElementList, in order. */
  readonly stats: readonly string[];
  /** The 49 upstream flat record fields in struct order (exporters.md §1.4). */
  readonly flat: readonly string[];
  /** The flow log line fields in order (exporters.md §5.2). */
  readonly log: readonly string[];
  /** The ClickHouse INSERT columns in order (exporters.md §3.4–3.5). */
  readonly clickHouse: readonly string[];
  /** The S3 CSV columns in order (exporters.md §4.2). */
  readonly s3: readonly string[];
  /**
   * Fixed-length Agent fields that change between two exports of one flow (NonStats and Stats
   * lists, in Agent template order): what a generator patches in a cached record.
   */
  readonly agentUpdates: readonly string[];
}

/** The IE a row is carried by in an IPv4 (`ipv6` false) or IPv6 template. */
export function ieName(row: SchemaRow, ipv6: boolean): string {
  const extra = row[5];
  if (row[1] !== "ipAddress") return row[0];
  const name = ipv6 ? extra?.v6 : extra?.v4;
  if (name === undefined) throw new Error(`record schema: ${row[0]}: ipAddress without v4/v6 IEs`);
  return name;
}

/**
 * Rows with an FA template position, sorted by it; throws unless the positions run 1..n without
 * gaps or repeats, Agent rows first, then FA-computed rows, then labels.
 */
function templateRows(rows: readonly SchemaRow[]): SchemaRow[] {
  const placed = rows.filter((r) => r[3] > 0).sort((a, b) => a[3] - b[3]);
  const rank = { agent: 0, fa: 1, label: 2, sink: 3 };
  placed.forEach((r, i) => {
    if (r[3] !== i + 1) {
      throw new Error(`record schema: ${r[0]}: FA position ${r[3]}, want ${i + 1}`);
    }
    if (r[2] === "sink") throw new Error(`record schema: ${r[0]}: a sink field has no IE`);
    if (i > 0 && rank[r[2]] < rank[placed[i - 1][2]]) {
      throw new Error(`record schema: ${r[0]}: ${r[2]} field after a ${placed[i - 1][2]} field`);
    }
  });
  for (const r of rows) {
    if (r[3] <= 0 && r[2] !== "sink") throw new Error(`record schema: ${r[0]}: no FA position`);
  }
  return placed;
}

/** Derives every projection of a schema table (exported for tests that add rows). */
export function projectSchema(rows: readonly SchemaRow[]): RecordProjections {
  const placed = templateRows(rows);
  const names = (rs: SchemaRow[], ipv6: boolean): readonly string[] =>
    Object.freeze(rs.map((r) => ieName(r, ipv6)));
  const agent = placed.filter((r) => r[2] === "agent");
  const exported = placed.filter((r) => r[2] !== "label");
  // Sinks see flat fields: an address field under its own name, not its IE's.
  const inSink = (s: Sink): readonly string[] =>
    Object.freeze(rows.filter((r) => r[4].includes(s)).map((r) => r[0]));
  const sinkOnly = new Set(rows.filter((r) => r[2] === "sink").map((r) => r[0]));
  const stats = rows.filter((r) => r[5]?.stats !== undefined)
    .sort((a, b) => a[5]!.stats! - b[5]!.stats!);
  stats.forEach((r, i) => {
    if (r[5]!.stats !== i + 1) throw new Error(`record schema: ${r[0]}: stats ${r[5]!.stats}`);
  });
  return Object.freeze({
    agentIPv4: names(agent, false),
    agentIPv6: names(agent, true),
    aggregatedIPv4: names(exported, false),
    aggregatedIPv6: names(exported, true),
    podLabels: names(placed.filter((r) => r[2] === "label"), false),
    stats: names(stats, false),
    flat: Object.freeze(inSink("flat").filter((n) => !sinkOnly.has(n))),
    log: inSink("log"),
    clickHouse: inSink("ch"),
    s3: inSink("s3"),
    agentUpdates: names(
      agent.filter((r) =>
        (r[5]?.stats !== undefined || r[5]?.nonStats) && r[1] !== "string" &&
        r[1] !== "ipAddress"
      ),
      false,
    ),
  });
}

const P = projectSchema(RECORD_SCHEMA);

/** Antrea Agent IPv4 template (ID 256), 39 element names in wire order (ipfix.md §5.3 1–39). */
export const AGENT_IPV4_FIELDS: readonly string[] = P.agentIPv4;

/** Antrea Agent IPv6 template (ID 257), 39 element names in wire order. */
export const AGENT_IPV6_FIELDS: readonly string[] = P.agentIPv6;

/** FA export template for IPv4 flows: 63 names (add {@linkcode POD_LABEL_FIELDS} for 65). */
export const AGGREGATED_IPV4_FIELDS: readonly string[] = P.aggregatedIPv4;

/** FA export template for IPv6 flows: 63 names (add {@linkcode POD_LABEL_FIELDS} for 65). */
export const AGGREGATED_IPV6_FIELDS: readonly string[] = P.aggregatedIPv6;

/** ipfix.md §5.2 AntreaLabelsElementList: appended to the FA template when labels are on. */
export const POD_LABEL_FIELDS: readonly string[] = P.podLabels;

/** ipfix.md §5.2 StatsElementList (aggregated on every record), in order. */
export const STATS_FIELDS: readonly string[] = P.stats;

/** ipfix.md §5.2 AntreaSourceStatsElementList, paired by index with {@linkcode STATS_FIELDS}. */
export const SOURCE_STATS_FIELDS: readonly string[] = Object.freeze(
  STATS_FIELDS.map((n) => n + "FromSourceNode"),
);

/** ipfix.md §5.2 AntreaDestinationStatsElementList, paired by index with STATS_FIELDS. */
export const DESTINATION_STATS_FIELDS: readonly string[] = Object.freeze(
  STATS_FIELDS.map((n) => n + "FromDestinationNode"),
);

/** The 49 upstream flat record fields in struct order (exporters.md §1.4; no `clusterUUID`). */
export const FLAT_RECORD_FIELDS = P.flat as readonly UpstreamFlatField[];

/** The 28 fields of a flow log line, in order (exporters.md §5.2). */
export const LOG_LINE_FIELDS = P.log as readonly FlatField[];

/** The 50 columns of the ClickHouse INSERT, in order (exporters.md §3.4–3.5). */
export const CLICKHOUSE_COLUMNS = P.clickHouse as readonly FlatField[];

/** The 51 columns of an S3 CSV row, in order (exporters.md §4.2). */
export const S3_COLUMNS = P.s3 as readonly S3Column[];

/**
 * The fixed-length Agent fields that change between exports of one flow, in Agent template
 * order: flowEndSeconds, flowEndReason and the eight counters (tcpState changes too, but is
 * variable-length).
 */
export const AGENT_UPDATE_FIELDS: readonly string[] = P.agentUpdates;

/** The IPv6-template IEs of the Agent's address fields (source, destination, cluster IP). */
export const AGENT_IPV6_ADDRESS_FIELDS: readonly string[] = Object.freeze(
  RECORD_SCHEMA.filter((r) => r[1] === "ipAddress" && r[2] === "agent").map((r) => ieName(r, true)),
);
