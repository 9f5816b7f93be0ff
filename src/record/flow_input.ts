/**
 * The codec → core boundary, checked once per template instead of trusting every record: a
 * data set may be handed to the aggregation core as {@linkcode FlowInput} only when its
 * template carries the flow key (both addresses of one family, protocol, both ports) and every
 * field the schema declares for the Agent record is decoded as the schema's type (the codec
 * decodes by the registry's type of the template's element).
 *
 * @module
 */

import { elementByName } from "../ipfix/registry.ts";
import type { DataType, FieldSpecifier } from "../ipfix/types.ts";
import { fieldName } from "../ipfix/registry.ts";
import { RECORD_SCHEMA } from "./schema.ts";

/** Agent-record IE name → the data type the schema expects for it. */
const EXPECTED: ReadonlyMap<string, DataType> = (() => {
  const m = new Map<string, DataType>();
  for (const row of RECORD_SCHEMA) {
    if (row[2] !== "agent") continue;
    if (row[1] === "ipAddress") {
      const extra = row[5] as { v4: string; v6: string };
      m.set(extra.v4, "ipv4Address");
      m.set(extra.v6, "ipv6Address");
    } else {
      m.set(row[0], row[1]);
    }
  }
  return m;
})();

const KEY = ["protocolIdentifier", "sourceTransportPort", "destinationTransportPort"];
const V4 = ["sourceIPv4Address", "destinationIPv4Address"];
const V6 = ["sourceIPv6Address", "destinationIPv6Address"];

/** Why a template cannot feed the core, or `undefined` when its records are flow input. */
export function flowTemplateProblem(fields: readonly FieldSpecifier[]): string | undefined {
  const names = new Set(fields.map((f) => fieldName(f.enterprise, f.id)));
  const missing = KEY.filter((n) => !names.has(n));
  if (missing.length > 0) return `no ${missing.join(", ")}`;
  if (!V4.every((n) => names.has(n)) && !V6.every((n) => names.has(n))) {
    return "no source and destination address of one family";
  }
  for (const name of names) {
    const want = EXPECTED.get(name);
    const got = elementByName(name)?.type;
    if (want !== undefined && got !== want) {
      return `${name} is ${got}, the record schema says ${want}`;
    }
  }
  return undefined;
}
