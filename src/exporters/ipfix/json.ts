/**
 * `flowCollector.recordFormat: JSON` (exporters.md §2.6): one JSON document per record,
 * `{"@timestamp":"<RFC 3339, seconds>","ipfix":{<IE name>: <value>, …}}` plus `\n`, with keys
 * sorted and strings escaped the way Go's encoding/json does, so consumers of upstream's output
 * parse ours unchanged. Unsigned64 values are written as exact JSON integers (they may exceed
 * 2^53, which `JSON.stringify` cannot express).
 */

import type { FieldValue } from "../../ipfix/types.ts";
import { toBase64 } from "../../bytes.ts";

/** Escapes a string like Go's `json.Marshal` (HTML-safe: `<`, `>`, `&`, U+2028/9 as `\uXXXX`). */
export function goJsonString(s: string): string {
  return JSON.stringify(s).replace(/[<>&\u2028\u2029]/g, (c) => {
    return "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0");
  });
}

function jsonValue(v: FieldValue): string {
  switch (typeof v) {
    case "bigint":
      return v.toString();
    case "number":
      return Number.isFinite(v) ? String(v) : "0";
    case "boolean":
      return v ? "true" : "false";
    case "string":
      return goJsonString(v);
    default: {
      // Go marshals []byte as base64; no Antrea IE is an octetArray, but stay faithful.
      return goJsonString(toBase64(v));
    }
  }
}

/** Formats epoch milliseconds as RFC 3339 with seconds precision in UTC (`…T10:00:00Z`). */
export function rfc3339Seconds(epochMs: number): string {
  return new Date(Math.floor(epochMs / 1000) * 1000).toISOString().replace(".000Z", "Z");
}

/**
 * The `ipfix` object of a record's JSON document (`{<IE name>: <value>, …}`, keys sorted), for
 * the values in `values` under the names in `names` (any order). It does not depend on the
 * time, so the exporter builds it when the record is queued.
 */
export function jsonRecordFields(names: readonly string[], values: readonly FieldValue[]): string {
  const idx = names.map((_, i) => i).sort((a, b) =>
    names[a] < names[b] ? -1 : names[a] > names[b] ? 1 : 0
  );
  let body = "";
  for (const i of idx) {
    if (body !== "") body += ",";
    body += goJsonString(names[i]) + ":" + jsonValue(values[i]);
  }
  return `{${body}}`;
}

/** What precedes the {@linkcode jsonRecordFields} object in a document sent at `epochMs`. */
export function jsonDocumentPrefix(epochMs: number): string {
  return `{"@timestamp":"${rfc3339Seconds(epochMs)}","ipfix":`;
}

/** What follows the {@linkcode jsonRecordFields} object in a document (with its `\n`). */
export const JSON_DOCUMENT_SUFFIX = "}\n";

/**
 * Returns the JSON line (with trailing `\n`) for one record whose values are given in `values`
 * under the names in `names` (any order; keys are sorted here).
 */
export function jsonRecordLine(
  names: readonly string[],
  values: readonly FieldValue[],
  epochMs: number,
): string {
  return jsonDocumentPrefix(epochMs) + jsonRecordFields(names, values) + JSON_DOCUMENT_SUFFIX;
}
