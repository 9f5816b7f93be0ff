/**
 * The process against the test Kubernetes API server (`--kubeconfig`), with the permissions
 * `deno task permissions` prints for it: the collector's CA and client certificate are
 * published, an Agent built from them connects over TLS, a denied flow gets the destination
 * Pod from the Pod store, and the cluster UUID is read from the Antrea cluster identity.
 */

import assert from "node:assert/strict";
import { CA_CONFIGMAP, CLIENT_SECRET } from "../../src/k8s/mod.ts";
import { connectTestApi, FakeKubeApiServer, secretText } from "../_helpers/k8s_server.ts";
import {
  apiArgs,
  DENO_JSON,
  FaProcess,
  flowLogConfig,
  printedPermissions,
} from "../_helpers/process.ts";
import { agentRecord } from "../_helpers/agent_record.ts";
import { waitFor } from "../_helpers/wait.ts";
import { SimAgent } from "./helpers/agent.ts";
import { readFlowLog } from "./helpers/flow_log.ts";
import { intraNodeRecord } from "./helpers/scenarios.ts";

const NS = "flow-aggregator";
const UUID = "7b3b5b8e-1c6f-4f4e-9d2a-6c1e5f0a9b21";

async function tlsDenyFlow(workers: number): Promise<void> {
  const server = await new FakeKubeApiServer().start();
  const { kubeconfig, cleanup } = await connectTestApi(server);
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-k8s-" });
  let fa: FaProcess | undefined;
  try {
    server.put("configmaps", {
      metadata: { name: "antrea-cluster-identity", namespace: "kube-system" },
      data: { uuid: UUID },
    });
    server.put("pods", {
      metadata: { name: "client-0", namespace: "shop", uid: "u-client-0" },
      spec: { nodeName: "k8s-node-1" },
      status: { phase: "Running", podIP: "10.10.1.4", podIPs: [{ ip: "10.10.1.4" }] },
    });
    server.put("pods", {
      metadata: {
        name: "server-0",
        namespace: "shop",
        uid: "u-server-0",
        creationTimestamp: "2020-01-01T00:00:00Z",
        labels: { app: "db" },
      },
      spec: { nodeName: "k8s-node-2" },
      status: { phase: "Running", podIP: "10.10.2.5", podIPs: [{ ip: "10.10.2.5" }] },
    });
    const conf = `${dir}/flow-aggregator.conf`;
    await Deno.writeTextFile(
      conf,
      flowLogConfig(`${dir}/flows.log`, { transport: "TLS" }) +
        "recordContents:\n  podLabels: true\n",
    );
    const args = [
      "--config",
      conf,
      "--listen",
      "127.0.0.1:0",
      "--kubeconfig",
      kubeconfig,
      ...apiArgs(`${dir}/api`),
      "--workers",
      String(workers),
    ];
    const flags = await printedPermissions(args);
    assert.ok(flags[0].includes(new URL(server.url).host), `API server in ${flags[0]}`);
    assert.ok(flags.some((f) => f.startsWith("--allow-read=") && f.includes(kubeconfig)));

    fa = FaProcess.start({
      denoFlags: [...flags, "--config", DENO_JSON],
      args,
      cwd: dir,
      env: { POD_NAMESPACE: NS },
    });
    // Loading client-node and generating RSA keys take a while on a loaded machine.
    const port = await fa.collectorPort(60_000);
    await fa.waitFor({ msg: "published the collector CA and Agent client certificate" }, 20_000);
    await fa.waitFor({ msg: "Pod store synced" }, 10_000);
    await fa.waitFor({ msg: "cluster UUID read from the Antrea cluster identity" }, 10_000);

    const cm = server.get("configmaps", NS, CA_CONFIGMAP)!;
    const secret = server.get("secrets", NS, CLIENT_SECRET)!;
    const agent = await SimAgent.connect("k8s-node-1", port, "tls", {
      tls: {
        ca: cm.data["ca.crt"],
        cert: secretText(secret, "tls.crt"),
        key: secretText(secret, "tls.key"),
      },
    });
    await agent.sendTemplates();
    const now = Math.floor(Date.now() / 1000);
    // Denied by an egress rule on the source Node: the destination Pod is unknown there.
    await agent.sendRecord(agentRecord({
      flowStartSeconds: now - 5,
      flowEndSeconds: now,
      sourceIPv4Address: "10.10.1.4",
      destinationIPv4Address: "10.10.2.5",
      sourceTransportPort: 41000,
      destinationTransportPort: 5432,
      sourcePodName: "client-0",
      sourcePodNamespace: "shop",
      sourceNodeName: "k8s-node-1",
      flowType: 2,
      egressNetworkPolicyRuleAction: 2,
    }));
    agent.close();
    await waitFor(async () => (await readFlowLog(`${dir}/flows.log`)).length > 0, {
      timeoutMs: 15_000,
      what: "the flow in the flow log",
    });
    const [line] = await readFlowLog(`${dir}/flows.log`);
    assert.equal(line.destinationPodName, "server-0");
    assert.equal(line.destinationPodNamespace, "shop");
    assert.equal(line.destinationNodeName, "k8s-node-2");
    const status = await fa.stop("SIGTERM", 20_000);
    assert.equal(status.code, 0, fa.stderr);
    assert.deepEqual(fa.find({ level: "error" }).map((e) => e.raw), []);
    const [metrics] = fa.find({ msg: "kubernetes metrics" });
    const last = fa.find({ msg: "record metrics" }).at(-1);
    assert.equal(last?.fields["podStore.pods"], "2");
    assert.equal(last?.fields["certificates.published"], "1");
    assert.equal(last?.fields["kubeClient.malformedAnswers"], "0");
    assert.equal(metrics.fields.clusterUuidSource, "cluster");
    assert.ok(server.requests.some((r) => r.url.startsWith("/api/v1/pods?watch=true")));
    assert.equal(
      fa.find({ msg: "aggregation sharded over worker threads" }).length,
      workers > 1 ? 1 : 0,
    );
  } finally {
    fa?.kill("SIGKILL");
    await fa?.status;
    await server.stop();
    await cleanup();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("e2e k8s: certificates published, Agent connects over TLS, deny flow filled from the Pod store", async () => {
  await tlsDenyFlow(1);
});

Deno.test("e2e k8s: the same with the core sharded over 2 worker threads, each with a copy of the Pod store", async () => {
  await tlsDenyFlow(2);
});

Deno.test("e2e k8s: an unreachable API server never stops collection", async () => {
  // A kubeconfig naming a server that is gone.
  const server = await new FakeKubeApiServer().start();
  const { kubeconfig, cleanup } = await connectTestApi(server);
  await server.stop();
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-k8s-down-" });
  let fa: FaProcess | undefined;
  try {
    const conf = `${dir}/flow-aggregator.conf`;
    await Deno.writeTextFile(conf, flowLogConfig(`${dir}/flows.log`));
    fa = FaProcess.start({
      // Debug level, for the "session closed" event that tells all sent data was read.
      args: [
        "--config",
        conf,
        "--listen",
        "127.0.0.1:0",
        "--kubeconfig",
        kubeconfig,
        "--log-level",
        "debug",
      ],
      cwd: dir,
    });
    const port = await fa.collectorPort(60_000);
    const agent = await SimAgent.connect("k8s-node-1", port, "tcp");
    await agent.sendTemplates();
    await agent.sendRecord(intraNodeRecord(53_000));
    agent.close();
    await fa.waitFor({ msg: "session closed" }, 10_000);
    // Each Kubernetes step keeps retrying, logged, while records are collected.
    await fa.waitFor({ msg: "listing Pods failed, retrying", attempt: "3" }, 20_000);
    await fa.waitFor(
      { msg: /^reading ConfigMap kube-system\/antrea-cluster-identity failed/ },
      10_000,
    );
    assert.equal((await fa.stop("SIGTERM", 20_000)).code, 0, fa.stderr);
    // Exported at its active timeout while the API was down, and again at the final flush.
    const lines = await readFlowLog(`${dir}/flows.log`);
    assert.ok(lines.length >= 1, "the record was collected and exported");
    assert.deepEqual(new Set(lines.map((l) => l.sourceTransportPort)), new Set(["53000"]));
  } finally {
    fa?.kill("SIGKILL");
    await fa?.status;
    await cleanup();
    await Deno.remove(dir, { recursive: true });
  }
});
