/**
 * The HTTP library client-node's requests go through, and the watch: a redirect is refused,
 * never followed (the request, its body and headers would go where it points), and counted.
 * (Its bound on answers is tested with the client, `client_test.ts`.)
 */

import assert from "node:assert/strict";
import { RedirectRefused } from "../../src/k8s/http.ts";
import { within } from "../../src/clock.ts";
import { connectTestApi, FakeKubeApiServer } from "../_helpers/k8s_server.ts";

async function withServers(
  fn: (
    ctx: {
      server: FakeKubeApiServer;
      other: FakeKubeApiServer;
      api: Awaited<ReturnType<typeof connectTestApi>>["api"];
    },
  ) => Promise<void>,
): Promise<void> {
  const server = await new FakeKubeApiServer().start();
  // Another origin the client would trust (the same test CA): following is all it takes.
  const other = await new FakeKubeApiServer().start();
  const { api, cleanup } = await connectTestApi(server);
  try {
    await fn({ server, other, api });
  } finally {
    await server.stop();
    await other.stop();
    await cleanup();
  }
}

// A 307 to another origin made the client POST our CA's private key there.
Deno.test("k8s http: a create redirected to another origin is refused, nothing sent there", async () => {
  await withServers(async ({ server, other, api }) => {
    server.fault({
      match: { method: "POST", path: "/secrets" },
      status: 307,
      headers: { location: `${other.url}/api/v1/namespaces/ns/secrets` },
    });
    await assert.rejects(
      api.createSecret("ns", {
        metadata: { name: "ca", namespace: "ns" },
        type: "kubernetes.io/tls",
        data: { "tls.crt": btoa("cert"), "tls.key": btoa("THE CA'S PRIVATE KEY") },
      }),
      (err: unknown) =>
        err instanceof RedirectRefused && err.message.includes(`a redirect to ${other.url}`),
    );
    assert.equal(other.received, 0, "nothing reached the other origin");
    assert.equal(server.received, 1);
    assert.equal(api.stats().redirectsRefused, 1);
  });
});

Deno.test("k8s http: a get redirected to itself is refused at once, not followed 20 times", async () => {
  await withServers(async ({ server, api }) => {
    server.fault({
      match: { method: "GET", path: "/configmaps/c" },
      status: 302,
      headers: { location: "/api/v1/namespaces/ns/configmaps/c?again=1" },
      times: 100,
    });
    await assert.rejects(api.getConfigMap("ns", "c"), /302, a redirect to the same origin/);
    assert.equal(server.received, 1);
    assert.equal(api.stats().redirectsRefused, 1);
  });
});

Deno.test("k8s http: a watch redirected is refused, counted", async () => {
  await withServers(async ({ server, other, api }) => {
    server.fault({
      match: { method: "GET", path: "/pods", query: "watch=true" },
      status: 307,
      headers: { location: `${other.url}/api/v1/pods?watch=true` },
    });
    const done = Promise.withResolvers<unknown>();
    await api.watchPods("1", { onEvent: () => {}, onDone: (err) => done.resolve(err) });
    const err = await done.promise;
    assert.ok(err instanceof RedirectRefused, String(err));
    assert.equal(other.received, 0, "nothing reached the other origin");
    assert.equal(api.stats().redirectsRefused, 1);
  });
});

// A server that sent its headers and then never finished the body left the body read pending
// after the call's signal aborted: `set` ended with "Top-level await promise never resolved", and
// each timed-out attempt of the aggregator's retries stayed pending. The signal's reason decides
// the words: a timeout (AbortSignal.timeout, retrying's own timeout error) or a cancellation.
// The abort comes 2 s after the call (300 ms was too short on a busy machine: the headers had
// not arrived yet, and a call aborted before them is another case).
const ABORT_MS = 2_000;
const ABORTS: [string, (signal: AbortController) => AbortSignal, RegExp][] = [
  ["AbortSignal.timeout", () => AbortSignal.timeout(ABORT_MS), /^k8s: the request timed out/],
  ["retrying's timeout", (c) => {
    setTimeout(
      () => c.abort(new Error(`no answer from the Kubernetes API within ${ABORT_MS} ms`)),
      ABORT_MS,
    );
    return c.signal;
  }, /^k8s: the request timed out/],
  ["a cancellation", (c) => {
    setTimeout(() => c.abort(), ABORT_MS);
    return c.signal;
  }, /^k8s: the request was cancelled/],
];
for (const [what, signalOf, words] of ABORTS) {
  Deno.test(`k8s http: a body that never ends fails the call when its signal aborts (${what})`, async () => {
    await withServers(async ({ server, api }) => {
      server.put("configmaps", { metadata: { name: "c", namespace: "ns" }, data: { a: "b" } });
      server.fault({ match: { path: "/configmaps/c" }, hang: "body", times: 2 });
      for (const method of ["GET", "PUT"]) {
        const signal = signalOf(new AbortController());
        const call = method === "GET"
          ? api.getConfigMap("ns", "c", signal)
          : api.replaceConfigMap("ns", {
            metadata: { name: "c", namespace: "ns", resourceVersion: "1" },
            data: { a: "c" },
          }, signal);
        let err: unknown;
        const settled = call.then(() => {}, (e) => void (err = e));
        // The guard only bounds the test: the call used to settle never (or as a bad answer).
        assert.equal(await within(settled, 10_000), "done", `the ${method} settled`);
        assert.ok(err instanceof Error && err.name === "AnswerAborted", String(err));
        assert.match(err.message, words);
        assert.match(err.message, new RegExp(`answer to the ${method}`));
      }
    });
  });
}
