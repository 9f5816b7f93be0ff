/**
 * `deno task bench --baseline=REV`: measures another revision's figures in the same run as the
 * current ones, so that a comparison is not spoiled by how loaded the shared machine was at
 * another time. The revision is checked out into a temporary detached git worktree (sharing the
 * repository's `node_modules`), its own `scripts/bench.ts` runs one part at a time with
 * `--only=<part> --out=<json>`, and its parts alternate with the current revision's (each side
 * run the same way, as a fresh process) so noise spreads over both. Only the parts both
 * revisions have among {@linkcode COMPARABLE_PARTS} are compared, and only the keys both report.
 *
 * @module
 */

/** Parts whose figures are compared with a baseline revision. */
export const COMPARABLE_PARTS: readonly string[] = ["decode", "aggregate", "e2e", "replay"];

/** Which revision a step of the alternation measures. */
export type Side = "current" | "baseline";

/** One step of the alternation: a part measured on one side. */
export interface AlternationStep {
  /** Benchmark part (`--only` name). */
  part: string;
  /** Revision measured. */
  side: Side;
  /** Repetition of this part (0 for the first pair). */
  round: number;
}

/** Options of {@linkcode alternationOrder}. */
export interface AlternationOptions {
  /** Pairs per part; default 1 for every part. */
  rounds?: (part: string) => number;
}

/**
 * The part names a revision's `scripts/bench.ts` accepts in `--only` (the keys of its `PARTS`
 * table), or null when its source has no such table or does not take `--only=` and `--out=`.
 */
export function benchPartsOf(source: string): string[] | null {
  if (!source.includes("--only=") || !source.includes("--out=")) return null;
  const m = /const PARTS\b[^\n]*=\s*\{\n([\s\S]*?)\n\};/.exec(source);
  if (m === null) return null;
  const parts = [...m[1].matchAll(/^\s*(?:"([\w-]+)"|([A-Za-z_]\w*))\s*:/gm)].map((x) =>
    x[1] ?? x[2]
  );
  return parts.length > 0 ? parts : null;
}

/** The selected parts, in their order, that both revisions have among the comparable ones. */
export function sharedParts(
  selected: readonly string[],
  baselineParts: readonly string[],
): string[] {
  return selected.filter((p) => COMPARABLE_PARTS.includes(p) && baselineParts.includes(p));
}

/**
 * Order in which the shared parts run on both sides: each part on one side right after the
 * other, `rounds(part)` pairs in a row, the side that goes first swapping from pair to pair
 * (current first for the very first) so neither side always runs on the warmer or the more
 * loaded machine.
 */
export function alternationOrder(
  parts: readonly string[],
  opts: AlternationOptions = {},
): AlternationStep[] {
  const steps: AlternationStep[] = [];
  let pair = 0;
  for (const part of parts) {
    const rounds = Math.max(1, opts.rounds?.(part) ?? 1);
    for (let round = 0; round < rounds; round++, pair++) {
      const first: Side = pair % 2 === 0 ? "current" : "baseline";
      const second: Side = first === "current" ? "baseline" : "current";
      steps.push({ part, side: first, round }, { part, side: second, round });
    }
  }
  return steps;
}

/**
 * Runs `a` and `b` `pairs` times each, alternating which goes first (A B, B A, A B, ...) so a
 * drift of the machine's speed spreads over both, and returns each one's results in order.
 */
export function alternate<T>(pairs: number, a: () => T, b: () => T): { a: T[]; b: T[] } {
  const out = { a: [] as T[], b: [] as T[] };
  for (let i = 0; i < pairs; i++) {
    if (i % 2 === 0) {
      out.a.push(a());
      out.b.push(b());
    } else {
      out.b.push(b());
      out.a.push(a());
    }
  }
  return out;
}

/** Median of the finite numbers among `values` (null when there is none). */
export function median(values: readonly unknown[]): number | null {
  const v = values.filter((x): x is number => typeof x === "number" && Number.isFinite(x))
    .sort((a, b) => a - b);
  if (v.length === 0) return null;
  const m = v.length >> 1;
  return v.length % 2 === 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

/** Baseline figures and current / baseline ratios, per compared key. */
export interface Comparison {
  /** The baseline revision's figure (null when it produced none). */
  baseline: Record<string, number | null>;
  /** Current / baseline (null when either is missing or the baseline is 0). */
  ratio: Record<string, number | null>;
}

/**
 * Compares `keys` of the current results with the baseline's: only the keys the baseline
 * report has at all (an older bench.ts may not know a newer key) are compared.
 */
export function compareResults(
  current: Readonly<Record<string, number | null>>,
  baseline: Readonly<Record<string, unknown>>,
  keys: readonly string[],
): Comparison {
  const out: Comparison = { baseline: {}, ratio: {} };
  for (const k of keys) {
    if (!(k in baseline)) continue;
    const b = typeof baseline[k] === "number" && Number.isFinite(baseline[k])
      ? baseline[k] as number
      : null;
    const c = current[k] ?? null;
    out.baseline[k] = b;
    out.ratio[k] = b !== null && b !== 0 && c !== null ? c / b : null;
  }
  return out;
}

/** A temporary checkout of a revision. */
export interface Worktree {
  /** Its directory (the checkout's root). */
  dir: string;
  /** The full commit hash checked out. */
  commit: string;
  /** Removes the worktree and its temporary directory (idempotent, never throws). */
  remove(): Promise<void>;
}

async function git(repo: string, args: string[]): Promise<string> {
  const out = await new Deno.Command("git", {
    args: ["-C", repo, ...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(
      `git ${args.join(" ")}: exit ${out.code}: ${new TextDecoder().decode(out.stderr).trim()}`,
    );
  }
  return new TextDecoder().decode(out.stdout).trim();
}

/**
 * Checks `rev` out into a fresh temporary directory (`git worktree add --detach`) and links the
 * repository's `node_modules` into it, so the revision runs on the same dependencies without an
 * install.
 */
export async function addWorktree(repo: string, rev: string): Promise<Worktree> {
  const commit = await git(repo, ["rev-parse", "--verify", "--end-of-options", `${rev}^{commit}`]);
  const tmp = await Deno.makeTempDir({ prefix: "fa-bench-baseline-" });
  const dir = `${tmp}/wt`;
  let removed: Promise<void> | undefined;
  const remove = (): Promise<void> =>
    removed ??= (async () => {
      // The link first: nothing may ever delete through it into the shared node_modules.
      await Deno.remove(`${dir}/node_modules`).catch(() => {});
      await git(repo, ["worktree", "remove", "--force", dir]).catch(() => {});
      await Deno.remove(tmp, { recursive: true }).catch(() => {});
      await git(repo, ["worktree", "prune"]).catch(() => {});
    })();
  try {
    await git(repo, ["worktree", "add", "--detach", dir, commit]);
    const modules = await Deno.realPath(`${repo}/node_modules`).catch(() => undefined);
    if (modules !== undefined) await Deno.symlink(modules, `${dir}/node_modules`);
  } catch (e) {
    await remove();
    throw e;
  }
  return { dir, commit, remove };
}

/** The fields of a bench.ts JSON report used here (any revision's). */
export interface PartReport {
  /** Figures by key. */
  results: Record<string, unknown>;
  /** Notes by key. */
  notes?: Record<string, string>;
  /** Raw data by part. */
  details?: Record<string, unknown>;
}

/** Options of {@linkcode runBenchPart}. */
export interface RunPartOptions {
  /** Checkout root: the process runs there, with its `deno.json`. */
  root: string;
  /** Smoke mode (`--quick`). */
  quick: boolean;
  /** Where the report is written. */
  outPath: string;
}

/** Part processes running now (see {@linkcode signalRunningParts}). */
const running = new Set<Deno.ChildProcess>();
/** Set once we are told to stop: no part process starts after it. */
let stopping = false;

/**
 * Pids of every descendant of `pid` (children first), from the parent pids in /proc; empty
 * where /proc cannot be read.
 */
export async function descendantPids(pid: number): Promise<number[]> {
  const parentOf = new Map<number, number>();
  try {
    for await (const e of Deno.readDir("/proc")) {
      if (!/^\d+$/.test(e.name)) continue;
      const stat = await Deno.readTextFile(`/proc/${e.name}/stat`).catch(() => "");
      // The field after the parenthesised command name and the state is the parent pid.
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (Number.isInteger(ppid)) parentOf.set(Number(e.name), ppid);
    }
  } catch {
    return [];
  }
  const out: number[] = [];
  const walk = (p: number): void => {
    for (const [child, parent] of parentOf) {
      if (parent === p) {
        out.push(child);
        walk(child);
      }
    }
  };
  walk(pid);
  return out;
}

/**
 * On our own Ctrl-C or SIGTERM: starts no more part processes and sends `signal` to each one
 * still running and to its descendants (a part's own flow-aggregator and flowgen processes would
 * outlive it otherwise: it dies of the signal without stopping them).
 */
export async function signalRunningParts(signal: Deno.Signal): Promise<void> {
  stopping = true;
  for (const child of running) {
    const pids = [child.pid, ...await descendantPids(child.pid)];
    for (const pid of pids) {
      try {
        Deno.kill(pid, signal);
      } catch { /* exited meanwhile */ }
    }
  }
}

/**
 * Runs `<root>/scripts/bench.ts --only=<part>` as a fresh process (its progress lines go to our
 * stderr, its table is discarded) and returns its JSON report.
 */
export async function runBenchPart(part: string, opts: RunPartOptions): Promise<PartReport> {
  if (stopping) throw new Error(`bench.ts --only=${part}: not started, stopping`);
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      "--config",
      `${opts.root}/deno.json`,
      `${opts.root}/scripts/bench.ts`,
      `--only=${part}`,
      `--out=${opts.outPath}`,
      ...(opts.quick ? ["--quick"] : []),
    ],
    cwd: opts.root,
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  running.add(child);
  const out = await child.output().finally(() => running.delete(child));
  if (!out.success) throw new Error(`bench.ts --only=${part} in ${opts.root}: exit ${out.code}`);
  const report = JSON.parse(await Deno.readTextFile(opts.outPath)) as PartReport;
  if (typeof report.results !== "object" || report.results === null) {
    throw new Error(`bench.ts --only=${part} in ${opts.root}: no results in ${opts.outPath}`);
  }
  return report;
}
