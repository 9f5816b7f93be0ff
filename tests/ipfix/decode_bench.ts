/**
 * Decode throughput of the 39-field Antrea Agent IPv4 record (`deno bench tests/ipfix/`).
 * Target: >= 1,000,000 records/s on one core. Each iteration decodes one whole golden data
 * message (one record), like the collector does for Agent traffic; a second bench packs 50
 * records per message to show the per-record cost without per-message overhead.
 */
import {
  decodeMessage,
  encodeDataSet,
  encodeMessage,
  RecordEncoder,
  TemplateStore,
} from "../../src/ipfix/mod.ts";
import { fieldsFor } from "../../src/ipfix/mod.ts";
import { AGENT_IPV4_FIELDS } from "../../src/record/schema.ts";
import { DATA_MSG, DATA_RECORD, TEMPLATE_MSG } from "./golden.ts";

const store = new TemplateStore();
decodeMessage(TEMPLATE_MSG, store);

const RECORDS = 50;
const multi = encodeMessage(
  { exportTime: 1700000010, sequenceNumber: 1, observationDomainId: 0x33de13e2 },
  [encodeDataSet(256, fieldsFor(AGENT_IPV4_FIELDS), new Array(RECORDS).fill(DATA_RECORD))],
);

let sink = 0;

Deno.bench("decode Agent IPv4 message, 1 record", () => {
  sink += decodeMessage(DATA_MSG, store).dataSets[0].records.length;
});

Deno.bench(`decode Agent IPv4 message, ${RECORDS} records (per message)`, () => {
  sink += decodeMessage(multi, store).dataSets[0].records.length;
});

const encoder = new RecordEncoder(256, fieldsFor(AGENT_IPV4_FIELDS));
const encBuf = new DataView(new ArrayBuffer(65535));

Deno.bench("encode Agent IPv4 record (RecordEncoder, reused buffer)", () => {
  sink += encoder.write(encBuf, 0, DATA_RECORD);
});

globalThis.addEventListener("unload", () => {
  if (sink < 0) throw new Error("unreachable");
});
