/** Small builders shared by the codec tests. */
import {
  type DataType,
  elementByName,
  encodeDataSet,
  encodeMessage,
  encodeTemplateSet,
  type FieldSpecifier,
  type FieldValue,
  registerElement,
  type TemplateRecord,
  VARIABLE_LENGTH,
} from "../../src/ipfix/mod.ts";

/** Observation domain used by the tests. */
export const DOMAIN = 7;

/** A message with the given sets and the test domain. */
export function message(sets: Uint8Array[], domain = DOMAIN): Uint8Array {
  return encodeMessage(
    { exportTime: 1700000000, sequenceNumber: 1, observationDomainId: domain },
    sets,
  );
}

/** A data template record. */
export function tmpl(id: number, fields: FieldSpecifier[]): TemplateRecord {
  return { id, fields, scopeFieldCount: 0 };
}

/** Template set + data set for one template in one message. */
export function templateAndData(
  t: TemplateRecord,
  records: Record<string, FieldValue | undefined>[],
): Uint8Array {
  return message([encodeTemplateSet([t]), encodeDataSet(t.id, t.fields, records)]);
}

/** A raw set: id, body bytes (length computed). */
export function rawSet(id: number, body: number[] | Uint8Array): Uint8Array {
  const out = new Uint8Array(4 + body.length);
  out[0] = id >> 8;
  out[1] = id & 0xff;
  out[2] = out.length >> 8;
  out[3] = out.length & 0xff;
  out.set(body, 4);
  return out;
}

/** Concatenates byte arrays. */
export { concat } from "../_helpers/bytes.ts";

/** Private enterprise number of the per-type test elements. */
export const TEST_PEN = 4242;

/** Every RFC 7012 data type with its default length. */
export const TYPES: [DataType, number][] = [
  ["octetArray", VARIABLE_LENGTH],
  ["unsigned8", 1],
  ["unsigned16", 2],
  ["unsigned32", 4],
  ["unsigned64", 8],
  ["signed8", 1],
  ["signed16", 2],
  ["signed32", 4],
  ["signed64", 8],
  ["float32", 4],
  ["float64", 8],
  ["boolean", 1],
  ["macAddress", 6],
  ["string", VARIABLE_LENGTH],
  ["dateTimeSeconds", 4],
  ["dateTimeMilliseconds", 8],
  ["dateTimeMicroseconds", 8],
  ["dateTimeNanoseconds", 8],
  ["ipv4Address", 4],
  ["ipv6Address", 16],
  ["basicList", VARIABLE_LENGTH],
  ["subTemplateList", VARIABLE_LENGTH],
  ["subTemplateMultiList", VARIABLE_LENGTH],
];

/**
 * The Antrea registry lacks most RFC 7012 types; registers one test element per type
 * (`test_<type>`, PEN 4242) so every type goes through the real registry path. Idempotent.
 */
export function registerTestElements(): void {
  TYPES.forEach(([type, length], i) => {
    registerElement({ name: `test_${type}`, id: i + 1, enterprise: TEST_PEN, type, length });
  });
}

/** Field specifier of the test element of `type` (default length unless given). */
export function spec(type: DataType, length?: number): FieldSpecifier {
  const ie = elementByName(`test_${type}`);
  if (ie === undefined) throw new Error("call registerTestElements() first");
  return { id: ie.id, enterprise: ie.enterprise, length: length ?? ie.length };
}
