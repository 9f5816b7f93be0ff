/**
 * The test API server checked against a real client, Debian's `kubectl`: it must read the
 * server's objects and follow a Pod watch, or the server does not speak the protocol the
 * client-node tests rely on.
 */

import assert from "node:assert/strict";
import { FakeKubeApiServer } from "../_helpers/k8s_server.ts";

async function kubectl(server: FakeKubeApiServer, args: string[]): Promise<string> {
  const dir = await Deno.makeTempDir();
  try {
    const kubeconfig = `${dir}/config`;
    await Deno.writeTextFile(kubeconfig, server.kubeconfig());
    const out = await new Deno.Command("kubectl", {
      args: ["--kubeconfig", kubeconfig, ...args],
      env: { HOME: dir },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stdout = new TextDecoder().decode(out.stdout);
    const stderr = new TextDecoder().decode(out.stderr);
    // A watch ended by --request-timeout exits non-zero with a timeout message; anything else
    // is a protocol failure of the server.
    if (!out.success && !/timeout|Timeout|deadline/.test(stderr)) {
      throw new Error(`kubectl ${args.join(" ")} failed: ${stderr}`);
    }
    return stdout;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("kubectl reads ConfigMaps from the test API server", async () => {
  const server = await new FakeKubeApiServer().start();
  try {
    server.put("configmaps", {
      metadata: { name: "flow-aggregator-ca", namespace: "x", labels: { app: "flow-aggregator" } },
      data: { "ca.crt": "PEM" },
    });
    const out = JSON.parse(await kubectl(server, ["get", "configmap", "-n", "x", "-o", "json"]));
    assert.equal(out.items.length, 1);
    assert.equal(out.items[0].metadata.name, "flow-aggregator-ca");
    assert.deepEqual(out.items[0].data, { "ca.crt": "PEM" });
    assert.ok(server.requests.some((r) => r.url.startsWith("/api/v1/namespaces/x/configmaps")));
  } finally {
    await server.stop();
  }
});

Deno.test("kubectl follows a Pod watch on the test API server", async () => {
  const server = await new FakeKubeApiServer().start();
  try {
    server.put("pods", { metadata: { name: "a", namespace: "n1" }, spec: {}, status: {} });
    const watching = kubectl(server, [
      "get",
      "pods",
      "-A",
      "--watch",
      "-o",
      "json",
      "--request-timeout=3s",
    ]);
    // The second Pod arrives over the open watch stream, not in the initial list.
    const deadline = Date.now() + 10_000;
    while (server.watchCount === 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(server.watchCount, 1, "kubectl opened a watch");
    server.put("pods", { metadata: { name: "b", namespace: "n2" }, spec: {}, status: {} });
    await new Promise((r) => setTimeout(r, 200));
    server.dropWatches();
    const out = await watching;
    const names = [...out.matchAll(/"name": "([ab])"/g)].map((m) => m[1]);
    assert.deepEqual(names, ["a", "b"]);
  } finally {
    await server.stop();
  }
});

// node:http holds a response's headers until its first write: a watch with no event to send
// answered nothing, and the aggregator's Pod watch failed "no answer within 10000 ms" every
// 10 s against a quiet test server (seen in a review). An API server answers a watch at once.
Deno.test("the test API server answers a quiet watch's headers at once", async () => {
  const server = await new FakeKubeApiServer().start();
  const client = Deno.createHttpClient({ caCerts: [server.apiServerCa] });
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(new Error("no headers within 3 s")), 3_000);
  try {
    const res = await fetch(`${server.url}/api/v1/pods?watch=true&resourceVersion=1000`, {
      client,
      signal: ac.signal,
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "application/json");
    await res.body?.cancel();
  } finally {
    clearTimeout(timer);
    client.close();
    await server.stop();
  }
});
