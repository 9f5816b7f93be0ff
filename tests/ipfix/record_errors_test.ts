import assert from "node:assert/strict";
import {
  type CompiledTemplate,
  type DataRecord,
  decodeMessage,
  encodeDataSet,
  encodeTemplateSet,
  fieldsFor,
  IpfixDecodeError,
  TemplateStore,
} from "../../src/ipfix/mod.ts";
import { DOMAIN, message, rawSet, tmpl } from "./helpers.ts";

const WITH_NAME = fieldsFor(["sourceTransportPort", "sourcePodName", "protocolIdentifier"]);

function good(i: number): Record<string, number | string> {
  return { sourceTransportPort: i, sourcePodName: `pod-${i}`, protocolIdentifier: 6 };
}

Deno.test("10 good records then one whose string overruns the set: the 10 are kept, 1 dropped", () => {
  const store = new TemplateStore();
  const t = tmpl(301, WITH_NAME);
  decodeMessage(message([encodeTemplateSet([t])]), store);
  const set = encodeDataSet(301, WITH_NAME, Array.from({ length: 10 }, (_, i) => good(i)));
  // The 11th record: port, then a string length of 200 with only 3 bytes behind it.
  const bad = rawSet(301, [...set.subarray(4), 0, 11, 200, 97, 98, 99]);
  const m = decodeMessage(message([bad]), store);
  assert.equal(m.dataSets.length, 1);
  assert.deepEqual(m.dataSets[0].records, Array.from({ length: 10 }, (_, i) => good(i)));
  assert.deepEqual(m.recordsDropped, [{ setId: 301, reason: "badVarLength", records: 1 }]);
  // The rest of the set cannot be resynchronised: still reported as a set error.
  assert.deepEqual(m.setErrors, [{ setId: 301, reason: "badVarLength" }]);
});

const PORTS = fieldsFor(["sourceTransportPort", "destinationTransportPort"]);
const POISON = 0xdead;

/**
 * A fixed-length template whose decoder rejects a record with source port {@linkcode POISON}
 * (no fixed-length value fails today's decoder; a validation added later would, and the decoder
 * must then skip exactly that record).
 */
function poisonedPorts(store: TemplateStore, id: number): CompiledTemplate {
  const ct = store.compile(tmpl(id, PORTS))!;
  const decodeRecords: CompiledTemplate["decodeRecords"] = (bytes, off, end, out) => {
    while (end - off >= ct.minRecordLength) {
      const one: DataRecord[] = [];
      ct.decodeRecords(bytes, off, end, one, 1);
      if (one[0].sourceTransportPort === POISON) {
        throw new IpfixDecodeError("badRecord", "poisoned record");
      }
      out.push(one[0]);
      off += ct.fixedRecordLength;
    }
    return off;
  };
  return { ...ct, decodeRecords };
}

Deno.test("fixed-length template: a bad record drops only itself, decoding resumes after it", () => {
  const store = new TemplateStore();
  assert.equal(store.compile(tmpl(310, PORTS))?.fixedRecordLength, 4);
  assert.equal(store.add(DOMAIN, poisonedPorts(store, 310)), undefined);
  const ports = [1, 2, POISON, 4, 5, POISON, POISON, 8];
  const set = encodeDataSet(
    310,
    PORTS,
    ports.map((p) => ({ sourceTransportPort: p, destinationTransportPort: 80 })),
  );
  const m = decodeMessage(message([set]), store);
  assert.deepEqual(m.dataSets[0].records.map((r) => r.sourceTransportPort), [1, 2, 4, 5, 8]);
  assert.deepEqual(m.recordsDropped.map((d) => [d.setId, d.reason, d.records]), [
    [310, "badRecord", 1],
    [310, "badRecord", 1],
    [310, "badRecord", 1],
  ]);
  assert.deepEqual(m.setErrors, [], "resynchronised: the set itself is not in error");
});

Deno.test("variable-length template: a record cut by the set end after a string is badRecord", () => {
  const store = new TemplateStore();
  decodeMessage(message([encodeTemplateSet([tmpl(301, WITH_NAME)])]), store);
  assert.equal(store.get(DOMAIN, 301)?.fixedRecordLength, 0);
  const set = encodeDataSet(301, WITH_NAME, [good(1), good(2)]);
  const m = decodeMessage(message([rawSet(301, [...set.subarray(4), 0, 3, 2, 97, 98])]), store);
  assert.equal(m.dataSets[0].records.length, 2);
  assert.deepEqual(m.recordsDropped, [{ setId: 301, reason: "badRecord", records: 1 }]);
});
