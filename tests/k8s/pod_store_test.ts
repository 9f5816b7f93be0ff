/**
 * The Pod store: lookups by IP and flow start time (IP reuse, host network, terminated and
 * deleted Pods), the informer against the test API server with the real client (list, watch,
 * bookmarks, a dropped watch, 410 Gone), and the export path filling a deny flow's Pod fields
 * and labels from it.
 */

import assert from "node:assert/strict";
import type { ExportedFlow } from "../../src/aggregation/record.ts";
import { ManualClock } from "../../src/clock.ts";
import { parseConfig } from "../../src/components.ts";
import type { Exporter } from "../../src/exporters/exporter.ts";
import { FlowAggregator, statsFields } from "../../src/flow_aggregator.ts";
import { prometheusText } from "../../src/api/prometheus.ts";
import {
  MAX_IPS_PER_POD,
  type PodObject,
  PodStore,
  type PodStoreOptions,
} from "../../src/k8s/pod_store.ts";
import type { KubeApi } from "../../src/k8s/client.ts";
import { MAX_LIST_PAGE_BYTES } from "../../src/k8s/http.ts";
import { agentRecord } from "../_helpers/agent_record.ts";
import { connectTestApi, FakeKubeApiServer, type KubeObject } from "../_helpers/k8s_server.ts";
import { pollUntil, settleDriving, waitFor } from "../_helpers/wait.ts";
import { prng } from "../_helpers/prng.ts";

const T0 = 1_700_000_000; // ManualClock's default wall time, in seconds

function pod(
  name: string,
  ip: string,
  opts: {
    uid?: string;
    created?: number;
    labels?: Record<string, string>;
    hostNetwork?: boolean;
    phase?: string;
    node?: string;
  } = {},
): KubeObject & PodObject {
  return {
    metadata: {
      name,
      namespace: "ns",
      uid: opts.uid ?? `uid-${name}`,
      creationTimestamp: new Date((opts.created ?? T0 - 3600) * 1000).toISOString(),
      ...(opts.labels ? { labels: opts.labels } : {}),
    },
    spec: { nodeName: opts.node ?? "node-1", hostNetwork: opts.hostNetwork ?? false },
    status: { phase: opts.phase ?? "Running", podIP: ip, podIPs: [{ ip }] },
  };
}

Deno.test("pod store: IP reuse picks the Pod that owned the IP when the flow started", () => {
  const clock = new ManualClock();
  const store = new PodStore({ clock });
  store.apply("ADDED", pod("a", "10.0.0.5", { created: T0 - 600 }));
  clock.advance(60_000);
  store.apply("DELETED", pod("a", "10.0.0.5"));
  const deletedAt = T0 + 60;
  store.apply("ADDED", pod("b", "10.0.0.5", { created: deletedAt + 5 }));
  assert.equal(store.lookup("10.0.0.5", deletedAt - 30)?.name, "a");
  assert.equal(store.lookup("10.0.0.5", deletedAt + 10)?.name, "b");
  // Between A's deletion and B's creation the IP was nobody's.
  assert.equal(store.lookup("10.0.0.5", deletedAt + 1), undefined);
  // After the retention A is gone and B is the only owner: returned whatever the time.
  clock.advance(5 * 60_000);
  assert.equal(store.stats().pods, 1);
  assert.equal(store.lookup("10.0.0.5", deletedAt - 30)?.name, "b");
});

Deno.test("pod store: a replica fed by replicate() answers every look-up as the store does", () => {
  const rand = prng(42);
  const clock = new ManualClock();
  const store = new PodStore({ clock });
  const ips = Array.from({ length: 12 }, (_, i) => `10.0.1.${i}`);
  // Half the history before the replica starts (its seed), half after (its changes).
  const step = (i: number): void => {
    const name = `p${Math.floor(rand() * 30)}`;
    const r = rand();
    if (r < 0.5) {
      store.apply(
        "ADDED",
        pod(name, ips[Math.floor(rand() * ips.length)], {
          created: T0 - 600 + i,
          labels: rand() < 0.5 ? { app: name } : undefined,
          node: `node-${i % 3}`,
        }),
      );
    } else if (r < 0.7) {
      store.apply("MODIFIED", pod(name, ips[Math.floor(rand() * ips.length)], { created: T0 }));
    } else if (r < 0.9) {
      store.apply("DELETED", pod(name, "0.0.0.0"));
    } else {
      store.apply("MODIFIED", pod(name, ips[0], { phase: "Succeeded" }));
    }
    clock.advance(Math.floor(rand() * 20_000));
  };
  for (let i = 0; i < 200; i++) step(i);
  const replica = new PodStore({ clock: new ManualClock() });
  let changes = 0;
  for (
    const c of store.replicate((c) => {
      changes++;
      replica.applyChange(c);
    })
  ) replica.applyChange(c);
  const same = (where: string): void => {
    for (const ip of ips) {
      for (let t = T0 - 700; t < T0 + 3000; t += 37) {
        assert.deepEqual(replica.lookup(ip, t), store.lookup(ip, t), `${where}: ${ip} at ${t}`);
      }
    }
    assert.deepEqual(replica.stats().pods, store.stats().pods, where);
  };
  same("after the seed");
  for (let i = 200; i < 400; i++) step(i);
  same("after the changes");
  // Past every retention: the removals reach the replica too.
  clock.advance(10 * 60_000);
  same("after the retention");
  assert.ok(changes > 100, `${changes} changes`);
});

Deno.test("pod store: a deleted Pod stays findable for 5 minutes, then is forgotten", () => {
  const clock = new ManualClock();
  const store = new PodStore({ clock });
  store.apply("ADDED", pod("a", "10.0.0.6"));
  store.apply("DELETED", pod("a", "10.0.0.6"));
  clock.advance(5 * 60_000 - 1);
  assert.equal(store.lookup("10.0.0.6", T0)?.name, "a");
  clock.advance(1);
  assert.equal(store.lookup("10.0.0.6", T0), undefined);
  assert.deepEqual([store.stats().pods, store.stats().ips], [0, 0]);
});

Deno.test("pod store: host-network Pods never match, terminated Pods count as deleted", () => {
  const clock = new ManualClock();
  const store = new PodStore({ clock });
  // A host-network Pod reports its Node's IP.
  store.apply("ADDED", pod("agent", "192.168.1.10", { hostNetwork: true }));
  assert.equal(store.lookup("192.168.1.10", T0), undefined);
  assert.equal(store.stats().hostNetworkSkipped, 1);
  // A Job Pod finishes; its IP goes to a new Pod while the finished object lingers.
  store.apply("ADDED", pod("job", "10.0.0.7", { created: T0 - 600 }));
  clock.advance(10_000);
  store.apply("MODIFIED", pod("job", "10.0.0.7", { phase: "Succeeded" }));
  store.apply("ADDED", pod("web", "10.0.0.7", { created: T0 + 20 }));
  assert.equal(store.lookup("10.0.0.7", T0 + 30)?.name, "web");
  assert.equal(store.lookup("10.0.0.7", T0 - 60)?.name, "job");
  // A Pod first seen terminated is never indexed.
  store.apply("ADDED", pod("done", "10.0.0.8", { phase: "Failed" }));
  assert.equal(store.lookup("10.0.0.8", T0), undefined);
});

Deno.test("pod store: keeps only name, namespace, Node and labels; no labels is undefined", () => {
  const store = new PodStore({ clock: new ManualClock() });
  store.apply("ADDED", pod("a", "10.0.0.9", { labels: { app: "x" }, node: "n2" }));
  store.apply("ADDED", pod("b", "fd00::9"));
  assert.deepEqual(store.lookup("10.0.0.9", T0), {
    name: "a",
    namespace: "ns",
    nodeName: "n2",
    labels: { app: "x" },
  });
  assert.deepEqual(store.lookup("fd00::9", T0), {
    name: "b",
    namespace: "ns",
    nodeName: "node-1",
    labels: undefined,
  });
});

interface InformerContext {
  server: FakeKubeApiServer;
  store: PodStore;
  clock: ManualClock;
  /** The client on the server (to start the informer by hand). */
  api: KubeApi;
  /** Starts the informer on the server's current Pods; resolves once it watches. */
  run(): Promise<void>;
  /**
   * Drops the open watch and holds the next watch request back a moment, so what the test does
   * right after happens while no watch is open.
   */
  dropWatchWithGap(): void;
}

/**
 * An informer (the real client) on a fresh test API server; `options` adds to or overrides the
 * store's (attempt timeouts far beyond the backoff pauses a test fires).
 */
async function withInformer(
  fn: (ctx: InformerContext) => Promise<void>,
  options: Partial<PodStoreOptions> = {},
): Promise<void> {
  const server = await new FakeKubeApiServer().start();
  const { api, cleanup } = await connectTestApi(server);
  const clock = new ManualClock();
  const store = new PodStore({ clock, attemptTimeoutMs: 3_600_000, ...options });
  try {
    await fn({
      server,
      store,
      clock,
      api,
      run: async () => {
        store.start(api);
        await settleDriving(clock, store.whenSynced());
        await waitFor(() => server.watchCount === 1, { what: "watch open" });
      },
      dropWatchWithGap: () => {
        server.fault({ match: { method: "GET", path: "/pods" }, delayMs: 300 });
        server.dropWatches();
      },
    });
  } finally {
    await store.stop();
    await server.stop();
    await cleanup();
  }
}

Deno.test("pod store informer: list, then watch events and bookmarks", async () => {
  await withInformer(async ({ server, store, run }) => {
    server.put("pods", pod("a", "10.1.0.1"));
    await run();
    assert.equal(store.lookup("10.1.0.1", T0)?.name, "a");
    server.put("pods", pod("b", "10.1.0.2", { labels: { tier: "db" } }));
    await waitFor(() => store.lookup("10.1.0.2", T0) !== undefined, { what: "ADDED b" });
    server.put("pods", pod("b", "10.1.0.2", { labels: { tier: "cache" } }));
    await waitFor(() => store.lookup("10.1.0.2", T0)?.labels?.tier === "cache", {
      what: "MODIFIED b",
    });
    server.bookmark();
    server.delete("pods", "ns", "a");
    await waitFor(() => store.stats().events === 3, { what: "DELETED a" });
    const watch = server.requests.find((r) => r.url.includes("watch=true"))!;
    assert.match(watch.url, /allowWatchBookmarks=true/);
    assert.match(watch.url, /resourceVersion=\d+/);
    assert.deepEqual([store.stats().lists, store.stats().watches], [1, 1]);
  });
});

Deno.test("pod store informer: a dropped watch resumes without losing an update", async () => {
  await withInformer(async ({ server, store, run, dropWatchWithGap }) => {
    server.put("pods", pod("a", "10.2.0.1", { labels: { v: "1" } }));
    await run();
    dropWatchWithGap();
    server.put("pods", pod("a", "10.2.0.1", { labels: { v: "2" } }));
    await waitFor(() => store.lookup("10.2.0.1", T0)?.labels?.v === "2", {
      what: "update made during the gap",
    });
    assert.equal(store.stats().lists, 1, "resumed from its resourceVersion, no re-list");
    assert.equal(store.stats().watches, 2);
  });
});

Deno.test("pod store informer: 410 Gone re-lists and reconciles deletions", async () => {
  await withInformer(async ({ server, store, clock, run, dropWatchWithGap }) => {
    server.put("pods", pod("a", "10.3.0.1", { created: T0 - 600 }));
    await run();
    dropWatchWithGap();
    // During the gap: A is deleted, its IP goes to B, and the event window is compacted.
    clock.advance(30_000);
    server.delete("pods", "ns", "a");
    server.put("pods", pod("b", "10.3.0.1", { created: T0 + 40 }));
    server.compact();
    await waitFor(() => store.stats().relistsGone === 1, { what: "410 Gone" });
    await waitFor(() => store.stats().lists === 2, { what: "re-list" });
    assert.equal(store.lookup("10.3.0.1", T0 + 50)?.name, "b");
    // A was marked deleted by the re-list (at T0+30), so it only owns earlier flows.
    assert.equal(store.lookup("10.3.0.1", T0)?.name, "a");
    await waitFor(() => server.watchCount === 1, { what: "watch open again" });
  });
});

Deno.test("pod store informer: 410 as the watch's HTTP status re-lists too", async () => {
  await withInformer(async ({ server, store, run }) => {
    server.put("pods", pod("a", "10.7.0.1"));
    await run();
    server.fault({ match: { method: "GET", path: "/api/v1/pods" }, status: 410 });
    server.dropWatches();
    await waitFor(() => store.stats().relistsGone === 1, { what: "410 status" });
    await waitFor(() => store.stats().lists === 2, { what: "re-list" });
    assert.equal(store.stats().failures, 0);
  });
});

Deno.test("pod store informer: list failures are retried with backoff", async () => {
  await withInformer(async ({ server, store, run }) => {
    server.put("pods", pod("a", "10.4.0.1"));
    server.fault({ match: { method: "GET", path: "/api/v1/pods" }, status: 503, times: 2 });
    await run();
    assert.equal(store.stats().failures, 2);
    assert.equal(store.lookup("10.4.0.1", T0)?.name, "a");
  });
});

Deno.test("pod store informer: a list answered 429 waits for its Retry-After", async () => {
  await withInformer(async ({ server, store, clock, api }) => {
    server.put("pods", pod("a", "10.4.1.1"));
    server.fault({
      match: { method: "GET", path: "/api/v1/pods" },
      status: 429,
      headers: { "retry-after": "7" },
    });
    store.start(api);
    // The pause after the 429: its Retry-After (7 s), not the first backoff (500 ms).
    const pause = await pollUntil(() => clock.pendingTimers().find((ms) => ms < 60_000), {
      what: "the pause after the 429",
    });
    assert.equal(pause, 7_000);
    clock.advance(pause);
    await store.whenSynced();
    assert.equal(store.lookup("10.4.1.1", T0)?.name, "a");
  });
});

Deno.test("pod store informer: a slow list times out and is retried", async () => {
  await withInformer(async ({ server, store, clock, api }) => {
    server.put("pods", pod("a", "10.6.0.1"));
    // The first list hangs for (real) 3 s; the clock says 5 s passed: the attempt is given up.
    server.fault({ match: { method: "GET", path: "/api/v1/pods" }, delayMs: 3_000 });
    store.start(api);
    await waitFor(() => server.received === 1, { what: "the slow list received" });
    clock.advance(5_000);
    await pollUntil(() => clock.pendingTimers().find((ms) => ms === 500), { what: "backoff" });
    clock.advance(500);
    await store.whenSynced();
    assert.equal(store.stats().failures, 1);
    assert.equal(store.lookup("10.6.0.1", T0)?.name, "a");
    assert.equal(server.requests.length, 1, "synced before the slow answer came back");
  }, { attemptTimeoutMs: 5_000 });
});

class Capture implements Exporter {
  readonly name = "capture";
  readonly flows: ExportedFlow[] = [];
  start(): Promise<void> {
    return Promise.resolve();
  }
  stop(): Promise<void> {
    return Promise.resolve();
  }
  addRecord(flow: ExportedFlow): void {
    this.flows.push(flow);
  }
  stats(): { received: number; exported: number; dropped: number; errors: number } {
    return { received: this.flows.length, exported: 0, dropped: 0, errors: 0 };
  }
}

Deno.test("export path: a deny flow gets its Pod fields and labels from the store", async () => {
  const clock = new ManualClock();
  const store = new PodStore({ clock });
  store.apply("ADDED", pod("client", "10.5.0.1", { node: "n1", labels: { app: "web" } }));
  store.apply(
    "ADDED",
    pod("server", "10.5.0.2", { node: "n2", labels: { z: "<b>&", app: "db", "a.io/x": "1" } }),
  );
  const capture = new Capture();
  const fa = new FlowAggregator(
    parseConfig(`recordContents:
  podLabels: true
aggregatorTransportProtocol: TCP
activeFlowRecordTimeout: 10s
flowLogger:
  enable: true
  path: /nonexistent/never-written.log
`),
    {
      clock,
      manualSweep: true,
      listenAddress: "127.0.0.1:0",
      exporterFactory: () => capture,
      metricsLogIntervalMs: 0,
      hooks: { lookupPod: (ip, t) => store.lookup(ip, t) },
    },
  );
  await fa.start();
  try {
    // Denied at the source Node's egress: the Agent knows only its own Pod's name.
    fa.ingest([agentRecord({
      sourceIPv4Address: "10.5.0.1",
      destinationIPv4Address: "10.5.0.2",
      sourcePodName: "client",
      sourcePodNamespace: "ns",
      sourceNodeName: "n1",
      flowType: 2,
      egressNetworkPolicyRuleAction: 2,
    })]);
    // An unknown destination: no Pod fields, labels "".
    fa.ingest([agentRecord({
      sourceIPv4Address: "10.5.0.1",
      destinationIPv4Address: "8.8.8.8",
      sourcePodName: "client",
      sourcePodNamespace: "ns",
      sourceNodeName: "n1",
      flowType: 3,
    })]);
    clock.advance(60_000);
    fa.sweep();
    const byDst = new Map(capture.flows.map((f) => [f.key.destinationAddress, f.record]));
    const denied = byDst.get("10.5.0.2")!;
    assert.equal(denied.destinationPodName, "server");
    assert.equal(denied.destinationPodNamespace, "ns");
    assert.equal(denied.destinationNodeName, "n2");
    // Go's json.Marshal: sorted keys, compact, <, > and & escaped.
    assert.equal(denied.sourcePodLabels, '{"app":"web"}');
    assert.equal(
      denied.destinationPodLabels,
      '{"a.io/x":"1","app":"db","z":"\\u003cb\\u003e\\u0026"}',
    );
    const external = byDst.get("8.8.8.8")!;
    assert.equal(external.destinationPodName, "");
    assert.equal(external.destinationPodLabels, "");
    assert.equal(external.sourcePodLabels, '{"app":"web"}');
  } finally {
    await fa.stop();
  }
});

Deno.test("pod store: objects that are no Pod are counted and skipped, the rest of the list applied", () => {
  const store = new PodStore({ clock: new ManualClock() });
  const nullIps = pod("b", "10.9.0.2");
  (nullIps.status as { podIPs: unknown[] }).podIPs = [null, { ip: 7 }, { ip: "10.9.0.2" }];
  store.replace([
    null as unknown as PodObject,
    pod("a", "10.9.0.1"),
    "pod" as unknown as PodObject,
    nullIps,
  ]);
  assert.equal(store.stats().malformed, 2);
  assert.equal(store.lookup("10.9.0.1", T0)?.name, "a");
  assert.equal(store.lookup("10.9.0.2", T0)?.name, "b", "the IP entries that are IPs count");
});

Deno.test("pod store: a Pod listing one IP twice leaves no index entry behind when the IP goes", () => {
  const store = new PodStore({ clock: new ManualClock() });
  const twice = pod("a", "10.9.1.1");
  twice.status!.podIPs = [{ ip: "10.9.1.1" }, { ip: "10.9.1.1" }];
  store.apply("ADDED", twice);
  store.apply("MODIFIED", pod("a", "10.9.1.2"));
  assert.equal(store.stats().ips, 1);
  assert.equal(store.lookup("10.9.1.1", T0), undefined);
});

Deno.test("pod store informer: a watch answered 410 Gone every time backs off instead of re-listing in a loop", async () => {
  await withInformer(async ({ server, store, clock, api }) => {
    server.put("pods", pod("a", "10.9.2.1"));
    server.fault({
      match: { method: "GET", path: "/api/v1/pods", query: "watch=true" },
      status: 410,
      times: 1_000_000,
    });
    store.start(api);
    await settleDriving(clock, store.whenSynced());
    // Real time passes, the clock does not: the backoff's pause never ends.
    await new Promise((r) => setTimeout(r, 1000));
    const s = store.stats();
    assert.ok(s.lists <= 3 && s.watches <= 3, `a loop: ${s.lists} lists, ${s.watches} watches`);
    // Its pause is on the clock: once it passes, the next round comes.
    clock.advance(60_000);
    await waitFor(() => store.stats().watches > s.watches, { what: "the next round" });
  }, { attemptTimeoutMs: 3_600_000 });
});

Deno.test("pod store: namespaces and Nodes that came and went leave no names behind", () => {
  const clock = new ManualClock();
  const store = new PodStore({ clock, retentionMs: 1000 });
  // 10,000 Pods, each in its own namespace on its own Node (test namespaces, autoscaled Nodes).
  for (let i = 0; i < 10_000; i++) {
    const p = pod(`p${i}`, `10.8.${i >> 8}.${i & 255}`, { node: `node-${i}` });
    p.metadata.namespace = `ns-${i}`;
    store.apply("ADDED", p);
    store.apply("DELETED", p);
    if (i % 1000 === 999) clock.advance(2000); // their retention passes: removed
  }
  clock.advance(2000);
  assert.equal(store.stats().pods, 0);
  // Bounded by twice the Pods held (none) and the slack, not by the 20,000 names seen.
  assert.ok(store.stats().names <= 2 * 1024 + 2, `${store.stats().names} names kept`);
  // A live Pod's names still share one string with the next Pod of its namespace.
  store.apply("ADDED", pod("a", "10.8.200.1"));
  assert.equal(store.lookup("10.8.200.1", T0)?.namespace, "ns");
});

Deno.test("pod store: at maxPods the oldest deleted Pod makes room, then new Pods are refused, counted", () => {
  const clock = new ManualClock();
  const store = new PodStore({ clock, maxPods: 3 });
  for (const name of ["a", "b", "c"]) {
    store.apply("ADDED", pod(name, `10.10.0.${name.charCodeAt(0)}`));
  }
  store.apply("DELETED", pod("a", "10.10.0.97"));
  store.apply("ADDED", pod("d", "10.10.0.100"));
  assert.equal(store.lookup("10.10.0.100", T0)?.name, "d", "a deleted Pod made room");
  assert.equal(store.lookup("10.10.0.97", T0), undefined, "the deleted Pod was forgotten early");
  store.apply("ADDED", pod("e", "10.10.0.101"));
  assert.equal(store.lookup("10.10.0.101", T0), undefined, "no room: not held");
  const s = store.stats();
  assert.deepEqual([s.pods, s.ips, s.deletedForgottenEarly, s.podsRefused], [3, 3, 1, 1]);
  // The forgotten Pod's retention timer finds nothing left to remove.
  clock.advance(10 * 60_000);
  assert.equal(store.stats().pods, 3);
});

Deno.test("pod store: its counters are on the metrics line and in /metrics", () => {
  const store = new PodStore({ clock: new ManualClock(), maxPods: 1 });
  store.apply("ADDED", pod("a", "10.10.0.1"));
  store.apply("ADDED", pod("b", "10.10.0.2"));
  const fa = new FlowAggregator(parseConfig(""), {
    manualSweep: true,
    metricsLogIntervalMs: 0,
    podStoreCounters: () => store.stats(),
  });
  const stats = fa.stats();
  assert.deepEqual(stats.podStore, store.stats());
  const fields = statsFields(stats);
  assert.equal(fields["podStore.podsRefused"], 1);
  assert.equal(fields["podStore.pods"], 1);
  assert.match(prometheusText(stats), /^flow_aggregator_pod_store_pods_refused 1$/m);
});

Deno.test("pod store: a flood of Pods added and deleted holds at most maxPods", () => {
  const store = new PodStore({ clock: new ManualClock(), maxPods: 100 });
  for (let i = 0; i < 20_000; i++) {
    const p = pod(`p${i}`, `10.11.${i >> 8}.${i & 255}`);
    store.apply("ADDED", p);
    if (i % 2 === 0) store.apply("DELETED", p);
  }
  const s = store.stats();
  assert.ok(s.pods <= 100 && s.ips <= 100, `${s.pods} Pods, ${s.ips} IPs held`);
  assert.ok(s.podsRefused > 0 && s.deletedForgottenEarly > 0, JSON.stringify(s));
});

Deno.test("pod store: a Pod whose labels are over maxLabelBytes is held without them, counted", () => {
  const store = new PodStore({ clock: new ManualClock(), maxLabelBytes: 100 });
  store.apply("ADDED", pod("big", "10.12.0.1", { labels: { app: "x".repeat(200) } }));
  store.apply("ADDED", pod("small", "10.12.0.2", { labels: { app: "web" } }));
  assert.equal(store.lookup("10.12.0.1", T0)?.name, "big");
  assert.equal(store.lookup("10.12.0.1", T0)?.labels, undefined);
  assert.deepEqual(store.lookup("10.12.0.2", T0)?.labels, { app: "web" });
  assert.equal(store.stats().labelsDropped, 1);
});

Deno.test("pod store informer: limits.maxPods bounds the Pods taken from a list", async () => {
  const config = parseConfig("limits:\n  maxPods: 5\n");
  await withInformer(async ({ server, store, clock, api }) => {
    for (let i = 0; i < 12; i++) server.put("pods", pod(`p${i}`, `10.13.0.${i}`));
    store.start(api);
    await settleDriving(clock, store.whenSynced());
    assert.deepEqual([store.stats().pods, store.stats().podsRefused], [5, 7]);
  }, { maxPods: config.limits.maxPods });
});

Deno.test("pod store informer: watches that send an event but advance nothing back off", async () => {
  await withInformer(async ({ server, store, clock, api }) => {
    const a = server.put("pods", pod("a", "10.14.0.1"));
    // Every watch: the same Pod at the version it was listed at, then the end of the answer.
    server.fault({
      match: { method: "GET", path: "/api/v1/pods", query: "watch=true" },
      lines: [JSON.stringify({ type: "MODIFIED", object: a })],
      times: 1_000_000,
    });
    store.start(api);
    await settleDriving(clock, store.whenSynced());
    // Real time passes, the clock does not: the backoff's pause never ends.
    await new Promise((r) => setTimeout(r, 1000));
    const s = store.stats();
    assert.ok(s.watches <= 3, `a loop: ${s.watches} watches, ${s.events} events`);
    assert.equal(s.lists, 1);
    clock.advance(60_000);
    await waitFor(() => store.stats().watches > s.watches, { what: "the next round" });
  }, { attemptTimeoutMs: 3_600_000 });
});

Deno.test("pod store informer: the list is read in pages of 500, an expired continue token lists again", async () => {
  await withInformer(async ({ server, store, run }) => {
    for (let i = 0; i < 1200; i++) server.put("pods", pod(`p${i}`, `10.15.${i >> 8}.${i & 255}`));
    // The second page's token has expired: the list starts again from its first page.
    server.fault({
      match: { method: "GET", path: "/api/v1/pods", query: "continue=" },
      status: 410,
    });
    await run();
    const lists = server.requests.filter((r) =>
      r.url.startsWith("/api/v1/pods?") && !/watch=/.test(r.url)
    );
    assert.deepEqual(
      lists.map((r) => [new URL(r.url, "http://x").searchParams.get("limit"), r.status]),
      [["500", 200], ["500", 410], ["500", 200], ["500", 200], ["500", 200]],
    );
    assert.ok(lists.slice(3).every((r) => r.url.includes("continue=")));
    const s = store.stats();
    assert.deepEqual([s.pods, s.lists, s.listPages, s.relistsGone], [1200, 1, 4, 1]);
    assert.equal(store.lookup("10.15.4.175", T0)?.name, "p1199");
  });
});

// Before, a page over the client's bound for a page (8 MiB) was asked again at the same size on
// every retry: the store never synced (no Pod metadata for any flow), whatever the wait.
Deno.test("pod store informer: a page over the client's bound is asked again with half the Pods, down to what fits", async () => {
  await withInformer(async ({ server, store, clock, api }) => {
    // 33 Pods of 256 KiB of annotations: 8.25 MiB in one page of 500, over the 8 MiB bound.
    assert.equal(MAX_LIST_PAGE_BYTES, 8 << 20);
    const pad = "x".repeat(256 << 10);
    for (let i = 0; i < 33; i++) {
      const p = pod(`big${i}`, `10.18.0.${i}`);
      p.metadata!.annotations = { pad };
      server.put("pods", p);
    }
    store.start(api);
    // Each refused page is 8 MiB read.
    await settleDriving(clock, store.whenSynced(), { timeoutMs: 120_000, what: "the list" });
    const limits = server.requests
      .filter((r) => r.url.startsWith("/api/v1/pods?") && !/watch=/.test(r.url))
      .map((r) => new URL(r.url, "http://x").searchParams.get("limit"));
    // 500, 250, 125, 63 and 32 Pods are over it (32 are 8 MiB and their JSON); 16 fit, and the
    // list goes on in pages of 16 (16, 16, 1).
    assert.deepEqual(limits, ["500", "250", "125", "63", "32", "16", "16", "16"]);
    const s = store.stats();
    assert.deepEqual([s.pods, s.lists, s.listPages, s.listPagesHalved], [33, 1, 3, 5]);
    assert.equal(store.lookup("10.18.0.32", T0)?.name, "big32");
  });
});

Deno.test("pod store informer: a list of more pages than maxPods needs is cut, no Pod marked deleted", async () => {
  await withInformer(async ({ server, store, clock, api }) => {
    for (let i = 0; i < 1600; i++) server.put("pods", pod(`p${i}`, `10.16.${i >> 8}.${i & 255}`));
    store.start(api);
    await settleDriving(clock, store.whenSynced());
    const s = store.stats();
    assert.deepEqual([s.pods, s.listPages, s.listsTruncated], [5, 2, 1]);
    assert.equal(store.lookup("10.16.0.0", T0)?.name, "p0", "the Pods held stay live");
  }, { attemptTimeoutMs: 3_600_000, maxPods: 5 });
});

Deno.test("pod store: a Pod's IPs are indexed at most MAX_IPS_PER_POD, the rest counted", () => {
  const store = new PodStore({ clock: new ManualClock() });
  const many = pod("many", "10.17.0.0");
  many.status!.podIPs = Array.from(
    { length: 5000 },
    (_, i) => ({ ip: `10.17.${i >> 8}.${i & 255}` }),
  );
  store.apply("ADDED", many);
  assert.equal(store.stats().ips, MAX_IPS_PER_POD);
  assert.equal(store.stats().ipsDropped, 5000 - MAX_IPS_PER_POD);
  assert.equal(store.lookup("10.17.0.0", T0)?.name, "many");
});

Deno.test("pod store: removing Pods that shared one IP visits each once, not all of them per Pod", () => {
  const clock = new ManualClock();
  const store = new PodStore({ clock, retentionMs: 1000 });
  const n = 5000;
  for (let i = 0; i < n; i++) {
    const p = pod(`p${i}`, "10.18.0.1", { uid: `u${i}` });
    store.apply("ADDED", p);
    store.apply("DELETED", p);
  }
  // Elements the removal sweep walks through with array methods (the old index filtered every
  // Pod on the IP for each one removed: n² / 2).
  let visited = 0;
  const filter = Array.prototype.filter;
  Array.prototype.filter = function (this: unknown[], ...args: unknown[]) {
    visited += this.length;
    return filter.apply(this, args as Parameters<typeof filter>);
  } as typeof filter;
  try {
    clock.advance(2000);
  } finally {
    Array.prototype.filter = filter;
  }
  assert.equal(store.stats().pods, 0);
  assert.equal(store.stats().ips, 0);
  assert.ok(visited <= 10 * n, `${visited} elements visited for ${n} Pods`);
});

Deno.test("pod store: IPs are indexed in canonical text, as flows look them up", () => {
  const store = new PodStore({ clock: new ManualClock() });
  const dual = pod("dual", "10.19.0.5");
  dual.status!.podIPs = [{ ip: "10.19.0.5" }, { ip: "FD00:0:0:0::5" }, { ip: "not-an-ip" }];
  store.apply("ADDED", dual);
  store.apply("ADDED", pod("v6", "fd00:0000::6"));
  assert.equal(store.lookup("fd00::5", T0)?.name, "dual");
  assert.equal(store.lookup("fd00::6", T0)?.name, "v6");
  assert.equal(store.lookup("10.19.0.5", T0)?.name, "dual");
  assert.deepEqual([store.stats().ips, store.stats().ipsDropped], [3, 1]);
});

// Before, every restart after an expired continue token was at once: a server whose tokens
// always expire got 3,826 lists in 20 s, the store never synced.
Deno.test("pod store informer: continue tokens that always expire back off after the first restart", async () => {
  await withInformer(async ({ server, store, clock, api }) => {
    for (let i = 0; i < 600; i++) server.put("pods", pod(`p${i}`, `10.20.${i >> 8}.${i & 255}`));
    server.fault({
      match: { method: "GET", path: "/api/v1/pods", query: "continue=" },
      status: 410,
      times: 1_000_000,
    });
    store.start(api);
    // Real time passes, the clock does not: a backoff pause never ends.
    await new Promise((r) => setTimeout(r, 1000));
    const lists = () => server.requests.filter((r) => !/watch=/.test(r.url)).length;
    const s = store.stats();
    // First page, expired token, restart at once: first page, expired token, then a pause.
    assert.equal(lists(), 4, `a loop: ${lists()} list requests`);
    assert.equal(s.relistsGone, 2);
    const pause = clock.pendingTimers().find((ms) => ms < 60_000);
    assert.equal(pause, 500);
    clock.advance(500);
    await waitFor(() => lists() === 6, { what: "the next restart" });
    // The next pause is longer.
    assert.equal(await pollUntil(() => clock.pendingTimers().find((ms) => ms < 60_000)), 1000);
  });
});

// Before, a watch failing with an ERROR event other than 410 resumed from the same version
// forever (with backoff): never a list, the store's metadata stale for good.
Deno.test("pod store informer: a watch ERROR event other than 410 re-lists", async () => {
  await withInformer(async ({ server, store, clock, run }) => {
    server.put("pods", pod("a", "10.21.0.1", { labels: { v: "1" } }));
    await run();
    // Meanwhile the Pod changed; every watch from now on fails with 504.
    server.fault({
      match: { method: "GET", path: "/api/v1/pods", query: "watch=true" },
      lines: [JSON.stringify({
        type: "ERROR",
        object: { kind: "Status", code: 504, message: "Too large resource version: 99999" },
      })],
      times: 1_000_000,
    });
    server.dropWatches();
    server.put("pods", pod("a", "10.21.0.1", { labels: { v: "2" } }));
    await settleDriving(
      clock,
      waitFor(() => store.stats().lists >= 2, { what: "a re-list" }),
    );
    assert.equal(store.lookup("10.21.0.1", T0)?.labels?.v, "2");
    assert.ok(store.stats().relistsWatchFailed >= 1);
  });
});

Deno.test("pod store informer: watches failing with 500 in a row re-list after a few", async () => {
  await withInformer(async ({ server, store, clock, run }) => {
    server.put("pods", pod("a", "10.22.0.1"));
    await run();
    server.fault({
      match: { method: "GET", path: "/api/v1/pods", query: "watch=true" },
      status: 500,
      times: 1_000_000,
    });
    server.dropWatches();
    await settleDriving(
      clock,
      waitFor(() => store.stats().lists >= 2, { what: "a re-list" }),
    );
    // The first watch, then three answered 500, then the list (and the watches after it).
    const calls = server.requests.map((r) => /watch=true/.test(r.url) ? r.status : "list");
    assert.deepEqual(calls.slice(0, 6), ["list", 200, 500, 500, 500, "list"]);
    assert.equal(store.stats().relistsWatchFailed, 1);
  });
});

// Before, a watch that moved the version by a bookmark and closed at once counted as progress:
// 2,995 watches in 10 s, no pause.
Deno.test("pod store informer: watches that move the version by a bookmark and close at once back off", async () => {
  await withInformer(async ({ server, store, clock, run }) => {
    server.put("pods", pod("a", "10.23.0.1"));
    await run();
    // Each of the next 50 watches: one bookmark at a later version, then the end.
    for (let i = 1; i <= 50; i++) {
      server.fault({
        match: { method: "GET", path: "/api/v1/pods", query: "watch=true" },
        lines: [JSON.stringify({
          type: "BOOKMARK",
          object: {
            kind: "Pod",
            metadata: { resourceVersion: String(server.resourceVersion + i) },
          },
        })],
      });
    }
    server.dropWatches();
    // Real time passes, the clock does not: a backoff pause never ends.
    await new Promise((r) => setTimeout(r, 1000));
    const s = store.stats();
    assert.ok(s.watches <= 5, `a loop: ${s.watches} watches`);
    assert.equal(s.watchesBackedOff, 1);
    assert.equal(s.lists, 1);
    clock.advance(60_000);
    await waitFor(() => store.stats().watches > s.watches, { what: "the next round" });
  });
});

/** Pods with fields of the wrong type or size, as a hostile or broken API server sends them. */
function hostilePods(prefix: string, net: number): KubeObject[] {
  const p = (name: string, i: number, meta: Record<string, unknown> = {}) => {
    const o = pod(name, `10.24.${net}.${i}`);
    Object.assign(o.metadata, meta);
    return o;
  };
  return [
    p(`${prefix}-good`, 1, { labels: { app: "web" } }),
    // An object's text is 15 bytes: it passed the label bound whatever its size.
    p(`${prefix}-objlabel`, 2, { labels: { app: { v: "x".repeat(200_000) } } }),
    p(`${prefix}-strlabels`, 3, { labels: "abc" }),
    p(`${prefix}-numlabel`, 4, { labels: { n: 5, z: null } }),
    p(`${prefix}-long`, 5, { name: `${prefix}-${"x".repeat(300)}` }),
    p(`${prefix}-objname`, 6, { name: { evil: prefix }, uid: `uid-${prefix}-objname` }),
    p(`${prefix}-numns`, 7, { namespace: 123 }),
    p(`${prefix}-badtime`, 8, { creationTimestamp: "yesterday-ish" }),
  ];
}

// Before, fields were used as they came: 200 KB labels passed maxPodLabelBytes, `"abc"` was
// exported as {"0":"a","1":"b","2":"c"}, a name {evil:1} as "[object Object]", a 300-character
// name held whole.
Deno.test("pod store informer: Pods with fields of the wrong type or size, listed or watched, are not held or held without them, counted", async () => {
  await withInformer(async ({ server, store, run }) => {
    for (const o of hostilePods("l", 0)) server.put("pods", o);
    await run();
    for (const o of hostilePods("w", 1)) server.put("pods", o);
    await waitFor(() => store.lookup("10.24.1.8", T0) !== undefined, { what: "the watched Pods" });
    for (const net of [0, 1]) {
      const at = (i: number) => store.lookup(`10.24.${net}.${i}`, T0 + 3600);
      assert.deepEqual(at(1)?.labels, { app: "web" });
      for (const i of [2, 3, 4]) {
        assert.ok(at(i) !== undefined, `Pod ${i} held`);
        assert.equal(at(i)?.labels, undefined, `Pod ${i} held without its labels`);
      }
      for (const i of [5, 6, 7]) assert.equal(at(i), undefined, `Pod ${i} not held`);
      assert.equal(at(8)?.name, net === 0 ? "l-badtime" : "w-badtime");
    }
    // Per set: 3 labels, 3 names, 1 creation time.
    assert.equal(store.stats().malformed, 14);
    assert.equal(store.stats().labelsDropped, 0);
  });
});

// Before, an unparsable creation time was NaN: such a Pod won (or lost) every look-up on an IP
// it shared, by the order the Pods came in.
Deno.test("pod store: a Pod whose creation time is unreadable counts as created when seen", () => {
  const clock = new ManualClock();
  const store = new PodStore({ clock });
  const bad = pod("bad", "10.25.0.1");
  bad.metadata.creationTimestamp = "not a time";
  store.replace([bad, pod("old", "10.25.0.1", { created: T0 - 3600 })]);
  assert.equal(store.lookup("10.25.0.1", T0 - 60)?.name, "old");
  assert.equal(store.lookup("10.25.0.1", T0 + 60)?.name, "bad");
  assert.equal(store.stats().malformed, 1);
});

// Before, an event of an unknown type was counted nowhere and an object without uid counted as
// an event applied.
Deno.test("pod store informer: a watch event of unknown type and an object without uid are counted malformed", async () => {
  await withInformer(async ({ server, store, run }) => {
    server.put("pods", pod("a", "10.26.0.1"));
    await run();
    const noUid = pod("b", "10.26.0.2");
    delete (noUid.metadata as { uid?: string }).uid;
    server.fault({
      match: { method: "GET", path: "/api/v1/pods", query: "watch=true" },
      lines: [
        JSON.stringify({ type: "FOO", object: pod("c", "10.26.0.3") }),
        JSON.stringify({ type: "ADDED", object: noUid }),
      ],
    });
    server.dropWatches();
    await waitFor(() => store.stats().malformed === 2, { what: "both counted" });
    assert.equal(store.stats().events, 0);
    assert.equal(store.lookup("10.26.0.3", T0), undefined);
  });
});

Deno.test("pod store: a DELETED for a Pod not held is counted; host-network and terminated ones are not", () => {
  const store = new PodStore({ clock: new ManualClock() });
  store.apply("ADDED", pod("a", "10.27.0.1"));
  store.apply("DELETED", pod("a", "10.27.0.1"));
  store.apply("DELETED", pod("ghost", "10.27.0.2"));
  store.apply("DELETED", pod("agent", "10.27.0.3", { hostNetwork: true }));
  store.apply("DELETED", pod("job", "10.27.0.4", { phase: "Succeeded" }));
  assert.equal(store.stats().deletesUnknown, 1);
});

Deno.test("pod store informer: lastEventAgeSeconds says how long since a list page, event or bookmark", async () => {
  await withInformer(async ({ server, store, clock, run }) => {
    server.put("pods", pod("a", "10.28.0.1"));
    await run();
    assert.equal(store.stats().lastEventAgeSeconds, 0);
    clock.advance(90_000); // a watch open and silent
    assert.equal(store.stats().lastEventAgeSeconds, 90);
    server.bookmark();
    await waitFor(() => store.stats().lastEventAgeSeconds === 0, { what: "the bookmark" });
    clock.advance(30_000);
    server.put("pods", pod("b", "10.28.0.2"));
    await waitFor(() => store.stats().lastEventAgeSeconds === 0, { what: "the event" });
  });
});
