/**
 * The ClickHouse side of the record schema (exporters.md §3.3–3.5): the 50 inserted columns
 * and their types come from `src/record/schema.ts`; this module adds the two server-default
 * columns of the v1.13 `flows` table (`timeInserted`, `trusted`), renders flat records as the
 * body of an insert, and writes the DDL of the table and its three views, valid on ClickHouse
 * 18.16 (Debian) and current releases (TTL only where the server has it).
 *
 * Insert bodies are RowBinary ({@linkcode RowBinaryWriter}): the server parses it several
 * times faster than JSON (it shares the cores with us), and it is a fifth of the bytes to
 * render, compress and spool. JSONEachRow ({@linkcode rowJson}) remains for batches spooled by
 * an older version, which are replayed as they were written, and for the bench's baseline.
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

/** How an insert body is encoded (the `FORMAT` of its INSERT). */
export type InsertFormat = "RowBinary" | "JSONEachRow";

// RowBinary of the column types of the flows table (the same encoding on 18.16 and current
// servers): UInt8, UInt16, UInt64 and DateTime (unix seconds as UInt32) little-endian, String
// as a LEB128 byte length and the UTF-8 bytes. No row separator.
const FIXED_BYTES: Record<string, number> = { UInt8: 1, UInt16: 2, UInt64: 8, DateTime: 4 };
const utf8 = new TextEncoder();

/** Writes `s` at `p` of `b` (room checked by the caller: 5 + 3 × length); returns the end. */
function putString(b: Uint8Array, p: number, s: string): number {
  const n = s.length;
  // The length in UTF-16 units is the byte length when every unit is ASCII (the usual case:
  // names, addresses, states); on the first other unit start over with the encoder.
  let q = putLength(b, p, n);
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x80) return putUtf8(b, p, s);
    b[q++] = c;
  }
  return q;
}

function putUtf8(b: Uint8Array, p: number, s: string): number {
  const bytes = utf8.encode(s);
  p = putLength(b, p, bytes.length);
  b.set(bytes, p);
  return p + bytes.length;
}

/** A String's byte length as RowBinary's LEB128 prefix at `p`; returns the end. */
function putLength(b: Uint8Array, p: number, len: number): number {
  while (len >= 0x80) {
    b[p++] = (len & 0x7f) | 0x80;
    len >>>= 7;
  }
  b[p++] = len;
  return p;
}

function putU64(d: DataView, p: number, v: bigint | number): number {
  // Exact for every u64 (bigint); a plain number from a hand-built record is accepted too.
  d.setBigUint64(p, typeof v === "bigint" ? v : BigInt(v), true);
  return p + 8;
}

// The room one row needs at most (a string: 5 bytes of length, at most 3 bytes per UTF-16
// unit), and the writer of one row at `p`, generated from the column list as straight-line
// code, as the JSON line is.
const STRING_COLUMNS = INSERT_COLUMNS.filter((c) => columnType(c) === "String");
const ROW_FIXED_BYTES = INSERT_COLUMNS.reduce((n, c) => n + (FIXED_BYTES[columnType(c)] ?? 5), 0);
const rowRoom = new Function(
  `return (r) => ${ROW_FIXED_BYTES} + 3 * (${
    STRING_COLUMNS.map((c) => `r[${JSON.stringify(c)}].length`).join(" + ")
  });`,
)() as (r: FlatRecord) => number;
const writeRow = new Function(
  "H",
  `return (b, d, p, r) => {\n${
    INSERT_COLUMNS.map((c) => {
      const v = `r[${JSON.stringify(c)}]`;
      switch (columnType(c)) {
        case "String":
          return `  p = H.putString(b, p, ${v});`;
        case "UInt64":
          return `  p = H.putU64(d, p, ${v});`;
        case "DateTime":
          return `  d.setUint32(p, ${v}, true); p += 4;`;
        case "UInt16":
          return `  d.setUint16(p, ${v}, true); p += 2;`;
        default:
          return `  b[p++] = ${v};`;
      }
    }).join("\n")
  }\n  return p;\n};`,
)({ putString, putU64 }) as (b: Uint8Array, d: DataView, p: number, r: FlatRecord) => number;

/**
 * Accumulates the RowBinary rows of one batch (the 50 insert columns, in order) in one
 * growing buffer, reused from batch to batch.
 */
export class RowBinaryWriter {
  #buf: Uint8Array;
  #view: DataView;
  #pos = 0;
  #rows = 0;

  /** Starts with `initialBytes` of room (grows by doubling). */
  constructor(initialBytes = 1 << 16) {
    this.#buf = new Uint8Array(initialBytes);
    this.#view = new DataView(this.#buf.buffer);
  }

  /** Rows written since the last {@linkcode take}. */
  get rows(): number {
    return this.#rows;
  }

  /** Appends the row of one flat record. */
  add(record: FlatRecord): void {
    const need = this.#pos + rowRoom(record);
    if (need > this.#buf.length) {
      const grown = new Uint8Array(Math.max(need, this.#buf.length * 2));
      grown.set(this.#buf.subarray(0, this.#pos));
      this.#buf = grown;
      this.#view = new DataView(grown.buffer);
    }
    this.#pos = writeRow(this.#buf, this.#view, this.#pos, record);
    this.#rows++;
  }

  /** The rows written so far (a copy), and starts a new batch. */
  take(): Uint8Array {
    const out = this.#buf.slice(0, this.#pos);
    this.#pos = 0;
    this.#rows = 0;
    return out;
  }
}

/** The RowBinary body of some flat records (the 50 insert columns). */
export function rowBinary(records: Iterable<FlatRecord>): Uint8Array {
  const w = new RowBinaryWriter();
  for (const r of records) w.add(r);
  return w.take();
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
