import assert from "node:assert/strict";
import {
  decodeMessage,
  encodeDataSet,
  encodeMessage,
  encodeTemplateSet,
  fieldsFor,
  IpfixEncodeError,
  MessageBuilder,
  RecordEncoder,
  TemplateStore,
  writeMessageHeader,
  writeSetHeader,
} from "../../src/ipfix/mod.ts";
import { tmpl } from "./helpers.ts";
import { hex } from "./golden.ts";

const PORTS = fieldsFor(["sourceTransportPort", "destinationTransportPort"]); // 4-byte records
const STATE = fieldsFor(["tcpState"]); // variable length
const header = (seq: number) => ({
  exportTime: 1700000000,
  sequenceNumber: seq,
  observationDomainId: 7,
});

/** Writes `count` 4-byte port records of set 300 with the exporter's packing rule. */
function pack(out: MessageBuilder, count: number, maxMessageBytes: number): void {
  const enc = new RecordEncoder(300, PORTS);
  for (let i = 0; i < count; i++) {
    const at = out.reserveRecord(300, 4, maxMessageBytes, header(i));
    enc.write(out.view, at, { sourceTransportPort: i, destinationTransportPort: 80 });
    out.commit(4);
  }
  out.endMessage();
}

Deno.test("headers: version 10, lengths and the chosen fields, as encodeMessage writes them", () => {
  const m = new Uint8Array(24);
  const v = new DataView(m.buffer);
  writeMessageHeader(v, 0, 24, {
    exportTime: 0x01020304,
    sequenceNumber: -1,
    observationDomainId: 9,
  });
  writeSetHeader(v, 16, 300, 8);
  assert.deepEqual(m.subarray(0, 20), hex("000a 0018 01020304 ffffffff 00000009 012c 0008"));
  const set = new Uint8Array([1, 44, 0, 8, 0, 0, 0, 0]);
  assert.deepEqual(
    encodeMessage({ exportTime: 0x01020304, sequenceNumber: 0xffffffff, observationDomainId: 9 }, [
      set,
    ]),
    m,
  );
});

Deno.test("appendMessage: one record per message, back to back, decodable one by one", () => {
  const out = new MessageBuilder(32); // grows as needed
  const enc = new RecordEncoder(300, PORTS);
  for (let i = 0; i < 100; i++) {
    const at = out.appendMessage(header(i + 1), 300, 4);
    enc.write(out.view, at, { sourceTransportPort: i, destinationTransportPort: 443 });
  }
  assert.equal(out.count, 100);
  assert.equal(out.length, 100 * 24);
  assert.equal(out.bytes().length, 2400);
  const store = new TemplateStore();
  decodeMessage(encodeMessage(header(0), [encodeTemplate(300)]), store);
  out.messages().forEach((m, i) => {
    const d = decodeMessage(m, store);
    assert.equal(d.header.sequenceNumber, i + 1);
    assert.equal(d.header.length, 24);
    assert.deepEqual(d.dataSets[0].records, [{
      sourceTransportPort: i,
      destinationTransportPort: 443,
    }]);
  });
  // The same bytes as the codec's one-shot functions.
  const first = encodeMessage(header(1), [
    encodeDataSet(300, PORTS, [{ sourceTransportPort: 0, destinationTransportPort: 443 }]),
  ]);
  assert.deepEqual(out.messages()[0], first);
});

Deno.test("reserveRecord: records share a message while it stays below the bound", () => {
  const out = new MessageBuilder();
  // 20 bytes of headers + 4 per record, strictly below 40: at most 4 records per message.
  pack(out, 10, 40);
  const sizes = out.messages().map((m) => m.length);
  assert.deepEqual(sizes, [36, 36, 28]);
  const store = new TemplateStore();
  decodeMessage(encodeMessage(header(0), [encodeTemplate(300)]), store);
  const decoded = out.messages().map((m) => decodeMessage(m, store));
  // Each message carries the header given when it was opened (its first record's).
  assert.deepEqual(decoded.map((d) => d.header.sequenceNumber), [0, 4, 8]);
  assert.deepEqual(
    decoded.flatMap((d) => d.dataSets[0].records.map((r) => r.sourceTransportPort)),
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
  );
});

Deno.test("reserveRecord: a new set id starts a new message (one set per message)", () => {
  const out = new MessageBuilder();
  const ports = new RecordEncoder(300, PORTS);
  const state = new RecordEncoder(301, STATE);
  let at = out.reserveRecord(300, 4, 65536, header(0));
  ports.write(out.view, at, { sourceTransportPort: 1 });
  out.commit(4);
  at = out.reserveRecord(301, 4, 65536, header(1));
  state.write(out.view, at, { tcpState: "FIN" });
  out.commit(4);
  at = out.reserveRecord(301, 6, 65536, header(2));
  state.write(out.view, at, { tcpState: "CLOSE" });
  out.commit(6);
  out.endMessage();
  const store = new TemplateStore();
  decodeMessage(encodeMessage(header(0), [encodeTemplate(300), encodeTemplate(301, STATE)]), store);
  const d = out.messages().map((m) => decodeMessage(m, store));
  assert.deepEqual(d.map((x) => x.dataSets.map((s) => s.templateId)), [[300], [301]]);
  assert.deepEqual(d[1].dataSets[0].records, [{ tcpState: "FIN" }, { tcpState: "CLOSE" }]);
  assert.equal(d[1].header.sequenceNumber, 1);
});

Deno.test("a record never committed leaves no trace; a message without records is dropped", () => {
  const out = new MessageBuilder();
  const enc = new RecordEncoder(300, PORTS);
  let at = out.reserveRecord(300, 4, 65536, header(0));
  assert.throws(() => enc.write(out.view, at, { sourceTransportPort: "x" }), IpfixEncodeError);
  at = out.reserveRecord(300, 4, 65536, header(0));
  enc.write(out.view, at, { sourceTransportPort: 5, destinationTransportPort: 6 });
  out.commit(4);
  out.reserveRecord(301, 4, 65536, header(1)); // opened, nothing committed
  out.endMessage();
  assert.equal(out.count, 1);
  assert.deepEqual(
    out.bytes(),
    encodeMessage(header(0), [
      encodeDataSet(300, PORTS, [{ sourceTransportPort: 5, destinationTransportPort: 6 }]),
    ]),
  );
  out.endMessage(); // nothing open: no-op
  assert.equal(out.count, 1);
});

Deno.test("a message over 65535 bytes is refused and dropped, the earlier ones kept", () => {
  const out = new MessageBuilder();
  out.appendMessage(header(0), 300, 4);
  assert.throws(() => out.appendMessage(header(1), 300, 65516), IpfixEncodeError);
  out.reserveRecord(300, 65000, 65536, header(1));
  out.commit(65000);
  out.reserveRecord(300, 1000, 70000, header(1)); // the caller's bound is too loose
  out.commit(1000);
  assert.throws(() => out.endMessage(), IpfixEncodeError);
  assert.equal(out.count, 1);
  assert.equal(out.length, 24);
  assert.equal(out.appendMessage(header(2), 300, 65515), 24 + 20, "65535 bytes is allowed");
  assert.equal(out.count, 2);
});

Deno.test("reset empties the builder and reuses its buffer", () => {
  const out = new MessageBuilder();
  pack(out, 10, 40);
  const buf = out.buffer;
  out.reset();
  assert.equal(out.count, 0);
  assert.equal(out.length, 0);
  assert.deepEqual(out.messages(), []);
  pack(out, 2, 40);
  assert.equal(out.buffer, buf);
  assert.deepEqual(out.messages().map((m) => m.length), [28]);
});

function encodeTemplate(id: number, fields = PORTS): Uint8Array {
  return encodeTemplateSet([tmpl(id, fields)]);
}
