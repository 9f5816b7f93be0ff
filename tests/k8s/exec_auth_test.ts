/**
 * Exec credential plugins (a kubeconfig user's `exec`), against the test API server with the
 * real client: a slow plugin's time does not count against a watch's headers bound, a hung
 * plugin is killed with what it started, and requests waiting for a credential share one run.
 */

import assert from "node:assert/strict";
import { connectKube, resolveKubeTarget } from "../../src/k8s/client.ts";
import { MAX_ANSWER_BYTES } from "../../src/k8s/exec_auth.ts";
import { describe, statusOf } from "../../src/k8s/retry.ts";
import { watchStream } from "../../src/k8s/watch.ts";
import { FakeKubeApiServer } from "../_helpers/k8s_server.ts";
import { waitFor } from "../_helpers/wait.ts";

const CREDENTIAL = JSON.stringify({
  apiVersion: "client.authentication.k8s.io/v1",
  kind: "ExecCredential",
  status: { token: "plugin-token" },
});

interface PluginContext {
  server: FakeKubeApiServer;
  dir: string;
  /** A kubeconfig whose user runs `script` (bash) for its credential. */
  kubeconfig(script: string): Promise<string>;
  /** Lines the plugins wrote to `$DIR/calls`. */
  calls(): Promise<string[]>;
}

async function withPlugin(fn: (ctx: PluginContext) => Promise<void>): Promise<void> {
  const server = await new FakeKubeApiServer().start();
  server.token = "plugin-token";
  const dir = await Deno.makeTempDir({ prefix: "fa-exec-" });
  const calls = async () => {
    const text = await Deno.readTextFile(`${dir}/calls`).catch(() => "");
    return text.split("\n").filter((l) => l !== "");
  };
  try {
    await fn({
      server,
      dir,
      kubeconfig: async (script) => {
        await Deno.writeTextFile(`${dir}/plugin.sh`, `echo $$ >> ${dir}/calls\n${script}\n`);
        const config = JSON.parse(server.kubeconfig());
        config.users[0].user = {
          exec: {
            apiVersion: "client.authentication.k8s.io/v1",
            command: "bash",
            args: [`${dir}/plugin.sh`],
          },
        };
        await Deno.writeTextFile(`${dir}/config`, JSON.stringify(config));
        return `${dir}/config`;
      },
      calls,
    });
  } finally {
    // Whatever a plugin left (the code before the fix left them all) is ended here.
    for (const pid of [...await calls(), ...await pidsIn(`${dir}/children`)]) {
      try {
        Deno.kill(Number(pid), "SIGKILL");
      } catch {
        // gone
      }
    }
    await server.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

async function pidsIn(file: string): Promise<string[]> {
  const text = await Deno.readTextFile(file).catch(() => "");
  return text.split("\n").filter((l) => l !== "");
}

/** True while `pid` runs (a zombie left for an init that does not reap counts as ended). */
function running(pid: string): boolean {
  try {
    return Deno.readTextFileSync(`/proc/${pid}/stat`).split(" ")[2] !== "Z";
  } catch {
    return false;
  }
}

Deno.test("exec credentials: a slow plugin's time does not count against the watch's headers bound", async () => {
  await withPlugin(async ({ server, kubeconfig }) => {
    server.put("pods", {
      metadata: { name: "a", namespace: "ns", uid: "u-a" },
      status: { podIP: "10.0.0.1" },
    });
    const lib = await import("@kubernetes/client-node");
    const { fetch } = await import("undici");
    const kc = new lib.KubeConfig();
    kc.loadFromString(await Deno.readTextFile(await kubeconfig(`sleep 3\necho '${CREDENTIAL}'`)));
    const events: string[] = [];
    const done = Promise.withResolvers<unknown>();
    const handle = watchStream({ lib, kc, fetch }, "/api/v1/pods", {}, {
      onEvent: (ev) => events.push(ev.type),
      onDone: (err) => done.resolve(err),
    }, { authMs: 30_000, headersMs: 2_000, inactivityMs: 60_000 });
    try {
      // The plugin takes 3 s, the answer's headers come at once after it (2 s of margin: with
      // 500 ms, on a machine at load 13, the headers once came later than that).
      await Promise.race([
        waitFor(() => events.length > 0, { what: "the watch's first event" }),
        done.promise.then((err) => assert.fail(`the watch ended: ${err}`)),
      ]);
      assert.deepEqual(events, ["ADDED"]);
    } finally {
      handle.abort();
    }
  });
});

Deno.test("exec credentials: a hung plugin is killed after its timeout, with what it started", async () => {
  await withPlugin(async ({ dir, kubeconfig, calls }) => {
    const config = await kubeconfig(`sleep 1000 &\necho $! >> ${dir}/children\nwait`);
    const target = await resolveKubeTarget({ kubeconfig: config, env: () => undefined });
    const api = await connectKube(target!, { execPluginTimeoutMs: 300 });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const outcome = await Promise.race([
      api.getConfigMap("ns", "x").then(() => "answered", (err) => `failed: ${err}`),
      new Promise<string>((r) => timer = setTimeout(() => r("still waiting after 10 s"), 10_000)),
    ]);
    clearTimeout(timer);
    assert.match(outcome, /^failed: .*credential plugin bash gave no answer within 300 ms/);
    const pids = [...await calls(), ...await pidsIn(`${dir}/children`)];
    assert.equal(pids.length, 2, "the plugin and its child");
    await waitFor(() => pids.every((p) => !running(p)), { what: "the plugin's processes ended" });
  });
});

Deno.test("exec credentials: requests waiting for a credential share one plugin run, then its cache", async () => {
  await withPlugin(async ({ server, kubeconfig, calls }) => {
    const config = await kubeconfig(`sleep 0.5\necho '${CREDENTIAL}'`);
    const target = await resolveKubeTarget({ kubeconfig: config, env: () => undefined });
    const api = await connectKube(target!);
    const answers = await Promise.all(
      Array.from({ length: 4 }, () => api.getConfigMap("ns", "none")),
    );
    assert.deepEqual(answers, [undefined, undefined, undefined, undefined]);
    await api.getConfigMap("ns", "none");
    assert.equal((await calls()).length, 1, "one plugin run for five requests");
    assert.ok(server.requests.every((r) => r.status === 404), "each carried the plugin's token");
  });
});

Deno.test("exec credentials: a plugin writing without end is killed at the answer bound, its output not kept", async () => {
  await withPlugin(async ({ kubeconfig }) => {
    // `yes` writes without end: before the bound, its output grew in memory until the timeout.
    const config = await kubeconfig("exec yes credential");
    const target = await resolveKubeTarget({ kubeconfig: config, env: () => undefined });
    const api = await connectKube(target!, { execPluginTimeoutMs: 60_000 });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const outcome = await Promise.race([
      api.getConfigMap("ns", "x").then(() => "answered", (err) => `failed: ${err}`),
      new Promise<string>((r) => timer = setTimeout(() => r("still waiting after 20 s"), 20_000)),
    ]);
    clearTimeout(timer);
    assert.match(
      outcome,
      new RegExp(`credential plugin bash wrote over ${MAX_ANSWER_BYTES} bytes`),
    );
  });
});

Deno.test("exec credentials: closing the client kills a running plugin at once, and runs none after", async () => {
  await withPlugin(async ({ dir, kubeconfig, calls }) => {
    const config = await kubeconfig(`sleep 1000 &\necho $! >> ${dir}/children\nwait`);
    const target = await resolveKubeTarget({ kubeconfig: config, env: () => undefined });
    // A timeout far beyond the test: only close() can end the plugin.
    const api = await connectKube(target!, { execPluginTimeoutMs: 600_000 });
    const outcome = api.getConfigMap("ns", "x").then(() => "answered", (err) => `failed: ${err}`);
    await waitFor(async () => (await pidsIn(`${dir}/children`)).length === 1, {
      what: "the plugin started its child",
    });
    const pids = [...await calls(), ...await pidsIn(`${dir}/children`)];
    api.close();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const result = await Promise.race([
      outcome,
      new Promise<string>((r) => timer = setTimeout(() => r("still waiting after 5 s"), 5_000)),
    ]);
    clearTimeout(timer);
    assert.match(result, /^failed: .*credential plugin bash killed: the client was closed/);
    await waitFor(() => pids.every((p) => !running(p)), { what: "the plugin's processes ended" });
    await assert.rejects(api.getConfigMap("ns", "x"), /not run: the client is closed/);
    assert.equal((await calls()).length, 1, "no plugin run after close");
    // The refused attempt is a run that failed: failures never pass runs.
    const st = api.stats();
    assert.equal(st.credentialPluginRuns, 2);
    assert.equal(st.credentialPluginFailures, 2);
  });
});

// A plugin printing its own error on stdout (exit 0) was reported as "the API server answered
// text that is no JSON" and counted in malformedAnswers, though no request was sent.
Deno.test("exec credentials: a plugin printing no JSON fails naming the plugin, no request sent, nothing counted", async () => {
  await withPlugin(async ({ server, kubeconfig }) => {
    const config = await kubeconfig(
      `echo 'Error: could not refresh SSO session ${"x".repeat(500)}'\necho 'second line'`,
    );
    const target = await resolveKubeTarget({ kubeconfig: config, env: () => undefined });
    const api = await connectKube(target!);
    try {
      const err = await api.getConfigMap("ns", "x").then(() => undefined, (e) => e as Error);
      assert.ok(err instanceof Error, "the get failed");
      assert.equal(err.name, "Error", "not a MalformedAnswer");
      assert.match(
        err.message,
        /^credential plugin bash printed text that is no JSON \("Error: could not refresh SSO session x+…"\): no credential$/,
      );
      assert.ok(err.message.length < 250, `cut: ${err.message.length} characters`);
      assert.equal(describe(err), err.message);
      assert.equal(api.stats().malformedAnswers, 0);
      assert.equal(server.requests.length, 0, "no request reached the server");
    } finally {
      api.close();
    }
  });
});

// Each was cached (a status "oops", a token 12345: requests then went out without a token) or
// threw a TypeError (null).
const WRONG_CREDENTIALS: Record<string, [string, RegExp]> = {
  "null": ["null", /printed null, not an ExecCredential/],
  "an array": ["[]", /printed an array, not an ExecCredential/],
  "nothing": ["", /printed nothing/],
  "another kind": ['{"kind":"Status","status":{"token":"t"}}', /printed kind "Status", not/],
  "no status": ['{"kind":"ExecCredential"}', /whose status is absent, not an object/],
  "a status string": ['{"status":"oops"}', /whose status is a string, not an object/],
  "a token number": [
    '{"kind":"ExecCredential","status":{"token":12345}}',
    /whose status.token is a number, not a string/,
  ],
  // (It said "a object".)
  "a token object": [
    '{"kind":"ExecCredential","status":{"token":{"value":"plugin-token"}}}',
    /whose status.token is an object, not a string/,
  ],
  "no token nor certificate": [
    '{"kind":"ExecCredential","status":{}}',
    /with neither a token nor a client certificate and key/,
  ],
  "a certificate without key": [
    '{"kind":"ExecCredential","status":{"clientCertificateData":"c"}}',
    /with a client certificate but no key/,
  ],
  "an expiry that is no time": [
    '{"kind":"ExecCredential","status":{"token":"plugin-token","expirationTimestamp":"soon"}}',
    /whose status.expirationTimestamp is no time/,
  ],
};
for (const [name, [output, expected]] of Object.entries(WRONG_CREDENTIALS)) {
  Deno.test(`exec credentials: a plugin printing ${name} fails, named, and is not kept`, async () => {
    await withPlugin(async ({ server, kubeconfig, calls }) => {
      const config = await kubeconfig(`printf '%s' '${output}'`);
      const target = await resolveKubeTarget({ kubeconfig: config, env: () => undefined });
      const api = await connectKube(target!);
      try {
        for (let i = 0; i < 2; i++) {
          await assert.rejects(api.getConfigMap("ns", "x"), (err: Error) => {
            assert.match(err.message, /^credential plugin bash printed /);
            assert.match(err.message, expected);
            assert.doesNotMatch(err.message, /plugin-token/, "no token in the message");
            return true;
          });
        }
        assert.equal((await calls()).length, 2, "run again: the wrong answer was not kept");
        assert.equal(server.requests.length, 0, "no request sent without a credential");
        const stats = api.stats();
        assert.equal(stats.malformedAnswers, 0);
        // Counted as the plugin's failures (they had no counter of their own).
        assert.equal(stats.credentialPluginRuns, 2);
        assert.equal(stats.credentialPluginFailures, 2);
        assert.equal(stats.credentialsRefused, 0);
      } finally {
        api.close();
      }
    });
  });
}

// The plugin contract: a credential without expirationTimestamp is kept until the API server
// answers 401. It was kept for good: once the token was revoked or rotated, every call failed
// 401 until a restart, the plugin (which had the new token) never run again.
Deno.test("exec credentials: a credential without expiry is kept until a 401, then the plugin runs again", async () => {
  await withPlugin(async ({ server, dir, kubeconfig, calls }) => {
    server.token = "token-A";
    await Deno.writeTextFile(`${dir}/current`, "token-A");
    const config = await kubeconfig(
      `printf '{"kind":"ExecCredential","status":{"token":"%s"}}' "$(cat ${dir}/current)"`,
    );
    const target = await resolveKubeTarget({ kubeconfig: config, env: () => undefined });
    const api = await connectKube(target!);
    try {
      assert.equal(await api.getConfigMap("ns", "x"), undefined);
      assert.equal(await api.getConfigMap("ns", "x"), undefined);
      assert.equal((await calls()).length, 1, "kept while accepted");
      // The token is rotated: the plugin now prints the new one.
      server.token = "token-B";
      await Deno.writeTextFile(`${dir}/current`, "token-B");
      await assert.rejects(api.getConfigMap("ns", "x"), (err) => statusOf(err) === 401);
      assert.equal(await api.getConfigMap("ns", "x"), undefined, "the next call has the new one");
      assert.equal((await calls()).length, 2);
      // The Pod list (our own request) and a create drop it on a 401 too.
      for (
        const [token, call] of [
          ["token-C", () => api.listPods()],
          ["token-D", () => api.createConfigMap("ns", { metadata: { name: "y" }, data: {} })],
        ] as const
      ) {
        server.token = token;
        await Deno.writeTextFile(`${dir}/current`, token);
        await assert.rejects(call(), (err) => statusOf(err) === 401);
        await call();
      }
      // And a watch refused.
      server.token = "token-E";
      await Deno.writeTextFile(`${dir}/current`, "token-E");
      const ended = Promise.withResolvers<unknown>();
      await api.watchPods("1", { onEvent: () => {}, onDone: (err) => ended.resolve(err) });
      assert.equal(statusOf(await ended.promise), 401);
      await api.listPods();
      assert.equal((await calls()).length, 5);
      const stats = api.stats();
      assert.equal(stats.credentialPluginRuns, 5);
      assert.equal(stats.credentialPluginFailures, 0);
      assert.equal(stats.credentialsRefused, 4, "each 401 dropped the credential held");
      assert.deepEqual(server.requests.map((r) => r.status), [
        404,
        404,
        401,
        404,
        401,
        200,
        401,
        201,
        401,
        200,
      ]);
    } finally {
      api.close();
    }
  });
});
