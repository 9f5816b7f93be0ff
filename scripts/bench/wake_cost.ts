/**
 * What waking a thread costs in Deno on this machine, with nothing else to do: a worker woken
 * `--rate` times a second for `--seconds`, by `postMessage`, by `Atomics.notify` on an
 * `Atomics.waitAsync` (how the aggregation shards wait for their ring), and by that notify raced
 * with a timer armed and cleared around each wait (how they waited before). Prints the exact run
 * time (`/proc/self/task/<tid>/schedstat`) per wake of the main thread (its interval timer and
 * the send), of the worker and of V8's helper threads. On these 2-core VMs a wake costs tens
 * to hundreds of µs whatever it brings, which is what the batching delays are sized against
 * (docs/udp-ingest.md, "Wake-ups at low rates").
 *
 *   deno run --allow-all scripts/bench/wake_cost.ts [--rate=200] [--seconds=5]
 *
 * @module
 */

import { threadTimes } from "./process.ts";

const WORKER = `
self.onmessage = (e) => {
  if (e.data === null) return; // a wake by message: nothing to do
  const h = new Int32Array(e.data.sab);
  (async () => {
    for (;;) {
      const r = Atomics.waitAsync(h, 0, Atomics.load(h, 0));
      if (!r.async) continue;
      if (e.data.timer) {
        let t;
        await Promise.race([r.value, new Promise((res) => (t = setTimeout(res, 1000)))]);
        clearTimeout(t);
      } else await r.value;
    }
  })();
};
`;

/** The ways of waking the worker. */
export const WAKE_MODES = ["postMessage", "waitAsync", "waitAsync+timer"] as const;

/** µs of run time per wake, per thread kind (`main`, `worker`, `V8`), for one mode. */
export async function wakeCost(
  mode: typeof WAKE_MODES[number],
  rate: number,
  seconds: number,
): Promise<Record<string, number>> {
  const url = URL.createObjectURL(new Blob([WORKER], { type: "text/javascript" }));
  const w = new Worker(url, { type: "module" });
  const h = new Int32Array(new SharedArrayBuffer(8));
  if (mode !== "postMessage") w.postMessage({ sab: h.buffer, timer: mode === "waitAsync+timer" });
  await new Promise((r) => setTimeout(r, 500));
  const before = await threadTimes("self");
  let wakes = 0;
  const iv = setInterval(() => {
    wakes++;
    if (mode === "postMessage") w.postMessage(null);
    else {
      Atomics.add(h, 0, 1);
      Atomics.notify(h, 0);
    }
  }, 1000 / rate);
  await new Promise((r) => setTimeout(r, seconds * 1000));
  clearInterval(iv);
  const after = await threadTimes("self");
  w.terminate();
  URL.revokeObjectURL(url);
  const out: Record<string, number> = { main: 0, worker: 0, V8: 0 };
  for (const [tid, t] of after) {
    const kind = t.name.startsWith("V8 ")
      ? "V8"
      : t.name.startsWith("worker-")
      ? "worker"
      : t.name === "deno"
      ? "main"
      : undefined;
    const run = t.run - (before.get(tid)?.run ?? 0);
    if (kind !== undefined) out[kind] += run / wakes * 1e6;
  }
  return out;
}

if (import.meta.main) {
  const num = (name: string, d: number) =>
    Number(Deno.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? d);
  const rate = num("rate", 200);
  const seconds = num("seconds", 5);
  console.log(`µs of CPU per wake at ${rate} wakes/s (main: its timer and the send)`);
  for (const mode of WAKE_MODES) {
    const c = await wakeCost(mode, rate, seconds);
    console.log(
      `${mode.padEnd(16)} worker ${c.worker.toFixed(1).padStart(6)}  main ${
        c.main.toFixed(1).padStart(6)
      }  V8 helpers ${c.V8.toFixed(1).padStart(6)}`,
    );
  }
}
