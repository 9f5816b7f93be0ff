/**
 * Sums the self time of a V8 `.cpuprofile` (from `--cpu-prof`, e.g. `scripts/bench/e2e.ts
 * --cpu-prof`) per function and per source file, largest first, so a profile of the real process
 * can be read without a browser.
 *
 *   deno run --allow-read scripts/bench/cpuprofile_summary.ts CPU.123.cpuprofile [top=30]
 */

/** The parts of a V8 CPU profile used here. */
interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
}

/** One summary row: a function or file and its share of the sampled time. */
export interface ProfileRow {
  /** `name url:line` or the url. */
  key: string;
  /** Self time in microseconds. */
  selfUs: number;
  /** Share of the total sampled time, 0..1. */
  share: number;
}

/** Self time per function and per url, sorted by decreasing time. */
export function summarize(
  p: CpuProfile,
): { totalUs: number; byFunction: ProfileRow[]; byUrl: ProfileRow[] } {
  const self = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++) {
    self.set(p.samples[i], (self.get(p.samples[i]) ?? 0) + (p.timeDeltas[i] ?? 0));
  }
  const byFn = new Map<string, number>();
  const byUrl = new Map<string, number>();
  let total = 0;
  for (const n of p.nodes) {
    const t = self.get(n.id) ?? 0;
    total += t;
    const cf = n.callFrame;
    // Paths relative to the repository when possible: shorter and comparable across clones.
    const url = cf.url.replace(/^file:\/\/.*?\/(src|scripts|tests)\//, "$1/");
    const fn = `${cf.functionName || "(anonymous)"} ${url}:${cf.lineNumber + 1}`;
    byFn.set(fn, (byFn.get(fn) ?? 0) + t);
    const file = url || cf.functionName;
    byUrl.set(file, (byUrl.get(file) ?? 0) + t);
  }
  const rows = (m: Map<string, number>): ProfileRow[] =>
    [...m].map(([key, selfUs]) => ({ key, selfUs, share: total > 0 ? selfUs / total : 0 }))
      .sort((a, b) => b.selfUs - a.selfUs);
  return { totalUs: total, byFunction: rows(byFn), byUrl: rows(byUrl) };
}

if (import.meta.main) {
  const [path, top = "30"] = Deno.args;
  if (path === undefined) {
    console.error("usage: cpuprofile_summary.ts FILE.cpuprofile [top]");
    Deno.exit(2);
  }
  const s = summarize(JSON.parse(await Deno.readTextFile(path)));
  const fmt = (rows: ProfileRow[]): string =>
    rows.slice(0, Number(top)).map((r) => `${(100 * r.share).toFixed(1).padStart(5)}% ${r.key}`)
      .join("\n");
  console.log(`total ${(s.totalUs / 1e6).toFixed(2)} s sampled`);
  console.log(`-- self time by function\n${fmt(s.byFunction)}`);
  console.log(`-- self time by file\n${fmt(s.byUrl)}`);
}
