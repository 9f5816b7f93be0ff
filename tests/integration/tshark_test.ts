/**
 * Wireshark's IPFIX dissector as an independent decoder: the datagrams our exporter sends
 * (captured by a UDP endpoint, written into a pcap with Ethernet/IPv4/UDP framing) must decode
 * with `tshark -d udp.port==PORT,cflow -V` without a single malformed packet or expert error,
 * with both 63-field templates and every data record recognised.
 */
import assert from "node:assert/strict";
import { IpfixExporter } from "../../src/exporters/ipfix/exporter.ts";
import { CaptureServer } from "../../src/flowgen/mod.ts";
import { setLogWriter } from "../../src/log.ts";
import { concat } from "../_helpers/bytes.ts";
import { syntheticFlows } from "./helpers/ipfix_export.ts";

setLogWriter(() => {});

const available = (() => {
  try {
    return new Deno.Command("sh", { args: ["-c", "command -v tshark"] }).outputSync().success;
  } catch {
    return false;
  }
})();

function ipChecksum(b: Uint8Array): number {
  let sum = 0;
  for (let i = 0; i < b.length; i += 2) sum += (b[i] << 8) | (b[i + 1] ?? 0);
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

/** A classic pcap (Ethernet) of UDP datagrams 127.0.0.1:srcPort -> 127.0.0.1:dstPort. */
function pcap(payloads: Uint8Array[], srcPort: number, dstPort: number): Uint8Array {
  const parts: Uint8Array[] = [];
  const g = new DataView(new ArrayBuffer(24));
  g.setUint32(0, 0xa1b2c3d4, true);
  g.setUint16(4, 2, true);
  g.setUint16(6, 4, true);
  g.setUint32(16, 65535, true);
  g.setUint32(20, 1, true); // LINKTYPE_ETHERNET
  parts.push(new Uint8Array(g.buffer));
  const t0 = Math.floor(Date.now() / 1000);
  payloads.forEach((p, i) => {
    const frame = new Uint8Array(14 + 20 + 8 + p.length);
    const v = new DataView(frame.buffer);
    frame.set([0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2], 0);
    v.setUint16(12, 0x0800);
    const ip = frame.subarray(14, 34);
    const iv = new DataView(frame.buffer, 14, 20);
    ip[0] = 0x45;
    iv.setUint16(2, 20 + 8 + p.length);
    iv.setUint16(4, i & 0xffff);
    ip[8] = 64;
    ip[9] = 17;
    ip.set([127, 0, 0, 1], 12);
    ip.set([127, 0, 0, 1], 16);
    iv.setUint16(10, ipChecksum(ip));
    v.setUint16(34, srcPort);
    v.setUint16(36, dstPort);
    v.setUint16(38, 8 + p.length);
    v.setUint16(40, 0); // no UDP checksum (allowed on IPv4)
    frame.set(p, 42);
    const h = new DataView(new ArrayBuffer(16));
    h.setUint32(0, t0, true);
    h.setUint32(4, i, true);
    h.setUint32(8, frame.length, true);
    h.setUint32(12, frame.length, true);
    parts.push(new Uint8Array(h.buffer), frame);
  });
  return concat(...parts);
}

Deno.test({
  name: "tshark decodes the exported UDP stream (templates and data) with no malformed packet",
  async fn() {
    // Never skipped: scripts/setup.sh (run by .ci/run) installs tshark; without it this fails.
    assert.ok(available, "tshark is not installed (scripts/setup.sh installs it)");
    const cap = CaptureServer.listen({ kind: "udp" });
    const e = new IpfixExporter({
      address: `127.0.0.1:${cap.port}:udp`,
      observationDomainId: 1234,
      podLabels: true,
    });
    await e.start();
    const sent = syntheticFlows(200, { agents: 2, flows: 60, seed: 8 });
    for (const f of sent) e.addRecord(f);
    await cap.waitFor(() => cap.records.length === sent.length, 5000, "records");
    await e.stop();
    await cap.close();
    const dir = await Deno.makeTempDir({ prefix: "tshark_" });
    try {
      const file = `${dir}/export.pcap`;
      await Deno.writeFile(file, pcap(cap.messages.map((m) => m.bytes), 40000, cap.port));
      const out = await new Deno.Command("tshark", {
        // Wireshark ignores templates above 60 fields by default; ours have 63/65.
        args: [
          "-r",
          file,
          "-d",
          `udp.port==${cap.port},cflow`,
          "-o",
          "cflow.max_template_fields:128",
          "-V",
        ],
        stdout: "piped",
        stderr: "piped",
        env: { HOME: dir }, // no user profile: default dissector settings
      }).output();
      const text = new TextDecoder().decode(out.stdout);
      assert.ok(out.success, new TextDecoder().decode(out.stderr));
      assert.doesNotMatch(text, /Malformed/i);
      assert.doesNotMatch(text, /\[Expert Info \(Error/);
      // Both templates with 65 fields (labels on), announced once each.
      const templates = text.match(/Template Id: (256|257)\n\s+Field Count: 65/g) ?? [];
      assert.equal(templates.length, 2, "two 65-field templates");
      // Every data record is dissected as a flow; one IPFIX message per datagram.
      const frames = text.match(/^Frame \d+:/gm) ?? [];
      assert.equal(frames.length, cap.messages.length);
      const flows = text.match(/^\s+Flow \d+\n/gm) ?? [];
      assert.equal(flows.length, sent.length, "every data record recognised as a flow");
      assert.match(text, /Observation Domain Id: 1234/);
      // Wireshark's view of every flow's addresses and ports matches what was sent.
      const seen = [
        ...text.matchAll(
          /SrcPort: (\d+)\n\s+DstPort: (\d+)[\s\S]*?SrcAddr: (\S+)\n\s+DstAddr: (\S+)/g,
        ),
      ]
        .map((m) => `${m[3]} ${m[4]} ${m[1]} ${m[2]}`).sort();
      const want = sent.map((f) =>
        `${f.key.sourceAddress} ${f.key.destinationAddress} ${f.key.sourcePort} ${f.key.destinationPort}`
      ).sort();
      assert.deepEqual(seen, want);
      assert.ok(want.some((w) => w.startsWith("fd00:")), "IPv6 flows included");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
