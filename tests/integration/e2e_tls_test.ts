/**
 * End to end: mutual TLS without a Kubernetes cluster. `aggregatorTransportProtocol: TLS` with
 * `--cert-dir DIR` writes the generated CA (ca.crt) and the Agent client certificate (tls.crt,
 * tls.key); an Agent using them (a `node:tls` client, as the Go Agent verifies the server) gets
 * its records logged, and a client without a certificate is refused.
 */

import assert from "node:assert/strict";
import { SimAgent } from "./helpers/agent.ts";
import { byKey, readFlowLog } from "./helpers/flow_log.ts";
import { FaProcess, flowLogConfig } from "../_helpers/process.ts";
import { withDeadline } from "../_helpers/wait.ts";
import { intraNodeKey, intraNodeRecord, NODES } from "./helpers/scenarios.ts";

function conf(logPath: string): string {
  return flowLogConfig(logPath, { transport: "TLS", activeTimeout: "1h", inactiveTimeout: "1h" });
}

Deno.test("e2e tls: --cert-dir writes ca.crt/tls.crt/tls.key; an Agent with them is logged, one without a certificate is refused", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-tls-" });
  const logPath = `${dir}/flows.log`;
  const certDir = `${dir}/certs`;
  const fa = await FaProcess.startWithConfig(dir, conf(logPath), {
    args: ["--cert-dir", certDir, "--log-level", "debug"],
  });
  const agents: SimAgent[] = [];
  try {
    const port = await fa.collectorPort(30_000);
    assert.equal(fa.find({ msg: "Started TLS collecting process" }).length, 1);
    const wrote = fa.find({ msg: "wrote the CA and Agent client certificate" });
    assert.equal(wrote.length, 1);
    assert.equal(wrote[0].fields.dir, certDir);

    const ca = await Deno.readTextFile(`${certDir}/ca.crt`);
    const cert = await Deno.readTextFile(`${certDir}/tls.crt`);
    const key = await Deno.readTextFile(`${certDir}/tls.key`);
    assert.match(ca, /^-----BEGIN CERTIFICATE-----\r?\n/);
    assert.match(cert, /^-----BEGIN CERTIFICATE-----\r?\n/);
    assert.match(key, /^-----BEGIN (RSA )?PRIVATE KEY-----\r?\n/);
    assert.equal((await Deno.stat(`${certDir}/tls.key`)).mode! & 0o777, 0o600, "key is owner-only");
    assert.ok(!fa.stderr.includes(key.split("\n")[1]), "the private key is never logged");

    // The Agent verifies the server against ca.crt and presents tls.crt.
    for (const n of NODES) {
      agents.push(await SimAgent.connect(n, port, "tls", { tls: { ca, cert, key } }));
    }
    for (const a of agents) assert.equal(a.tlsSocket!.authorized, true, "server cert verified");
    for (const a of agents) await a.sendTemplates();
    await agents[0].sendRecord(intraNodeRecord(47_001, 0));
    await agents[1].sendRecord(intraNodeRecord(47_002, 1));

    // No client certificate: the handshake fails (TLS 1.2) or the server aborts right after it
    // (TLS 1.3 sends the client's Finished before the server checks). Either way nothing it
    // sends is collected.
    let refused = false;
    try {
      const rogue = await SimAgent.connect("k8s-node-9", port, "tls", { tls: { ca } });
      try {
        await rogue.sendTemplates();
        await rogue.sendRecord(intraNodeRecord(47_009, 0));
      } catch {
        // write after the server's alert
      }
      await withDeadline(rogue.tlsClosed!, 10_000, "server closes the certificate-less client");
      refused = true;
    } catch (e) {
      refused = !(e instanceof Error && e.message.startsWith("timeout"));
    }
    assert.ok(refused, "client without certificate refused");
    await fa.waitFor({ msg: "TLS handshake failed" }, 10_000);

    for (const a of agents) a.close();
    await fa.waitFor(() => fa.find({ msg: "session closed" }).length >= 2, 10_000);
    const status = await fa.stop("SIGTERM");
    assert.equal(status.code, 0, fa.stderr);

    const groups = byKey(await readFlowLog(logPath));
    assert.deepEqual(
      [...groups.keys()].sort(),
      [intraNodeKey(47_001, 0), intraNodeKey(47_002, 1)].sort(),
      "both Agents' flows logged, nothing from the client without a certificate",
    );
    assert.equal(groups.get(intraNodeKey(47_002, 1))![0].sourceNodeName, NODES[1]);
    const metrics = fa.find({ msg: "record metrics" }).at(-1)!;
    assert.equal(Number(metrics.fields.numRecordsReceived), 2);
  } finally {
    for (const a of agents) a.close();
    await fa.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("e2e tls: standalone without --cert-dir the unpublished certificates are warned about; ~/.kube/config is not read", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-tls2-" });
  try {
    // ~/.kube/config is not read implicitly (only --kubeconfig or KUBECONFIG): still standalone,
    // so nobody hands the certificates to the Agents.
    await Deno.mkdir(`${dir}/.kube`);
    await Deno.writeTextFile(`${dir}/.kube/config`, "apiVersion: v1\nkind: Config\n");
    const fa = await FaProcess.startWithConfig(dir, conf(`${dir}/flows.log`), {
      env: { HOME: dir },
    });
    try {
      await fa.collectorPort(30_000);
      const warn = fa.find({ level: "warn", msg: /not published anywhere/ });
      assert.equal(warn.length, 1, fa.stderr);
      assert.match(warn[0].fields.msg, /--cert-dir/);
      assert.equal((await fa.stop("SIGTERM")).code, 0);
    } finally {
      await fa.dispose();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
