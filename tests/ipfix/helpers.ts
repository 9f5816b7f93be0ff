/** Small builders shared by the codec tests. */
import {
  encodeDataSet,
  encodeMessage,
  encodeTemplateSet,
  type FieldSpecifier,
  type FieldValue,
  type TemplateRecord,
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
export function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}
