/**
 * `GET /metrics`: every counter of the process in the Prometheus text format (0.0.4), derived
 * from the same flat fields as the metrics log line (`statsFields`), so a counter added to a
 * component appears in both without an edit. Names follow Prometheus conventions
 * (`flow_aggregator_` prefix, snake case); a sink's counters carry a `sink` label. The loss
 * ledger is exported as two identities anyone can check:
 *
 * - `flow_aggregator_ledger_records{stage="received"}` ==
 *   sum of `stage="aggregated"`, `"rejected"`, `"non_flow"`, `"options"`, `"in_flight"`
 *   (records handed to shard workers not yet counted by them; 0 with one shard), at every
 *   scrape;
 * - per sink: `flow_aggregator_sink_received` ==
 *   `_exported + _dropped + _filtered + _buffered + _unacknowledged`.
 *
 * The process's resource use (`src/process_stats.ts`) keeps the standard `process_` names; each
 * thread's V8 memory is `flow_aggregator_thread_heap_used_bytes{thread="shard0"}` and its twins.
 *
 * @module
 */

import { type FlowAggregatorStats, ledgerStages, statsFields } from "../flow_aggregator.ts";
import { EXPORTER_SECTIONS } from "../components.ts";

function snake(s: string): string {
  return s.replace(/([a-z0-9])([A-Z])/g, "$1_$2").replace(/[^A-Za-z0-9_]/g, "_").toLowerCase();
}

function labelValue(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/** One sample: metric name, labels, value. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

function sampleOf(key: string, v: unknown): Sample | undefined {
  const value = typeof v === "number"
    ? v
    : typeof v === "bigint"
    ? Number(v)
    : typeof v === "boolean"
    ? (v ? 1 : 0)
    : undefined;
  // Text values ("unknown" kernel drops) are not numbers: left out rather than faked as 0.
  if (value === undefined) return undefined;
  // The process's resource use under the names every Prometheus client library gives it
  // (`process_resident_memory_bytes`, `process_cpu_seconds_total`, ...), so the dashboards and
  // alerts written for any process (a Go collector's included) work unchanged.
  if (key.startsWith("process.")) {
    return { name: `process_${snake(key.slice(8))}`, labels: {}, value };
  }
  // Their sums over the threads: each thread's is here ({@linkcode threadSamples}).
  if (key.startsWith("threads.")) return undefined;
  for (const section of EXPORTER_SECTIONS) {
    if (key.startsWith(`${section}.sink.`)) {
      const rest = key.slice(section.length + 6);
      return {
        name: `flow_aggregator_sink_detail_${snake(rest)}`,
        labels: { sink: section },
        value,
      };
    }
    if (key.startsWith(`${section}.`)) {
      const rest = key.slice(section.length + 1);
      return { name: `flow_aggregator_sink_${snake(rest)}`, labels: { sink: section }, value };
    }
  }
  return { name: `flow_aggregator_${snake(key)}`, labels: {}, value };
}

function ledger(s: FlowAggregatorStats): Sample[] {
  return Object.entries(ledgerStages(s)).map(([stage, value]) => ({
    name: "flow_aggregator_ledger_records",
    labels: { stage: snake(stage) },
    value,
  }));
}

/**
 * Datagrams per UDP socket (`socket` = its index): with one socket per shard the kernel keeps
 * each Agent on one, so a socket far busier than the others (and its kernel drops) is where the
 * busiest Agents landed. Nothing without a UDP collector.
 */
function udpSockets(s: FlowAggregatorStats): Sample[] {
  const udp = s.collector?.udpReceiver;
  if (udp === undefined) return [];
  const per: Sample[] = udp.socketDatagrams.map((value, i) => ({
    name: "flow_aggregator_udp_socket_datagrams",
    labels: { socket: String(i) },
    value,
  }));
  // Whether the kernel's drops can be read (the socket path without /proc access cannot): 0
  // says why `flow_aggregator_udp_kernel_drops` is absent, which is never a false 0.
  per.push({
    name: "flow_aggregator_udp_kernel_drops_known",
    labels: {},
    value: udp.kernelDropsKnown ? 1 : 0,
  });
  return per;
}

/**
 * Each thread's V8 memory (`thread` = `main`, `shard<i>`, or a sink's section): the process's RSS
 * does not tell which isolate grows.
 */
function threadSamples(s: FlowAggregatorStats): Sample[] {
  const out: Sample[] = [];
  for (const [thread, memory] of Object.entries(s.threads ?? {})) {
    for (const [k, value] of Object.entries(memory)) {
      out.push({ name: `flow_aggregator_thread_${snake(k)}`, labels: { thread }, value });
    }
  }
  return out;
}

/**
 * The API's counts by the bound that refused or closed (`limit` = the bound's name: a
 * `maxApi*` limit, a timeout, or `pendingResponseBytes` / `queries` / `liveViews` for
 * `refused_busy`): the unlabelled series is their sum. The keys are the API's own, never a
 * peer's.
 */
function apiLimitSamples(s: FlowAggregatorStats): Sample[] {
  const out: Sample[] = [];
  for (const [k, counts] of Object.entries(s.api ?? {})) {
    if (typeof counts !== "object" || counts === null) continue;
    for (const [limit, value] of Object.entries(counts)) {
      if (typeof value !== "number") continue;
      out.push({ name: `flow_aggregator_api_${snake(k)}_by_limit`, labels: { limit }, value });
    }
  }
  return out;
}

/** The Prometheus text of a stats snapshot. */
export function prometheusText(stats: FlowAggregatorStats): string {
  const byName = new Map<string, Sample[]>();
  const add = (x: Sample) => {
    const list = byName.get(x.name);
    if (list === undefined) byName.set(x.name, [x]);
    else list.push(x);
  };
  for (const [k, v] of Object.entries(statsFields(stats))) {
    const x = sampleOf(k, v);
    if (x !== undefined) add(x);
  }
  for (const x of ledger(stats)) add(x);
  for (const x of udpSockets(stats)) add(x);
  for (const x of threadSamples(stats)) add(x);
  for (const x of apiLimitSamples(stats)) add(x);
  const lines: string[] = [];
  for (const [name, samples] of [...byName].sort(([a], [b]) => a < b ? -1 : 1)) {
    lines.push(`# TYPE ${name} untyped`);
    for (const x of samples) {
      const labels = Object.entries(x.labels).map(([k, v]) => `${k}="${labelValue(v)}"`);
      lines.push(`${name}${labels.length > 0 ? `{${labels.join(",")}}` : ""} ${x.value}`);
    }
  }
  return lines.join("\n") + "\n";
}
