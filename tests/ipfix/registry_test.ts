import assert from "node:assert/strict";
import {
  ALL_ELEMENTS,
  elementByName,
  fieldName,
  fieldsFor,
  lookupElement,
  PEN,
  registerElement,
} from "../../src/ipfix/mod.ts";

const CSV = new URL("../../src/ipfix/ie_registry.csv", import.meta.url);

Deno.test("ALL_ELEMENTS holds exactly the rows of ie-registry.csv", () => {
  const text = Deno.readTextFileSync(CSV);
  const rows = text.trim().split("\n").slice(1).map((l) => l.split(","));
  assert.equal(ALL_ELEMENTS.length, rows.length);
  assert.equal(ALL_ELEMENTS.length, 73);
  rows.forEach(([name, id, pen, type, len], i) => {
    assert.deepEqual(ALL_ELEMENTS[i], {
      name,
      id: Number(id),
      enterprise: Number(pen),
      type,
      length: Number(len),
    });
  });
});

Deno.test("lookup by (enterprise, id) distinguishes ids shared across PENs", () => {
  assert.equal(lookupElement(0, 136)?.name, "flowEndReason");
  assert.equal(lookupElement(PEN.ANTREA, 136)?.name, "tcpState");
  assert.equal(lookupElement(0, 150)?.name, "flowStartSeconds");
  assert.equal(lookupElement(PEN.ANTREA, 150)?.name, "reverseThroughputFromDestinationNode");
  assert.equal(lookupElement(PEN.IANA_REVERSE, 86)?.name, "reversePacketTotalCount");
  assert.equal(lookupElement(0, 86)?.name, "packetTotalCount");
  assert.equal(lookupElement(0, 999), undefined);
  assert.equal(lookupElement(777, 1), undefined);
});

Deno.test("lookup by name returns the registry entry", () => {
  assert.deepEqual(elementByName("destinationClusterIPv6"), {
    name: "destinationClusterIPv6",
    id: 107,
    enterprise: 56506,
    type: "ipv6Address",
    length: 16,
  });
  assert.equal(elementByName("flowEndSecondsFromSourceNode")?.type, "dateTimeSeconds");
  assert.equal(elementByName("egressIP")?.type, "string");
  assert.equal(elementByName("noSuchElement"), undefined);
});

Deno.test("fieldName gives the registry name or <pen>/<id>", () => {
  assert.equal(fieldName(56506, 101), "sourcePodName");
  assert.equal(fieldName(0, 999), "0/999");
});

Deno.test("fieldsFor returns registry lengths and throws on unknown names", () => {
  assert.deepEqual(fieldsFor(["sourcePodName", "octetDeltaCount", "reverseOctetDeltaCount"]), [
    { id: 101, enterprise: 56506, length: 65535 },
    { id: 1, enterprise: 0, length: 8 },
    { id: 1, enterprise: 29305, length: 8 },
  ]);
  assert.throws(() => fieldsFor(["bogus"]), /bogus/);
});

Deno.test("registerElement adds elements and refuses conflicts", () => {
  const ie = {
    name: "regTestCounter",
    id: 77,
    enterprise: 31337,
    type: "unsigned64",
    length: 8,
  } as const;
  registerElement(ie);
  registerElement(ie); // identical: no-op
  assert.equal(lookupElement(31337, 77)?.name, "regTestCounter");
  assert.throws(() => registerElement({ ...ie, type: "unsigned32", length: 4 }));
  assert.throws(() => registerElement({ ...ie, name: "sourcePodName" }));
});

Deno.test("registry_data.ts is what scripts/gen_ie_registry.ts writes from the CSV", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const out = `${dir}/registry_data.ts`;
    const gen = new URL("../../scripts/gen_ie_registry.ts", import.meta.url).pathname;
    const { code } = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--allow-read", `--allow-write=${out}`, gen, CSV.pathname, out],
      stdout: "null",
    }).output();
    assert.equal(code, 0);
    const committed = new URL("../../src/ipfix/registry_data.ts", import.meta.url);
    assert.equal(Deno.readTextFileSync(out), Deno.readTextFileSync(committed));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
