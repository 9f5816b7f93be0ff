/**
 * What a trickling TCP peer costs the main thread of a Deno reader, with nothing else to do: one
 * connection from a peer process writing a small message every `--every-ms`, read here either
 * as soon as bytes arrive (`read`) or with a 20 ms pause after each read (`gated`, what the
 * collector's `ReadGate` does for a connection that caught up with its peer). Prints, per
 * second, the main thread's voluntary context switches (its wake-ups) and its exact run time
 * (`/proc/self/task/<tid>/schedstat`). The runtime wakes the main thread for every segment that
 * arrives, read pending or not, so the gate saves the reads' work but not the wake-ups
 * (`src/collector/fairness.ts`).
 *
 *   deno run --allow-all scripts/bench/tcp_readiness.ts [--every-ms=2] [--seconds=4]
 *
 * @module
 */

const PEER = `
const c = await Deno.connect({ hostname: "127.0.0.1", port: Number(Deno.args[0]) });
await c.setNoDelay(true);
const msg = new Uint8Array(200);
for (;;) {
  await c.write(msg);
  await new Promise((r) => setTimeout(r, Number(Deno.args[1])));
}
`;

/** The main thread's wake-ups and run time (µs), cumulative. */
async function mainThread(): Promise<{ wakes: number; runUs: number }> {
  const dir = `/proc/self/task/${Deno.pid}`;
  const status = await Deno.readTextFile(`${dir}/status`);
  const run = Number((await Deno.readTextFile(`${dir}/schedstat`)).split(" ")[0]);
  return {
    wakes: Number(status.match(/^voluntary_ctxt_switches:\s+(\d+)/m)?.[1]),
    runUs: run / 1e3,
  };
}

/** One trial: wake-ups and run time of the main thread per second, messages received per second. */
export async function readinessTrial(
  mode: "read" | "gated",
  everyMs: number,
  seconds: number,
): Promise<{ wakesPerSec: number; cpuUsPerSec: number; messagesPerSec: number }> {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const peer = new Deno.Command(Deno.execPath(), {
    args: ["eval", PEER, String(port), String(everyMs)],
    stdout: "null",
    stderr: "null",
  }).spawn();
  const conn = await listener.accept();
  let bytes = 0;
  const reading = (async () => {
    const buf = new Uint8Array(65536);
    try {
      for (;;) {
        const n = await conn.read(buf);
        if (n === null) return;
        bytes += n;
        if (mode === "gated") await new Promise((r) => setTimeout(r, 20));
      }
    } catch {
      // closed at the end of the trial
    }
  })();
  try {
    await new Promise((r) => setTimeout(r, 1000));
    const a = await mainThread();
    const b0 = bytes;
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const b = await mainThread();
    return {
      wakesPerSec: (b.wakes - a.wakes) / seconds,
      cpuUsPerSec: (b.runUs - a.runUs) / seconds,
      messagesPerSec: (bytes - b0) / 200 / seconds,
    };
  } finally {
    peer.kill();
    await peer.status;
    conn.close();
    listener.close();
    await reading;
  }
}

if (import.meta.main) {
  const arg = (name: string, dflt: number) =>
    Number(Deno.args.find((a) => a.startsWith(`--${name}=`))?.split("=")[1] ?? dflt);
  const everyMs = arg("every-ms", 2);
  const seconds = arg("seconds", 4);
  for (const mode of ["read", "gated", "read", "gated"] as const) {
    const t = await readinessTrial(mode, everyMs, seconds);
    console.log(
      `${mode.padEnd(5)}: ${t.messagesPerSec.toFixed(0)} messages/s, main thread ` +
        `${t.wakesPerSec.toFixed(0)} wake-ups/s, ${(t.cpuUsPerSec / 1000).toFixed(1)} ms CPU/s`,
    );
  }
}
