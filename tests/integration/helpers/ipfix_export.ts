/**
 * The pieces around the FA's IPFIX exporter in the export round-trip tests: the Agent side
 * (flowgen sending to one of our Collectors, whose decoded records feed the code under test),
 * the external collector (another Collector keeping every record it decodes with its template
 * id), and synthetic aggregated records to export without running the aggregation.
 */

import { Collector, fastUdpReceiverFactory, type TlsMaterial } from "../../../src/collector/mod.ts";
import {
  type FlowgenOptions,
  type FlowgenReport,
  FlowModel,
  type FlowModelOptions,
  runFlowgen,
  syntheticAggregate,
} from "../../../src/flowgen/mod.ts";
import type { DataRecord } from "../../../src/ipfix/mod.ts";
import type { ExportedFlow } from "../../../src/aggregation/record.ts";

/** A record as the external collector decoded it. */
export interface Received {
  /** Template id it arrived under (256 IPv4, 257 IPv6). */
  templateId: number;
  /** The decoded record. */
  record: DataRecord;
}

/**
 * Starts a Collector on 127.0.0.1 that appends every decoded record to `out`. Over UDP it
 * receives on the fast path (a recvmmsg thread, 4 MiB socket buffer): it shares this process's
 * main thread with the exporter under test, and a socket read from that thread (the 208 KiB
 * default buffer holds ~90 full export datagrams) overflows whenever the exporter writes a
 * larger burst than that while the thread is busy.
 */
export async function decodingCollector(
  proto: "tcp" | "udp" | "tls",
  out: Received[],
  tls?: TlsMaterial,
): Promise<Collector> {
  const udpReceiver = proto === "udp" ? fastUdpReceiverFactory({ mode: "ffi" }) : undefined;
  const address = "127.0.0.1:0";
  const c = new Collector({ address, protocol: proto, tls, udpReceiver }, (recs, ctx) => {
    for (const record of recs) out.push({ templateId: ctx.templateId, record });
  });
  await c.start();
  return c;
}

/**
 * Runs flowgen over TCP against a Collector standing in for the FA's Agent side, which hands
 * every decoded record to `onRecord`; returns that Collector (still running) and the report.
 */
export async function flowgenToAgentSide(
  onRecord: (r: DataRecord) => void,
  traffic: Omit<FlowgenOptions, "target" | "proto">,
): Promise<{ agentSide: Collector; report: FlowgenReport }> {
  const agentSide = new Collector({ address: "127.0.0.1:0", protocol: "tcp" }, (recs) => {
    for (const r of recs) onRecord(r);
  });
  await agentSide.start();
  const report = await runFlowgen({
    target: `127.0.0.1:${agentSide.port}`,
    proto: "tcp",
    ...traffic,
  });
  return { agentSide, report };
}

/**
 * At least `count` synthetic aggregated records from a {@linkcode FlowModel}, numbered from 0.
 * Whole model batches are kept, so there may be a few more than `count`.
 */
export function syntheticFlows(count: number, model: FlowModelOptions): ExportedFlow[] {
  const m = new FlowModel(model);
  const sent: ExportedFlow[] = [];
  while (sent.length < count) {
    for (const r of m.next()) sent.push(syntheticAggregate(r.record, sent.length));
  }
  return sent;
}
