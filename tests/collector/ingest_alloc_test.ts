/**
 * The main thread of a sharded process allocates next to nothing per Agent message: a session
 * walks the message in place (raw mode) and the router copies each record into its shard's
 * frame. Garbage per message is young-generation collections on the thread every record goes
 * through; measured before the fixes, 33 bytes per message in the session (a heap number per
 * `lastSeenMs` store, a new sink context at every IPv4/IPv6 template switch) and 107 per
 * record in the router (a `subarray` per copy). The child process runs with a young generation
 * large enough that no collection happens while it measures (`heapUsed` then only grows).
 */

import assert from "node:assert/strict";
import { Counters } from "../../src/collector/stats.ts";
import { type RecordContext, Session, type SessionEnv } from "../../src/collector/session.ts";
import { TaskCachedClock } from "../../src/clock.ts";
import type { DataRecord, RawRecords, TemplateRecord } from "../../src/ipfix/mod.ts";
import { logger, RateLimitedLog } from "../../src/log.ts";
import { ReplayStream } from "../../src/flowgen/mod.ts";
import { RawRowWriter, RawTemplateIds } from "../../src/shard/raw_rows.ts";
import { createRing, RingReader, RingWriter } from "../../src/shard/ring.ts";
import { DENO_JSON, runDeno } from "../_helpers/process.ts";

/** Bytes allocated per call of `f` (which handles `per` messages), the least of three passes. */
function bytesPer(f: () => void, per: number): number {
  for (let i = 0; i < 400; i++) f();
  let least = Infinity;
  for (let pass = 0; pass < 3; pass++) {
    const before = Deno.memoryUsage().heapUsed;
    for (let i = 0; i < 20; i++) f();
    least = Math.min(least, (Deno.memoryUsage().heapUsed - before) / (20 * per));
  }
  return least;
}

/** The child: measures and prints `{ session, router }` bytes per message. */
function measure(): { session: number; router: number } {
  const stream = new ReplayStream({ agents: 1, flows: 2_000, seed: 1, uniqueNames: 0.2 });
  const clock = new TaskCachedClock();
  let records = 0;
  let last: RawRecords | undefined;
  const env: SessionEnv = {
    counters: new Counters("tcp"),
    sink: (_r: DataRecord[], _c: RecordContext, raw?: RawRecords) => {
      records += raw!.spans.length / 2;
      last = raw;
    },
    log: logger("test"),
    rateLog: new RateLimitedLog(10_000, () => clock.nowMs()),
    clock,
    raw: true,
  };
  const session = new Session(env, {
    transport: "tcp",
    exporterAddress: "10.0.0.1",
    peer: "[10.0.0.1]:1",
    templateTtlMs: 0,
  });
  const t0 = 1_700_000_000;
  for (const m of stream.templateMessages(0, t0)) session.handleMessage(m);
  const round = stream.rounds[0];
  round.patch(0, round.messages, 1, t0 + 10);
  // The round's messages back to back in one buffer, as a read buffer holds them.
  const buf = new Uint8Array(round.views.reduce((n, v) => n + v.length, 0));
  const offs = [0];
  for (const v of round.views) {
    buf.set(v, offs.at(-1)!);
    offs.push(offs.at(-1)! + v.length);
  }
  const n = offs.length - 1;
  const templates = new Set<TemplateRecord>();
  const spans: { t: TemplateRecord; start: number; end: number }[] = [];
  for (let i = 0; i < n; i++) {
    session.handleMessage(buf, offs[i], offs[i + 1]);
    templates.add(last!.compiled.template);
    spans.push({ t: last!.compiled.template, start: last!.spans[0], end: last!.spans[1] });
  }
  if (records !== n || templates.size !== 2) {
    throw new Error(`${records} records of ${n} messages, ${templates.size} templates`);
  }
  const sessionBytes = bytesPer(() => {
    for (let i = 0; i < n; i++) session.handleMessage(buf, offs[i], offs[i + 1]);
  }, n);
  const ring = createRing(8 << 20);
  const writer = new RawRowWriter(new RingWriter(ring), new RawTemplateIds());
  const reader = new RingReader(ring);
  const routerBytes = bytesPer(() => {
    for (const s of spans) {
      if (!writer.add(s.t, buf, s.start, s.end)) {
        for (let f = reader.next(); f !== undefined; f = reader.next()) reader.release();
        writer.add(s.t, buf, s.start, s.end);
      }
    }
  }, n);
  return { session: sessionBytes, router: routerBytes };
}

if (Deno.args[0] === "--child") {
  console.log(JSON.stringify(measure()));
} else {
  Deno.test("ingest path: a session and the router allocate under 8 bytes per Agent message", async () => {
    const out = await runDeno([
      "run",
      "--allow-read",
      "--allow-env",
      "--config",
      DENO_JSON,
      "--v8-flags=--max-semi-space-size=64,--min-semi-space-size=64",
      new URL(import.meta.url).pathname,
      "--child",
    ]);
    assert.equal(out.code, 0, out.stderr.slice(-500));
    const r = JSON.parse(out.stdout.trim().split("\n").at(-1)!) as {
      session: number;
      router: number;
    };
    assert.ok(r.session < 8, `session: ${r.session.toFixed(1)} bytes per message`);
    assert.ok(r.router < 8, `router: ${r.router.toFixed(1)} bytes per record`);
  });
}
