/**
 * Which API server the process uses (in-cluster service account, `--kubeconfig`, `KUBECONFIG`,
 * none), and the in-cluster configuration working against the test API server: the token is
 * sent, the CA file verifies the server.
 */

import assert from "node:assert/strict";
import { connectKube, resolveKubeTarget } from "../../src/k8s/client.ts";
import { FakeKubeApiServer } from "../_helpers/k8s_server.ts";

function envOf(vars: Record<string, string>): (name: string) => string | undefined {
  return (name) => vars[name];
}

Deno.test("k8s client: standalone without service account, --kubeconfig or KUBECONFIG", async () => {
  const dir = await Deno.makeTempDir();
  try {
    // KUBERNETES_SERVICE_HOST alone (no token file) is not a cluster; ~/.kube/config is not read.
    const target = await resolveKubeTarget({
      env: envOf({ KUBERNETES_SERVICE_HOST: "10.96.0.1", HOME: dir }),
      serviceAccountDir: `${dir}/sa`,
    });
    assert.equal(target, undefined);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("k8s client: in-cluster from the service account, token and CA used", async () => {
  const server = await new FakeKubeApiServer().start();
  server.token = "sa-token-1";
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/token`, "sa-token-1");
    await Deno.writeTextFile(`${dir}/ca.crt`, server.apiServerCa);
    const port = new URL(server.url).port;
    const target = await resolveKubeTarget({
      env: envOf({ KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: port }),
      serviceAccountDir: dir,
    });
    assert.deepEqual(target, {
      mode: "in-cluster",
      server: `https://127.0.0.1:${port}`,
      source: dir,
    });
    server.put("configmaps", { metadata: { name: "c", namespace: "n" }, data: { k: "v" } });
    const api = await connectKube(target!);
    assert.deepEqual((await api.getConfigMap("n", "c"))?.data, { k: "v" });
    assert.equal(await api.getConfigMap("n", "missing"), undefined);
    // Another service account's token is refused: the token file is really what is sent.
    const other = await Deno.makeTempDir({ dir });
    await Deno.writeTextFile(`${other}/token`, "another-token");
    await Deno.copyFile(`${dir}/ca.crt`, `${other}/ca.crt`);
    const refused = await connectKube({ ...target!, source: other });
    await assert.rejects(refused.getConfigMap("n", "c"), (e: { code?: number }) => e.code === 401);
  } finally {
    await server.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("k8s client: --kubeconfig wins over the service account and KUBECONFIG", async () => {
  const server = await new FakeKubeApiServer().start();
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/token`, "t");
    await Deno.writeTextFile(`${dir}/config`, server.kubeconfig());
    const env = envOf({
      KUBERNETES_SERVICE_HOST: "10.96.0.1",
      KUBECONFIG: `${dir}/other:${dir}/more`,
    });
    const explicit = await resolveKubeTarget({
      kubeconfig: `${dir}/config`,
      env,
      serviceAccountDir: dir,
    });
    assert.deepEqual(explicit, { mode: "kubeconfig", server: server.url, source: `${dir}/config` });
    // Without the flag and without a service account: the first KUBECONFIG path.
    await assert.rejects(
      resolveKubeTarget({ env, serviceAccountDir: `${dir}/none` }),
      /No such file|not found/i,
    );
  } finally {
    await server.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
