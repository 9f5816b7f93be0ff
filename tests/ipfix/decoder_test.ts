import assert from "node:assert/strict";
import {
  decodeMessage,
  encodeDataSet,
  encodeMessage,
  encodeTemplateSet,
  fieldsFor,
  IpfixDecodeError,
  readMessageLength,
  TemplateStore,
  VARIABLE_LENGTH,
} from "../../src/ipfix/mod.ts";
import { concat, DOMAIN, message, rawSet, templateAndData, tmpl } from "./helpers.ts";
import { DATA_MSG, TEMPLATE_MSG } from "./golden.ts";

const PORTS = fieldsFor(["sourceTransportPort", "destinationTransportPort"]);
const WITH_NAME = fieldsFor(["sourceTransportPort", "sourcePodName", "protocolIdentifier"]);

/** The bytes of a hex string (spaces ignored). */
function hex(s: string): Uint8Array {
  return new Uint8Array(s.replace(/\s+/g, "").match(/../g)!.map((x) => parseInt(x, 16)));
}

function throwsReason(fn: () => unknown, reason: string): void {
  assert.throws(fn, (e: unknown) => e instanceof IpfixDecodeError && e.reason === reason);
}

Deno.test("several records in one data set are all decoded", () => {
  const store = new TemplateStore();
  const recs = [1, 2, 3, 4].map((i) => ({
    sourceTransportPort: i,
    destinationTransportPort: i * 10,
  }));
  const m = decodeMessage(templateAndData(tmpl(300, PORTS), recs), store);
  assert.equal(m.templateRecords, 1);
  assert.deepEqual(m.dataSets[0].records, recs);
});

Deno.test("several sets in one message: template, two data sets of two templates, in order", () => {
  const store = new TemplateStore();
  const t1 = tmpl(300, PORTS);
  const t2 = tmpl(301, WITH_NAME);
  const msg = message([
    encodeTemplateSet([t1, t2]), // two template records in one set
    encodeDataSet(301, t2.fields, [{
      sourceTransportPort: 5,
      sourcePodName: "a",
      protocolIdentifier: 17,
    }]),
    encodeDataSet(300, t1.fields, [{ sourceTransportPort: 1, destinationTransportPort: 2 }]),
  ]);
  const m = decodeMessage(msg, store);
  assert.equal(m.templateRecords, 2);
  assert.deepEqual(m.dataSets.map((d) => d.templateId), [301, 300]);
  assert.deepEqual(m.dataSets[0].records[0], {
    sourceTransportPort: 5,
    sourcePodName: "a",
    protocolIdentifier: 17,
  });
  assert.equal(store.size, 2);
});

Deno.test("padding shorter than the minimum record length ends a data set", () => {
  const store = new TemplateStore();
  decodeMessage(message([encodeTemplateSet([tmpl(300, PORTS)])]), store);
  const data = encodeDataSet(300, PORTS, [{ sourceTransportPort: 1, destinationTransportPort: 2 }]);
  const padded = rawSet(300, [...data.subarray(4), 0, 0, 0]); // 4-byte record + 3 padding
  const m = decodeMessage(message([padded]), store);
  assert.equal(m.dataSets[0].records.length, 1);
  assert.deepEqual(m.setErrors, []);
});

Deno.test("padding at the end of a template set is ignored", () => {
  const store = new TemplateStore();
  const set = encodeTemplateSet([tmpl(300, PORTS)]);
  const m = decodeMessage(message([rawSet(2, [...set.subarray(4), 0, 0])]), store);
  assert.equal(m.templateRecords, 1);
  assert.deepEqual(m.setErrors, []);
});

Deno.test("a trailing partial record that is at least the minimum length drops the set", () => {
  const store = new TemplateStore();
  decodeMessage(message([encodeTemplateSet([tmpl(301, WITH_NAME)])]), store);
  // record: port(2) + len 5 "abc" (only 3 bytes) + proto missing => badVarLength
  const m = decodeMessage(message([rawSet(301, [0, 1, 5, 97, 98, 99, 6])]), store);
  assert.equal(m.dataSets.length, 0);
  assert.deepEqual(m.setErrors, [{ setId: 301, reason: "badVarLength" }]);
});

Deno.test("a record whose fixed fields after a string overrun the set is badRecord", () => {
  const store = new TemplateStore();
  decodeMessage(message([encodeTemplateSet([tmpl(301, WITH_NAME)])]), store);
  // port, "ab" (len 2), then protocol byte missing: min length 4 is met, record still cut
  const m = decodeMessage(message([rawSet(301, [0, 1, 2, 97, 98])]), store);
  assert.deepEqual(m.setErrors, [{ setId: 301, reason: "badRecord" }]);
});

Deno.test("a bad set is dropped and the sets around it are kept", () => {
  const store = new TemplateStore();
  const t = tmpl(301, WITH_NAME);
  const good = encodeDataSet(301, t.fields, [{
    sourceTransportPort: 9,
    sourcePodName: "x",
    protocolIdentifier: 1,
  }]);
  const msg = message([
    encodeTemplateSet([t]),
    good,
    rawSet(301, [0, 1, 9, 97, 98]),
    rawSet(5, [1, 2, 3, 4]),
    good,
  ]);
  const m = decodeMessage(msg, store);
  assert.equal(m.dataSets.length, 2);
  assert.deepEqual(m.setErrors, [
    { setId: 301, reason: "badVarLength" },
    { setId: 5, reason: "reservedSetId" },
  ]);
});

Deno.test("variable length: 1-byte and 3-byte forms, long form accepted for short values", () => {
  const store = new TemplateStore();
  decodeMessage(message([encodeTemplateSet([tmpl(301, WITH_NAME)])]), store);
  const longForm = rawSet(301, [0, 7, 255, 0, 3, 120, 121, 122, 6]);
  const shortForm = rawSet(301, [0, 8, 3, 120, 121, 122, 17]);
  const m = decodeMessage(message([longForm, shortForm]), store);
  assert.deepEqual(m.dataSets.map((d) => d.records[0]), [
    { sourceTransportPort: 7, sourcePodName: "xyz", protocolIdentifier: 6 },
    { sourceTransportPort: 8, sourcePodName: "xyz", protocolIdentifier: 17 },
  ]);
});

Deno.test("variable length: a 3-byte prefix cut by the set end is badVarLength", () => {
  const store = new TemplateStore();
  const t = tmpl(302, fieldsFor(["sourcePodName"]));
  decodeMessage(message([encodeTemplateSet([t])]), store);
  const m = decodeMessage(message([rawSet(302, [255, 0])]), store);
  assert.deepEqual(m.setErrors, [{ setId: 302, reason: "badVarLength" }]);
});

Deno.test("strings of 255+ bytes use the 3-byte form and round trip", () => {
  const store = new TemplateStore();
  const long = "p".repeat(300) + "é✓😀";
  const m = decodeMessage(
    templateAndData(tmpl(301, WITH_NAME), [{
      sourceTransportPort: 1,
      sourcePodName: long,
      protocolIdentifier: 6,
    }]),
    store,
  );
  assert.equal(m.dataSets[0].records[0].sourcePodName, long);
});

Deno.test("invalid UTF-8 decodes with replacement characters instead of throwing", () => {
  const store = new TemplateStore();
  decodeMessage(message([encodeTemplateSet([tmpl(301, WITH_NAME)])]), store);
  const m = decodeMessage(message([rawSet(301, [0, 1, 3, 0x61, 0xff, 0x62, 6])]), store);
  assert.equal(m.dataSets[0].records[0].sourcePodName, "a\ufffdb");
});

Deno.test("options template: records decoded with options true", () => {
  const store = new TemplateStore();
  const t = {
    id: 400,
    fields: fieldsFor(["sourceTransportPort", "octetTotalCount"]),
    scopeFieldCount: 1,
  };
  const msg = message([
    encodeTemplateSet([t], true),
    encodeDataSet(400, t.fields, [{ sourceTransportPort: 4739, octetTotalCount: 12n }]),
  ]);
  const m = decodeMessage(msg, store);
  assert.equal(m.templateRecords, 1);
  assert.deepEqual(m.dataSets, [{
    templateId: 400,
    options: true,
    records: [{ sourceTransportPort: 4739, octetTotalCount: 12n }],
    template: { ...t, fields: t.fields },
  }]);
  assert.equal(store.get(DOMAIN, 400)?.template.scopeFieldCount, 1);
  // The data set carries the stored template object itself (consumers cache checks by it).
  assert.equal(m.dataSets[0].template, store.get(DOMAIN, 400)?.template);
});

Deno.test("options template with scope field count 0 is refused alone (badTemplate)", () => {
  const store = new TemplateStore();
  // 400: scope count 0 (invalid); 401: scope count 1 (valid). The set was dropped whole.
  const body = [0x01, 0x90, 0, 1, 0, 0, 0, 7, 0, 2, 0x01, 0x91, 0, 1, 0, 1, 0, 7, 0, 2];
  const m = decodeMessage(message([rawSet(3, body)]), store);
  assert.deepEqual(m.setErrors, []);
  assert.deepEqual(m.templatesRefused, [{
    reason: "badTemplate",
    templates: 1,
    firstTemplateId: 400,
    detail: "template 400: scope count 0/1",
  }]);
  assert.equal(m.templateRecords, 1);
  assert.equal(store.get(DOMAIN, 401)?.template.scopeFieldCount, 1);
  assert.equal(store.get(DOMAIN, 400), undefined);
});

Deno.test("withdrawal (field count 0) deletes the template; later data is a template miss", () => {
  const store = new TemplateStore();
  decodeMessage(message([encodeTemplateSet([tmpl(300, PORTS), tmpl(301, WITH_NAME)])]), store);
  const m = decodeMessage(
    message([
      encodeTemplateSet([tmpl(300, [])]),
      encodeDataSet(300, PORTS, [{ sourceTransportPort: 1, destinationTransportPort: 2 }]),
    ]),
    store,
  );
  assert.equal(m.withdrawals, 1);
  assert.deepEqual(m.templateMisses, [300]);
  assert.equal(store.get(DOMAIN, 300), undefined);
  assert.ok(store.get(DOMAIN, 301));
});

Deno.test("withdrawal of id 2 removes all data templates, id 3 all options templates", () => {
  const store = new TemplateStore();
  const opt = { id: 500, fields: PORTS, scopeFieldCount: 1 };
  decodeMessage(
    message([
      encodeTemplateSet([tmpl(300, PORTS), tmpl(301, WITH_NAME)]),
      encodeTemplateSet([opt], true),
    ]),
    store,
  );
  assert.equal(store.size, 3);
  decodeMessage(message([encodeTemplateSet([tmpl(2, [])])]), store);
  assert.equal(store.size, 1);
  assert.ok(store.get(DOMAIN, 500));
  decodeMessage(
    message([encodeTemplateSet([{ id: 3, fields: [], scopeFieldCount: 0 }], true)]),
    store,
  );
  assert.equal(store.size, 0);
});

Deno.test("a template id < 256 is refused alone (badTemplate), the set's other templates stored", () => {
  // Found by a differential review against tshark: 1000 [protocolIdentifier], 100
  // [sourceTransportPort] (id < 256), 1001 [destinationTransportPort]. The whole set was dropped.
  const store = new TemplateStore();
  const set = hex("0002001c 03e80001 00040001 00640001 00070002 03e90001 000b0002");
  const m = decodeMessage(message([set]), store);
  assert.deepEqual(m.setErrors, []);
  assert.deepEqual(m.templatesRefused, [{
    reason: "badTemplate",
    templates: 1,
    firstTemplateId: 100,
    detail: "template id 100 < 256",
  }]);
  assert.equal(m.templateRecords, 2);
  const data = decodeMessage(message([hex("03e80005 06"), hex("03e90006 0050")]), store);
  assert.deepEqual(data.templateMisses, []);
  assert.deepEqual(data.dataSets.map((d) => d.records), [
    [{ protocolIdentifier: 6 }],
    [{ destinationTransportPort: 80 }],
  ]);
});

Deno.test("a withdrawal of an id < 256 other than 2 and 3 is refused alone (badTemplate)", () => {
  const store = new TemplateStore();
  const t300 = encodeTemplateSet([tmpl(300, PORTS)]).subarray(4);
  const t301 = encodeTemplateSet([tmpl(301, WITH_NAME)]).subarray(4);
  const m = decodeMessage(message([rawSet(2, [...t300, 0, 5, 0, 0, ...t301])]), store);
  assert.deepEqual(m.setErrors, []);
  assert.deepEqual(m.templatesRefused, [{
    reason: "badTemplate",
    templates: 1,
    firstTemplateId: 5,
    detail: "withdrawal of template id 5",
  }]);
  assert.equal(m.withdrawals, 0);
  assert.equal(m.templateRecords, 2);
  assert.equal(store.size, 2);
});

Deno.test("a template id < 256 overrunning its set still drops the set", () => {
  const store = new TemplateStore();
  const t300 = encodeTemplateSet([tmpl(300, PORTS)]).subarray(4);
  const m = decodeMessage(message([rawSet(2, [...t300, 0, 100, 0, 2, 0, 7, 0, 2])]), store);
  assert.deepEqual(m.setErrors, [{ setId: 2, reason: "badTemplate" }]);
  assert.equal(store.size, 0);
});

Deno.test("reserved set ids 0, 1 and 4-255 are set errors, the rest of the message is kept", () => {
  for (const id of [0, 1, 4, 100, 255]) {
    const store = new TemplateStore();
    const m = decodeMessage(
      message([rawSet(id, [1, 2, 3, 4]), encodeTemplateSet([tmpl(300, PORTS)])]),
      store,
    );
    assert.deepEqual(m.setErrors, [{ setId: id, reason: "reservedSetId" }], `set id ${id}`);
    assert.equal(m.templateRecords, 1);
  }
});

Deno.test("unknown PEN / IE are kept as raw octets under <pen>/<id>", () => {
  const store = new TemplateStore();
  const fields = [
    { id: 999, enterprise: 0, length: 3 },
    { id: 5, enterprise: 12345, length: VARIABLE_LENGTH },
    ...fieldsFor(["protocolIdentifier"]),
  ];
  decodeMessage(message([encodeTemplateSet([tmpl(300, fields)])]), store);
  const m = decodeMessage(message([rawSet(300, [1, 2, 3, 2, 0xaa, 0xbb, 6])]), store);
  assert.deepEqual(m.dataSets[0].records[0], {
    "0/999": new Uint8Array([1, 2, 3]),
    "12345/5": new Uint8Array([0xaa, 0xbb]),
    protocolIdentifier: 6,
  });
});

Deno.test("unsigned64 above 2^53 is exact (2^64-5 and 2^53+1)", () => {
  const store = new TemplateStore();
  const t = tmpl(300, fieldsFor(["octetDeltaCount", "packetDeltaCount", "reverseOctetDeltaCount"]));
  const rec = {
    octetDeltaCount: 2n ** 64n - 5n,
    packetDeltaCount: 2n ** 53n + 1n,
    reverseOctetDeltaCount: 0x1fffffffffffffn,
  };
  const m = decodeMessage(templateAndData(t, [rec]), store);
  assert.deepEqual(m.dataSets[0].records[0], rec);
});

Deno.test("reduced-size fields decode by the template length", () => {
  const store = new TemplateStore();
  const fields = [
    { id: 1, enterprise: 0, length: 4 }, // octetDeltaCount u64 in 4 bytes
    { id: 2, enterprise: 0, length: 7 }, // packetDeltaCount u64 in 7 bytes
    { id: 7, enterprise: 0, length: 1 }, // sourceTransportPort u16 in 1 byte
    { id: 116, enterprise: 56506, length: 2 }, // ingressNetworkPolicyRulePriority i32 in 2
    { id: 119, enterprise: 56506, length: 3 }, // egressNetworkPolicyRulePriority i32 in 3
  ];
  decodeMessage(message([encodeTemplateSet([tmpl(300, fields)])]), store);
  const body = [0xff, 0xff, 0xff, 0xfe, 0x01, 0, 0, 0, 0, 0, 2, 80, 0xff, 0xff, 0xff, 0xff, 0xfe];
  const m = decodeMessage(message([rawSet(300, body)]), store);
  assert.deepEqual(m.dataSets[0].records[0], {
    octetDeltaCount: 0xfffffffen,
    packetDeltaCount: 2n ** 48n + 2n,
    sourceTransportPort: 80,
    ingressNetworkPolicyRulePriority: -1,
    egressNetworkPolicyRulePriority: -2,
  });
});

Deno.test("illegal field lengths are badTemplate (too long, wrong address size, var-length int, 0)", () => {
  const cases = [
    { id: 7, enterprise: 0, length: 4 }, // u16 in 4 bytes
    { id: 8, enterprise: 0, length: 16 }, // ipv4Address in 16
    { id: 1, enterprise: 0, length: VARIABLE_LENGTH }, // u64 as variable length
    { id: 101, enterprise: 56506, length: 0 }, // zero-length string
    { id: 150, enterprise: 0, length: 2 }, // dateTimeSeconds in 2
  ];
  for (const f of cases) {
    const store = new TemplateStore();
    const m = decodeMessage(message([encodeTemplateSet([tmpl(300, [f])])]), store);
    assert.deepEqual(m.setErrors, [], JSON.stringify(f));
    assert.deepEqual(
      m.templatesRefused.map(({ reason, templates, firstTemplateId }) => ({
        reason,
        templates,
        firstTemplateId,
      })),
      [{ reason: "badTemplate", templates: 1, firstTemplateId: 300 }],
      JSON.stringify(f),
    );
    assert.match(m.templatesRefused[0].detail ?? "", /template 300 field 0/);
    assert.equal(store.size, 0);
  }
});

Deno.test("one invalid template record is refused alone: the set's other templates are stored", () => {
  // Found by a differential review against tshark: 1000 [protocolIdentifier/1], 1002
  // [sourceIPv4Address/8: illegal], 1001 [destinationTransportPort/2]. The whole set was dropped
  // (setErrors badTemplate, 0 templates), so the data of 1000 and 1001 became template misses.
  const store = new TemplateStore();
  const set = hex("00020020 03e80001 00040001 03ea0002 00080008 00040001 03e90001 000b0002");
  const m = decodeMessage(message([set]), store);
  assert.deepEqual(m.setErrors, []);
  assert.equal(m.templateRecords, 2);
  assert.equal(m.templatesRefused.length, 1);
  assert.equal(m.templatesRefused[0].reason, "badTemplate");
  assert.equal(m.templatesRefused[0].templates, 1);
  assert.equal(m.templatesRefused[0].firstTemplateId, 1002);
  assert.match(m.templatesRefused[0].detail!, /length not allowed for ipv4Address/);
  assert.ok(store.get(DOMAIN, 1000) && store.get(DOMAIN, 1001));
  assert.equal(store.get(DOMAIN, 1002), undefined);
  const data = decodeMessage(
    message([hex("03e80005 06"), hex("03e90006 0050"), hex("03ea0009 0a000001 06")]),
    store,
  );
  assert.deepEqual(data.templateMisses, []);
  assert.deepEqual(data.dataSets.map((d) => d.records), [
    [{ protocolIdentifier: 6 }],
    [{ destinationTransportPort: 80 }],
  ]);
  // The refused template's data is counted as records dropped, not as a miss.
  assert.deepEqual(data.recordsDropped, [{ setId: 1002, reason: "templateRefused", records: 1 }]);
});

Deno.test("an invalid redefinition withdraws the previous definition of its id", () => {
  const store = new TemplateStore();
  decodeMessage(message([hex("0002000c 03ea0001 00080004")]), store); // 1002 [sourceIPv4/4]
  assert.ok(store.get(DOMAIN, 1002));
  const m = decodeMessage(message([hex("0002000c 03ea0001 00080008")]), store); // length 8
  assert.equal(m.templatesRefused[0]?.reason, "badTemplate");
  assert.equal(store.get(DOMAIN, 1002), undefined);
  const data = decodeMessage(message([hex("03ea0008 0a000001")]), store);
  assert.deepEqual(data.dataSets, []);
  assert.deepEqual(data.recordsDropped, [{ setId: 1002, reason: "templateRefused", records: 1 }]);
});

Deno.test("a template record overrunning its set still drops the set (its extent is unknown)", () => {
  const store = new TemplateStore();
  // 1000 [protocolIdentifier/1], then 1001 announcing 2 fields with only one in the set.
  const m = decodeMessage(message([hex("00020014 03e80001 00040001 03e90002 000b0002")]), store);
  assert.deepEqual(m.setErrors, [{ setId: 2, reason: "badTemplate" }]);
  assert.equal(m.templateRecords, 0);
  assert.equal(store.size, 0);
});

Deno.test("duplicate IEs in a template: first occurrence wins, offsets stay aligned", () => {
  const store = new TemplateStore();
  const fields = fieldsFor([
    "sourceTransportPort",
    "sourcePodName",
    "sourceTransportPort",
    "protocolIdentifier",
  ]);
  decodeMessage(message([encodeTemplateSet([tmpl(300, fields)])]), store);
  const m = decodeMessage(message([rawSet(300, [0, 1, 1, 97, 0, 2, 6])]), store);
  assert.deepEqual(m.dataSets[0].records[0], {
    sourceTransportPort: 1,
    sourcePodName: "a",
    protocolIdentifier: 6,
  });
});

Deno.test("a template repeating an element is reported when stored (the repeats' values are not kept)", () => {
  // The review's template: sourceTransportPort twice; only the first value reaches the record.
  const store = new TemplateStore();
  const twice = fieldsFor(["sourceTransportPort", "sourceTransportPort"]);
  const m = decodeMessage(
    message([encodeTemplateSet([tmpl(300, twice), tmpl(301, PORTS)])]),
    store,
  );
  assert.deepEqual(m.duplicateFieldTemplates, [300]);
  assert.equal(store.get(DOMAIN, 300)?.duplicateFields, 1);
  assert.equal(store.get(DOMAIN, 301)?.duplicateFields, 0);
  // Three of one element: two values not kept, one template reported.
  const thrice = fieldsFor(["protocolIdentifier", "protocolIdentifier", "protocolIdentifier"]);
  const m2 = decodeMessage(message([encodeTemplateSet([tmpl(302, thrice)])]), store);
  assert.deepEqual(m2.duplicateFieldTemplates, [302]);
  assert.equal(store.get(DOMAIN, 302)?.duplicateFields, 2);
  // Nothing per record: data sets report nothing.
  const data = decodeMessage(message([rawSet(300, [0, 1, 0, 2])]), store);
  assert.deepEqual(data.duplicateFieldTemplates, []);
  assert.deepEqual(data.dataSets[0].records, [{ sourceTransportPort: 1 }]);
});

Deno.test("data before its template in one message is a miss; after it, decoded", () => {
  const store = new TemplateStore();
  const t = tmpl(300, PORTS);
  const data = encodeDataSet(300, PORTS, [{ sourceTransportPort: 1, destinationTransportPort: 2 }]);
  const m = decodeMessage(message([data, encodeTemplateSet([t]), data]), store);
  assert.deepEqual(m.templateMisses, [300]);
  assert.equal(m.dataSets.length, 1);
});

Deno.test("templates are scoped by observation domain", () => {
  const store = new TemplateStore();
  decodeMessage(TEMPLATE_MSG, store);
  const other = DATA_MSG.slice();
  other[15] ^= 1; // different observation domain id
  const m = decodeMessage(other, store);
  assert.deepEqual(m.templateMisses, [256]);
  assert.equal(m.dataSets.length, 0);
});

Deno.test("header-only message and empty data set decode to nothing without errors", () => {
  const store = new TemplateStore();
  decodeMessage(message([encodeTemplateSet([tmpl(300, PORTS)])]), store);
  const m1 = decodeMessage(message([]), store);
  assert.deepEqual([m1.dataSets, m1.setErrors], [[], []]);
  const m2 = decodeMessage(message([rawSet(300, [])]), store);
  assert.deepEqual([m2.dataSets, m2.setErrors, m2.templateMisses], [[], [], []]);
});

Deno.test("message-level errors throw IpfixDecodeError with a reason", () => {
  const store = new TemplateStore();
  throwsReason(() => decodeMessage(new Uint8Array(10), store), "truncated");
  const v9 = DATA_MSG.slice();
  v9[1] = 9;
  throwsReason(() => decodeMessage(v9, store), "badVersion");
  throwsReason(() => decodeMessage(DATA_MSG.subarray(0, 100), store), "badLength");
  throwsReason(() => decodeMessage(concat(DATA_MSG, new Uint8Array(1)), store), "badLength");
  const len0 = DATA_MSG.slice();
  len0[2] = 0;
  len0[3] = 0;
  throwsReason(() => decodeMessage(len0, store), "badLength");
});

Deno.test("a set length < 4 or past the message end is badSetLength and stops the walk", () => {
  const store = new TemplateStore();
  const t = encodeTemplateSet([tmpl(300, PORTS)]);
  const tooLong = rawSet(300, [1, 2, 3, 4]);
  tooLong[3] = 200;
  const m = decodeMessage(message([t, tooLong]), store);
  assert.deepEqual(m.setErrors, [{ setId: 300, reason: "badSetLength" }]);
  assert.equal(m.templateRecords, 1);
  const short = rawSet(300, [1, 2, 3, 4]);
  short[3] = 2;
  assert.deepEqual(decodeMessage(message([short]), store).setErrors, [{
    setId: 300,
    reason: "badSetLength",
  }]);
  const cut = encodeMessage({ exportTime: 0, sequenceNumber: 0, observationDomainId: 0 }, [
    new Uint8Array([0, 2]),
  ]);
  assert.deepEqual(decodeMessage(cut, store).setErrors, [{ setId: -1, reason: "truncated" }]);
});

Deno.test("readMessageLength frames TCP streams and reports truncation", () => {
  const stream = concat(TEMPLATE_MSG, DATA_MSG);
  assert.equal(readMessageLength(stream), 288);
  assert.equal(readMessageLength(stream, 288), 175);
  throwsReason(() => readMessageLength(stream, stream.length - 3), "truncated");
});

Deno.test("decodes from a subarray of a larger buffer (non-zero byteOffset)", () => {
  const store = new TemplateStore();
  decodeMessage(TEMPLATE_MSG, store);
  const big = concat(new Uint8Array(13), DATA_MSG, new Uint8Array(5));
  const m = decodeMessage(big.subarray(13, 13 + DATA_MSG.length), store);
  assert.equal(m.dataSets[0].records[0].sourcePodName, "perftest-a");
});

Deno.test("IPv6 text is exact for many distinct and repeated addresses (cached formatting)", () => {
  // Enough distinct addresses to overflow and collide in the decoder's text cache; repeats
  // must return the same text, and every text must match the address bytes.
  const t = tmpl(300, fieldsFor(["sourceIPv6Address", "destinationIPv6Address"]));
  const expected: string[] = [];
  const records: Record<string, Uint8Array>[] = [];
  let x = 12345;
  for (let i = 0; i < 3000; i++) {
    const a = new Uint8Array(16);
    a[0] = 0xfd;
    for (let j = 10; j < 16; j++) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      a[j] = (x >>> 16) & (i % 3 === 0 ? 0 : 0xff); // some with zero runs at the end
    }
    const hex = Array.from({ length: 8 }, (_, g) => ((a[2 * g] << 8) | a[2 * g + 1]).toString(16));
    expected.push(hex.join(":"));
    records.push({ sourceIPv6Address: a, destinationIPv6Address: a });
  }
  const store = new TemplateStore();
  for (let round = 0; round < 2; round++) {
    for (let i = 0; i < records.length; i += 100) {
      const msg = decodeMessage(templateAndData(t, records.slice(i, i + 100)), store);
      const got = msg.dataSets[0].records;
      for (let j = 0; j < got.length; j++) {
        const want = expected[i + j];
        const src = got[j].sourceIPv6Address as string;
        assert.equal(src, got[j].destinationIPv6Address);
        // Compare numerically: the text is RFC 5952 (compressed), the expectation is not.
        const words = (s: string): string => {
          const [l, r = ""] = s.split("::");
          const left = l === "" ? [] : l.split(":");
          const right = s.includes("::") ? (r === "" ? [] : r.split(":")) : [];
          const mid = new Array(8 - left.length - right.length).fill("0");
          return [...left, ...(s.includes("::") ? mid : []), ...right]
            .map((g) => parseInt(g, 16)).join(",");
        };
        assert.equal(words(src), words(want), `record ${i + j}: ${src} vs ${want}`);
      }
    }
  }
});

Deno.test("four or more zero bytes ending a template set are padding, not a withdrawal of id 0", () => {
  // Found by a differential review against tshark: template 256 followed by 4 zero bytes was
  // read as a withdrawal of template id 0 (badTemplate), losing template 256.
  for (const zeros of [4, 5, 8, 12]) {
    const store = new TemplateStore();
    const t256 = [...hex("01000001 00040001")];
    const m = decodeMessage(message([rawSet(2, [...t256, ...new Array(zeros).fill(0)])]), store);
    assert.deepEqual(m.setErrors, [], `${zeros} zero bytes`);
    assert.deepEqual(m.templatesRefused, [], `${zeros} zero bytes`);
    assert.equal(m.templateRecords, 1, `${zeros} zero bytes`);
    const data = decodeMessage(message([hex("01000005 06")]), store);
    assert.deepEqual(data.dataSets[0]?.records, [{ protocolIdentifier: 6 }], `${zeros} zero bytes`);
  }
  // The same in an options template set.
  const store = new TemplateStore();
  const opt = [...hex("01900001 0001 00040001")];
  const m = decodeMessage(message([rawSet(3, [...opt, 0, 0, 0, 0, 0, 0])]), store);
  assert.deepEqual([m.setErrors, m.templatesRefused, m.templateRecords], [[], [], 1]);
});

Deno.test("id 0 with a field count 0 followed by non-zero bytes is not padding: refused alone", () => {
  const store = new TemplateStore();
  const body = [...hex("01000001 00040001"), 0, 0, 0, 0, ...hex("01010001 00070002")];
  const m = decodeMessage(message([rawSet(2, body)]), store);
  assert.deepEqual(m.setErrors, []);
  assert.deepEqual(m.templatesRefused.map((r) => [r.reason, r.firstTemplateId]), [[
    "badTemplate",
    0,
  ]]);
  assert.equal(m.templateRecords, 2);
});
