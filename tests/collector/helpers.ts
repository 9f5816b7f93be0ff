/** Shared helpers for the collector tests: message builders, clients and polling. */

import {
  type DataRecord,
  encodeDataSet,
  encodeMessage,
  encodeTemplateSet,
  fieldsFor,
  type FieldSpecifier,
} from "../../src/ipfix/mod.ts";
import { AGENT_IPV4_FIELDS } from "../../src/record/schema.ts";
import type { RecordContext } from "../../src/collector/mod.ts";

/** Golden template message of ipfix.md §1.13 (domain 0x33de13e2, template 256). */
export const GOLDEN_TEMPLATE = hex(
  "000a01206553f1000000000033de13e200020110010000270096000400970004" +
    "0088000100070002000b00020004000100560008005500080002000800010008" +
    "00080004000c0004805600080000727980550008000072798002000800007279" +
    "80010008000072798065ffff0000dcba8064ffff0000dcba8068ffff0000dcba" +
    "8067ffff0000dcba8066ffff0000dcba8069ffff0000dcba806c00020000dcba" +
    "806dffff0000dcba806effff0000dcba806fffff0000dcba807300010000dcba" +
    "808dffff0000dcba808b00010000dcba8070ffff0000dcba8071ffff0000dcba" +
    "807600010000dcba808effff0000dcba808c00010000dcba8088ffff0000dcba" +
    "808900010000dcba8099ffff0000dcba809affff0000dcba806a00040000dcba",
);

/** Golden data message of ipfix.md §1.13 (one record, 10.10.0.79:44752 → 10.10.1.80:5201). */
export const GOLDEN_DATA = hex(
  "000a00af6553f10a0000000133de13e20100009f6553f1006553f10a02aed014" +
    "510600000000000000640000000000003a980000000000000064000000000000" +
    "3a980a0a004f0a0a015000000000000000500000000000002328000000000000" +
    "005000000000000023280a70657266746573742d610b616e747265612d746573" +
    "740a6b38732d6e6f64652d31000000000000000000000000000000000b455354" +
    "41424c495348454402000000000000",
);

/** Decodes a hex string. */
export function hex(s: string): Uint8Array {
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

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

/** A template message. */
export function templateMessage(
  domain: number,
  id: number,
  fields: FieldSpecifier[],
): Uint8Array {
  return encodeMessage(
    { exportTime: 1_700_000_000, sequenceNumber: 0, observationDomainId: domain },
    [encodeTemplateSet([{ id, fields, scopeFieldCount: 0 }])],
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

/** Polls `cond` (I/O completes asynchronously) until true or `timeoutMs`; throws on timeout. */
export async function waitFor(cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() > end) throw new Error(`timeout waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 0));
  }
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

/** Writes all bytes to a stream. */
export async function writeAll(
  w: { write(p: Uint8Array): Promise<number> },
  data: Uint8Array,
): Promise<void> {
  let off = 0;
  while (off < data.length) off += await w.write(data.subarray(off));
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
