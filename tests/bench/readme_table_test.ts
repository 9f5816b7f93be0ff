/**
 * The README benchmark table generated from a report (scripts/bench/readme_table.ts): every key
 * of the report has a row, references come from the baseline when the run had one and from the
 * row's reference key otherwise, and the README's generated part is replaced between its
 * markers only. No timing.
 */

import assert from "node:assert/strict";
import { type BenchReport, emptyResults } from "../../scripts/bench.ts";
import {
  LATER_CAPTION,
  laterRows,
  laterTable,
  markdownTable,
  parseHistory,
  RATIO_KEYS,
  README_ROWS,
  TABLE_END,
  TABLE_START,
  updateReadme,
} from "../../scripts/bench/readme_table.ts";

function report(extra: Partial<BenchReport> = {}): BenchReport {
  return {
    time: "2026-12-03T16:00:00.000Z",
    quick: false,
    env: { deno: "2.9.6", cpus: 2, loadavg: [0.5, 0.6, 0.7] },
    results: {
      ...emptyResults(),
      decode_records_per_s: 2_000_000,
      udp_e2e_lossless_records_per_s: 60_000,
      udp_e2e_c_baseline_per_s: 75_000,
      rss_bytes_idle: 52_400_000,
      memory_bytes_per_flow_1m: 512.4,
    },
    notes: {},
    details: {},
    commit: "0123456789abcdef",
    ...extra,
  };
}

function rowOf(table: string, key: string): string {
  const line = table.split("\n").find((l) => l.includes(`(\`${key}\`)`));
  assert.ok(line !== undefined, `no row for ${key}`);
  return line;
}

Deno.test("README_ROWS: every report key is a row, a row's reference or a row's ratio", () => {
  const keys = README_ROWS.map((r) => r.key);
  assert.equal(new Set(keys).size, keys.length, "a key listed twice");
  const shown = new Set<string>(keys);
  for (const r of README_ROWS) if (r.ref !== undefined) shown.add(r.ref);
  for (const [ratio, row] of Object.entries(RATIO_KEYS)) {
    const withRef = README_ROWS.find((r) => r.key === row);
    assert.ok(withRef?.ref !== undefined, `${ratio}: row ${row} has no reference`);
    shown.add(ratio);
  }
  assert.deepEqual([...shown].sort(), Object.keys(emptyResults()).sort());
});

Deno.test("markdownTable: a row's reference key gives the reference and the ratio", () => {
  const t = markdownTable(report());
  const udp = rowOf(t, "udp_e2e_lossless_records_per_s");
  assert.match(udp, /60,000 records\/s/);
  assert.match(udp, /75,000 datagrams\/s \(C `recv\(\)` loop, same buffer\)/);
  assert.match(udp, /\| 0\.800 \|/);
  assert.match(rowOf(t, "rss_bytes_idle"), /52\.4 MB/);
  assert.match(rowOf(t, "memory_bytes_per_flow_1m"), /512 B .*≤ 400 B/);
  // Not measured: a dash, never a zero.
  assert.match(rowOf(t, "aggregate_records_per_s"), /\| — \| — \| — \|/);
});

Deno.test("markdownTable: the TLS rows are judged against the same run's TCP figures", () => {
  const t = markdownTable(report({
    results: {
      ...emptyResults(),
      e2e_replay_tcp_records_per_s: 1_000_000,
      e2e_replay_tls_records_per_s: 600_000,
      tls_idle_connection_bytes: 60_000,
      tcp_idle_connection_bytes: 15_000,
    },
  }));
  const rate = rowOf(t, "e2e_replay_tls_records_per_s");
  assert.match(
    rate,
    /\| 600,000 records\/s \| 1,000,000 records\/s \(same run over TCP\) \| 0\.600 \|/,
  );
  const mem = rowOf(t, "tls_idle_connection_bytes");
  assert.match(mem, /\| 60,000 B \| 15,000 B \(plain TCP connection, same run\) \| 4\.000 \|/);
});

Deno.test("markdownTable: the baseline's figure wins over the row's reference key", () => {
  const t = markdownTable(report({
    baselineRev: { rev: "ba8743a", commit: "ba8743a000" },
    baseline: { decode_records_per_s: 2_500_000 },
    ratio: { decode_records_per_s: 0.8 },
  }));
  assert.match(rowOf(t, "decode_records_per_s"), /2,500,000 records\/s \(`ba8743a`\) \| 0\.800 \|/);
  // decode_realistic has no baseline figure: its own reference (null here) is shown.
  assert.match(rowOf(t, "decode_realistic_records_per_s"), /golden record looped/);
});

Deno.test("markdownTable: a figure the report predates has no row; one measured as null does", () => {
  const r = report();
  const { decode_records_per_s: _, ...older } = r.results;
  const table = markdownTable({ ...r, results: older as BenchReport["results"] });
  assert.ok(!table.includes("(`decode_records_per_s`)"), table);
  assert.ok(table.includes("(`rss_bytes_idle`)"), table);
  assert.match(rowOf(markdownTable(r), "decode_records_per_s"), /2,000,000/);
  const nulled = markdownTable({ ...r, results: { ...r.results, decode_records_per_s: null } });
  assert.match(rowOf(nulled, "decode_records_per_s"), /\| — \|/);
});

Deno.test("updateReadme: replaces only the text between the markers", () => {
  const before = `# Title\n\nintro\n\n${TABLE_START}\nold table\n${TABLE_END}\n\nafter\n`;
  const after = updateReadme(before, report());
  assert.ok(after.startsWith(`# Title\n\nintro\n\n${TABLE_START}\n`));
  assert.ok(after.endsWith(`${TABLE_END}\n\nafter\n`));
  assert.ok(!after.includes("old table"));
  assert.match(after, /commit `0123456`/);
  assert.match(after, /decode_records_per_s/);
  assert.throws(() => updateReadme("# no markers\n", report()), /markers/);
});

Deno.test("laterRows: a row the full run lacks comes from the newest run that measured it and its reference", () => {
  const full = report({
    results: { ...report().results, e2e_replay_tcp_records_per_s: 1_500_000 },
  });
  const { e2e_replay_tls_records_per_s: _t, e2e_replay_cores: _c, ...rest } = full.results;
  const older = { ...full, results: rest as BenchReport["results"] };
  const entry = (commit: string, results: Partial<BenchReport["results"]>, only?: string[]) => ({
    commit,
    date: "2026-12-05T10:00:00.000Z",
    ...(only ? { only } : {}),
    results: { ...emptyResults(), ...results },
  });
  const history = [
    entry("aaaaaaa1", {
      e2e_replay_tls_records_per_s: 500_000,
      e2e_replay_tcp_records_per_s: 1e6,
      e2e_replay_cores: 1.5,
    }),
    entry(
      "bbbbbbb2",
      { e2e_replay_tls_records_per_s: 800_000, e2e_replay_tcp_records_per_s: 1e6 },
      [
        "replay",
      ],
    ),
    // Newest, but without the reference: not taken (figure and reference from one run).
    entry("ccccccc3", { e2e_replay_tls_records_per_s: 900_000 }),
  ];
  const later = laterRows(older, history);
  assert.deepEqual(
    later.map((l) => [l.row.key, l.run.commit]),
    [["e2e_replay_tls_records_per_s", "bbbbbbb2"], ["e2e_replay_cores", "aaaaaaa1"]],
  );
  const t = laterTable(later);
  // The reference is the history run's, not the full run's 1,500,000.
  assert.match(
    rowOf(t, "e2e_replay_tls_records_per_s"),
    /\| 800,000 records\/s \| 1,000,000 records\/s \(same run over TCP\) \| 0\.800 \| — \| `bbbbbbb`, 2026-12-05, `--only=replay` \|/,
  );
  assert.match(rowOf(t, "e2e_replay_cores"), /\| 1\.50 \|.*`aaaaaaa`, 2026-12-05, full run \|$/);
  // In the README: below the main table, with its caption; none when nothing is missing.
  const readme = `${TABLE_START}\nold\n${TABLE_END}\n`;
  const withLater = updateReadme(readme, older, history);
  assert.ok(withLater.indexOf(LATER_CAPTION) > withLater.indexOf("(`decode_records_per_s`)"));
  assert.ok(withLater.indexOf(LATER_CAPTION) < withLater.indexOf(TABLE_END));
  assert.ok(!updateReadme(readme, full, history).includes(LATER_CAPTION));
});

Deno.test("parseHistory: one entry per non-empty line, oldest first", () => {
  const lines = [
    JSON.stringify({ commit: "a", date: "d1", results: {} }),
    JSON.stringify({ commit: "b", date: "d2", only: ["decode"], results: {} }),
  ];
  const h = parseHistory(lines.join("\n") + "\n\n");
  assert.deepEqual(h.map((e) => e.commit), ["a", "b"]);
  assert.deepEqual(h[1].only, ["decode"]);
});
