/**
 * End-to-end cost of two checkouts of the real process, alternated: many short trials of A and
 * B (A B, B A, A B, ...), each a fresh `main.ts` of that checkout (its own `deno.json`) with the
 * e2e configuration (TCP, flow log on) fed by the replay sender over 4 connections, judged like
 * every e2e trial (scripts/bench/e2e.ts: every record received, aggregated and accounted for
 * by the flow log sink, exit 0). The sender, the configuration and the judging are this
 * checkout's, so only the process differs. Single e2e runs swing by ±40 % on these shared
 * 2-core machines; a burst of a neighbour's load hits the trials next to each other alike, so
 * the medians of many alternated trials, and the median of the per-round B/A ratios, are what
 * to read.
 *
 *   deno run -A scripts/bench/ab_e2e.ts A_ROOT B_ROOT [--rounds=N] [--duration=S] [--flows=N]
 *     [--rate=R] [--a-args="ARGS"] [--b-args="ARGS"] [--a-deno-flags="FLAGS"] [--b-deno-flags="FLAGS"]
 *
 * `--a-args`/`--b-args` add arguments to that side's process (split on spaces), so one checkout
 * can be compared with itself under other flags: `. . --b-args="--workers 2"`;
 * `--a-deno-flags`/`--b-deno-flags` add `deno run` flags, e.g.
 * `--b-deno-flags="--v8-flags=--no-parallel-scavenge"`.
 *
 * A root is a checkout, e.g. `git worktree add --detach /tmp/base REV` with its node_modules
 * linked to this one's (`ln -s $PWD/node_modules /tmp/base/node_modules`). Defaults: 10 rounds
 * (20 trials, about 3 minutes), 5 s of sending per trial, 20,000 flows, `--rate=200000`.
 *
 * The main figure is the process's CPU per record, all its threads (utime + stime from
 * /proc/<pid>/stat, from listening to the last session drained, over the records received);
 * records/s (received / (send time + drain)) is reported too. The default is a **fixed paced
 * rate** of 200,000 records/s, which both sides sustain at about 0.8 of a core (unpaced, the
 * process reads 250–450k/s at about one core). At a fixed rate both sides get the same work per
 * second, so CPU per record measures cost rather than how the scheduler split the two cores
 * between the process, the sender and the neighbours in that trial; unpaced, the process reads
 * bigger batches the further it falls behind, so its cost per record moves with the rate it got.
 * In 4-round, 3 s runs of ba8743a against 14cd4dd the CPU per record of one side spread by
 * 7–10 % at 200k/s, 11–19 % at 100k/s (the fixed costs of a trial weigh more) and 6–39 %
 * unpaced. At a fixed rate records/s is the target rate by construction (its B/A is about 1, not
 * a throughput comparison); `--rate=0` sends unpaced, for a throughput A/B (noisier). A trial at
 * a fixed rate fails when the sender achieved less than 95 % of it: if many do, the machine is
 * busy; lower `--rate`.
 *
 * Failed trials are printed with their reasons, counted, and left out of the medians (and their
 * round out of the paired ratios). Progress goes to stderr, one line per trial and the summary;
 * the summary as JSON is the last line on stdout.
 *
 * @module
 */

import { type E2eTrial, runE2eTrial } from "./e2e.ts";
import { REPLAY_UNIQUE_NAMES } from "./core.ts";
import { median } from "./baseline.ts";
import { agentSpread } from "./e2e_replay.ts";

/** Which checkout a trial ran. */
export type AbSide = "A" | "B";

/** One trial of the A/B and where it ran. */
export interface AbTrial {
  /** Checkout. */
  side: AbSide;
  /** Round (0-based); each round has one trial of each side. */
  round: number;
  /** The trial. */
  trial: E2eTrial;
}

/** Medians of one side's passing trials. */
export interface AbSideSummary {
  /** Trials run. */
  trials: number;
  /** Trials that passed (the ones in the medians). */
  passed: number;
  /** Median CPU microseconds per record (null if none passed). */
  cpuUsPerRecord: number | null;
  /** Median records/s (null if none passed). */
  recordsPerSec: number | null;
  /** Median cores used (CPU seconds per wall second; null if none passed). */
  cores: number | null;
  /**
   * Median of the trials' per-Agent spread (slowest / fastest Agent's records; null if none
   * passed): meaningful unpaced (`--rate=0`), where every Agent sends flat out.
   */
  agentSpread: number | null;
}

/** Result of {@linkcode summarizeAb}. */
export interface AbSummary {
  /** Checkout A. */
  a: AbSideSummary;
  /** Checkout B. */
  b: AbSideSummary;
  /** B / A of the median CPU per record (< 1: B costs less). */
  cpuBOverA: number | null;
  /** Median of B / A CPU per record over the rounds where both passed (paired). */
  cpuBOverAPaired: number | null;
  /** B / A of the median records/s (> 1: B is faster). */
  rateBOverA: number | null;
  /** Median of B / A records/s over the rounds where both passed (paired). */
  rateBOverAPaired: number | null;
  /** Rounds where both sides passed. */
  pairedRounds: number;
}

/** `b / a`, null when either is missing or `a` is not positive. */
export function ratio(b: number | null, a: number | null): number | null {
  return a === null || b === null || !(a > 0) ? null : b / a;
}

/** Medians per side (passing trials only) and the B/A ratios, plain and paired by round. */
export function summarizeAb(trials: readonly AbTrial[]): AbSummary {
  const side = (s: AbSide): AbSideSummary => {
    const all = trials.filter((t) => t.side === s);
    const ok = all.filter((t) => t.trial.pass).map((t) => t.trial);
    return {
      trials: all.length,
      passed: ok.length,
      cpuUsPerRecord: median(ok.map((t) => t.aggregatorCpuUsPerRecord)),
      recordsPerSec: median(ok.map((t) => t.recordsPerSec)),
      cores: median(ok.map((t) => t.coresUsed)),
      agentSpread: median(ok.map((t) => agentSpread(t.flowgen?.perAgent))),
    };
  };
  const a = side("A");
  const b = side("B");
  const cpuRatios: (number | null)[] = [];
  const rateRatios: (number | null)[] = [];
  const rounds = new Set(trials.map((t) => t.round));
  for (const r of rounds) {
    const ta = trials.find((t) => t.round === r && t.side === "A" && t.trial.pass)?.trial;
    const tb = trials.find((t) => t.round === r && t.side === "B" && t.trial.pass)?.trial;
    if (ta === undefined || tb === undefined) continue;
    cpuRatios.push(ratio(tb.aggregatorCpuUsPerRecord, ta.aggregatorCpuUsPerRecord));
    rateRatios.push(ratio(tb.recordsPerSec ?? null, ta.recordsPerSec ?? null));
  }
  return {
    a,
    b,
    cpuBOverA: ratio(b.cpuUsPerRecord, a.cpuUsPerRecord),
    cpuBOverAPaired: median(cpuRatios),
    rateBOverA: ratio(b.recordsPerSec, a.recordsPerSec),
    rateBOverAPaired: median(rateRatios),
    pairedRounds: cpuRatios.length,
  };
}

/** "B is 3.1 % lower than A" style wording of a B/A ratio. */
export function describeRatio(r: number | null, lowerIsBetter: boolean): string {
  if (r === null) return "no ratio (a side has no passing trial)";
  const pct = Math.abs(r - 1) * 100;
  if (pct < 0.05) return "B equals A";
  const better = lowerIsBetter ? r < 1 : r > 1;
  return `B is ${pct.toFixed(1)} % ${r < 1 ? "lower" : "higher"} than A (${
    better ? "B better" : "A better"
  })`;
}

function trialLine(t: AbTrial, root: string): string {
  const x = t.trial;
  return `round ${t.round} ${t.side} (${root}): ${x.pass ? "pass" : "FAIL"} ${
    (x.recordsPerSec ?? NaN).toFixed(0)
  } records/s, ${x.aggregatorCpuUsPerRecord.toFixed(3)} us/record, ${
    (x.coresUsed ?? NaN).toFixed(2)
  } cores, received ${x.metrics?.numRecordsReceived ?? "-"}, peak RSS ${
    (x.aggregatorPeakRssBytes / 2 ** 20).toFixed(0)
  } MiB, per Agent ${x.flowgen?.perAgent?.join("/") ?? "-"}${
    x.failures.length ? ` (${x.failures.join("; ")})` : ""
  }`;
}

/** Reads `--name=value` from the command line as process arguments (split on spaces). */
function argsFlag(name: string): string[] {
  const a = Deno.args.find((x) => x.startsWith(`--${name}=`));
  return a === undefined ? [] : a.slice(name.length + 3).split(" ").filter((x) => x !== "");
}

/** Reads `--name=value` or `--name value` from the command line as a number. */
function flag(name: string): number | undefined {
  const i = Deno.args.findIndex((a) => a === `--${name}` || a.startsWith(`--${name}=`));
  if (i < 0) return undefined;
  const a = Deno.args[i];
  const v = Number(a.includes("=") ? a.slice(a.indexOf("=") + 1) : Deno.args[i + 1]);
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${name}: want a number >= 0`);
  return v;
}

if (import.meta.main) {
  const [aRoot, bRoot] = Deno.args;
  if (
    aRoot === undefined || bRoot === undefined || aRoot.startsWith("-") || bRoot.startsWith("-")
  ) {
    console.error(
      "usage: ab_e2e.ts A_ROOT B_ROOT [--rounds=N] [--duration=S] [--flows=N] [--rate=R]",
    );
    Deno.exit(2);
  }
  const roots: Record<AbSide, string> = { A: aRoot, B: bRoot };
  const sideArgs: Record<AbSide, string[]> = { A: argsFlag("a-args"), B: argsFlag("b-args") };
  const sideFlags: Record<AbSide, string[]> = {
    A: argsFlag("a-deno-flags"),
    B: argsFlag("b-deno-flags"),
  };
  const rounds = flag("rounds") ?? 10;
  const durationSec = flag("duration") ?? 5;
  const flows = flag("flows") ?? 20_000;
  const rate = flag("rate") ?? 200_000;
  const params = { rounds, durationSec, flows, rate, uniqueNames: REPLAY_UNIQUE_NAMES };
  console.error(
    `ab_e2e: A=${aRoot} ${[...sideFlags.A, ...sideArgs.A].join(" ")} B=${bRoot} ${
      [...sideFlags.B, ...sideArgs.B].join(" ")
    } ${JSON.stringify(params)}`,
  );
  const trials: AbTrial[] = [];
  for (let round = 0; round < rounds; round++) {
    const order: AbSide[] = round % 2 === 0 ? ["A", "B"] : ["B", "A"];
    for (const side of order) {
      let trial: E2eTrial;
      try {
        trial = await runE2eTrial(rate, {
          durationSec,
          flows,
          sender: "replay",
          uniqueNames: REPLAY_UNIQUE_NAMES,
          root: roots[side],
          args: sideArgs[side],
          denoFlags: sideFlags[side],
        });
      } catch (e) {
        // The process did not start (or the trial could not run at all): a failed trial too.
        console.error(`round ${round} ${side}: trial did not run: ${(e as Error).message}`);
        continue;
      }
      const t = { side, round, trial };
      trials.push(t);
      console.error(trialLine(t, roots[side]));
    }
  }
  const s = summarizeAb(trials);
  const fmt = (v: number | null, d: number) => v === null ? "-" : v.toFixed(d);
  for (const side of ["A", "B"] as const) {
    const x = side === "A" ? s.a : s.b;
    console.error(
      `${side} (${roots[side]}): ${x.passed} of ${rounds} trials passed; median ${
        fmt(x.cpuUsPerRecord, 3)
      } us/record, ${fmt(x.recordsPerSec, 0)} records/s, ${fmt(x.cores, 2)} cores, Agent spread ${
        fmt(x.agentSpread, 3)
      }`,
    );
  }
  const failed = trials.filter((t) => !t.trial.pass);
  const notRun = 2 * rounds - trials.length;
  if (failed.length > 0 || notRun > 0) {
    console.error(
      `excluded from the medians: ${failed.length} failed trial(s)` +
        (notRun > 0 ? ` and ${notRun} that did not run` : "") +
        failed.map((t) => `\n  round ${t.round} ${t.side}: ${t.trial.failures.join("; ")}`)
          .join(""),
    );
  }
  console.error(
    `CPU us/record B/A ${fmt(s.cpuBOverA, 3)} (paired over ${s.pairedRounds} rounds ${
      fmt(s.cpuBOverAPaired, 3)
    }): ${describeRatio(s.cpuBOverA, true)}`,
  );
  const worst = s.cpuBOverA === null || s.cpuBOverAPaired === null
    ? null
    : Math.max(s.cpuBOverA, s.cpuBOverAPaired);
  console.error(
    `B within 5 % of A's CPU per record (both ratios <= 1.05): ${
      worst === null ? "unknown" : worst <= 1.05 ? "yes" : "no"
    }`,
  );
  console.error(
    `records/s B/A ${fmt(s.rateBOverA, 3)} (paired ${fmt(s.rateBOverAPaired, 3)}): ${
      rate > 0
        ? `paced at ${rate}/s, about 1 by construction (not a throughput comparison)`
        : describeRatio(s.rateBOverA, false)
    }`,
  );
  console.log(JSON.stringify({
    aRoot,
    bRoot,
    ...params,
    ...s,
    failed: failed.length,
    notRun,
    trials: trials.map((t) => ({
      round: t.round,
      side: t.side,
      pass: t.trial.pass,
      cpuUsPerRecord: t.trial.aggregatorCpuUsPerRecord,
      recordsPerSec: t.trial.recordsPerSec,
      failures: t.trial.failures,
    })),
  }));
}
