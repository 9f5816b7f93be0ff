/**
 * The flow log on standard output when its reader goes away part-way (EPIPE): the lines that
 * reached the pipe whole count as exported, the others as dropped, none twice.
 */

import assert from "node:assert/strict";
import { PIPE_BUF, StdoutSink } from "../../../src/exporters/flow_log/rotate.ts";

Deno.test("flow log to stdout: a reader gone mid-write leaves exported = the whole lines it was given", async () => {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL("../../_helpers/flow_log_stdout_child.ts", import.meta.url).pathname,
    ],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const reader = child.stdout.getReader();
  const chunks: Uint8Array[] = [];
  let got = 0;
  while (got < 200_000) {
    const r = await reader.read();
    if (r.done) break;
    got += r.value.length;
    chunks.push(r.value);
  }
  await reader.cancel();
  const err = await new Response(child.stderr).text();
  await child.status;
  const text = new TextDecoder().decode(new Uint8Array(chunks.flatMap((c) => [...c])));
  const wholeRead = text.split("\n").length - 1;
  const stats = JSON.parse(err.trim().split("\n").at(-1)!);
  assert.equal(stats.received, 5000);
  assert.equal(stats.exported + stats.dropped, 5000, JSON.stringify(stats));
  assert.ok(stats.dropped > 0, "the reader left before the end");
  // What the reader got whole was exported; the pipe may have taken a little more it never read.
  assert.ok(stats.exported >= wholeRead, `${stats.exported} exported, ${wholeRead} lines read`);
  assert.ok(stats.exported < wholeRead + 1000, `${stats.exported} exported, ${wholeRead} read`);
});

/**
 * Deno's stdout as seen by the writer (measured with strace): one `write(p)` goes out as the
 * bytes up to p's last newline, then its tail; each of those is taken whole by the pipe or fails
 * (EPIPE) once its reader has gone, here after `capacity` bytes. The call throws if either fails.
 */
function lineBufferedPipe(capacity: number) {
  const delivered: Uint8Array[] = [];
  let total = 0;
  const put = (part: Uint8Array) => {
    if (part.length === 0) return;
    if (total + part.length > capacity) throw new Error("Broken pipe (os error 32)");
    delivered.push(part.slice());
    total += part.length;
  };
  return {
    write(p: Uint8Array): Promise<number> {
      const lines = p.lastIndexOf(0x0a) + 1;
      try {
        put(p.subarray(0, lines));
        put(p.subarray(lines));
      } catch (e) {
        return Promise.reject(e);
      }
      return Promise.resolve(p.length);
    },
    /** Whole lines the reader got. */
    wholeLines(): number {
      return new TextDecoder().decode(new Uint8Array(delivered.flatMap((c) => [...c])))
        .split("\n").length - 1;
    },
  };
}

Deno.test("flow log to stdout: lines that reached the reader before a failed write are counted written, whatever their sizes", async () => {
  // Lines of sizes that do not divide PIPE_BUF, one longer than it; the reader leaves at
  // every byte count around a few piece boundaries.
  const lines = Array.from(
    { length: 60 },
    (_, i) =>
      (i === 25 ? "L".repeat(PIPE_BUF + 300) : `${i}:`.padEnd(37 + (i * 53) % 400, "x")) + "\n",
  );
  const total = lines.reduce((n, l) => n + l.length, 0);
  let checked = 0;
  for (let capacity = 1; capacity < total; capacity += 97) {
    const pipe = lineBufferedPipe(capacity);
    const result = await new StdoutSink(pipe).writeLines(lines);
    assert.ok(result.error !== undefined, `capacity ${capacity}: the write failed`);
    assert.equal(result.written, pipe.wholeLines(), `capacity ${capacity}`);
    checked++;
  }
  assert.ok(checked > 100);
  const all = lineBufferedPipe(total);
  assert.deepEqual(await new StdoutSink(all).writeLines(lines), { written: 60, tooLong: 0 });
  assert.equal(all.wholeLines(), 60);
});
