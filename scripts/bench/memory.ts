/**
 * Memory per live aggregated flow (issue 5, `heap_bytes_per_flow_100k` / `_1m`): an
 * AggregationCore with the process's default limits is filled with N correlated InterNode
 * flows (a source-Node half and a destination-Node half each, realistic Pod, Node, Service and
 * policy strings), and the growth after a full GC is divided by the live flow count. Each size
 * runs in a fresh subprocess (`--v8-flags=--expose-gc`) so nothing from an earlier size or from
 * the caller stays on the heap. The core keeps its counters in typed arrays outside the JS heap,
 * so the JS heap figure alone flatters it: the external (ArrayBuffer) growth is reported next
 * to it, and their sum is the honest total.
 *
 *   deno run --allow-all scripts/bench/memory.ts [--quick]
 */

import { ManualClock } from "../../src/clock.ts";
import { AggregationCore, type FlowInput } from "../../src/aggregation/mod.ts";
import { DENO_JSON } from "./process.ts";

/** Memory growth of one fill, per live flow, after GC. */
export interface HeapSample {
  /** Live flows in the core (asserted equal to the flows created). */
  flows: number;
  /** JS heap (`heapUsed`) growth per flow. */
  heapBytesPerFlow: number;
  /**
   * External memory growth per flow (typed arrays' ArrayBuffers: Deno reports them under
   * `external`; there is no separate `arrayBuffers` figure in `Deno.memoryUsage()`).
   */
  externalBytesPerFlow: number;
  /** heap + external per flow. */
  totalBytesPerFlow: number;
  /** Resident set growth per flow (touched pages, allocator slack included). */
  rssBytesPerFlow: number;
  /** Records ingested per second while filling (record building included). */
  fillRecordsPerSec: number;
}

/** Result of {@linkcode benchHeapPerFlow}. */
export interface HeapResult {
  /** JS heap bytes per live flow at 100,000 flows (quick mode: at 10,000 flows). */
  heap_bytes_per_flow_100k: number;
  /** JS heap bytes per live flow at 1,000,000 flows (quick mode: at 20,000 flows). */
  heap_bytes_per_flow_1m: number;
  /** Both samples with external and total memory, and how they were taken. */
  detail: {
    /** The sample behind `heap_bytes_per_flow_100k`. */
    at100k: HeapSample;
    /** The sample behind `heap_bytes_per_flow_1m`. */
    at1m: HeapSample;
    /** Target from issue 5. */
    target: string;
    /** What the figures mean. */
    note: string;
  };
}

/** One half of InterNode flow `i`, as the Agent on the `side` Node reports it. */
export function interNodeHalf(i: number, side: "S" | "D"): FlowInput {
  const s = side === "S";
  return {
    sourceIPv4Address: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
    destinationIPv4Address: `10.200.${(i >> 8) & 255}.${i & 255}`,
    sourceTransportPort: 30_000 + (i % 30_000),
    destinationTransportPort: 443,
    protocolIdentifier: 6,
    flowStartSeconds: 1_700_000_000,
    flowEndSeconds: 1_700_000_005,
    flowEndReason: 2,
    tcpState: "ESTABLISHED",
    flowType: 2,
    sourcePodName: s ? `frontend-7d9f8b-${i % 500}` : "",
    sourcePodNamespace: s ? "shop" : "",
    sourceNodeName: s ? `node-${i % 20}` : "",
    destinationPodName: s ? "" : `backend-5c6d-${i % 300}`,
    destinationPodNamespace: s ? "" : "shop",
    destinationNodeName: s ? "" : `node-${(i + 1) % 20}`,
    destinationClusterIPv4: s ? "10.96.0.20" : "0.0.0.0",
    destinationServicePort: s ? 443 : 0,
    destinationServicePortName: s ? "shop/backend:https" : "",
    ingressNetworkPolicyName: s ? "" : "allow-frontend",
    ingressNetworkPolicyNamespace: s ? "" : "shop",
    ingressNetworkPolicyRuleAction: s ? 0 : 1,
    ingressNetworkPolicyType: s ? 0 : 1,
    ingressNetworkPolicyRuleName: s ? "" : "rule-0",
    egressNetworkPolicyName: "",
    egressNetworkPolicyNamespace: "",
    egressNetworkPolicyRuleAction: 0,
    egressNetworkPolicyType: 0,
    egressNetworkPolicyRuleName: "",
    egressName: "",
    egressIP: "",
    octetTotalCount: 123_456n,
    octetDeltaCount: 123_456n,
    packetTotalCount: 321n,
    packetDeltaCount: 321n,
    reverseOctetTotalCount: 654_321n,
    reverseOctetDeltaCount: 654_321n,
    reversePacketTotalCount: 123n,
    reversePacketDeltaCount: 123n,
  };
}

function fill(core: AggregationCore, from: number, to: number): void {
  for (let i = from; i < to; i++) {
    // Built one at a time and dropped: only what the core keeps is measured.
    if (!core.addRecord(interNodeHalf(i, "S"))) throw new Error(`flow ${i}: S half rejected`);
    if (!core.addRecord(interNodeHalf(i, "D"))) throw new Error(`flow ${i}: D half rejected`);
  }
}

/**
 * Measures one size in this isolate. Needs `--v8-flags=--expose-gc`; run it in a fresh process
 * (see {@linkcode measureHeapInSubprocess}) or earlier allocations skew it.
 */
export function measureHeapSample(flows: number): HeapSample {
  const gc = (globalThis as unknown as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error("memory bench: run with --v8-flags=--expose-gc");
  const settle = (): Deno.MemoryUsage => {
    gc();
    gc();
    return Deno.memoryUsage();
  };
  // Warm up (JIT code, interned strings of the pools, lazily created statics) in a core that is
  // dropped, so the measured growth is the flows' own.
  const warm = new AggregationCore({
    activeTimeoutMs: 3_600_000,
    inactiveTimeoutMs: 3_600_000,
    clock: new ManualClock(),
  });
  fill(warm, 0, Math.min(flows, 5_000));
  const before = settle();
  // The process's defaults (maxFlows 1,000,000): no preallocation hint for the measured size.
  const core = new AggregationCore({
    activeTimeoutMs: 3_600_000,
    inactiveTimeoutMs: 3_600_000,
    clock: new ManualClock(),
  });
  const t0 = performance.now();
  fill(core, 0, flows);
  const t1 = performance.now();
  const after = settle();
  if (core.flowCount !== flows) {
    throw new Error(`memory bench: expected ${flows} live flows, core holds ${core.flowCount}`);
  }
  const stats = core.stats();
  if (stats.correlated !== flows) {
    throw new Error(`memory bench: expected ${flows} correlated flows, got ${stats.correlated}`);
  }
  const heap = (after.heapUsed - before.heapUsed) / flows;
  const ext = (after.external - before.external) / flows;
  // Keep `warm` alive until after the measurement so it is in both snapshots.
  if (warm.flowCount === 0) throw new Error("unreachable");
  return {
    flows: core.flowCount,
    heapBytesPerFlow: heap,
    externalBytesPerFlow: ext,
    totalBytesPerFlow: heap + ext,
    rssBytesPerFlow: (after.rss - before.rss) / flows,
    fillRecordsPerSec: (2 * flows) / ((t1 - t0) / 1000),
  };
}

/**
 * Runs `script --child ARG` in a fresh Deno process with `--expose-gc` and parses the JSON it
 * prints: a memory measurement that nothing of the caller's heap can skew.
 */
export async function measureInGcChild<T>(
  script: URL,
  arg: number,
  what: string,
): Promise<T> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-read",
      "--config",
      DENO_JSON,
      "--v8-flags=--expose-gc,--max-old-space-size=4096",
      script.pathname,
      "--child",
      String(arg),
    ],
    env: { NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout).trim();
  if (!out.success || text === "") {
    throw new Error(
      `${what} child (${arg}) exited ${out.code}: ${
        new TextDecoder().decode(out.stderr).slice(-500)
      }`,
    );
  }
  return JSON.parse(text) as T;
}

/** Runs {@linkcode measureHeapSample} for `flows` in a fresh Deno process. */
export function measureHeapInSubprocess(flows: number): Promise<HeapSample> {
  return measureInGcChild(new URL(import.meta.url), flows, "memory bench");
}

/**
 * Heap bytes per live flow at 100,000 and 1,000,000 flows (quick: 10,000 and 20,000, keyed
 * the same so CI exercises the path in about a second).
 */
export async function benchHeapPerFlow(opts: { quick: boolean }): Promise<HeapResult> {
  const [small, large] = opts.quick ? [10_000, 20_000] : [100_000, 1_000_000];
  // Sequential: two fills at once would share the 2 cores and the measurements nothing.
  const at100k = await measureHeapInSubprocess(small);
  const at1m = await measureHeapInSubprocess(large);
  return {
    heap_bytes_per_flow_100k: at100k.heapBytesPerFlow,
    heap_bytes_per_flow_1m: at1m.heapBytesPerFlow,
    detail: {
      at100k,
      at1m,
      target: "<= 1,000 heap bytes per live flow at 1,000,000 flows",
      note: "growth of heapUsed / external after two forced GCs divided by live correlated " +
        "InterNode flows, in a fresh process per size; the core's counters live in typed " +
        "arrays (external), so totalBytesPerFlow = heap + external is the full cost" +
        (opts.quick ? "; quick mode: 10k and 20k flows, not the keyed sizes" : ""),
    },
  };
}

if (import.meta.main) {
  const child = Deno.args.indexOf("--child");
  if (child >= 0) {
    console.log(JSON.stringify(measureHeapSample(Number(Deno.args[child + 1]))));
  } else {
    const r = await benchHeapPerFlow({ quick: Deno.args.includes("--quick") });
    console.log(JSON.stringify(r, null, 2));
  }
}
