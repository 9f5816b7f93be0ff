/**
 * How fast this machine's CPU was during a bench run, so runs on different days can be told
 * apart: these shared VMs have had days where every figure, unchanged code included, was half
 * that of the day before. {@linkcode cpuProbeMs} times a fixed piece of single-threaded work (a
 * hash over a buffer) several times and keeps the fastest, which is what the CPU gives when the
 * probe is not preempted: it follows the host's speed, not the moment's contention (that is the
 * load average's). `deno task bench` records it at the start and at the end of every run
 * (`env.cpuProbeMs` in bench/latest.json and in each bench/history.jsonl line); compare figures
 * across runs only when their probes agree.
 *
 * @module
 */

/** Bytes hashed per round of the probe. */
const PROBE_BYTES = 1 << 20;
/** Rounds per timing: about 50-100 ms of work on these machines. */
const PROBE_ROUNDS = 24;

/** FNV-1a over `data`, `rounds` times; returns the hash so the work cannot be optimised away. */
export function probeWork(data: Uint8Array, rounds: number): number {
  let h = 0x811c9dc5;
  for (let r = 0; r < rounds; r++) {
    for (let i = 0; i < data.length; i++) h = Math.imul(h ^ data[i], 0x01000193);
  }
  return h >>> 0;
}

/**
 * Milliseconds the fastest of `timings` runs of the fixed probe work took (after one untimed
 * warm-up run). Lower is a faster machine.
 */
export function cpuProbeMs(timings = 7): number {
  const data = new Uint8Array(PROBE_BYTES);
  for (let i = 0; i < data.length; i++) data[i] = (i * 131) & 0xff;
  let sink = probeWork(data, 2);
  let best = Infinity;
  for (let t = 0; t < timings; t++) {
    const t0 = performance.now();
    sink ^= probeWork(data, PROBE_ROUNDS);
    best = Math.min(best, performance.now() - t0);
  }
  if (sink === -1) console.log(sink); // keeps `sink` alive
  return Math.round(best * 10) / 10;
}

if (import.meta.main) console.log(cpuProbeMs());
