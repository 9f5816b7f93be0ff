/**
 * Publication of the collector's TLS material against the test API server, with the real
 * client: objects created as Agents expect them, kept across a restart when reusable, replaced
 * when not, retried through 5xx and conflicts, and usable by an Agent-side TLS client.
 */

import assert from "node:assert/strict";
import tls from "node:tls";
import forge from "node-forge";
import { ManualClock } from "../../src/clock.ts";
import { setLogWriter } from "../../src/log.ts";
import { prometheusText } from "../../src/api/prometheus.ts";
import { parseConfig } from "../../src/components.ts";
import { FlowAggregator, statsFields } from "../../src/flow_aggregator.ts";
import { ClusterIdentity } from "../../src/k8s/cluster_uuid.ts";
import {
  CA_CONFIGMAP,
  CA_SECRET,
  CertificatePublisher,
  type CertificateSyncOptions,
  CLIENT_SECRET,
  prepareCertificates,
} from "../../src/k8s/certificates.ts";
import type { KubeApi } from "../../src/k8s/client.ts";
import { generateCertificates, type GeneratedCertificates } from "../../src/pki/mod.ts";
import { concat, GOLDEN_DATA, GOLDEN_TEMPLATE, startCollector } from "../collector/helpers.ts";
import { connectTestApi, FakeKubeApiServer, secretText } from "../_helpers/k8s_server.ts";
import { collectorTls } from "../_helpers/tls.ts";
import { settleDriving, waitFor } from "../_helpers/wait.ts";

const NS = "flow-aggregator";

async function withApi(
  fn: (ctx: {
    server: FakeKubeApiServer;
    api: KubeApi;
    clock: ManualClock;
    opts: CertificateSyncOptions & { waitMs: number };
    prepare(): Promise<GeneratedCertificates>;
    publish(certs: GeneratedCertificates): Promise<CertificatePublisher>;
  }) => Promise<void>,
): Promise<void> {
  const server = await new FakeKubeApiServer().start();
  const { api, cleanup } = await connectTestApi(server);
  const clock = new ManualClock(Date.now());
  // Attempt timeouts far beyond the pauses the drive fires: only the backoff moves the clock.
  const opts = { api, namespace: NS, clock, attemptTimeoutMs: 3_600_000, waitMs: 3_600_000 };
  try {
    await fn({
      server,
      api,
      clock,
      opts,
      prepare: () => settleDriving(clock, prepareCertificates(opts)),
      publish: async (certs) => {
        const p = new CertificatePublisher(opts);
        p.publish(certs);
        await settleDriving(clock, p.settled);
        return p;
      },
    });
  } finally {
    await server.stop();
    await cleanup();
  }
}

/** What an Agent reads: `ca.crt` from the ConfigMap, `tls.crt`/`tls.key` from the Secret. */
function agentMaterial(server: FakeKubeApiServer): { ca: string; cert: string; key: string } {
  const cm = server.get("configmaps", NS, CA_CONFIGMAP);
  const secret = server.get("secrets", NS, CLIENT_SECRET);
  assert.ok(cm && secret, "ConfigMap and Secret published");
  return {
    ca: cm.data["ca.crt"],
    cert: secretText(secret, "tls.crt"),
    key: secretText(secret, "tls.key"),
  };
}

/** The warnings logged while `fn` runs. */
async function warningsOf(fn: () => Promise<void>): Promise<string[]> {
  const lines: string[] = [];
  const restore = setLogWriter((line, level) => {
    if (level === "warn") lines.push(line);
  });
  try {
    await fn();
  } finally {
    setLogWriter(restore);
  }
  return lines;
}

function writes(server: FakeKubeApiServer): string[] {
  return server.requests.filter((r) => r.method === "POST" || r.method === "PUT")
    .map((r) => `${r.method} ${r.url} ${r.status}`);
}

Deno.test("k8s certificates: ConfigMap and Secrets created as Agents expect them", async () => {
  await withApi(async ({ server, prepare, publish }) => {
    const certs = await prepare();
    const p = await publish(certs);
    const cm = server.get("configmaps", NS, CA_CONFIGMAP)!;
    assert.deepEqual(cm.metadata.labels, { app: "flow-aggregator" });
    assert.deepEqual(Object.keys(cm.data), ["ca.crt"]);
    const secret = server.get("secrets", NS, CLIENT_SECRET)!;
    // §3.3: the Secret is created with no labels (it had the ConfigMap's app=flow-aggregator).
    assert.equal(secret.metadata.labels, undefined);
    assert.equal(secret.type, "kubernetes.io/tls");
    assert.deepEqual(Object.keys(secret.data).sort(), ["tls.crt", "tls.key"]);
    assert.deepEqual(agentMaterial(server), {
      ca: certs.ca.certPem,
      cert: certs.client.certPem,
      key: certs.client.keyPem,
    });
    const caSecret = server.get("secrets", NS, CA_SECRET)!;
    assert.equal(secretText(caSecret, "tls.key"), certs.ca.keyPem);
    assert.deepEqual(p.stats(), {
      published: 1,
      failures: 0,
      created: 3,
      updated: 0,
      caNotPersisted: 0,
      pemsTooLarge: 0,
    });
  });
});

Deno.test("k8s certificates: a restart keeps a valid published pair unchanged", async () => {
  await withApi(async ({ server, prepare, publish }) => {
    const first = await prepare();
    await publish(first);
    const before = writes(server).length;
    const second = await prepare();
    assert.equal(second.ca.certPem, first.ca.certPem);
    assert.equal(second.client.certPem, first.client.certPem);
    assert.equal(second.client.keyPem, first.client.keyPem);
    // Only the server certificate is new, and the kept CA signed it.
    assert.notEqual(second.server.certPem, first.server.certPem);
    const ca = forge.pki.certificateFromPem(first.ca.certPem);
    assert.ok(ca.verify(forge.pki.certificateFromPem(second.server.certPem)));
    const p = await publish(second);
    assert.equal(writes(server).length, before, "nothing rewritten");
    assert.deepEqual(p.stats(), {
      published: 1,
      failures: 0,
      created: 0,
      updated: 0,
      caNotPersisted: 0,
      pemsTooLarge: 0,
    });
  });
});

Deno.test("k8s certificates: a restart replaces a pair that is not reusable", async () => {
  await withApi(async ({ server, prepare, publish }) => {
    const first = await prepare();
    await publish(first);
    // Someone put a client certificate of another CA into the Secret.
    const other = generateCertificates({});
    const secret = server.get("secrets", NS, CLIENT_SECRET)!;
    secret.data["tls.crt"] = btoa(other.client.certPem);
    secret.data["tls.key"] = btoa(other.client.keyPem);
    server.put("secrets", secret);
    const second = await prepare();
    assert.notEqual(second.ca.certPem, first.ca.certPem, "new CA");
    const p = await publish(second);
    assert.deepEqual(p.stats(), {
      published: 1,
      failures: 0,
      created: 0,
      updated: 3,
      caNotPersisted: 0,
      pemsTooLarge: 0,
    });
    assert.deepEqual(agentMaterial(server), {
      ca: second.ca.certPem,
      cert: second.client.certPem,
      key: second.client.keyPem,
    });
    // An update keeps the label of the ConfigMap.
    const cm = server.get("configmaps", NS, CA_CONFIGMAP)!;
    assert.deepEqual(cm.metadata.labels, { app: "flow-aggregator" });
  });
});

// A value that is not base64 (a hand edit) once threw in the comparison: publication retried
// the Secret forever, and the restart's read failed until the wait ran out.
Deno.test("k8s certificates: a Secret value that is not base64 is replaced, not retried forever", async () => {
  await withApi(async ({ server, prepare, publish }) => {
    const first = await prepare();
    await publish(first);
    for (const name of [CA_SECRET, CLIENT_SECRET]) {
      const secret = server.get("secrets", NS, name)!;
      secret.data["tls.crt"] = "%%% not base64 %%%";
      server.put("secrets", secret);
    }
    const second = await prepare();
    assert.notEqual(second.ca.certPem, first.ca.certPem, "not reusable: a new CA");
    const p = await publish(second);
    assert.deepEqual(p.stats(), {
      published: 1,
      failures: 0,
      created: 0,
      updated: 3,
      caNotPersisted: 0,
      pemsTooLarge: 0,
    });
    assert.equal(
      secretText(server.get("secrets", NS, CLIENT_SECRET)!, "tls.key"),
      second.client.keyPem,
    );
  });
});

Deno.test("k8s certificates: publication is retried through 5xx and 409 conflicts", async () => {
  await withApi(async ({ server, prepare, publish }) => {
    // An old ConfigMap exists and a concurrent writer changes it under our first update.
    server.put("configmaps", {
      metadata: { name: CA_CONFIGMAP, namespace: NS, labels: { app: "flow-aggregator" } },
      data: { "ca.crt": "old" },
    });
    server.fault({ match: { method: "GET", path: "/configmaps/" }, status: 500, times: 2 });
    server.fault({ match: { method: "PUT", path: "/configmaps/" }, concurrentWrite: true });
    server.fault({ match: { method: "POST", path: "/secrets" }, status: 503 });
    const certs = await prepare();
    const p = await publish(certs);
    const statuses = server.requests.map((r) => r.status);
    assert.equal(statuses.filter((s) => s === 500).length, 2);
    assert.equal(statuses.filter((s) => s === 409).length, 1);
    assert.equal(statuses.filter((s) => s === 503).length, 1);
    assert.deepEqual(p.stats(), {
      published: 1,
      failures: 4,
      created: 2,
      updated: 1,
      caNotPersisted: 0,
      pemsTooLarge: 0,
    });
    assert.equal(agentMaterial(server).ca, certs.ca.certPem);
  });
});

Deno.test("k8s certificates: an unreachable API server does not hold the start", async () => {
  await withApi(async ({ server, api, clock }) => {
    server.fault({ match: { path: "/secrets/" }, status: 500, times: 1000 });
    let certs: GeneratedCertificates | undefined;
    const warnings = await warningsOf(async () => {
      const prepared = prepareCertificates({ api, namespace: NS, clock, waitMs: 10_000 });
      // The first attempt's 500 taken in: its backoff pause is pending (not the attempt's
      // timeout, which advancing the clock would fire too).
      await waitFor(() => clock.pendingTimers().some((ms) => ms <= 1_000), {
        what: "the first attempt's failure",
      });
      clock.advance(10_000);
      certs = await prepared;
    });
    // Fresh material, usable at once; publication is the background's business.
    assert.ok(certs?.ca.certPem.includes("BEGIN CERTIFICATE"));
    assert.ok(server.requests.length >= 1, "the API server was asked");
    // The API server answered: the warning says what (it said "no answer within 10000 ms").
    const last = warnings.at(-1) ?? "";
    assert.match(last, /could not be read: generating a new collector CA/);
    assert.match(last, /err="500: injected fault"/);
  });
});

// v1.13's RBAC (and our manifest's before the CA Secret was added to it) grants nothing on
// Secret flow-aggregator-ca-tls: the start waited 10 s on its 403s, then the publication retried
// them forever before the ConfigMap and the client Secret, which were never published.
Deno.test("k8s certificates: without rights on the CA Secret, the Agents' objects are published at once", async () => {
  await withApi(async ({ server, clock, opts }) => {
    server.fault({ match: { path: `/secrets/${CA_SECRET}` }, status: 403, times: 1e9 });
    const p = new CertificatePublisher(opts);
    let certs: GeneratedCertificates | undefined;
    const warnings = await warningsOf(async () => {
      // Not waited on: the attempt and wait timeouts are an hour, only backoff pauses fire.
      certs = await settleDriving(clock, prepareCertificates(opts));
      p.publish(certs);
      await settleDriving(clock, p.settled);
    });
    assert.ok(certs);
    assert.deepEqual(agentMaterial(server), {
      ca: certs.ca.certPem,
      cert: certs.client.certPem,
      key: certs.client.keyPem,
    });
    assert.equal(server.get("secrets", NS, CA_SECRET), undefined);
    assert.deepEqual(p.stats(), {
      published: 1,
      failures: 0,
      created: 2,
      updated: 0,
      caNotPersisted: 1,
      pemsTooLarge: 0,
    });
    // Not retried: one read at start, one in the publication.
    const onCa = server.requests.filter((r) => r.url.includes(CA_SECRET));
    assert.deepEqual(onCa.map((r) => `${r.method} ${r.status}`), ["GET 403", "GET 403"]);
    // The warning names the rule to add.
    assert.ok(
      warnings.some((w) => w.includes(`get and update on secrets named ${CA_SECRET}`)),
      warnings.join("\n"),
    );
  });
});

Deno.test("k8s certificates: the publisher counts a CA Secret it may not read or write, warns once", async () => {
  await withApi(async ({ server, clock, opts }) => {
    server.fault({ match: { path: `/secrets/${CA_SECRET}` }, status: 403, times: 1e9 });
    const p = new CertificatePublisher(opts);
    const warnings = await warningsOf(async () => {
      const certs = await settleDriving(clock, p.prepare());
      p.publish(certs);
      await settleDriving(clock, p.settled);
      p.publish(certs);
      await settleDriving(clock, p.settled);
    });
    assert.equal(p.stats().caNotPersisted, 3, "at start and in each publication");
    assert.equal(p.stats().published, 2);
    assert.equal(warnings.filter((w) => w.includes("no right to read or write")).length, 1);
  });
});

// Update allowed on the Agents' objects, not on the CA Secret: a 403 on its update, after a
// successful read, is no failure to retry either.
Deno.test("k8s certificates: a 403 on updating the CA Secret leaves it, the rest published", async () => {
  await withApi(async ({ server, prepare, publish }) => {
    await publish(await prepare());
    server.fault({ match: { method: "PUT", path: `/secrets/${CA_SECRET}` }, status: 403 });
    const other = generateCertificates({});
    const p = await publish(other);
    assert.equal(agentMaterial(server).ca, other.ca.certPem);
    assert.deepEqual(p.stats(), {
      published: 1,
      failures: 0,
      created: 0,
      updated: 2,
      caNotPersisted: 1,
      pemsTooLarge: 0,
    });
  });
});

// The Agents' objects first: a CA Secret that fails (5xx, timeouts) does not hold them up.
Deno.test("k8s certificates: the CA Secret failing does not hold the ConfigMap and client Secret", async () => {
  await withApi(async ({ server, opts }) => {
    server.fault({ match: { path: `/secrets/${CA_SECRET}` }, status: 500, times: 1e9 });
    const certs = generateCertificates({});
    const p = new CertificatePublisher(opts);
    p.publish(certs);
    try {
      // The clock is not driven: what needs no retry is done, the CA Secret waits its backoff.
      await waitFor(
        () =>
          server.get("configmaps", NS, CA_CONFIGMAP) !== undefined &&
          server.get("secrets", NS, CLIENT_SECRET) !== undefined,
        { what: "the ConfigMap and the client Secret", timeoutMs: 10_000 },
      );
      assert.equal(agentMaterial(server).ca, certs.ca.certPem);
      assert.equal(p.stats().published, 0, "the CA Secret is still being retried");
    } finally {
      await p.stop();
    }
  });
});

Deno.test("k8s certificates: an Agent built from the published objects connects", async () => {
  await withApi(async ({ server, prepare, publish }) => {
    const certs = await prepare();
    await publish(certs);
    const agent = agentMaterial(server);
    const { c, received } = await startCollector({
      address: "127.0.0.1:0",
      protocol: "tls",
      tls: collectorTls(certs),
    });
    try {
      const authorized = await new Promise<boolean>((resolve, reject) => {
        const s = tls.connect({
          host: "127.0.0.1",
          port: c.port,
          ca: [agent.ca],
          cert: agent.cert,
          key: agent.key,
          // What an Antrea Agent verifies (control-plane.md §3.5).
          servername: `flow-aggregator.${NS}.svc`,
        }, () => {
          const ok = s.authorized;
          s.write(concat(GOLDEN_TEMPLATE, GOLDEN_DATA), () => s.end());
          resolve(ok);
        });
        s.on("error", reject);
        s.resume();
      });
      assert.equal(authorized, true);
      await waitFor(() => received.length === 1, { what: "a record over the published TLS" });
    } finally {
      await c.stop();
    }
  });
});

// A get answered with another object (a faulty proxy or cache): its name was written back, so
// our CA went into ConfigMap kube-root-ca.crt (every namespace has one: the cluster's root CA).
Deno.test("k8s certificates: a get answered with another object is refused, never written to", async () => {
  await withApi(async ({ server, api, prepare, publish }) => {
    const root = server.put("configmaps", {
      metadata: { name: "kube-root-ca.crt", namespace: NS },
      data: { "ca.crt": "THE CLUSTER'S ROOT CA" },
    });
    server.fault({
      match: { method: "GET", path: `/configmaps/${CA_CONFIGMAP}` },
      body: JSON.stringify(root),
    });
    const certs = await prepare();
    const p = await publish(certs);
    assert.deepEqual(server.get("configmaps", NS, "kube-root-ca.crt"), root, "untouched");
    assert.equal(agentMaterial(server).ca, certs.ca.certPem);
    assert.deepEqual(p.stats(), {
      published: 1,
      failures: 1,
      created: 3,
      updated: 0,
      caNotPersisted: 0,
      pemsTooLarge: 0,
    });
    assert.equal(api.stats().malformedAnswers, 1);
  });
});

// What a get of the CA ConfigMap may be answered with besides the ConfigMap: each was taken for
// it (a PUT to the collection's path, a PUT of whatever came back) or threw on its null.
const MALFORMED: Record<string, string> = {
  "no metadata": JSON.stringify({ kind: "ConfigMap", apiVersion: "v1", data: { "ca.crt": "x" } }),
  "no namespace": JSON.stringify({
    kind: "ConfigMap",
    apiVersion: "v1",
    metadata: { name: CA_CONFIGMAP },
    data: { "ca.crt": "x" },
  }),
  "a Secret": JSON.stringify({
    kind: "Secret",
    apiVersion: "v1",
    metadata: { name: CA_CONFIGMAP, namespace: NS },
    type: "Opaque",
    data: { "ca.crt": "eA==" },
  }),
  "an HTML page": "<html>proxy login</html>",
  "truncated JSON": '{"kind":"ConfigMap","metadata":{"na',
  "null": "null",
};
for (const [name, body] of Object.entries(MALFORMED)) {
  Deno.test(`k8s certificates: a get answered with ${name} is refused and counted`, async () => {
    await withApi(async ({ server, api, prepare, publish }) => {
      server.fault({ match: { method: "GET", path: `/configmaps/${CA_CONFIGMAP}` }, body });
      const p = await publish(await prepare());
      assert.deepEqual(writes(server), [
        "POST /api/v1/namespaces/flow-aggregator/configmaps 201",
        "POST /api/v1/namespaces/flow-aggregator/secrets 201",
        "POST /api/v1/namespaces/flow-aggregator/secrets 201",
      ]);
      assert.equal(p.stats().failures, 1);
      assert.equal(api.stats().malformedAnswers, 1);
    });
  });
}

// A persisted CA of 188 KB (3000 SANs) was reused, then spread into String.fromCharCode at
// publication: a RangeError on every attempt, the publication never done.
Deno.test("k8s certificates: a Secret value of any size is published (a 300 KB certificate)", async () => {
  await withApi(async ({ server, prepare, publish }) => {
    const certs = await prepare();
    // What is published is not parsed: a long certificate text stands for a large certificate.
    const large = { ...certs, ca: { ...certs.ca, certPem: certs.ca.certPem.repeat(200) } };
    assert.ok(large.ca.certPem.length > 200_000);
    const p = await publish(large);
    assert.equal(secretText(server.get("secrets", NS, CA_SECRET)!, "tls.crt"), large.ca.certPem);
    assert.equal(p.stats().published, 1);
  });
});

Deno.test("k8s certificates: a persisted certificate over 64 KiB is not reused, counted", async () => {
  await withApi(async ({ server, clock, opts, prepare, publish }) => {
    const first = await prepare();
    await publish(first);
    // Still the same valid certificate to a PEM parser (text after its block is ignored).
    const secret = server.get("secrets", NS, CA_SECRET)!;
    secret.data["tls.crt"] = btoa(first.ca.certPem + "\n" + "#".repeat(70_000) + "\n");
    server.put("secrets", secret);
    const p = new CertificatePublisher(opts);
    const second = await settleDriving(clock, p.prepare());
    assert.notEqual(second.ca.keyPem, first.ca.keyPem, "a new CA (not the persisted key)");
    assert.equal(p.stats().pemsTooLarge, 1);
  });
});

// They reached only a separate "kubernetes metrics" log line (the client's and the cluster
// identity's nowhere), not /metrics.
Deno.test("k8s certificates: the publisher's, the client's and the cluster identity's counters are on the metrics line and in /metrics", async () => {
  await withApi(async ({ server, api, clock, opts }) => {
    server.fault({ match: { path: `/secrets/${CA_SECRET}` }, status: 403, times: 1e9 });
    const p = new CertificatePublisher(opts);
    p.publish(await settleDriving(clock, p.prepare()));
    await settleDriving(clock, p.settled);
    const identity = new ClusterIdentity({ clock });
    const fa = new FlowAggregator(parseConfig(""), {
      manualSweep: true,
      metricsLogIntervalMs: 0,
      certificateCounters: () => p.stats(),
      clusterUuidCounters: () => identity.stats(),
      kubeClientCounters: () => api.stats(),
    });
    const stats = fa.stats();
    assert.deepEqual(stats.certificates, p.stats());
    const fields = statsFields(stats);
    assert.equal(fields["certificates.published"], 1);
    assert.equal(fields["certificates.caNotPersisted"], 2);
    assert.equal(fields["clusterUuid.stateFileRejected"], 0);
    assert.equal(fields["kubeClient.answersTooLarge"], 0);
    const text = prometheusText(stats);
    assert.match(text, /^flow_aggregator_certificates_ca_not_persisted 2$/m);
    assert.match(text, /^flow_aggregator_cluster_uuid_poll_errors 0$/m);
    assert.match(text, /^flow_aggregator_kube_client_redirects_refused 0$/m);
  });
});
