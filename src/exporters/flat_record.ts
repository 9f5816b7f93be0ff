/**
 * The canonical flat flow record shared by the ClickHouse, S3 and log exporters
 * (exporters.md §1.4): one typed row built from an exported flow, in upstream struct order,
 * absent IEs as zero values, IPs as canonical text. Its fields and their sources come from the
 * record schema (`src/record/schema.ts`). Exporters build it synchronously inside `addRecord`,
 * so later mutation of the live flow can never leak into an exported row.
 */

import type { ExportedFlow } from "../aggregation/record.ts";
import { canonicalIP } from "../ipfix/ip.ts";
import {
  FLAT_RECORD_FIELDS,
  type FlatRecord,
  ieName,
  RECORD_SCHEMA,
  type SchemaRow,
} from "../record/schema.ts";

export { FLAT_RECORD_FIELDS, type FlatRecord };

/** IPv6 texts already made canonical, so a flow's addresses are parsed once, not per export. */
const canonicalV6 = new Map<string, string>();
const CANONICAL_V6_MAX = 4096;

/**
 * Address text as Go prints it (RFC 5952 for IPv6, an IPv4-mapped address as its dotted quad),
 * so every sink agrees with the flow key. The codec already produces canonical text; this
 * guards other producers, and leaves dotted quads and unparsable text as they are. IPv4 text
 * is returned as is; IPv6 text goes through a bounded cache.
 */
export function ipText(v: string | undefined): string {
  if (v === undefined) return "";
  if (v.indexOf(":") < 0) return v;
  let c = canonicalV6.get(v);
  if (c === undefined) {
    c = canonicalIP(v) ?? v;
    if (canonicalV6.size >= CANONICAL_V6_MAX) canonicalV6.clear();
    canonicalV6.set(v, c);
  }
  return c;
}

/** Pod label JSON as the sinks write it: absent is "", and a nil map (`null`) is `{}`. */
export function labels(v: string | undefined): string {
  // Upstream serialised a nil label map as `null`; latest Antrea writes `{}` (exporters.md §1.4).
  if (v === undefined) return "";
  return v === "null" ? "{}" : v;
}

/** The value expression of one flat field over the aggregated record `r`. */
function valueSource(row: SchemaRow): string {
  const ie = JSON.stringify(ieName(row, false));
  if (row[1] === "ipAddress") {
    return `H.ipText(r[${ie}] ?? r[${JSON.stringify(ieName(row, true))}])`;
  }
  if (row[2] === "label") return `H.labels(r[${ie}])`;
  if (row[1] === "unsigned64") return `r[${ie}] ?? 0n`;
  if (row[1] === "string") return `r[${ie}] ?? ""`;
  return `r[${ie}] ?? 0`;
}

// One object literal of fixed shape, generated once from the schema at module load (as the
// codec compiles its decoders): per record it is straight-line code, no loop over field names.
const FLAT_ROWS = FLAT_RECORD_FIELDS.map((f) => RECORD_SCHEMA.find((r) => r[0] === f)!);
const build = new Function(
  "H",
  `return (r, clusterUUID) => ({\n${
    FLAT_ROWS.map((row) => `  ${JSON.stringify(row[0])}: ${valueSource(row)},`).join("\n")
  }\n  clusterUUID,\n});`,
)({ ipText, labels }) as (r: ExportedFlow["record"], clusterUUID: string) => FlatRecord;

/** Builds the flat record of an exported flow. Absent IEs become 0 / 0n / "". */
export function toFlatRecord(flow: ExportedFlow, clusterUUID = ""): FlatRecord {
  return build(flow.record, clusterUUID);
}
