/**
 * The README's benchmark table, generated from `bench/latest.json` (issue 15: "the README's
 * performance table is regenerated from bench/latest.json, with the references"). Each row is a
 * key of the report next to its reference **measured in the same run**: the `--baseline`
 * revision's figure when the run had one for that key, otherwise the row's reference key (a C
 * loop, a peer tool, the flowgen-driven figure...), with the ratio, and the goal it is judged
 * against. The rows are listed once, in {@linkcode README_ROWS}; units and number formatting
 * come from scripts/bench.ts.
 *
 * A row whose figure `bench/latest.json` lacks (a bench part added after that full run) is
 * shown in a second table from the newest run in `bench/history.jsonl` that measured it and its
 * reference, named by commit and date ({@linkcode laterRows}): the same-run rule holds per row.
 *
 *   deno task bench:readme          # rewrite the README between the bench-table markers
 *   deno task bench:readme --check  # exit 1 when the README is not the table of latest.json
 *
 * @module
 */

import {
  type BenchReport,
  type BenchResults,
  formatValue,
  type HistoryEntry,
  UNITS,
} from "../bench.ts";
import { PACED_RATE } from "./e2e_replay.ts";
import { LOW_RATE_KEYS, LOW_RATES } from "./udp_e2e.ts";
import { DEFAULTS } from "../../src/config/defaults.ts";

type Key = keyof BenchResults;

/** One row of the README table. */
export interface ReadmeRow {
  /** The report key measured. */
  readonly key: Key;
  /** What it is, for a reader. */
  readonly label: string;
  /** The same run's reference when the run had no baseline for `key`. */
  readonly ref?: Key;
  /** What the reference is. */
  readonly refLabel?: string;
  /** The goal or target the figure is judged against. */
  readonly goal?: string;
}

/** The rows, in the README's order. */
export const README_ROWS: readonly ReadmeRow[] = [
  {
    key: "decode_records_per_s",
    label: "decode, golden Agent record, 1 per message",
    goal: "≥ 1M/s",
  },
  { key: "decode_batch_records_per_s", label: "decode, golden record, 50 per message" },
  {
    key: "decode_realistic_records_per_s",
    label: "decode, realistic replay stream",
    ref: "decode_records_per_s",
    refLabel: "golden record looped",
  },
  {
    key: "decode_realistic_wire_records_per_s",
    label: "decode, realistic replay stream, wire-number mode (the collector's)",
    ref: "decode_realistic_records_per_s",
    refLabel: "default mode: text, bigint",
    goal: "≥ 2M/s per core (#15)",
  },
  {
    key: "route_realistic_records_per_s",
    label: "main thread's share with shards: walk, route, copy to a ring (replay stream)",
    ref: "decode_realistic_records_per_s",
    refLabel: "decoding the same stream",
  },
  { key: "aggregate_records_per_s", label: "aggregate, half inter-node pairs", goal: "≥ 500k/s" },
  {
    key: "pipeline_realistic_records_per_s",
    label: "decode + aggregate, replay stream, one thread (wire-number mode)",
    ref: "pipeline_realistic_text_records_per_s",
    refLabel: "default decoder mode: text, bigint",
  },
  {
    key: "shard_realistic_records_per_s",
    label: "one shard's share: views decoded, aggregated (replay stream, 8 rounds)",
  },
  {
    key: "e2e_tcp_records_per_s",
    label: "e2e TCP, flowgen, flow log sink in its worker",
    ref: "e2e_tcp_inprocess_records_per_s",
    refLabel: "sink in process",
    goal: "≥ 150k/s; worker / in process ≥ 0.9",
  },
  {
    key: "e2e_replay_tcp_records_per_s",
    label: "e2e TCP, replay sender, 4 connections, 20k flows, shards = cores (default)",
    ref: "e2e_replay_one_shard_records_per_s",
    refLabel: "same process, `--workers 1`",
    goal: "≥ 1M/s (#15)",
  },
  {
    key: "e2e_replay_cpu_us_per_record",
    label: "collector CPU per record, all threads",
    ref: "e2e_replay_one_shard_cpu_us_per_record",
    refLabel: "same process, `--workers 1`",
    goal: "≤ 1.0 µs (#15)",
  },
  {
    key: "e2e_replay_paced_cpu_us_per_record",
    label: `collector CPU per record paced at ${
      PACED_RATE.toLocaleString("en-US")
    } records/s, upstream's timeouts (${DEFAULTS.activeFlowRecordTimeout} / ${DEFAULTS.inactiveFlowRecordTimeout})`,
    ref: "e2e_replay_cpu_us_per_record",
    refLabel: "same build flat out",
  },
  {
    key: "e2e_replay_tls_records_per_s",
    label: "e2e mutual TLS, replay sender, 4 connections, 20k flows, shipped defaults",
    ref: "e2e_replay_tcp_records_per_s",
    refLabel: "same run over TCP",
  },
  {
    key: "e2e_replay_tls_cpu_us_per_record",
    label: "collector CPU per record over mutual TLS, all threads",
    ref: "e2e_replay_cpu_us_per_record",
    refLabel: "same run over TCP",
  },
  { key: "e2e_replay_cores", label: "cores used by the collector", goal: "both (#15)" },
  { key: "e2e_replay_peak_rss_bytes", label: "collector peak RSS in the replay trial" },
  {
    key: "e2e_replay_stop_peak_rss_bytes",
    label: "peak RSS with its stop, 100k flows held (all exported at SIGTERM)",
    ref: "e2e_replay_large_peak_rss_bytes",
    refLabel: "same process before the stop",
  },
  { key: "e2e_replay_agent_spread", label: "slowest / fastest Agent connection", goal: "≥ 0.5" },
  { key: "replay_sender_cpu_us_per_record", label: "replay sender CPU per record" },
  {
    key: "udp_lossless_records_per_s",
    label: "UDP receive only, lossless",
    ref: "udp_c_baseline_per_s",
    refLabel: "C `recv()` loop",
    goal: "≥ 50 % of C",
  },
  { key: "udp_nfcapd_per_s", label: "UDP, Debian nfcapd (peer tool)" },
  {
    key: "udp_e2e_lossless_records_per_s",
    label: "UDP e2e (decode, aggregate, flow log), default buffer, < 0.1 % loss",
    ref: "udp_e2e_c_baseline_per_s",
    refLabel: "C `recv()` loop, same buffer",
    goal: "≥ C (#15)",
  },
  {
    key: "udp_e2e_one_socket_lossless_records_per_s",
    label: "UDP e2e, default buffer, one socket (`--udp-workers 1`)",
    ref: "udp_e2e_c_baseline_per_s",
    refLabel: "C `recv()` loop, same buffer",
  },
  {
    key: "udp_e2e_4mib_lossless_records_per_s",
    label: "UDP e2e, 4 MiB buffer",
    ref: "udp_e2e_4mib_c_baseline_per_s",
    refLabel: "C `recv()` loop, same buffer",
    goal: "≥ 300k/s (#15)",
  },
  {
    key: "udp_e2e_socket_lossless_records_per_s",
    label: "UDP e2e, plain socket path (no `--allow-ffi`)",
    ref: "udp_e2e_c_baseline_per_s",
    refLabel: "C `recv()` loop",
  },
  ...LOW_RATE_KEYS.map((key, i) => ({
    key: key.process,
    label: `UDP e2e CPU per record paced at ${
      LOW_RATES[i].toLocaleString("en-US")
    } records/s, warm, default buffer`,
    ref: key.c,
    refLabel: "C `recv()` loop, same rate",
  })),
  {
    key: "udp_e2e_loss_count_difference",
    label: "process vs kernel loss counts, difference",
    goal: "0",
  },
  { key: "heap_bytes_per_flow_100k", label: "JS heap per live flow, 100k flows" },
  { key: "heap_bytes_per_flow_1m", label: "JS heap per live flow, 1M flows" },
  {
    key: "memory_bytes_per_flow_1m",
    label: "heap + typed arrays per live flow, 1M flows",
    goal: "≤ 400 B (#15)",
  },
  { key: "rss_bytes_per_flow_1m", label: "RSS growth per live flow, 1M flows" },
  {
    key: "rss_bytes_idle",
    label: "idle RSS, embedded default config",
    ref: "rss_bytes_idle_runtime_workers",
    refLabel: "Deno alone with as many idle workers",
    goal: "≤ 40 MB (#15)",
  },
  { key: "rss_bytes_idle_runtime", label: "idle RSS of the Deno runtime alone (empty script)" },
  {
    key: "rss_bytes_idle_runtime_listeners",
    label: "idle RSS of Deno listening on a TCP and a TLS port, no worker, no product code",
  },
  {
    key: "rss_bytes_idle_bundle",
    label: "idle RSS of the build as the image runs it (cache filled at build)",
    ref: "rss_bytes_idle",
    refLabel: "`deno run main.ts`",
  },
  {
    key: "tls_idle_connection_bytes",
    label: "RSS per idle mutual-TLS connection, 1,000 connections",
    ref: "tcp_idle_connection_bytes",
    refLabel: "plain TCP connection, same run",
  },
  { key: "podstore_bytes_per_pod", label: "Pod store heap per Pod, 100k Pods", goal: "≤ 1 KB" },
  { key: "podstore_lookups_per_s", label: "Pod store lookups, 100k Pods" },
  {
    key: "api_query_ingest_ratio",
    label: "e2e with `/flowrecords` polled / without",
    goal: "≥ 0.9",
  },
  { key: "api_query_cpu_ratio", label: "CPU per record, polled / without" },
  {
    key: "clickhouse_rows_per_s",
    label: "ClickHouse sink inserts",
    ref: "clickhouse_client_rows_per_s",
    refLabel: "`clickhouse-client`",
    goal: "≥ 0.5 of the client",
  },
  { key: "spool_write_mb_per_s", label: "spool writes" },
  { key: "spool_replay_rows_per_s", label: "spool replay" },
  { key: "s3_records_per_s", label: "S3 sink CSV + gzip, one core" },
  { key: "s3_upload_mib_per_s", label: "S3 uploads to s3rver" },
];

/**
 * Report keys that are the ratio of a row to its reference: the table's ratio column shows them
 * (computed from the two figures), so they have no row of their own.
 */
export const RATIO_KEYS: Readonly<Partial<Record<Key, Key>>> = {
  e2e_worker_vs_inprocess_ratio: "e2e_tcp_records_per_s",
  clickhouse_vs_client_ratio: "clickhouse_rows_per_s",
};

/** First and last line of the generated part of the README. */
export const TABLE_START = "<!-- bench-table:start (deno task bench:readme) -->";
/** See {@linkcode TABLE_START}. */
export const TABLE_END = "<!-- bench-table:end -->";

/** A figure formatted by `formatValue`, with its "not measured" dash as the table's. */
function cell(s: string): string {
  return s === "-" ? "—" : s;
}

/** A value with its unit for a reader: bytes as B, or MB above 10 MB; counts bare. */
function show(v: number | null | undefined, key: Key): string {
  const unit = UNITS[key];
  const s = formatValue(v, unit);
  if (s === "-") return cell(s);
  if (unit === "bytes") return v! >= 1e7 ? `${(v! / 1e6).toFixed(1)} MB` : `${s} B`;
  if (unit === "ratio" || unit === "records" || unit === "cores") return s;
  return `${s} ${unit}`;
}

/**
 * The markdown table of `report`: one line per row of {@linkcode README_ROWS} whose figure the
 * report has (a report written before a row was added has no key for it: no row, rather than
 * one of dashes; a figure the run measured as null keeps its row).
 */
export function markdownTable(report: BenchReport, rows = README_ROWS): string {
  const base = report.baseline ?? {};
  const rev = report.baselineRev?.rev;
  const lines = [
    "| figure (`bench/latest.json` key) | measured | reference, same run | ratio | goal |",
    "| --- | ---: | ---: | ---: | --- |",
  ];
  for (const row of rows) {
    if (!(row.key in report.results)) continue;
    const b = base[row.key];
    const [ref, ratio] = b !== undefined && b !== null
      ? [`${show(b, row.key)} (\`${rev}\`)`, formatValue(report.ratio?.[row.key], "ratio")]
      : referenceCells(row, report.results);
    lines.push(`| ${rowCells(row, report.results, ref, ratio)} |`);
  }
  return lines.join("\n");
}

/** The figure and goal cells of `row` around its reference and ratio cells. */
function rowCells(row: ReadmeRow, results: BenchResults, ref: string, ratio: string): string {
  return `${row.label} (\`${row.key}\`) | ${show(results[row.key], row.key)} | ${ref} | ${
    cell(ratio)
  } | ${row.goal ?? "—"}`;
}

/** The reference and ratio cells of `row` from its reference key in the same `results`. */
function referenceCells(row: ReadmeRow, results: BenchResults): [string, string] {
  if (row.ref === undefined) return ["—", "—"];
  const v = results[row.key];
  const r = results[row.ref];
  const ratio = typeof v === "number" && typeof r === "number" && r > 0
    ? formatValue(v / r, "ratio")
    : "—";
  return [`${show(r, row.ref)} (${row.refLabel ?? row.ref})`, ratio];
}

/** A row the full run lacks, with the history run that measured it. */
export interface LaterRow {
  readonly row: ReadmeRow;
  readonly run: HistoryEntry;
}

/**
 * The rows of `rows` whose figure `report` lacks (not a key of its results: a part added to the
 * bench after that run), each with the newest entry of `history` (oldest first, as in
 * `bench/history.jsonl`) that measured it as a number, and its reference key too when the row
 * has one: figure and reference always come from one run.
 */
export function laterRows(
  report: BenchReport,
  history: readonly HistoryEntry[],
  rows = README_ROWS,
): LaterRow[] {
  const out: LaterRow[] = [];
  for (const row of rows) {
    if (row.key in report.results) continue;
    const measured = (e: HistoryEntry, k: Key) => typeof e.results[k] === "number";
    const run = history.findLast((e) =>
      measured(e, row.key) && (row.ref === undefined || measured(e, row.ref))
    );
    if (run !== undefined) out.push({ row, run });
  }
  return out;
}

/** The second table: {@linkcode laterRows}, each with its run; empty when there is none. */
export function laterTable(later: readonly LaterRow[]): string {
  if (later.length === 0) return "";
  const lines = [
    "| figure (`bench/history.jsonl` key) | measured | reference, same run | ratio | goal | run |",
    "| --- | ---: | ---: | ---: | --- | --- |",
  ];
  for (const { row, run } of later) {
    const [ref, ratio] = referenceCells(row, run.results);
    const parts = run.only === undefined ? "full run" : `\`--only=${run.only.join(",")}\``;
    lines.push(
      `| ${rowCells(row, run.results, ref, ratio)} | \`${run.commit.slice(0, 7)}\`, ${
        run.date.slice(0, 10)
      }, ${parts} |`,
    );
  }
  return lines.join("\n");
}

/** The line above {@linkcode laterTable}. */
export const LATER_CAPTION = "Figures the run above did not measure (bench parts added after " +
  "it), each from the newest run in `bench/history.jsonl` that measured it and its reference " +
  "(last column). Runs at different times met machines of different speed: compare each figure " +
  "with its own reference only.";

/** The header line above the table: when, which commit, which machine. */
export function tableCaption(report: BenchReport): string {
  const env = report.env as { cpus?: number; loadavg?: number[]; deno?: string };
  const load = env.loadavg?.map((x) => x.toFixed(1)).join(" / ") ?? "?";
  const commit = report.commit === undefined ? "" : `, commit \`${report.commit.slice(0, 7)}\``;
  const kind = report.quick ? "smoke run (`--quick`: not measurements)" : "run";
  return `Generated from \`bench/latest.json\`: ${kind} of ${report.time}${commit}, Deno ${
    env.deno ?? "?"
  }, ${env.cpus ?? "?"} cores, load average at the end ${load}.` +
    (report.baselineRev === undefined
      ? ""
      : ` Baseline \`${report.baselineRev.rev}\` (${
        report.baselineRev.commit.slice(0, 7)
      }) measured in the same run, alternating with the current code.`);
}

/**
 * `readme` with the text between {@linkcode TABLE_START} and {@linkcode TABLE_END] replaced by
 * the caption and table of `report`. Throws when the markers are missing or out of order.
 */
export function updateReadme(
  readme: string,
  report: BenchReport,
  history: readonly HistoryEntry[] = [],
): string {
  const a = readme.indexOf(TABLE_START);
  const b = readme.indexOf(TABLE_END);
  if (a < 0 || b < a) {
    throw new Error(`README: the markers ${TABLE_START} ... ${TABLE_END} are missing`);
  }
  const later = laterTable(laterRows(report, history));
  return readme.slice(0, a + TABLE_START.length) + "\n\n" + tableCaption(report) + "\n\n" +
    markdownTable(report) + "\n\n" + (later === "" ? "" : `${LATER_CAPTION}\n\n${later}\n\n`) +
    readme.slice(b);
}

/** The entries of a `bench/history.jsonl` text, oldest first. */
export function parseHistory(text: string): HistoryEntry[] {
  return text.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l) as HistoryEntry);
}

if (import.meta.main) {
  const root = new URL("../../", import.meta.url);
  const report = JSON.parse(
    await Deno.readTextFile(new URL("bench/latest.json", root)),
  ) as BenchReport;
  const history = parseHistory(
    await Deno.readTextFile(new URL("bench/history.jsonl", root)).catch(() => ""),
  );
  const readmeUrl = new URL("README.md", root);
  const before = await Deno.readTextFile(readmeUrl);
  // Written through deno fmt, as the check task compares formatted text.
  const tmp = await Deno.makeTempFile({ suffix: ".md" });
  try {
    await Deno.writeTextFile(tmp, updateReadme(before, report, history));
    const fmt = await new Deno.Command(Deno.execPath(), {
      args: ["fmt", "--config", new URL("deno.json", root).pathname, tmp],
      stdout: "null",
      stderr: "inherit",
    }).output();
    if (!fmt.success) throw new Error("deno fmt failed on the generated README");
    const after = await Deno.readTextFile(tmp);
    if (Deno.args.includes("--check")) {
      if (after !== before) {
        console.error("README: the benchmark table is not the one of bench/latest.json");
        Deno.exit(1);
      }
    } else {
      await Deno.writeTextFile(readmeUrl, after);
      console.error(after === before ? "README: table unchanged" : "README: table rewritten");
    }
  } finally {
    await Deno.remove(tmp);
  }
}
