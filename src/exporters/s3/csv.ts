/**
 * The S3 object line (exporters.md §4.2): the 51 columns of the record schema's S3 projection,
 * joined with `,`, newline-terminated, no header and no escaping, except that the Pod label
 * columns are wrapped in single quotes. Integers in decimal (u64 exact, from bigint), timestamps
 * in unix seconds, and `timeInserted` the wall-clock second at which the sink took the record.
 * The formatter is generated once from the schema (straight-line code, as the flat record is):
 * a column added to the schema's S3 projection appears here without another list.
 *
 * @module
 */

import type { ExportedFlow } from "../../aggregation/record.ts";
import { type FlatRecord, toFlatRecord } from "../flat_record.ts";
import { RECORD_SCHEMA, S3_COLUMNS } from "../../record/schema.ts";

/** Columns the flat record does not carry: the sink fills them at add time. */
const ADD_TIME_COLUMNS: ReadonlySet<string> = new Set(
  RECORD_SCHEMA.filter((r) => r[1] === "dateTimeSeconds" && r[2] === "sink").map((r) => r[0]),
);
/** Columns written between single quotes (the Pod label JSON). */
const QUOTED_COLUMNS: ReadonlySet<string> = new Set(
  RECORD_SCHEMA.filter((r) => r[2] === "label").map((r) => r[0]),
);

function columnSource(name: string): string {
  if (ADD_TIME_COLUMNS.has(name)) return "t";
  const v = `r[${JSON.stringify(name)}]`;
  return QUOTED_COLUMNS.has(name) ? `"'" + ${v} + "'"` : v;
}

const formatFlat = new Function(
  "r",
  "t",
  `return ${S3_COLUMNS.map(columnSource).join(' + "," + ')} + "\\n";`,
) as (r: FlatRecord, timeInsertedSeconds: number) => string;

/** The CSV line (with its `\n`) of a flat record added at `timeInsertedSeconds`. */
export function formatCsvFlat(flat: FlatRecord, timeInsertedSeconds: number): string {
  return formatFlat(flat, timeInsertedSeconds);
}

/** The CSV line (with its `\n`) of an exported flow, for cluster `clusterUuid`. */
export function formatCsvLine(
  flow: ExportedFlow,
  options: { clusterUuid: string; timeInsertedSeconds: number },
): string {
  return formatFlat(toFlatRecord(flow, options.clusterUuid), options.timeInsertedSeconds);
}
