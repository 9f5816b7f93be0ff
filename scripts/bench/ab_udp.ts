/**
 * CPU of two checkouts of the real process over UDP, per thread, alternated: one warm process of
 * each (main.ts with the e2e configuration, `benchConfig`, as a UDP collector on the fast path),
 * fed by udp_send.c with the replay stream at one fixed rate (`cStreamSender`, udp_e2e.ts), trials
 * A B, B A, ... after a warm-up of each. Per trial: the exact run time of every thread
 * (`/proc/<pid>/task/<tid>/schedstat`) per record sent, and the loss the kernel counted
 * (`/proc/net/snmp` RcvbufErrors; system-wide). Prints the median per thread name, user and
 * system time apart (utime/stime ticks of `/proc/<pid>/task/<tid>/stat`), and the total.
 *
 * Where ab_e2e.ts compares throughput and CPU over fresh processes (start-up and JIT included),
 * this compares the steady state, thread by thread: what the receive thread, the main thread
 * and each shard cost per record at a given rate. At low rates that is mostly thread wake-ups
 * (docs/udp-ingest.md, "Wake-ups at low rates").
 *
 *   deno run -A scripts/bench/ab_udp.ts A_ROOT B_ROOT [--rate=10000] [--rounds=4]
 *     [--seconds=4] [--buffer=0 (SO_RCVBUF request; 0 = the kernel's default)]
 *
 * A root is a checkout (see ab_e2e.ts); `.` is this one. Compare the main thread (`deno`), the
 * shards and the receive thread (the last `worker-N`): with both sides the same checkout (A
 * against A, 2,000 records/s), the process started second showed 3-4x the CPU of the first in
 * its flow log worker (`worker-1`), V8's helper threads and its I/O threads (a few µs per
 * record), and within 5 % of it in the others; the cause is not known.
 *
 * @module
 */

import { cStreamSender, rcvbufErrors } from "./udp_e2e.ts";
import { benchConfig, FLOW_LOG_FILE } from "./e2e.ts";
import { type FaProcess, startFlowAggregator, type ThreadTimes, threadTimes } from "./process.ts";
import { buildUdpTools } from "./udp.ts";
import { median } from "./baseline.ts";

/**
 * µs per record of each thread name between two samples (threads of one name summed; V8's
 * helper threads as `V8`), user and system apart, and `total`.
 */
export function perRecord(
  before: Map<number, ThreadTimes>,
  after: Map<number, ThreadTimes>,
  records: number,
): Record<string, number> {
  const out: Record<string, number> = { total: 0 };
  for (const [tid, b] of after) {
    const a = before.get(tid) ?? { name: b.name, run: 0, user: 0, sys: 0 };
    const name = b.name.startsWith("V8 ") ? "V8" : b.name;
    const us = (s: number) => s / records * 1e6;
    out[name] = (out[name] ?? 0) + us(b.run - a.run);
    out[`${name}.user`] = (out[`${name}.user`] ?? 0) + us(b.user - a.user);
    out[`${name}.sys`] = (out[`${name}.sys`] ?? 0) + us(b.sys - a.sys);
    out.total += us(b.run - a.run);
  }
  return out;
}

function arg(name: string, dflt: number): number {
  const a = Deno.args.find((x) => x.startsWith(`--${name}=`));
  return a === undefined ? dflt : Number(a.slice(name.length + 3));
}

if (import.meta.main) {
  const roots = Deno.args.filter((a) => !a.startsWith("--"));
  if (roots.length !== 2) {
    console.error("usage: ab_udp.ts A_ROOT B_ROOT [--rate=N] [--rounds=N] [--seconds=S]");
    Deno.exit(2);
  }
  const rate = arg("rate", 10_000);
  const rounds = arg("rounds", 4);
  const seconds = arg("seconds", 4);
  const buffer = arg("buffer", 0);
  const tools = await buildUdpTools();
  const sides: { root: string; dir: string; fa?: FaProcess }[] = [];
  const results: Record<string, number[]>[] = [{}, {}];
  try {
    const send = await cStreamSender(tools, 20_000, 2);
    for (const root of roots) {
      const dir = await Deno.makeTempDir({ prefix: "fa-ab-udp-" });
      const side: { root: string; dir: string; fa?: FaProcess } = { root, dir };
      sides.push(side);
      await Deno.writeTextFile(`${dir}/fa.conf`, benchConfig(`${dir}/${FLOW_LOG_FILE}`, "UDP"));
      side.fa = await startFlowAggregator({
        root,
        config: `${dir}/fa.conf`,
        cwd: dir,
        logLevel: "info",
        udp: true,
        args: ["--udp-receiver", "fast", "--udp-recv-buffer", String(buffer)],
      });
    }
    // Warm-up: JIT and every worker started, not counted (longer at low rates).
    const warm = Math.max(3, Math.ceil(30_000 / rate));
    for (const s of sides) await send(s.fa!.port, rate, warm);
    for (let r = 0; r < rounds; r++) {
      for (const i of r % 2 === 0 ? [0, 1] : [1, 0]) {
        const fa = sides[i].fa!;
        const t0 = await threadTimes(fa.pid);
        const k0 = await rcvbufErrors();
        const g = await send(fa.port, rate, seconds);
        await new Promise((res) => setTimeout(res, 300));
        const k1 = await rcvbufErrors();
        const per = perRecord(t0, await threadTimes(fa.pid), g.records);
        per.lossPercent = (k1 - k0) / g.records * 100;
        for (const [k, v] of Object.entries(per)) (results[i][k] ??= []).push(v);
        console.error(
          `round ${r} ${"AB"[i]}: ${per.total.toFixed(2)} µs/record, loss ${
            per.lossPercent.toFixed(2)
          } %`,
        );
      }
    }
  } finally {
    for (const s of sides) {
      await s.fa?.stop(30_000);
      await Deno.remove(s.dir, { recursive: true }).catch(() => {});
    }
    await Deno.remove(tools.dir, { recursive: true }).catch(() => {});
  }
  const keys = [...new Set([...Object.keys(results[0]), ...Object.keys(results[1])])].sort();
  console.log(`rate ${rate}/s, buffer ${buffer || "default"}, medians of ${rounds} trials`);
  console.log("thread".padEnd(24) + "A".padStart(10) + "B".padStart(10) + "B/A".padStart(8));
  for (const k of keys) {
    const a = median(results[0][k] ?? []) ?? 0;
    const b = median(results[1][k] ?? []) ?? 0;
    if (a < 0.05 && b < 0.05) continue;
    const ratio = a > 0 ? (b / a).toFixed(3) : "-";
    console.log(
      k.padEnd(24) + a.toFixed(2).padStart(10) + b.toFixed(2).padStart(10) + ratio.padStart(8),
    );
  }
}
