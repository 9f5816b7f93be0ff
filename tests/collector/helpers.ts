/** Shared helpers for the collector tests: golden messages, message builders and clients. */

import {
  type DataRecord,
  encodeDataSet,
  encodeMessage,
  encodeTemplateSet,
  fieldsFor,
  type FieldSpecifier,
} from "../../src/ipfix/mod.ts";
import { AGENT_IPV4_FIELDS } from "../../src/record/schema.ts";
import { Collector, type CollectorOptions, type RecordContext } from "../../src/collector/mod.ts";
import { concat } from "../_helpers/bytes.ts";
import { DATA_MSG, TEMPLATE_MSG } from "../ipfix/golden.ts";

/** Golden template and data messages of ipfix.md §1.13 (domain 0x33de13e2, template 256). */
export { DATA_MSG as GOLDEN_DATA, TEMPLATE_MSG as GOLDEN_TEMPLATE } from "../ipfix/golden.ts";

/** Agent IPv4 field list (template 256 in the golden vectors). */
export const AGENT_FIELDS: FieldSpecifier[] = fieldsFor(AGENT_IPV4_FIELDS);

/** A small 5-field template for tests that need a second, different definition. */
export const SMALL_FIELDS: FieldSpecifier[] = fieldsFor([
  "sourceIPv4Address",
  "destinationIPv4Address",
  "sourceTransportPort",
  "destinationTransportPort",
  "packetTotalCount",
]);

/** A template message announcing template `id` (or each of several ids) with `fields`. */
export function templateMessage(
  domain: number,
  id: number | readonly number[],
  fields: FieldSpecifier[],
): Uint8Array {
  const ids = typeof id === "number" ? [id] : id;
  return encodeMessage(
    { exportTime: 1_700_000_000, sequenceNumber: 0, observationDomainId: domain },
    [encodeTemplateSet(ids.map((id) => ({ id, fields, scopeFieldCount: 0 })))],
  );
}

/** A data message with one data set. */
export function dataMessage(
  domain: number,
  id: number,
  fields: FieldSpecifier[],
  records: DataRecord[],
): Uint8Array {
  return encodeMessage(
    { exportTime: 1_700_000_010, sequenceNumber: 1, observationDomainId: domain },
    [encodeDataSet(id, fields, records)],
  );
}

/** A record for {@linkcode SMALL_FIELDS}. */
export function smallRecord(i: number): DataRecord {
  return {
    sourceIPv4Address: "10.0.0.1",
    destinationIPv4Address: "10.0.0.2",
    sourceTransportPort: 1000 + (i % 60000),
    destinationTransportPort: 80,
    packetTotalCount: BigInt(i),
  };
}

/** What a test sink saw. */
export interface Received {
  records: DataRecord[];
  ctx: RecordContext;
}

/** A sink that stores everything. */
export function collectingSink(): {
  received: Received[];
  sink: (r: DataRecord[], c: RecordContext) => void;
} {
  const received: Received[] = [];
  return { received, sink: (records, ctx) => received.push({ records, ctx }) };
}

/** Starts a Collector with `options` and a {@linkcode collectingSink}; the caller stops it. */
export async function startCollector(
  options: CollectorOptions,
): Promise<{ c: Collector; received: Received[] }> {
  const { received, sink } = collectingSink();
  const c = new Collector(options, sink);
  await c.start();
  return { c, received };
}

/** Opens a UDP client socket on `hostname` (port chosen by the OS). */
export function udpClient(hostname: string): Deno.DatagramConn {
  return Deno.listenDatagram({ transport: "udp", hostname, port: 0 });
}

/** Sends one datagram to the collector. */
export async function udpSend(
  c: Deno.DatagramConn,
  hostname: string,
  port: number,
  data: Uint8Array,
): Promise<void> {
  await c.send(data, { transport: "udp", hostname, port });
}

/** Writes all bytes to a stream (the product's own). */
export { writeAll } from "../../src/bytes.ts";

/** Concatenates byte arrays. */
export { concat } from "../_helpers/bytes.ts";

/** The golden template followed by `n` golden data messages, as one byte string (one write). */
export function goldenBacklog(n: number): Uint8Array {
  return concat(TEMPLATE_MSG, ...new Array<Uint8Array>(n).fill(DATA_MSG));
}

/** Reads until EOF or error; resolves true when the peer closed the connection. */
export async function readUntilClosed(c: Deno.Conn, timeoutMs = 5000): Promise<boolean> {
  const buf = new Uint8Array(1024);
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    c.close();
  }, timeoutMs);
  try {
    for (;;) {
      const n = await c.read(buf);
      if (n === null) return !timedOut;
    }
  } catch {
    return !timedOut;
  } finally {
    clearTimeout(timer);
  }
}
