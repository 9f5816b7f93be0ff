/**
 * The Pod store (issue 11, `podstore_bytes_per_pod`, `podstore_lookups_per_s`): a PodStore is
 * filled with N Pods as the informer applies them (realistic names, 4 labels, one IP each, 1 %
 * host-network Pods that are skipped), and the JS heap growth after a full GC is divided by the
 * Pods held; then lookups of random known and unknown IPs are timed. Each size runs in a fresh
 * subprocess (`--v8-flags=--expose-gc`) so nothing from the caller stays on the heap.
 *
 *   deno run --allow-all scripts/bench/podstore.ts [--quick]
 */

import { ManualClock } from "../../src/clock.ts";
import { type PodObject, PodStore } from "../../src/k8s/pod_store.ts";
import { measureInGcChild } from "./memory.ts";

/** One measurement. */
export interface PodStoreSample {
  /** Pods held. */
  pods: number;
  /** JS heap growth per Pod held. */
  bytesPerPod: number;
  /** `lookup()` calls per second (half known IPs, half unknown). */
  lookupsPerSec: number;
}

/** Pod `i` as the API server lists it (the fields the store reads, and some it drops). */
function podOf(i: number): PodObject & { spec: Record<string, unknown> } {
  const app = `app-${i % 200}`;
  return {
    metadata: {
      uid: crypto.randomUUID(),
      name: `${app}-7d9f8b6c5-${i.toString(36).padStart(5, "x")}`,
      namespace: `team-${i % 50}`,
      labels: {
        app,
        "app.kubernetes.io/part-of": `suite-${i % 20}`,
        "pod-template-hash": "7d9f8b6c5",
        tier: i % 2 === 0 ? "web" : "db",
      },
      creationTimestamp: "2024-01-01T00:00:00Z",
      resourceVersion: String(1000 + i),
    },
    spec: { nodeName: `node-${i % 100}`, hostNetwork: i % 100 === 99, containers: [] },
    status: { phase: "Running", podIP: ipOf(i), podIPs: [{ ip: ipOf(i) }] },
  };
}

function ipOf(i: number): string {
  return `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
}

/** Measures `pods` in this isolate (needs `--v8-flags=--expose-gc`). */
export function measurePodStore(pods: number): PodStoreSample {
  const gc = (globalThis as unknown as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error("podstore bench: run with --v8-flags=--expose-gc");
  const settle = (): number => {
    gc();
    gc();
    return Deno.memoryUsage().heapUsed;
  };
  const warm = new PodStore({ clock: new ManualClock() });
  for (let i = 0; i < 2_000; i++) warm.apply("ADDED", podOf(i));
  const before = settle();
  const store = new PodStore({ clock: new ManualClock() });
  // Built one at a time and dropped, as the informer does: only what the store keeps counts.
  for (let i = 0; i < pods; i++) store.apply("ADDED", podOf(i));
  const after = settle();
  const held = store.stats().pods;
  const n = 1_000_000;
  const ips = Array.from(
    { length: 1024 },
    (_, k) => ipOf(k % 2 === 0 ? (k * 97) % pods : pods + k),
  );
  let found = 0;
  const t0 = performance.now();
  for (let k = 0; k < n; k++) if (store.lookup(ips[k & 1023], 1_700_000_000) !== undefined) found++;
  const t1 = performance.now();
  if (found === 0 || warm.stats().pods === 0) throw new Error("podstore bench: no lookup hit");
  return {
    pods: held,
    bytesPerPod: (after - before) / held,
    lookupsPerSec: n / ((t1 - t0) / 1000),
  };
}

/** Runs {@linkcode measurePodStore} in a fresh Deno process. */
export function measurePodStoreInSubprocess(pods: number): Promise<PodStoreSample> {
  return measureInGcChild(new URL(import.meta.url), pods, "podstore bench");
}

/** Bytes per Pod and lookups per second at 100,000 Pods (quick: 10,000). */
export function benchPodStore(opts: { quick: boolean }): Promise<PodStoreSample> {
  return measurePodStoreInSubprocess(opts.quick ? 10_000 : 100_000);
}

if (import.meta.main) {
  const child = Deno.args.indexOf("--child");
  if (child >= 0) {
    console.log(JSON.stringify(measurePodStore(Number(Deno.args[child + 1]))));
  } else {
    console.log(JSON.stringify(await benchPodStore({ quick: Deno.args.includes("--quick") })));
  }
}
