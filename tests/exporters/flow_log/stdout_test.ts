/**
 * The flow log on standard output when its reader goes away part-way (EPIPE): the lines that
 * reached the pipe whole count as exported, the others as dropped, none twice.
 */

import assert from "node:assert/strict";

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
