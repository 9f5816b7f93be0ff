/**
 * Raw mode (what a sharded process's collector runs): the usual message takes the lean walk
 * (`walkRawMessage`, no decoded-message objects) and every other one the full raw decoding.
 * Either way a session must count exactly what the decoding mode counts and hand the sink the
 * same records (as spans that decode to them), message by message.
 */

import assert from "node:assert/strict";
import { Counters } from "../../src/collector/stats.ts";
import { type RecordContext, Session, type SessionEnv } from "../../src/collector/session.ts";
import { ManualClock } from "../../src/clock.ts";
import {
  type DataRecord,
  encodeDataSet,
  encodeMessage,
  encodeTemplateSet,
  type RawRecords,
} from "../../src/ipfix/mod.ts";
import { logger, RateLimitedLog, setLogLevel } from "../../src/log.ts";
import { dataMessage, SMALL_FIELDS, smallRecord, templateMessage } from "./helpers.ts";
import { DENO_JSON, runDeno } from "../_helpers/process.ts";

setLogLevel("error");

interface Seen {
  ctx: RecordContext;
  records: DataRecord[];
}

/** A session in one mode and what its sink saw (raw spans decoded right away: they are reused). */
function session(raw: boolean): { s: Session; seen: Seen[]; counters: Counters } {
  const clock = new ManualClock();
  const seen: Seen[] = [];
  const counters = new Counters("tcp");
  const env: SessionEnv = {
    counters,
    sink: (records: DataRecord[], ctx: RecordContext, r?: RawRecords) => {
      if (r === undefined) {
        seen.push({ ctx, records });
        return;
      }
      assert.equal(records.length, 0);
      const out: DataRecord[] = [];
      for (let i = 0; i < r.spans.length; i += 2) {
        r.compiled.decodeRecords(r.bytes, r.spans[i], r.spans[i + 1], out, 1);
      }
      seen.push({ ctx, records: out });
    },
    log: logger("test"),
    rateLog: new RateLimitedLog(10_000, () => clock.nowMs()),
    clock,
    raw,
  };
  const s = new Session(env, {
    transport: "tcp",
    exporterAddress: "10.0.0.1",
    peer: "[10.0.0.1]:1",
    templateTtlMs: 0,
  });
  return { s, seen, counters };
}

const header = { exportTime: 1_700_000_020, sequenceNumber: 2, observationDomainId: 7 };

Deno.test("raw session: lean and full paths count and deliver what the decoding mode does", () => {
  const records = (from: number, n: number) =>
    Array.from({ length: n }, (_, i) => smallRecord(from + i));
  const messages: Uint8Array[] = [
    // The full path: templates.
    templateMessage(7, [300, 301], SMALL_FIELDS),
    // The lean path: data sets of known templates, one or several per message.
    dataMessage(7, 300, SMALL_FIELDS, records(1, 1)),
    dataMessage(7, 301, SMALL_FIELDS, records(10, 5)),
    encodeMessage(header, [
      encodeDataSet(300, SMALL_FIELDS, records(20, 2)),
      encodeDataSet(301, SMALL_FIELDS, records(30, 3)),
    ]),
    // The full path: an unknown template next to a known one (a miss, the other set kept).
    encodeMessage(header, [
      encodeDataSet(399, SMALL_FIELDS, records(40, 1)),
      encodeDataSet(300, SMALL_FIELDS, records(41, 1)),
    ]),
    // The full path: a template and data in one message.
    encodeMessage(header, [
      encodeTemplateSet([{ id: 302, fields: SMALL_FIELDS, scopeFieldCount: 0 }]),
      encodeDataSet(302, SMALL_FIELDS, records(50, 2)),
    ]),
    dataMessage(7, 302, SMALL_FIELDS, records(60, 4)),
    // The full path: a bad header (version 9) and a set overrunning the message.
    (() => {
      const m = dataMessage(7, 300, SMALL_FIELDS, records(70, 1)).slice();
      m[1] = 9;
      return m;
    })(),
    (() => {
      const m = dataMessage(7, 300, SMALL_FIELDS, records(80, 1)).slice();
      new DataView(m.buffer).setUint16(18, 4000);
      return m;
    })(),
    // A data set of a known template whose last record is cut short (its bytes read as padding).
    (() => {
      const m = dataMessage(7, 300, SMALL_FIELDS, records(90, 2));
      const cut = m.slice(0, m.length - 3);
      const v = new DataView(cut.buffer);
      v.setUint16(2, cut.length);
      v.setUint16(18, cut.length - 16);
      return cut;
    })(),
    // Empty data set (header only): nothing handed on either way.
    encodeMessage(header, [encodeDataSet(300, SMALL_FIELDS, [])]),
  ];
  const dec = session(false);
  const raw = session(true);
  // Each message handed in place too, inside a bigger buffer (as a stream's read buffer is).
  const decInPlace = session(false);
  const rawInPlace = session(true);
  for (const [i, m] of messages.entries()) {
    const a = dec.s.handleMessage(m);
    const b = raw.s.handleMessage(m);
    assert.deepEqual(b, a, `message ${i}: outcome`);
    assert.deepEqual(raw.seen, dec.seen, `message ${i}: what the sink got`);
    assert.deepEqual(raw.counters.snapshot(), dec.counters.snapshot(), `message ${i}: counters`);
    const at = 3 + i;
    const buf = new Uint8Array(at + m.length + 9).fill(0xab);
    buf.set(m, at);
    for (const x of [decInPlace, rawInPlace]) {
      assert.deepEqual(x.s.handleMessage(buf, at, at + m.length), a, `message ${i} in place`);
      assert.deepEqual(x.seen, dec.seen, `message ${i} in place: what the sink got`);
      assert.deepEqual(x.counters.snapshot(), dec.counters.snapshot(), `message ${i} in place`);
    }
  }
  // The sequence did reach the sink through both paths, and counted errors.
  const snap = raw.counters.snapshot();
  assert.equal(raw.seen.length, 8);
  assert.equal(raw.seen.reduce((n, x) => n + x.records.length, 0), 1 + 5 + 5 + 1 + 2 + 4 + 1);
  assert.equal(snap.templateMisses, 1);
  assert.deepEqual(snap.decodeErrors, { badVersion: 1 });
  assert.deepEqual(snap.setErrors, { badSetLength: 1 });
});

// Found by review: each session's raw walk kept the bytes of its last message, on the fast path
// the whole receive batch (up to 1 MiB): 300 idle sessions held 300 MB.
Deno.test("raw mode: a session does not keep the receive batch of its last message alive", async () => {
  const out = await runDeno([
    "run",
    "--allow-all",
    "--v8-flags=--expose-gc",
    "--config",
    DENO_JSON,
    new URL("../_helpers/udp_batch_pin_child.ts", import.meta.url).pathname,
  ]);
  assert.equal(out.code, 0, out.stderr);
  const got = JSON.parse(out.stdout.trim().split("\n").at(-1)!);
  assert.equal(got.sessions, 50);
  assert.equal(got.dataRecords, 50);
  // The last batch handled may still be referenced from the receive path; no session's is.
  assert.ok(got.alive <= 1, `${got.alive} of 50 batches of 1 MiB still alive`);
});
