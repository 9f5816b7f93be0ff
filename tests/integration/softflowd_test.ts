/**
 * Interop with a real IPFIX exporter: softflowd (Debian) replays a pcap written here with known
 * flows and exports them over UDP and TCP to a live Collector. Every flow softflowd reports
 * exporting (its `EXPIRED:` debug lines and "Flows exported" total) must arrive decoded with the
 * right addresses, ports and counts, and must match the pcap's ground truth.
 */

import assert from "node:assert/strict";
import { Collector, type Transport } from "../../src/collector/mod.ts";
import type { DataRecord } from "../../src/ipfix/mod.ts";
import { setLogLevel } from "../../src/log.ts";
import { flowPackets, type FlowSpec, ipLength, writePcap } from "../../scripts/pcap.ts";
import { waitFor } from "../_helpers/wait.ts";

setLogLevel("error");

const SOFTFLOWD = "/usr/sbin/softflowd";
const SOFTFLOWCTL = "/usr/sbin/softflowctl";
const T0 = 1_700_000_000_000_000;

const FLOWS: FlowSpec[] = [
  {
    src: "10.0.0.1",
    dst: "10.0.0.2",
    protocol: 6,
    srcPort: 40000,
    dstPort: 80,
    packets: 5,
    payloadLength: 100,
    startUs: T0,
    gapUs: 1000,
  },
  {
    src: "10.0.0.2",
    dst: "10.0.0.1",
    protocol: 6,
    srcPort: 80,
    dstPort: 40000,
    packets: 3,
    payloadLength: 1000,
    startUs: T0 + 500,
    gapUs: 1000,
  },
  {
    src: "10.0.0.3",
    dst: "10.0.0.4",
    protocol: 17,
    srcPort: 5353,
    dstPort: 5001,
    packets: 2,
    payloadLength: 40,
    startUs: T0 + 100,
    gapUs: 2000,
  },
  {
    src: "192.168.1.10",
    dst: "172.16.0.1",
    protocol: 6,
    srcPort: 65535,
    dstPort: 443,
    packets: 7,
    payloadLength: 0,
    startUs: T0 + 200,
    gapUs: 300,
    tcpFlags: 0x10,
  },
  {
    src: "10.9.8.7",
    dst: "10.9.8.6",
    protocol: 17,
    srcPort: 123,
    dstPort: 123,
    packets: 1,
    payloadLength: 48,
    startUs: T0 + 300,
    gapUs: 1,
  },
  {
    src: "10.9.8.6",
    dst: "10.9.8.7",
    protocol: 17,
    srcPort: 123,
    dstPort: 123,
    packets: 1,
    payloadLength: 48,
    startUs: T0 + 400,
    gapUs: 1,
  },
];

/** One direction of a flow as a comparable string. */
function flowKey(src: string, sport: number, dst: string, dport: number, proto: number): string {
  return `${src}:${sport}>${dst}:${dport}/${proto}`;
}

const EXPECTED = new Map(
  FLOWS.map((f) => [
    flowKey(f.src, f.srcPort, f.dst, f.dstPort, f.protocol),
    { packets: BigInt(f.packets), octets: BigInt(f.packets * ipLength(f)) },
  ]),
);

interface Reported {
  key: string;
  packets: bigint;
  octets: bigint;
}

/** Parses softflowd's debug `EXPIRED:` lines into one entry per exported direction. */
function parseExpired(stderr: string): { flows: Reported[]; recordsExported: number } {
  const flows: Reported[] = [];
  const re =
    /EXPIRED: seq:\d+ \[([\d.]+)\]:(\d+) <> \[([\d.]+)\]:(\d+) proto:(\d+) .*?octets>:(\d+) packets>:(\d+) octets<:(\d+) packets<:(\d+)/g;
  for (const m of stderr.matchAll(re)) {
    const [a, ap, b, bp, proto] = [m[1], Number(m[2]), m[3], Number(m[4]), Number(m[5])];
    if (m[7] !== "0") {
      flows.push({
        key: flowKey(a, ap, b, bp, proto),
        octets: BigInt(m[6]),
        packets: BigInt(m[7]),
      });
    }
    if (m[9] !== "0") {
      flows.push({
        key: flowKey(b, bp, a, ap, proto),
        octets: BigInt(m[8]),
        packets: BigInt(m[9]),
      });
    }
  }
  const total = /Flows exported: \d+ \((\d+) records\)/.exec(stderr);
  return { flows, recordsExported: total ? Number(total[1]) : -1 };
}

async function ctl(sock: string, cmd: string): Promise<boolean> {
  const o = await new Deno.Command(SOFTFLOWCTL, {
    args: ["-c", sock, cmd],
    stdout: "null",
    stderr: "null",
  })
    .output();
  return o.success;
}

/** Runs softflowd on the pcap towards the collector; returns its debug output. */
async function runSoftflowd(
  pcap: string,
  port: number,
  transport: Transport,
  dir: string,
): Promise<string> {
  const sock = `${dir}/ctl.sock`;
  const child = new Deno.Command(SOFTFLOWD, {
    args: [
      "-D",
      "-r",
      pcap,
      "-n",
      `127.0.0.1:${port}`,
      "-v",
      "10",
      "-P",
      transport,
      "-c",
      sock,
      "-p",
      `${dir}/pid`,
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = child.output();
  let exited = false;
  output.finally(() => exited = true);
  // In -r mode softflowd 1.1.0 may wait for its control socket before reading the file; poke
  // it until it has read the pcap and exited on EOF, then fall back to expire-all + shutdown.
  const deadline = performance.now() + 10_000;
  let poked = false;
  while (!exited && performance.now() < deadline) {
    await ctl(sock, "statistics");
    if (!exited && performance.now() > deadline - 5_000 && !poked) {
      poked = true;
      await ctl(sock, "expire-all");
      await ctl(sock, "shutdown");
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  if (!exited) child.kill("SIGKILL");
  const out = await output;
  const td = new TextDecoder();
  return td.decode(out.stdout) + td.decode(out.stderr);
}

for (const transport of ["udp", "tcp"] as const) {
  Deno.test(`softflowd interop over ${transport}: every exported flow is decoded exactly`, async () => {
    const stat = await Deno.stat(SOFTFLOWD).catch(() => undefined);
    assert.ok(stat?.isFile, `${SOFTFLOWD} is required (scripts/setup.sh installs softflowd)`);
    const dir = await Deno.makeTempDir({ prefix: "softflowd_test" });
    const pcap = `${dir}/flows.pcap`;
    await Deno.writeFile(pcap, writePcap(flowPackets(FLOWS)));
    const records: DataRecord[] = [];
    const c = new Collector({ address: "127.0.0.1:0", protocol: transport }, (recs, ctx) => {
      assert.equal(ctx.exporterAddress, "127.0.0.1");
      assert.equal(ctx.transport, transport);
      if (!ctx.options) records.push(...recs);
    });
    await c.start();
    try {
      const log = await runSoftflowd(pcap, c.port, transport, dir);
      const reported = parseExpired(log);
      assert.equal(reported.recordsExported, FLOWS.length, `softflowd output:\n${log}`);
      assert.equal(reported.flows.length, FLOWS.length);
      await waitFor(() => records.length >= reported.flows.length, {
        what: "all exported records",
      });
      assert.equal(records.length, reported.flows.length);

      const decoded = new Map<string, DataRecord>();
      for (const r of records) {
        const key = flowKey(
          r.sourceIPv4Address as string,
          r.sourceTransportPort as number,
          r.destinationIPv4Address as string,
          r.destinationTransportPort as number,
          r.protocolIdentifier as number,
        );
        assert.ok(!decoded.has(key), `duplicate record ${key}`);
        decoded.set(key, r);
      }
      for (const f of reported.flows) {
        const r = decoded.get(f.key);
        assert.ok(r, `softflowd exported ${f.key} but it was not decoded`);
        assert.equal(r.packetDeltaCount, f.packets, `${f.key} packets`);
        assert.equal(r.octetDeltaCount, f.octets, `${f.key} octets`);
        // And softflowd agrees with the pcap's ground truth.
        assert.deepEqual(EXPECTED.get(f.key), { packets: f.packets, octets: f.octets }, f.key);
      }
      const s = c.stats();
      assert.equal(s.decodeErrorsTotal, 0);
      assert.equal(s.templateMisses, 0);
      assert.deepEqual(s.setErrors, {});
      assert.equal(s.dataRecords, records.length + 1); // + softflowd's options record
    } finally {
      await c.stop();
      await Deno.remove(dir, { recursive: true });
    }
  });
}
