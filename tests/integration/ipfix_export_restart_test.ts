/**
 * The external collector goes away while flows keep coming, and comes back: the exporter must
 * notice, queue, reconnect with backoff, re-send both templates on the new session before any
 * data, deliver everything queued during the outage, and account for every record
 * (exported + dropped + unacknowledged == received), never counting as exported a record the
 * collector may not have read. One short outage and the 10 s one of the issue.
 */
import assert from "node:assert/strict";
import { Collector } from "../../src/collector/mod.ts";
import { IpfixExporter } from "../../src/exporters/ipfix/exporter.ts";
import { FlowModel, syntheticAggregate } from "../../src/flowgen/mod.ts";
import { setLogWriter } from "../../src/log.ts";
import { waitFor } from "../_helpers/wait.ts";

setLogWriter(() => {});

interface Side {
  c: Collector;
  seqs: number[];
}

async function external(port: number): Promise<Side> {
  const side: Side = { c: undefined as unknown as Collector, seqs: [] };
  side.c = new Collector({ address: `127.0.0.1:${port}`, protocol: "tcp" }, (recs) => {
    for (const r of recs) {
      // syntheticAggregate puts the record's sequence number in sourcePodLabels.
      const m = /"src-(\d+)"/.exec(r.sourcePodLabels as string);
      side.seqs.push(m ? Number(m[1]) : -1);
    }
  });
  await side.c.start();
  return side;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function outage(downMs: number): Promise<void> {
  const first = await external(0);
  const port = first.c.port;
  const e = new IpfixExporter({
    address: `127.0.0.1:${port}:tcp`,
    observationDomainId: 9,
    podLabels: true,
    backoffInitialMs: 100,
    backoffMaxMs: 1000,
  });
  await e.start();
  const model = new FlowModel({ agents: 2, flows: 100, seed: 2 });
  let seq = 0;
  // ~1,000 records/s from the "export loop" for the whole test.
  const feeder = setInterval(() => {
    for (let i = 0; i < 10; i++) {
      for (const r of model.next()) e.addRecord(syntheticAggregate(r.record, seq++));
    }
  }, 10);
  let second: Side | undefined;
  try {
    await waitFor(() => first.seqs.length > 500, {
      timeoutMs: 5000,
      what: "traffic before the outage",
    });
    await first.c.stop();
    await waitFor(() => !e.stats().connected, {
      timeoutMs: 2000,
      what: "exporter to notice the collector is gone",
    });
    const downFrom = seq;
    const errorsBefore = e.stats().errors;
    await sleep(downMs);
    assert.ok(e.stats().queued > 0, "records queue while the collector is down");
    assert.ok(e.stats().errors > errorsBefore, "failed reconnect attempts are counted");
    second = await external(port);
    await waitFor(() => e.stats().connected, { timeoutMs: 3000, what: "reconnect" });
    await sleep(300);
    clearInterval(feeder);
    await waitFor(() => e.stats().queued === 0, { timeoutMs: 5000, what: "queue to drain" });
    await e.stop();
    const total = seq;
    // The collector may lag behind the exporter under load: wait for what it must receive.
    await waitFor(() => second!.seqs.filter((x) => x >= downFrom).length >= total - downFrom, {
      timeoutMs: 10_000,
      what: "delivery of everything sent after the outage",
    }).catch(() => {}); // the assertions below report the numbers
    const s = e.stats();
    assert.equal(s.received, total);
    assert.equal(s.exported + s.dropped + s.unacknowledged, s.received);
    assert.equal(s.dropped, 0);
    assert.equal(s.queued, 0);
    assert.equal(s.reconnects, 1);
    assert.equal(s.templatesSent, 4, "both templates again on the new session");
    const ss = second.c.stats();
    assert.equal(ss.templateRecords, 2);
    assert.equal(ss.templateMisses, 0, "templates preceded the data on the new session");
    assert.equal(ss.decodeErrorsTotal, 0);
    // Everything added after the exporter saw the outage reaches the new collector, once.
    const after = second.seqs.filter((x) => x >= downFrom);
    assert.equal(new Set(after).size, after.length, "no duplicates after the outage");
    assert.equal(after.length, total - downFrom);
    // The first session ended without proof that its records were read: they are counted
    // possibly lost, not exported (issue 10: they used to be "exported", and lost in flight).
    // The second ended cleanly at stop(): exactly what the new collector decoded is exported.
    const delivered = new Set([...first.seqs, ...second.seqs]).size;
    assert.ok(s.exported <= delivered, `exported ${s.exported} > delivered ${delivered}`);
    assert.equal(s.exported, second.seqs.length);
    assert.equal(s.unacknowledged, s.possiblyLost);
    assert.ok(s.possiblyLost >= first.seqs.length, "what the first collector took is unproven");
  } finally {
    clearInterval(feeder);
    await e.stop();
    await first.c.stop();
    await second?.c.stop();
  }
}

Deno.test("collector away for 2 s: reconnect, templates re-sent, queue delivered", async () => {
  await outage(2000);
});

Deno.test("collector away for 10 s (issue scenario): reconnect, templates re-sent, queue delivered", async () => {
  await outage(10_000);
});
