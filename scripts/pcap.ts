/**
 * Writes classic libpcap files (Ethernet, IPv4, TCP/UDP) with known flows, for interop tests
 * that replay traffic through real exporters (softflowd `-r`). No dependencies: the bytes,
 * including IPv4/TCP/UDP checksums, are built here.
 */

/** One synthetic packet. */
export interface PcapPacket {
  /** Capture time, microseconds since the epoch. */
  readonly timeUs: number;
  /** Source IPv4 address (dotted quad). */
  readonly src: string;
  /** Destination IPv4 address. */
  readonly dst: string;
  /** 6 = TCP, 17 = UDP. */
  readonly protocol: 6 | 17;
  /** Source port. */
  readonly srcPort: number;
  /** Destination port. */
  readonly dstPort: number;
  /** Payload bytes after the TCP/UDP header. */
  readonly payloadLength: number;
  /** TCP flags byte (SYN 0x02, ACK 0x10, FIN 0x01, PSH 0x08); ignored for UDP. */
  readonly tcpFlags?: number;
}

/** A unidirectional flow to generate: `packets` packets `gapUs` apart. */
export interface FlowSpec {
  readonly src: string;
  readonly dst: string;
  readonly protocol: 6 | 17;
  readonly srcPort: number;
  readonly dstPort: number;
  readonly packets: number;
  readonly payloadLength: number;
  readonly startUs: number;
  readonly gapUs: number;
  readonly tcpFlags?: number;
}

function ipBytes(ip: string): number[] {
  const parts = ip.split(".").map(Number);
  if (parts.length !== 4 || parts.some((p) => !(p >= 0 && p <= 255))) {
    throw new Error(`pcap: bad IPv4 address ${ip}`);
  }
  return parts;
}

function checksum(bytes: Uint8Array, initial = 0): number {
  let sum = initial;
  for (let i = 0; i + 1 < bytes.length; i += 2) sum += (bytes[i] << 8) | bytes[i + 1];
  if (bytes.length % 2 === 1) sum += bytes[bytes.length - 1] << 8;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

/** IPv4 total length of a packet (what flow exporters count as octets). */
export function ipLength(p: { protocol: 6 | 17; payloadLength: number }): number {
  return 20 + (p.protocol === 6 ? 20 : 8) + p.payloadLength;
}

/** Builds the Ethernet frame of one packet. */
export function frame(p: PcapPacket, ipId = 0): Uint8Array {
  const l4Len = (p.protocol === 6 ? 20 : 8) + p.payloadLength;
  const total = 20 + l4Len;
  const out = new Uint8Array(14 + total);
  const v = new DataView(out.buffer);
  out.set([0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01], 0);
  v.setUint16(12, 0x0800);
  const ip = out.subarray(14, 34);
  ip[0] = 0x45;
  v.setUint16(16, total);
  v.setUint16(18, ipId & 0xffff);
  ip[8] = 64;
  ip[9] = p.protocol;
  ip.set(ipBytes(p.src), 12);
  ip.set(ipBytes(p.dst), 16);
  v.setUint16(24, checksum(ip));
  const l4 = out.subarray(34);
  const lv = new DataView(out.buffer, 34);
  lv.setUint16(0, p.srcPort);
  lv.setUint16(2, p.dstPort);
  if (p.protocol === 6) {
    lv.setUint32(4, 1000 + ipId);
    lv.setUint32(8, 0);
    l4[12] = 5 << 4;
    l4[13] = p.tcpFlags ?? 0x18;
    lv.setUint16(14, 65535);
  } else {
    lv.setUint16(4, l4Len);
  }
  for (let i = 0; i < p.payloadLength; i++) l4[(p.protocol === 6 ? 20 : 8) + i] = i & 0xff;
  // Pseudo-header sum: src, dst, zero+protocol, L4 length.
  const pseudo = new Uint8Array(12);
  pseudo.set(ipBytes(p.src), 0);
  pseudo.set(ipBytes(p.dst), 4);
  pseudo[9] = p.protocol;
  new DataView(pseudo.buffer).setUint16(10, l4Len);
  const partial = ~checksum(pseudo) & 0xffff;
  const ck = checksum(l4, partial);
  lv.setUint16(p.protocol === 6 ? 16 : 6, p.protocol === 17 && ck === 0 ? 0xffff : ck);
  return out;
}

/** Expands flow specs into packets sorted by time. */
export function flowPackets(flows: readonly FlowSpec[]): PcapPacket[] {
  const out: PcapPacket[] = [];
  for (const f of flows) {
    for (let i = 0; i < f.packets; i++) {
      out.push({
        timeUs: f.startUs + i * f.gapUs,
        src: f.src,
        dst: f.dst,
        protocol: f.protocol,
        srcPort: f.srcPort,
        dstPort: f.dstPort,
        payloadLength: f.payloadLength,
        tcpFlags: f.tcpFlags,
      });
    }
  }
  return out.sort((a, b) => a.timeUs - b.timeUs);
}

/** Returns a complete pcap file (microsecond timestamps, LINKTYPE_ETHERNET). */
export function writePcap(packets: readonly PcapPacket[]): Uint8Array {
  const frames = packets.map((p, i) => frame(p, i + 1));
  const size = 24 + frames.reduce((n, f) => n + 16 + f.length, 0);
  const out = new Uint8Array(size);
  const v = new DataView(out.buffer);
  v.setUint32(0, 0xa1b2c3d4, true);
  v.setUint16(4, 2, true);
  v.setUint16(6, 4, true);
  v.setUint32(16, 65535, true);
  v.setUint32(20, 1, true);
  let off = 24;
  for (const [i, f] of frames.entries()) {
    const t = packets[i].timeUs;
    v.setUint32(off, Math.floor(t / 1e6), true);
    v.setUint32(off + 4, t % 1e6, true);
    v.setUint32(off + 8, f.length, true);
    v.setUint32(off + 12, f.length, true);
    out.set(f, off + 16);
    off += 16 + f.length;
  }
  return out;
}
