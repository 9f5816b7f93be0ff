import assert from "node:assert/strict";
import { ManualClock } from "../../src/clock.ts";
import {
  decodeMessage,
  decoderTier,
  encodeDataSet,
  encodeTemplateSet,
  fieldsFor,
  type FieldSpecifier,
  GENERATED_MAX_FIELDS,
  LAYOUT_OVERHEAD_FIELDS,
  REFUSALS_REMEMBERED,
  TemplateBudget,
  TemplateLayouts,
  TemplateStore,
} from "../../src/ipfix/mod.ts";
import { decoderTiers } from "../../src/ipfix/compile.ts";
import { AGENT_IPV4_FIELDS } from "../../src/record/schema.ts";
import { DOMAIN, message, rawSet, tmpl } from "./helpers.ts";

/** `n` one-byte fields of unknown elements (kept raw under `4242/<id>`). */
function wideFields(n: number): FieldSpecifier[] {
  return Array.from({ length: n }, (_, i) => ({ id: 1000 + i, enterprise: 4242, length: 1 }));
}

/** A data set of `records` records of `width` one-byte fields, byte value = record index. */
function wideData(id: number, width: number, records: number): Uint8Array {
  const body = new Uint8Array(width * records);
  for (let r = 0; r < records; r++) body.fill(r, r * width, (r + 1) * width);
  return rawSet(id, body);
}

const PORTS = fieldsFor(["sourceTransportPort", "destinationTransportPort"]);

Deno.test("a template wider than maxFieldsPerTemplate is refused and its data counted dropped", () => {
  const store = new TemplateStore({ maxFieldsPerTemplate: 1024 });
  decodeMessage(message([encodeTemplateSet([tmpl(400, PORTS)])]), store);
  // The same id redefined 4,000 fields wide: the old definition must not decode the new data.
  const m = decodeMessage(message([encodeTemplateSet([tmpl(400, wideFields(4000))])]), store);
  assert.deepEqual(m.templatesRefused, [{ reason: "tooWide", templates: 1, firstTemplateId: 400 }]);
  assert.equal(m.templateRecords, 0);
  assert.equal(store.get(DOMAIN, 400), undefined);
  const d = decodeMessage(message([wideData(400, 4000, 3)]), store);
  assert.deepEqual(d.dataSets, []);
  assert.deepEqual(d.templateMisses, []);
  assert.deepEqual(d.recordsDropped, [{ setId: 400, reason: "templateRefused", records: 3 }]);
  // A template at the bound is accepted.
  const ok = decodeMessage(message([encodeTemplateSet([tmpl(401, wideFields(1024))])]), store);
  assert.equal(ok.templateRecords, 1);
  assert.deepEqual(ok.templatesRefused, []);
});

Deno.test("too-wide skip: enterprise field specifiers and the templates after it in the set", () => {
  const store = new TemplateStore({ maxFieldsPerTemplate: 4 });
  const wide = tmpl(402, [...wideFields(3), { id: 7, enterprise: 0, length: 65535 }, ...PORTS]);
  const m = decodeMessage(message([encodeTemplateSet([wide, tmpl(403, PORTS)])]), store);
  assert.deepEqual(m.templatesRefused, [{ reason: "tooWide", templates: 1, firstTemplateId: 402 }]);
  assert.equal(m.templateRecords, 1);
  assert.deepEqual(store.get(DOMAIN, 403)?.names, [
    "sourceTransportPort",
    "destinationTransportPort",
  ]);
  // Smallest record: 3 + 1 (variable) + 4 = 8 bytes; 17 bytes of data = 2 records at most.
  const d = decodeMessage(message([rawSet(402, new Uint8Array(17))]), store);
  assert.deepEqual(d.recordsDropped, [{ setId: 402, reason: "templateRefused", records: 2 }]);
});

Deno.test("templates wider than GENERATED_MAX_FIELDS stay on the generic decoder; Agent's tier up", () => {
  const store = new TemplateStore();
  const width = GENERATED_MAX_FIELDS + 1;
  const agent = fieldsFor(AGENT_IPV4_FIELDS);
  assert.ok(agent.length < GENERATED_MAX_FIELDS);
  decodeMessage(message([encodeTemplateSet([tmpl(500, wideFields(width))])]), store);
  decodeMessage(message([encodeTemplateSet([tmpl(501, agent)])]), store);
  for (let i = 0; i < 20; i++) {
    const m = decodeMessage(message([wideData(500, width, 2)]), store);
    assert.equal(m.dataSets[0].records.length, 2);
    assert.equal(m.dataSets[0].records[1][`4242/${1000 + width - 1}`].toString(), "1");
    decodeMessage(message([encodeDataSet(501, agent, [{}])]), store);
  }
  assert.equal(decoderTier(store.get(DOMAIN, 500)!), "generic");
  assert.equal(decoderTier(store.get(DOMAIN, 501)!), "generated");
});

Deno.test("templates per session: one over the bound is refused, a withdrawal frees its place", () => {
  const store = new TemplateStore({ maxTemplates: 2 });
  const m = decodeMessage(
    message([encodeTemplateSet([tmpl(256, PORTS), tmpl(257, PORTS), tmpl(258, PORTS)])]),
    store,
  );
  assert.equal(m.templateRecords, 2);
  assert.deepEqual(m.templatesRefused, [{
    reason: "sessionFull",
    templates: 1,
    firstTemplateId: 258,
  }]);
  // A re-announcement or a redefinition of a held template needs no new place.
  const again = decodeMessage(
    message([encodeTemplateSet([tmpl(257, fieldsFor(["flowType"]))])]),
    store,
  );
  assert.equal(again.templateRecords, 1);
  const d = decodeMessage(message([encodeDataSet(258, PORTS, [{}, {}])]), store);
  assert.deepEqual(d.recordsDropped, [{ setId: 258, reason: "templateRefused", records: 2 }]);
  store.withdraw(DOMAIN, 256);
  const after = decodeMessage(message([encodeTemplateSet([tmpl(258, PORTS)])]), store);
  assert.equal(after.templateRecords, 1);
  assert.equal(decodeMessage(message([encodeDataSet(258, PORTS, [{}])]), store).dataSets.length, 1);
});

Deno.test("templates in total: stores share one budget; closing or expiry gives it back", () => {
  const clock = new ManualClock();
  const budget = new TemplateBudget({ maxTemplates: 3 });
  const a = new TemplateStore({ budget });
  const b = new TemplateStore({ budget, ttlMs: 1000, clock });
  a.set(1, tmpl(256, PORTS));
  a.set(1, tmpl(257, PORTS));
  b.set(1, tmpl(256, PORTS));
  assert.equal(budget.used, 3);
  const m = decodeMessage(message([encodeTemplateSet([tmpl(258, PORTS)])], 1), b);
  assert.deepEqual(m.templatesRefused, [{
    reason: "totalFull",
    templates: 1,
    firstTemplateId: 258,
  }]);
  assert.throws(() => a.set(1, tmpl(259, PORTS)), /refused: totalFull/);
  // b's template expires: the next template taking its place purges it first.
  clock.advance(1000);
  b.set(1, tmpl(260, PORTS));
  assert.equal(budget.used, 3);
  a.clear();
  assert.equal(budget.used, 1);
  b.withdraw(1, 2);
  assert.equal(budget.used, 0);
});

Deno.test("refused (domain, id) pairs remembered are bounded; older data becomes a miss", () => {
  const store = new TemplateStore({ maxTemplates: 1 });
  store.set(DOMAIN, tmpl(256, PORTS));
  const many = Array.from({ length: REFUSALS_REMEMBERED + 4 }, (_, i) => tmpl(300 + i, PORTS));
  const m = decodeMessage(message([encodeTemplateSet(many)]), store);
  assert.deepEqual(m.templatesRefused, [
    { reason: "sessionFull", templates: many.length, firstTemplateId: 300 },
  ]);
  const oldest = decodeMessage(message([encodeDataSet(300, PORTS, [{}])]), store);
  assert.deepEqual(oldest.templateMisses, [300]);
  const newest = decodeMessage(message([encodeDataSet(300 + many.length - 1, PORTS, [{}])]), store);
  assert.equal(newest.recordsDropped[0].reason, "templateRefused");
});

const NAME = fieldsFor(["sourcePodName"]);

Deno.test("maxStringBytes: longer strings are cut on a UTF-8 boundary and counted", () => {
  const store = new TemplateStore({ maxStringBytes: 8 });
  decodeMessage(message([encodeTemplateSet([tmpl(600, NAME)])]), store);
  const values = ["short", "exactly8", "abcdefghij", "abcdefgé", "abcdef€x", "a".repeat(300)];
  const want = ["short", "exactly8", "abcdefgh", "abcdefg", "abcdef", "aaaaaaaa"];
  // Both tiers: the first data sets run the generic decoder, later ones the generated one.
  for (let round = 0; round < 12; round++) {
    const m = decodeMessage(
      message([encodeDataSet(600, NAME, values.map((v) => ({ sourcePodName: v })))]),
      store,
    );
    assert.deepEqual(m.dataSets[0].records.map((r) => r.sourcePodName), want, `round ${round}`);
    assert.equal(m.stringsTruncated, 4);
  }
  assert.equal(decoderTier(store.get(DOMAIN, 600)!), "generated");
});

Deno.test("maxStringBytes applies to fixed-length string fields in both tiers", () => {
  const fields = [{ ...NAME[0], length: 12 }];
  const bytes = new TextEncoder().encode("0123456789ab");
  for (
    const [tier, decode] of Object.entries(decoderTiers(tmpl(601, fields), { maxStringBytes: 5 }))
  ) {
    const out: Record<string, unknown>[] = [];
    decode(bytes, 0, bytes.length, out as never);
    assert.deepEqual(out, [{ sourcePodName: "01234" }], tier);
  }
});

Deno.test("identical field lists share one layout; distinct layouts are bounded in fields", () => {
  const O = LAYOUT_OVERHEAD_FIELDS; // each layout's fixed cost, in fields
  const budget = new TemplateBudget({ maxLayoutFields: 8 + O + 2 + O });
  const a = new TemplateStore({ budget });
  const b = new TemplateStore({ budget });
  const eight = wideFields(8);
  const first = a.set(1, tmpl(256, eight));
  // Another session's identical list (parsed into new objects) shares the held one.
  const second = b.set(1, tmpl(300, eight.map((f) => ({ ...f }))));
  assert.equal(second.template.fields, first.template.fields);
  assert.equal(second.decodeRecords, first.decodeRecords);
  assert.equal(budget.layouts.size, 1);
  assert.equal(budget.layouts.fields, 8 + O);
  // A new 3-field list would not fit, a 2-field one just fits.
  const m = decodeMessage(message([encodeTemplateSet([tmpl(301, wideFields(3))])], 1), b);
  assert.deepEqual(m.templatesRefused, [{
    reason: "layoutsFull",
    templates: 1,
    firstTemplateId: 301,
  }]);
  assert.equal(budget.used, 2, "the refused template gave its unit back");
  b.set(1, tmpl(302, PORTS));
  assert.equal(budget.layouts.fields, budget.layouts.maxFields);
  // The shared layout lives until its last template goes.
  a.clear();
  assert.equal(budget.layouts.fields, budget.layouts.maxFields);
  b.withdraw(1, 300);
  assert.equal(budget.layouts.fields, 2 + O);
  b.clear();
  assert.deepEqual([budget.used, budget.layouts.size, budget.layouts.fields], [0, 0, 0]);
});

Deno.test("two templates of one new layout in one set end up on one shared decoder", () => {
  const budget = new TemplateBudget();
  const store = new TemplateStore({ budget });
  decodeMessage(message([encodeTemplateSet([tmpl(256, PORTS), tmpl(257, PORTS)])]), store);
  assert.equal(store.get(DOMAIN, 256)!.decodeRecords, store.get(DOMAIN, 257)!.decodeRecords);
  assert.equal(budget.layouts.size, 1);
});

Deno.test("generated code is limited to a number of layouts; a released slot is reused", () => {
  const layouts = new TemplateLayouts({ maxGenerated: 1 });
  const x = layouts.hold(layouts.compile(tmpl(256, PORTS))!)!;
  const y = layouts.hold(layouts.compile(tmpl(257, fieldsFor(["flowType"])))!)!;
  const run = (ct: typeof x): void => {
    for (let i = 0; i < 12; i++) ct.decodeRecords(new Uint8Array(4), 0, 4, []);
  };
  run(x);
  run(y);
  assert.deepEqual([decoderTier(x), decoderTier(y)], ["generated", "generic"]);
  layouts.release(x);
  assert.equal(decoderTier(x), "generic", "released: generated code dropped");
  run(y);
  assert.equal(decoderTier(y), "generated");
});

Deno.test("a full store with a TTL walks its entries only once the earliest expiry passed", () => {
  const clock = new ManualClock();
  const store = new TemplateStore({ maxTemplates: 2, ttlMs: 1000, clock });
  store.set(1, tmpl(256, PORTS));
  clock.advance(400);
  store.set(1, tmpl(257, PORTS));
  assert.throws(() => store.set(1, tmpl(258, PORTS)), /sessionFull/);
  assert.equal(store.purgeExpired(), 0);
  clock.advance(600); // 256 expires now, 257 at 1400
  store.set(1, tmpl(258, PORTS));
  assert.deepEqual(store.list().map((e) => e.template.template.id).sort(), [257, 258]);
  clock.advance(400);
  assert.equal(store.purgeExpired(), 1, "257 expired");
  clock.advance(600);
  assert.equal(store.purgeExpired(), 1, "258 expired");
  // Empty again: a new template must still be purged when it expires.
  store.set(1, tmpl(259, PORTS));
  clock.advance(1000);
  assert.equal(store.size, 0);
});

Deno.test("a template announced on the wire with a held field list shares it", () => {
  const budget = new TemplateBudget();
  const a = new TemplateStore({ budget });
  const b = new TemplateStore({ budget });
  const agent = fieldsFor(AGENT_IPV4_FIELDS);
  decodeMessage(message([encodeTemplateSet([tmpl(256, agent)])]), a);
  const m = decodeMessage(message([encodeTemplateSet([tmpl(256, agent), tmpl(257, agent)])]), b);
  assert.equal(m.templateRecords, 2);
  const held = a.get(DOMAIN, 256)!;
  for (const id of [256, 257]) {
    const ct = b.get(DOMAIN, id)!;
    assert.equal(ct.template.id, id);
    assert.equal(ct.template.fields, held.template.fields);
    assert.equal(ct.decodeRecords, held.decodeRecords);
  }
  assert.equal(budget.layouts.size, 1);
  const d = decodeMessage(message([encodeDataSet(257, agent, [{ sourceTransportPort: 7 }])]), b);
  assert.equal(d.dataSets[0].records[0].sourceTransportPort, 7);
});

Deno.test("a redefinition whose new field list does not fit removes the old definition", () => {
  const budget = new TemplateBudget({ maxLayoutFields: 2 * (2 + LAYOUT_OVERHEAD_FIELDS) });
  const store = new TemplateStore({ budget });
  decodeMessage(message([encodeTemplateSet([tmpl(256, PORTS), tmpl(257, NAME)])]), store);
  const m = decodeMessage(message([encodeTemplateSet([tmpl(256, wideFields(3))])]), store);
  assert.deepEqual(m.templatesRefused, [
    { reason: "layoutsFull", templates: 1, firstTemplateId: 256 },
  ]);
  assert.equal(store.get(DOMAIN, 256), undefined, "old definition gone: its data would be misread");
  const d = decodeMessage(message([encodeDataSet(256, wideFields(3), [{}])]), store);
  assert.deepEqual(d.recordsDropped, [{ setId: 256, reason: "templateRefused", records: 1 }]);
});

Deno.test("an invalid template takes no room from the set's other templates", () => {
  // Room for one template of one 2-field layout: the invalid one before it must not use it up.
  const budget = new TemplateBudget({
    maxTemplates: 1,
    maxLayoutFields: 2 + LAYOUT_OVERHEAD_FIELDS,
  });
  const store = new TemplateStore({ budget });
  const bad = tmpl(300, [{ id: 7, enterprise: 0, length: 4 }]); // sourceTransportPort in 4 bytes
  const m = decodeMessage(message([encodeTemplateSet([bad, tmpl(301, PORTS)])], 1), store);
  assert.deepEqual(m.templatesRefused.map((r) => r.reason), ["badTemplate"]);
  assert.equal(m.templateRecords, 1);
  assert.ok(store.get(1, 301));
  assert.equal(budget.layouts.fields, 2 + LAYOUT_OVERHEAD_FIELDS);
});
