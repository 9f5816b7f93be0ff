import assert from "node:assert/strict";
import { ManualClock } from "../../src/clock.ts";
import { fieldsFor, IpfixDecodeError, TemplateStore } from "../../src/ipfix/mod.ts";

const T = {
  id: 256,
  fields: fieldsFor(["sourceTransportPort", "sourcePodName"]),
  scopeFieldCount: 0,
};
const TTL = 5_400_000;

Deno.test("template expires exactly TTL after it was set", () => {
  const clock = new ManualClock();
  const store = new TemplateStore({ ttlMs: TTL, clock });
  store.set(1, T);
  clock.advance(TTL - 1);
  assert.ok(store.get(1, 256));
  clock.advance(1);
  assert.equal(store.get(1, 256), undefined);
  assert.equal(store.size, 0);
});

Deno.test("refresh at exactly TTL keeps the template and pushes expiry forward", () => {
  const clock = new ManualClock();
  const store = new TemplateStore({ ttlMs: TTL, clock });
  const first = store.set(1, T);
  clock.advance(TTL);
  const again = store.set(1, T); // refresh lands at exactly the TTL
  assert.equal(again, first, "identical refresh reuses the compiled template");
  assert.ok(store.get(1, 256));
  clock.advance(TTL - 1);
  assert.ok(store.get(1, 256));
  clock.advance(1);
  assert.equal(store.get(1, 256), undefined);
});

Deno.test("ttl 0 or absent never expires", () => {
  const clock = new ManualClock();
  for (const store of [new TemplateStore({ clock }), new TemplateStore({ ttlMs: 0, clock })]) {
    store.set(1, T);
    clock.advance(1e12);
    assert.ok(store.get(1, 256));
    assert.equal(store.size, 1);
  }
});

Deno.test("size purges expired templates", () => {
  const clock = new ManualClock();
  const store = new TemplateStore({ ttlMs: 1000, clock });
  store.set(1, T);
  clock.advance(500);
  store.set(2, T);
  assert.equal(store.size, 2);
  clock.advance(500);
  assert.equal(store.size, 1);
});

Deno.test("templates are keyed by (domain, id) and a redefinition replaces", () => {
  const store = new TemplateStore();
  store.set(1, T);
  store.set(2, { ...T, fields: fieldsFor(["protocolIdentifier"]) });
  assert.deepEqual(store.get(1, 256)?.names, ["sourceTransportPort", "sourcePodName"]);
  assert.deepEqual(store.get(2, 256)?.names, ["protocolIdentifier"]);
  store.set(1, { ...T, fields: fieldsFor(["flowType"]) });
  assert.deepEqual(store.get(1, 256)?.names, ["flowType"]);
  assert.equal(store.get(1, 257), undefined);
});

Deno.test("compiled template exposes min record length and options flag", () => {
  const store = new TemplateStore();
  const ct = store.set(1, { id: 300, fields: T.fields, scopeFieldCount: 1 });
  assert.equal(ct.minRecordLength, 3);
  assert.equal(ct.options, true);
  const out: Record<string, unknown>[] = [];
  const bytes = new Uint8Array([0, 80, 2, 104, 105, 0, 81, 0, 9]);
  const next = ct.decodeRecords(bytes, 0, bytes.length, out as never);
  assert.equal(next, 8); // one padding byte left
  assert.deepEqual(out, [
    { sourceTransportPort: 80, sourcePodName: "hi" },
    { sourceTransportPort: 81, sourcePodName: "" },
  ]);
});

Deno.test("invalid template throws badTemplate and keeps the previous definition", () => {
  const store = new TemplateStore();
  store.set(1, T);
  assert.throws(
    () => store.set(1, { ...T, fields: [{ id: 7, enterprise: 0, length: 3 }] }),
    (e: unknown) => e instanceof IpfixDecodeError && e.reason === "badTemplate",
  );
  assert.throws(() => store.set(1, { ...T, id: 255 }), IpfixDecodeError);
  assert.throws(() => store.set(1, { ...T, fields: [] }), IpfixDecodeError);
  assert.deepEqual(store.get(1, 256)?.names, ["sourceTransportPort", "sourcePodName"]);
});

Deno.test("withdraw removes one template, or all data (2) / all options (3) of a domain", () => {
  const store = new TemplateStore();
  store.set(1, T);
  store.set(1, { ...T, id: 257 });
  store.set(1, { ...T, id: 258, scopeFieldCount: 1 });
  store.set(2, T);
  store.withdraw(1, 257);
  assert.equal(store.get(1, 257), undefined);
  store.withdraw(1, 2);
  assert.equal(store.get(1, 256), undefined);
  assert.ok(store.get(1, 258));
  assert.ok(store.get(2, 256), "other domain untouched");
  store.withdraw(1, 3);
  assert.equal(store.get(1, 258), undefined);
  assert.throws(() => store.withdraw(1, 17), IpfixDecodeError);
  store.clear();
  assert.equal(store.size, 0);
});
