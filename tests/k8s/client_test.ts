/**
 * Which API server the process uses (in-cluster service account, `--kubeconfig`, `KUBECONFIG`,
 * none), and the in-cluster configuration working against the test API server: the token is
 * sent, the CA file verifies the server.
 */

import assert from "node:assert/strict";
import { systemClock } from "../../src/clock.ts";
import {
  connectKube,
  MAX_KUBECONFIG_BYTES,
  resolveKubeTarget,
  SERVICE_ACCOUNT_DIR,
  serviceAccountLookup,
} from "../../src/k8s/client.ts";
import { describe, RetryAborted, retrying } from "../../src/k8s/retry.ts";
import { logger, setLogWriter } from "../../src/log.ts";
import { connectTestApi, FakeKubeApiServer } from "../_helpers/k8s_server.ts";
import { waitFor } from "../_helpers/wait.ts";

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

/** Runs `fn` with the log lines (warn and above) captured. */
async function capturingLog(fn: () => Promise<void>): Promise<string[]> {
  const lines: string[] = [];
  const previous = setLogWriter((l) => lines.push(l));
  try {
    await fn();
  } finally {
    setLogWriter(previous);
  }
  return lines;
}

Deno.test({
  name: "k8s client: KUBERNETES_SERVICE_HOST set but no --allow-read for the service account: " +
    "an error naming the flag, not a quiet standalone run",
  // The process's narrow flags without the service account directory (the image's former
  // fixed entrypoint): Deno refuses the token's stat.
  permissions: { read: false, env: true },
  async fn() {
    let target: unknown = "unset";
    const lines = await capturingLog(async () => {
      target = await resolveKubeTarget({
        env: envOf({ KUBERNETES_SERVICE_HOST: "10.96.0.1" }),
        serviceAccountDir: "/var/run/secrets/kubernetes.io/serviceaccount",
      });
    });
    assert.equal(target, undefined);
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(lines[0], /level=error component=k8s /);
    assert.match(
      lines[0],
      /KUBERNETES_SERVICE_HOST is set but this process may not read the service account \(it was not given --allow-read=\/var\/run\/secrets\/kubernetes.io\/serviceaccount\)/,
    );
    assert.match(
      lines[0],
      / missing="--allow-read=\/var\/run\/secrets\/kubernetes.io\/serviceaccount"/,
    );
  },
});

Deno.test({
  name: "k8s client: no --allow-env for KUBERNETES_SERVICE_HOST: a warning that it cannot tell",
  permissions: { read: true, env: ["KUBECONFIG"] },
  async fn() {
    const lines = await capturingLog(async () => {
      assert.equal(await resolveKubeTarget({ serviceAccountDir: "/nonexistent" }), undefined);
    });
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(
      lines[0],
      /level=warn component=k8s msg="cannot tell whether this runs in a Kubernetes Pod/,
    );
    assert.match(lines[0], / missing="--allow-env=KUBERNETES_SERVICE_HOST"/);
  },
});

Deno.test("k8s client: the service account is looked at with KUBERNETES_SERVICE_HOST and no --kubeconfig", () => {
  const host = envOf({ KUBERNETES_SERVICE_HOST: "10.96.0.1" });
  assert.equal(serviceAccountLookup({ env: host }), SERVICE_ACCOUNT_DIR);
  assert.equal(serviceAccountLookup({ env: host, serviceAccountDir: "/sa" }), "/sa");
  assert.equal(serviceAccountLookup({ env: host, kubeconfig: "/kc" }), undefined);
  assert.equal(serviceAccountLookup({ env: envOf({}) }), undefined);
});

// A kubeconfig that is a FIFO was opened with Deno.readTextFile: the start waited for a writer.
Deno.test("k8s client: a kubeconfig that is no regular file is refused unopened", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const fifo = `${dir}/kubeconfig`;
    const made = await new Deno.Command("mkfifo", { args: [fifo] }).output();
    assert.ok(made.success);
    let timer: ReturnType<typeof setTimeout> | undefined;
    // Generous: the first call loads the Kubernetes client's modules (seconds on a busy machine).
    const hung = new Promise((r) =>
      timer = setTimeout(() => r("still pending after 30 s"), 30_000)
    );
    const got = await Promise.race([
      resolveKubeTarget({ kubeconfig: fifo, env: () => undefined }).then(
        () => "resolved",
        (err: Error) => err.message,
      ),
      hung,
    ]);
    clearTimeout(timer);
    assert.match(String(got), /kubeconfig .*kubeconfig: not a regular file \(FIFO\)/);
    // A regular file past the bound is not read.
    await Deno.remove(fifo);
    await Deno.writeTextFile(fifo, "#".repeat(MAX_KUBECONFIG_BYTES + 1));
    await assert.rejects(
      resolveKubeTarget({ kubeconfig: fifo, env: () => undefined }),
      /over 4194304 bytes: not read/,
    );
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

// A hung or trickling API server once piled up one connection per timed-out attempt (the
// attempt was given up, its request left running), all still open after the retrying stopped.
for (const hang of ["headers", "body"] as const) {
  Deno.test(`k8s client: a timed-out attempt's request is cancelled (server hangs in its ${hang})`, async () => {
    const server = await new FakeKubeApiServer().start();
    const { api, cleanup } = await connectTestApi(server);
    server.fault({ match: { path: "/secrets/" }, times: 1000, hang });
    const stop = new AbortController();
    const work = retrying("reading a Secret", (signal) => api.getSecret("ns", "s", signal), {
      clock: systemClock,
      log: logger("client-test"),
      attemptTimeoutMs: 200,
      initialMs: 50,
      maxMs: 50,
      signal: stop.signal,
    });
    work.catch(() => {});
    let most = 0;
    try {
      // Ten attempts or so, each given up after 200 ms.
      await waitFor(() => {
        most = Math.max(most, server.openConnections);
        return server.received >= 10;
      }, { what: "ten attempts", timeoutMs: 20_000 });
      assert.ok(most <= 2, `connections open at once: ${most} (one per attempt in flight)`);
      stop.abort();
      await assert.rejects(work, RetryAborted);
      await waitFor(() => server.openConnections === 0, {
        what: "the last attempt's connection closed by the stop",
        timeoutMs: 5_000,
      });
    } finally {
      stop.abort();
      await server.stop();
      await cleanup();
    }
  });
}

// client-node read an answer whole, whatever its size: a 256 MiB ConfigMap grew memory by a
// gigabyte, and 700 MiB peaked at 1.6 GB on every retry.
Deno.test("k8s client: an answer over 4 MiB is refused and counted, its length declared or not", async () => {
  const server = await new FakeKubeApiServer().start();
  const { api, cleanup } = await connectTestApi(server);
  try {
    const pad = "x".repeat(5 << 20);
    // Sent in chunks: counted as it comes.
    server.put("configmaps", { metadata: { name: "big", namespace: "n" }, data: { pad } });
    await assert.rejects(api.getConfigMap("n", "big"), /passed 4194304 bytes: refused/);
    // Declared: refused before reading.
    server.fault({
      match: { path: "/configmaps/declared" },
      body: JSON.stringify({
        kind: "ConfigMap",
        apiVersion: "v1",
        metadata: { name: "declared", namespace: "n" },
        data: { pad },
      }),
      contentLength: true,
    });
    await assert.rejects(api.getConfigMap("n", "declared"), /is \d+ bytes, over 4194304 bytes/);
    assert.equal(api.stats().answersTooLarge, 2);
    // Under the bound: read as before.
    server.put("configmaps", {
      metadata: { name: "small", namespace: "n" },
      data: { pad: "x".repeat(3 << 20) },
    });
    assert.equal((await api.getConfigMap("n", "small"))?.data?.pad.length, 3 << 20);
    assert.equal(api.stats().answersTooLarge, 2);
  } finally {
    await server.stop();
    await cleanup();
  }
});

Deno.test("k8s client: a page of the Pod list has its own, larger bound", async () => {
  const server = await new FakeKubeApiServer().start();
  const { api, cleanup } = await connectTestApi(server);
  try {
    // Three Pods of 2 MiB: a 6 MiB page, over an object's bound, well under a page's.
    for (const name of ["a", "b", "c"]) {
      server.put("pods", {
        metadata: { name, namespace: "n", annotations: { pad: "x".repeat(2 << 20) } },
      });
    }
    const page = await api.listPods(undefined, { limit: 500 });
    assert.equal(page.items.length, 3);
    assert.equal(api.stats().answersTooLarge, 0);
  } finally {
    await server.stop();
    await cleanup();
  }
});

// client-node's error for a 401 has no body: every refused call was logged "401: HTTP-Code: 401".
Deno.test("k8s client: a refused token is described as such, on every call path", async () => {
  const server = await new FakeKubeApiServer().start();
  const { api, cleanup } = await connectTestApi(server);
  // The kubeconfig has the token "test-token"; the server now wants another.
  server.token = "the-right-token";
  try {
    const calls: Record<string, () => Promise<unknown>> = {
      get: () => api.getConfigMap("n", "c"),
      create: () => api.createSecret("n", { metadata: { name: "s" }, data: {} }),
      "the Pod list": () => api.listPods(),
      "a watch": () =>
        new Promise((_, reject) => {
          api.watchPods("1", { onEvent: () => {}, onDone: (err) => reject(err) });
        }),
    };
    for (const [name, call] of Object.entries(calls)) {
      await assert.rejects(call(), (err) => {
        assert.equal(describe(err), "401 Unauthorized: the token or credential was refused", name);
        return true;
      });
    }
  } finally {
    await server.stop();
    await cleanup();
  }
});

// A create or replace answered 2xx with text that is no JSON threw client-node's bare
// "Unexpected token 'g', ..." (for `set`, whose write may have been applied).
Deno.test("k8s client: a create or replace answered with no JSON is a malformed answer, counted", async () => {
  const server = await new FakeKubeApiServer().start();
  const { api, cleanup } = await connectTestApi(server);
  try {
    server.put("configmaps", { metadata: { name: "c", namespace: "n" }, data: { k: "v" } });
    const cm = (await api.getConfigMap("n", "c"))!;
    const calls: [string, string, () => Promise<unknown>][] = [
      ["POST", "creating Secret n/s", () => api.createSecret("n", { metadata: { name: "s" } })],
      ["PUT", "replacing ConfigMap n/c", () => api.replaceConfigMap("n", cm)],
      [
        "POST",
        "creating ConfigMap n/d",
        () => api.createConfigMap("n", { metadata: { name: "d" } }),
      ],
    ];
    let n = 0;
    for (const [method, what, call] of calls) {
      server.fault({ match: { method }, body: "garbage after a write" });
      await assert.rejects(call(), (err: Error) => {
        assert.equal(err.name, "MalformedAnswer");
        assert.match(
          err.message,
          new RegExp(
            `^k8s: ${what}, the API server answered text that is no JSON \\(.*\\): the ` +
              `(create|replace) may have been applied$`,
          ),
        );
        assert.equal(describe(err), err.message);
        return true;
      });
      assert.equal(api.stats().malformedAnswers, ++n);
    }
    server.fault({ match: { method: "PUT" }, body: "null" });
    await assert.rejects(api.replaceConfigMap("n", cm), /answered no object: the replace may/);
    assert.equal(api.stats().malformedAnswers, 4);
  } finally {
    await server.stop();
    await cleanup();
  }
});
