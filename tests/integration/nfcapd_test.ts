/**
 * Interop with a third-party collector: Debian's nfcapd (nfdump 1.7) receives our IPFIX export
 * over UDP and `nfdump -r FILE -o csv` must list every flow with the right addresses, ports,
 * protocol and counters (nfdump reads the IANA delta counters and the RFC 5103 reverse ones).
 */
import assert from "node:assert/strict";
import { IpfixExporter } from "../../src/exporters/ipfix/exporter.ts";
import { setLogWriter } from "../../src/log.ts";
import { waitFor } from "../_helpers/wait.ts";
import { syntheticFlows } from "./helpers/ipfix_export.ts";

setLogWriter(() => {});

function which(bin: string): boolean {
  try {
    return new Deno.Command("sh", { args: ["-c", `command -v ${bin}`] }).outputSync().success;
  } catch {
    return false;
  }
}

const available = which("nfcapd") && which("nfdump");

function freeUdpPort(): number {
  const s = Deno.listenDatagram({ transport: "udp", hostname: "127.0.0.1", port: 0 });
  const port = (s.addr as Deno.NetAddr).port;
  s.close();
  return port;
}

function files(dir: string): string[] {
  return [...Deno.readDirSync(dir)].map((e) => e.name);
}

Deno.test({
  name: "nfcapd receives the UDP export and nfdump lists every flow with its counters",
  async fn() {
    // Never skipped: scripts/setup.sh (run by .ci/run) installs nfdump; without it this fails.
    assert.ok(available, "nfcapd/nfdump are not installed (scripts/setup.sh installs them)");
    const dir = await Deno.makeTempDir({ prefix: "nfcapd_" });
    const port = freeUdpPort();
    const nfcapd = new Deno.Command("nfcapd", {
      // -B: a 2 MiB socket buffer so a burst of datagrams is not dropped on a loaded machine.
      args: ["-p", String(port), "-b", "127.0.0.1", "-w", dir, "-t", "3600", "-B", "2097152"],
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    try {
      // nfcapd creates its current file once the socket is bound.
      await waitFor(() => files(dir).some((f) => f.startsWith("nfcapd.current")), {
        timeoutMs: 5000,
        what: "nfcapd",
      });
      const e = new IpfixExporter({ address: `127.0.0.1:${port}:udp`, observationDomainId: 42 });
      await e.start();
      // Few flows, many updates: deltas differ from totals, so the counter mapping is checked.
      const sent = syntheticFlows(300, { agents: 3, flows: 40, seed: 21 });
      for (const f of sent) e.addRecord(f);
      assert.ok(sent.some((f) => f.record.packetDeltaCount !== f.record.packetTotalCount));
      await waitFor(() => e.stats().queued === 0, {
        timeoutMs: 5000,
        what: "exporter queue to drain",
      });
      await e.stop();
      assert.equal(e.stats().exported, sent.length);
      // UDP gives no delivery signal: leave nfcapd a moment to read its socket, then let it
      // write its file on SIGTERM.
      await new Promise((r) => setTimeout(r, 300));
      nfcapd.kill("SIGTERM");
      const st = await nfcapd.output();
      assert.ok(st.success || st.signal === null, `nfcapd exit ${st.code}`);
      const file = files(dir).find((f) => /^nfcapd\.\d{12}$/.test(f));
      assert.ok(file, `nfcapd file in ${files(dir).join(",")}`);
      const out = new Deno.Command("nfdump", {
        args: ["-r", `${dir}/${file}`, "-o", "csv"],
        stdout: "piped",
        stderr: "piped",
      }).outputSync();
      assert.ok(out.success, new TextDecoder().decode(out.stderr));
      const lines = new TextDecoder().decode(out.stdout).split("\n");
      const header = lines[0].split(",");
      const col = (n: string) => {
        const i = header.indexOf(n);
        assert.ok(i >= 0, `nfdump csv column ${n}`);
        return i;
      };
      const [sa, da, sp, dp, pr, ipkt, ibyt, opkt, obyt] = [
        "sa",
        "da",
        "sp",
        "dp",
        "pr",
        "ipkt",
        "ibyt",
        "opkt",
        "obyt",
      ].map(col);
      const rows = lines.slice(1).filter((l) => /^\d{4}-/.test(l)).map((l) => l.split(","));
      const got = rows.map((c) =>
        [c[sa], c[da], c[sp], c[dp], c[pr].trim(), c[ipkt], c[ibyt], c[opkt], c[obyt]].join(" ")
      ).sort();
      const want = sent.map((f) => {
        const r = f.record;
        return [
          f.key.sourceAddress,
          f.key.destinationAddress,
          f.key.sourcePort,
          f.key.destinationPort,
          f.key.protocol === 6 ? "TCP" : "UDP",
          r.packetDeltaCount,
          r.octetDeltaCount,
          r.reversePacketDeltaCount,
          r.reverseOctetDeltaCount,
        ].join(" ");
      }).sort();
      assert.equal(got.length, want.length, "one nfdump row per exported record");
      assert.deepEqual(got, want);
    } finally {
      try {
        nfcapd.kill("SIGKILL");
      } catch {
        // already exited
      }
      await nfcapd.status;
      await Deno.remove(dir, { recursive: true });
    }
  },
});
