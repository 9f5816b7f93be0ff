/**
 * Golden vectors of ipfix.md §1.13: the Antrea Agent IPv4 template and data messages and the
 * record they carry, shared by the codec, collector and flowgen tests.
 */

import type { DataRecord } from "../../src/ipfix/mod.ts";
import { agentRecord } from "../_helpers/agent_record.ts";

/** Hex text → bytes (whitespace ignored). */
export function hex(s: string): Uint8Array {
  const clean = s.replace(/\s+/g, "");
  const out = new Uint8Array(clean.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(clean.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** The 288-byte Agent IPv4 template message. */
export const TEMPLATE_MSG: Uint8Array = hex(`
000a01206553f1000000000033de13e200020110010000270096000400970004
0088000100070002000b00020004000100560008005500080002000800010008
00080004000c0004805600080000727980550008000072798002000800007279
80010008000072798065ffff0000dcba8064ffff0000dcba8068ffff0000dcba
8067ffff0000dcba8066ffff0000dcba8069ffff0000dcba806c00020000dcba
806dffff0000dcba806effff0000dcba806fffff0000dcba807300010000dcba
808dffff0000dcba808b00010000dcba8070ffff0000dcba8071ffff0000dcba
807600010000dcba808effff0000dcba808c00010000dcba8088ffff0000dcba
808900010000dcba8099ffff0000dcba809affff0000dcba806a00040000dcba`);

/** The matching 175-byte data message. */
export const DATA_MSG: Uint8Array = hex(`
000a00af6553f10a0000000133de13e20100009f6553f1006553f10a02aed014
510600000000000000640000000000003a980000000000000064000000000000
3a980a0a004f0a0a015000000000000000500000000000002328000000000000
005000000000000023280a70657266746573742d610b616e747265612d746573
740a6b38732d6e6f64652d31000000000000000000000000000000000b455354
41424c495348454402000000000000`);

/** The decoded data record the golden data message must produce. */
export const DATA_RECORD: DataRecord = agentRecord({
  flowStartSeconds: 1700000000,
  flowEndSeconds: 1700000010,
  flowEndReason: 2,
  sourceIPv4Address: "10.10.0.79",
  destinationIPv4Address: "10.10.1.80",
  sourceTransportPort: 44752,
  destinationTransportPort: 5201,
  protocolIdentifier: 6,
  packetTotalCount: 100n,
  octetTotalCount: 15000n,
  packetDeltaCount: 100n,
  octetDeltaCount: 15000n,
  reversePacketTotalCount: 80n,
  reverseOctetTotalCount: 9000n,
  reversePacketDeltaCount: 80n,
  reverseOctetDeltaCount: 9000n,
  sourcePodName: "perftest-a",
  sourcePodNamespace: "antrea-test",
  sourceNodeName: "k8s-node-1",
  tcpState: "ESTABLISHED",
  flowType: 2,
  destinationClusterIPv4: "0.0.0.0",
});
