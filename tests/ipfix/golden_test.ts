import assert from "node:assert/strict";
import {
  decodeMessage,
  encodeDataSet,
  encodeMessage,
  encodeTemplateSet,
  fieldsFor,
  type FieldValue,
  TemplateStore,
} from "../../src/ipfix/mod.ts";
import { AGENT_IPV4_FIELDS } from "../../src/record/schema.ts";
import { DATA_MSG, DATA_RECORD, TEMPLATE_MSG } from "./golden.ts";

Deno.test("golden template message registers Agent template 256 with 39 fields", () => {
  const store = new TemplateStore();
  const m = decodeMessage(TEMPLATE_MSG, store);
  assert.equal(TEMPLATE_MSG.length, 288);
  assert.deepEqual(m.header, {
    version: 10,
    length: 288,
    exportTime: 1700000000,
    sequenceNumber: 0,
    observationDomainId: 0x33de13e2,
  });
  assert.equal(m.templateRecords, 1);
  assert.deepEqual(m.setErrors, []);
  const ct = store.get(0x33de13e2, 256);
  assert.ok(ct);
  assert.deepEqual(ct.names, AGENT_IPV4_FIELDS);
  assert.deepEqual(ct.template.fields, fieldsFor(AGENT_IPV4_FIELDS));
  assert.equal(ct.minRecordLength, 113);
});

Deno.test("golden data message decodes to the listed values", () => {
  const store = new TemplateStore();
  decodeMessage(TEMPLATE_MSG, store);
  const m = decodeMessage(DATA_MSG, store);
  assert.equal(m.header.sequenceNumber, 1);
  assert.equal(m.header.exportTime, 1700000010);
  assert.equal(m.dataSets.length, 1);
  assert.equal(m.dataSets[0].templateId, 256);
  assert.equal(m.dataSets[0].options, false);
  assert.equal(m.dataSets[0].records.length, 1);
  const rec = m.dataSets[0].records[0];
  assert.deepEqual(rec, DATA_RECORD);
  // Template order is preserved as the record's key order.
  assert.deepEqual(Object.keys(rec), AGENT_IPV4_FIELDS);
});

Deno.test("golden template message re-encodes byte for byte", () => {
  const set = encodeTemplateSet([{
    id: 256,
    fields: fieldsFor(AGENT_IPV4_FIELDS),
    scopeFieldCount: 0,
  }]);
  const msg = encodeMessage(
    { exportTime: 1700000000, sequenceNumber: 0, observationDomainId: 0x33de13e2 },
    [set],
  );
  assert.deepEqual(msg, TEMPLATE_MSG);
});

/** `record` as a data set 256 (Agent IPv4 fields) under the golden data message's header. */
function encodeGoldenData(record: Record<string, FieldValue | undefined>): Uint8Array {
  const set = encodeDataSet(256, fieldsFor(AGENT_IPV4_FIELDS), [record]);
  return encodeMessage(
    { exportTime: 1700000010, sequenceNumber: 1, observationDomainId: 0x33de13e2 },
    [set],
  );
}

Deno.test("golden data message re-encodes byte for byte from the decoded record", () => {
  const store = new TemplateStore();
  decodeMessage(TEMPLATE_MSG, store);
  const rec = decodeMessage(DATA_MSG, store).dataSets[0].records[0];
  assert.deepEqual(encodeGoldenData(rec), DATA_MSG);
});

Deno.test("encoder writes zero values for missing fields (golden data from a sparse record)", () => {
  const sparse: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(DATA_RECORD)) {
    if (v !== "" && v !== 0 && v !== "0.0.0.0") sparse[k] = v;
  }
  assert.deepEqual(encodeGoldenData(sparse as Record<string, string | number | bigint>), DATA_MSG);
});

Deno.test("decoded values are copies: mutating the buffer afterwards changes nothing", () => {
  const store = new TemplateStore();
  decodeMessage(TEMPLATE_MSG, store);
  const buf = DATA_MSG.slice();
  const rec = decodeMessage(buf, store).dataSets[0].records[0];
  buf.fill(0xee, 16);
  assert.deepEqual(rec, DATA_RECORD);
});

Deno.test("later data sets (generated decoder tier) decode the golden record identically", () => {
  const store = new TemplateStore();
  decodeMessage(TEMPLATE_MSG, store);
  for (let i = 0; i < 20; i++) {
    assert.deepEqual(decodeMessage(DATA_MSG, store).dataSets[0].records, [DATA_RECORD]);
  }
});
