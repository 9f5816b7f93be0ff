/**
 * The same-run baseline comparison of `deno task bench --baseline=REV`
 * (scripts/bench/baseline.ts, scripts/bench.ts): which parts two revisions share, the order in
 * which their parts alternate, the ratios and the table, and that the temporary worktree leaves
 * nothing behind. No timing assertions.
 */

import { cpuProbeMs, probeWork } from "../../scripts/bench/machine.ts";
import assert from "node:assert/strict";
import {
  addWorktree,
  alternate,
  alternationOrder,
  benchPartsOf,
  compareResults,
  descendantPids,
  median,
  sharedParts,
} from "../../scripts/bench/baseline.ts";
import {
  type BenchReport,
  emptyResults,
  formatTable,
  formatValue,
  historyEntry,
} from "../../scripts/bench.ts";

const REPO = new URL("../..", import.meta.url).pathname.replace(/\/$/, "");

Deno.test("benchPartsOf: reads the PARTS table of this revision's bench.ts", async () => {
  const src = await Deno.readTextFile(`${REPO}/scripts/bench.ts`);
  assert.deepEqual(benchPartsOf(src), [
    "decode",
    "aggregate",
    "udp",
    "heap",
    "podstore",
    "rss",
    "connections",
    "api",
    "clickhouse",
    "s3",
    "replay",
    "e2e",
    "udp_e2e",
  ]);
});

Deno.test("benchPartsOf: null for a bench.ts without --only/--out or without PARTS", () => {
  const parts = `const PARTS: Record<string, () => void> = {\n  decode: a,\n  "e2e": b,\n};\n`;
  const flags = `Deno.args.find((a) => a.startsWith("--only="));\n` +
    `Deno.args.find((a) => a.startsWith("--out="));\n`;
  assert.deepEqual(benchPartsOf(parts + flags), ["decode", "e2e"]);
  assert.equal(benchPartsOf(parts), null, "no --only/--out: cannot run one part");
  assert.equal(benchPartsOf(flags), null, "no PARTS table");
  assert.equal(benchPartsOf(""), null);
});

Deno.test("sharedParts: the selected comparable parts the baseline also has, in order", () => {
  const all = ["decode", "aggregate", "udp", "heap", "rss", "s3", "e2e"];
  assert.deepEqual(sharedParts(all, all), ["decode", "aggregate", "e2e"]);
  // The replay e2e is compared when the baseline has it too (ba8743a does not).
  assert.deepEqual(sharedParts(["decode", "replay"], ["decode", "replay"]), ["decode", "replay"]);
  assert.deepEqual(sharedParts(["decode", "replay"], ["decode", "e2e"]), ["decode"]);
  assert.deepEqual(sharedParts(all, ["decode", "udp"]), ["decode"]);
  assert.deepEqual(sharedParts(["e2e", "decode"], all), ["e2e", "decode"]);
  assert.deepEqual(sharedParts(["udp", "rss"], all), []);
});

Deno.test("alternationOrder: each part on both sides back to back, the first side swapping", () => {
  assert.deepEqual(
    alternationOrder(["decode", "aggregate", "e2e"]).map((s) => `${s.part}:${s.side}`),
    [
      "decode:current",
      "decode:baseline",
      "aggregate:baseline",
      "aggregate:current",
      "e2e:current",
      "e2e:baseline",
    ],
  );
  assert.deepEqual(alternationOrder([]), []);
});

Deno.test("alternationOrder: with rounds, pairs repeat and the first side keeps swapping", () => {
  const steps = alternationOrder(["decode", "e2e"], {
    rounds: (p) => p === "e2e" ? 1 : 3,
  });
  assert.deepEqual(steps.map((s) => `${s.part}${s.round}:${s.side}`), [
    "decode0:current",
    "decode0:baseline",
    "decode1:baseline",
    "decode1:current",
    "decode2:current",
    "decode2:baseline",
    "e2e0:baseline",
    "e2e0:current",
  ]);
  assert.equal(alternationOrder(["decode"], { rounds: () => 0 }).length, 2, "at least one pair");
});

Deno.test("median: of the finite figures only; null when there is none", () => {
  assert.equal(median([3, 1, 2]), 2);
  assert.equal(median([4, 1, 3, 2]), 2.5);
  assert.equal(median([5, null, NaN, "7"]), 5);
  assert.equal(median([null]), null);
  assert.equal(median([]), null);
});

Deno.test("compareResults: only keys the baseline reports; ratio = current / baseline", () => {
  const c = compareResults(
    { a: 200, b: 50, c: 10, d: null, e: 5 },
    { a: 100, b: 0, d: 7, e: null, old_only: 3 },
    ["a", "b", "c", "d", "e"],
  );
  assert.deepEqual(c.baseline, { a: 100, b: 0, d: 7, e: null });
  assert.deepEqual(c.ratio, { a: 2, b: null, d: null, e: null });
  assert.ok(!("c" in c.baseline), "a key the baseline does not know is not compared");
  assert.ok(!("old_only" in c.baseline), "only the keys asked for");
});

function report(): BenchReport {
  const results = {
    ...emptyResults(),
    decode_records_per_s: 1_500_000,
    aggregate_records_per_s: 1_000_000,
    e2e_tcp_records_per_s: 150_000,
    e2e_tcp_inprocess_records_per_s: 160_000,
    e2e_worker_vs_inprocess_ratio: 0.9375,
  };
  return {
    time: "",
    quick: true,
    env: {},
    results,
    notes: { decode_records_per_s: "n" },
    details: {},
  };
}

Deno.test("formatTable: without a baseline, no baseline columns; ratios keep decimals", () => {
  const lines = formatTable(report()).split("\n");
  assert.match(lines[0], /^metric\s+value\s+unit\s+note$/);
  assert.match(lines.find((l) => l.startsWith("e2e_worker_vs"))!, /\s0\.938\s+ratio$/);
  assert.match(lines.find((l) => l.startsWith("decode_records"))!, /\s1,500,000\s+records\/s\s+n$/);
});

Deno.test("formatTable: with a baseline, compared keys show its figure and the ratio", () => {
  const r = report();
  r.baselineRev = { rev: "HEAD~1", commit: "0".repeat(40) };
  r.baseline = { decode_records_per_s: 1_200_000, e2e_tcp_records_per_s: null };
  r.ratio = { decode_records_per_s: 1.25, e2e_tcp_records_per_s: null };
  const lines = formatTable(r).split("\n");
  assert.match(lines[0], /^metric\s+value\s+unit\s+baseline HEAD~1\s+ratio\s+note$/);
  const cells = (k: string): string[] =>
    lines.find((l) => l.startsWith(k + " "))!.trim().split(/\s{2,}/);
  assert.deepEqual(cells("decode_records_per_s"), [
    "decode_records_per_s",
    "1,500,000",
    "records/s",
    "1,200,000",
    "1.250",
    "n",
  ]);
  assert.deepEqual(cells("e2e_tcp_records_per_s"), [
    "e2e_tcp_records_per_s",
    "150,000",
    "records/s",
    "-",
    "-",
  ]);
  // Not compared: no baseline cells at all.
  assert.deepEqual(cells("aggregate_records_per_s"), [
    "aggregate_records_per_s",
    "1,000,000",
    "records/s",
  ]);
  // Every row has the same width up to the note column.
  const noteAt = lines[0].indexOf("note");
  assert.ok(lines.every((l) => l.length <= noteAt || l[noteAt - 1] === " "));
});

Deno.test("formatValue: missing or non-finite figures print as -", () => {
  assert.equal(formatValue(null, "records/s"), "-");
  assert.equal(formatValue(NaN, "ratio"), "-");
  assert.equal(formatValue(1234.6, "bytes"), "1,235");
  assert.equal(formatValue(0.95, "ratio"), "0.950");
});

Deno.test("addWorktree: checks a revision out with node_modules linked, removes it all", async () => {
  const wt = await addWorktree(REPO, "HEAD");
  let removed = false;
  try {
    const head = new TextDecoder().decode(
      (await new Deno.Command("git", { args: ["-C", REPO, "rev-parse", "HEAD"] }).output())
        .stdout,
    ).trim();
    assert.equal(wt.commit, head);
    assert.ok((await Deno.stat(`${wt.dir}/scripts/bench.ts`)).isFile);
    const link = await Deno.lstat(`${wt.dir}/node_modules`).catch(() => undefined);
    const hasModules = await Deno.stat(`${REPO}/node_modules`).then(() => true, () => false);
    assert.equal(link?.isSymlink ?? false, hasModules);
    await wt.remove();
    removed = true;
    await assert.rejects(Deno.stat(wt.dir), Deno.errors.NotFound);
    const list = new TextDecoder().decode(
      (await new Deno.Command("git", { args: ["-C", REPO, "worktree", "list"] }).output()).stdout,
    );
    assert.ok(!list.includes(wt.dir), list);
    if (hasModules) assert.ok((await Deno.stat(`${REPO}/node_modules`)).isDirectory);
  } finally {
    if (!removed) await wt.remove();
  }
});

Deno.test("addWorktree: an unknown revision is an error naming it, and leaves nothing", async () => {
  await assert.rejects(addWorktree(REPO, "no-such-rev-xyz"), /no-such-rev-xyz/);
});

Deno.test("descendantPids: finds a child's own children from /proc", async () => {
  const child = new Deno.Command("sh", {
    args: ["-c", "sleep 30 & wait"],
    stdout: "null",
    stderr: "null",
  }).spawn();
  try {
    let pids: number[] = [];
    for (let i = 0; i < 50 && pids.length === 0; i++) {
      await new Promise((r) => setTimeout(r, 20));
      pids = await descendantPids(child.pid);
    }
    assert.equal(pids.length, 1, `descendants of sh: ${pids}`);
    const comm = await Deno.readTextFile(`/proc/${pids[0]}/comm`);
    assert.equal(comm.trim(), "sleep");
    Deno.kill(pids[0], "SIGTERM");
  } finally {
    try {
      child.kill("SIGTERM");
    } catch { /* exited */ }
    await child.status;
  }
});

Deno.test("formatValue: µs and cores keep two decimals", () => {
  assert.equal(formatValue(1.234, "µs"), "1.23");
  assert.equal(formatValue(0.987, "cores"), "0.99");
});

Deno.test("historyEntry: commit, date and every result key, the parts only when partial", () => {
  const r = { ...report(), time: "2026-12-03T13:00:00.000Z" };
  const full = historyEntry(r, "abc123");
  assert.deepEqual(Object.keys(full), ["commit", "date", "results"]);
  assert.equal(full.date, r.time);
  assert.deepEqual(Object.keys(full.results), Object.keys(emptyResults()));
  assert.deepEqual(historyEntry(r, "abc123+dirty", ["decode"]).only, ["decode"]);
  // The machine's speed goes along when the run measured it.
  const probed = { ...r, env: { cpuProbeMs: { start: 40.5, end: 41 } } };
  assert.deepEqual(historyEntry(probed, "abc123").cpuProbeMs, { start: 40.5, end: 41 });
});

Deno.test("alternate: each side runs the given times, the first one swapping every pair", () => {
  const calls: string[] = [];
  let n = 0;
  const r = alternate(3, () => (calls.push("a"), n++), () => (calls.push("b"), n++));
  assert.deepEqual(calls, ["a", "b", "b", "a", "a", "b"]);
  assert.deepEqual(r, { a: [0, 3, 4], b: [1, 2, 5] });
});

Deno.test("cpuProbeMs: the fixed work takes a positive time; probeWork is deterministic", () => {
  const ms = cpuProbeMs(2);
  assert.ok(ms > 0 && Number.isFinite(ms), `probe ${ms} ms`);
  const data = Uint8Array.of(1, 2, 3);
  assert.equal(probeWork(data, 2), probeWork(data, 2));
  assert.notEqual(probeWork(data, 1), probeWork(data, 2));
});
