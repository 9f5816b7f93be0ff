import assert from "node:assert/strict";
import { ManualClock } from "../../../src/clock.ts";
import { S3Exporter } from "../../../src/exporters/s3/exporter.ts";
import { OBJECT_NAME_PATTERN } from "../../../src/exporters/s3/object.ts";
import { fixtureFlow } from "../fixtures.ts";
import { s1Line, s3rverEnv, S3Server, s3UploaderConfig } from "../../_helpers/s3.ts";
import {
  assertLedger,
  BUCKET,
  captureLog,
  flowN,
  landThenFail,
  OBJECT_BYTES,
  range,
  tick,
  U,
  uploadedPorts,
  withExporter,
} from "../../_helpers/s3_exporter.ts";
import { pollUntil, waitFor } from "../../_helpers/wait.ts";

Deno.test("S3/S6: one record, one upload tick: one gzip object, the S1 line byte-exact", async () => {
  await withExporter({ bucketPrefix: "flows/x", uploadInterval: "10s" }, async (f) => {
    f.exporter.addRecord(fixtureFlow());
    const t = Math.floor(f.clock.wallMs() / 1000);
    assertLedger(f.exporter.stats());
    assert.equal(f.exporter.stats().buffered, 1);
    await tick(f, 10_000, (s) => s.exported === 1);
    const keys = await f.server.keys(BUCKET);
    assert.equal(keys.length, 1);
    assert.match(keys[0], /^flows\/x\/records-[a-z0-9]{12}\.csv\.gz$/);
    assert.match(keys[0].slice("flows/x/".length), OBJECT_NAME_PATTERN);
    assert.deepEqual(await f.server.lines(BUCKET, keys[0]), [s1Line(U, t)]);
    const s = f.exporter.stats();
    assert.equal(s.objectsUploaded, 1);
    assert.equal(s.pendingObjects, 0);
    assert.equal(s.buffered, 0);
    assertLedger(s);
  });
});

Deno.test("an empty tick uploads nothing; each tick with records makes a new object", async () => {
  await withExporter({ uploadInterval: "5s" }, async (f) => {
    await tick(f, 5_000, (s) => s.regionDiscoveries === 1);
    assert.deepEqual(await f.server.keys(BUCKET), []);
    for (const n of range(3)) f.exporter.addRecord(flowN(n));
    await tick(f, 5_000, (s) => s.exported === 3);
    for (const n of range(2, 4)) f.exporter.addRecord(flowN(n));
    await tick(f, 5_000, (s) => s.exported === 5);
    const { ports, objects } = await uploadedPorts(f.server);
    assert.deepEqual(ports, range(5));
    assert.deepEqual([...objects.values()].map((l) => l.length).sort(), [2, 3]);
  });
});

Deno.test("a new object every maxRecordsPerFile records, uploaded without waiting for the tick", async () => {
  await withExporter({ maxRecordsPerFile: 3, uploadInterval: "60s" }, async (f) => {
    for (const n of range(7)) f.exporter.addRecord(flowN(n));
    await waitFor(() => f.exporter.stats().exported === 6, { timeoutMs: 20_000 });
    assert.equal(f.exporter.stats().buffered, 1, "the 7th waits for the tick");
    assertLedger(f.exporter.stats());
    await tick(f, 60_000, (s) => s.exported === 7);
    const { ports, objects } = await uploadedPorts(f.server);
    assert.deepEqual(ports, range(7), "every record exactly once");
    assert.deepEqual([...objects.values()].map((l) => l.length).sort(), [1, 3, 3]);
  });
});

Deno.test("compress: false writes plain .csv objects", async () => {
  await withExporter({ compress: false, uploadInterval: "1s" }, async (f) => {
    f.exporter.addRecord(fixtureFlow(true));
    await tick(f, 1000, (s) => s.exported === 1);
    const [key] = await f.server.keys(BUCKET);
    assert.match(key, /^records-[a-z0-9]{12}\.csv$/);
    const text = new TextDecoder().decode(await f.server.object(BUCKET, key));
    assert.ok(
      text.startsWith("1637706961,1637706973,1637706974,1637706975,3,2001:0:3238:dfe1:63::fefb,"),
    );
    assert.ok(text.endsWith(",test-egress,172.18.0.1\n"));
  });
});

Deno.test("S7: stop finishes the current object and uploads it", async () => {
  const server = await S3Server.start({ buckets: [BUCKET] });
  try {
    const exporter = new S3Exporter(
      s3UploaderConfig({ bucketName: BUCKET, endpoint: server.endpoint, uploadInterval: "100s" }),
      {
        clock: new ManualClock(),
        clusterUuid: U,
        store: { env: s3rverEnv(), maxAttempts: 1 },
        spool: false,
      },
    );
    await exporter.start();
    for (const n of range(4)) exporter.addRecord(flowN(n));
    await exporter.stop();
    const s = exporter.stats();
    assert.equal(s.exported, 4);
    assert.equal(s.buffered, 0);
    assertLedger(s);
    assert.deepEqual((await uploadedPorts(server)).ports, range(4));
    exporter.addRecord(flowN(5));
    assert.equal(exporter.stats().stopDropped, 1, "a record after stop is counted, not kept");
    assertLedger(exporter.stats());
  } finally {
    await server.close();
  }
});

Deno.test("a large object uploads as multipart and arrives whole", async () => {
  const n = 12_000; // ~7 MB of CSV: two 5 MiB parts
  await withExporter({ compress: false, uploadInterval: "1s" }, async (f) => {
    for (const i of range(n)) f.exporter.addRecord(flowN(i));
    await tick(f, 1000, (s) => s.exported === n);
    const [key] = await f.server.keys(BUCKET);
    const bytes = await f.server.object(BUCKET, key);
    assert.ok(bytes.byteLength > 5 * 1024 * 1024, `${bytes.byteLength} bytes`);
    const { ports } = await uploadedPorts(f.server);
    assert.deepEqual(ports, range(n));
    const upload = (r: string) => r.startsWith(`POST /${BUCKET}/${key}?uploads`);
    const parts = (r: string) => r.startsWith(`PUT /${BUCKET}/${key}?`) && /partNumber=/.test(r);
    assert.equal(f.server.requests.filter(upload).length, 1, f.server.requests.join("\n"));
    assert.equal(f.server.requests.filter(parts).length, 2, "two parts");
  }, { store: { multipartBytes: 5 * 1024 * 1024, partBytes: 5 * 1024 * 1024 } });
});

Deno.test("server down under steady load, then back: every record once, no duplicate object", async () => {
  await withExporter({ uploadInterval: "2s", maxRecordsPerFile: 50 }, async (f) => {
    let next = 1;
    const feed = (k: number) => {
      for (let i = 0; i < k; i++) f.exporter.addRecord(flowN(next++));
    };
    feed(120);
    await tick(f, 2000, (s) => s.exported === 120);
    await f.server.stop();
    for (let round = 0; round < 3; round++) {
      feed(70);
      const failures = f.exporter.stats().uploadFailures;
      await tick(f, 2000, (s) => s.uploadFailures > failures);
      assertLedger(f.exporter.stats());
    }
    const during = f.exporter.stats();
    assert.equal(during.exported, 120);
    assert.equal(during.buffered, 210);
    assert.ok(during.pendingObjects >= 3);
    await f.server.restart();
    feed(30);
    const total = next - 1;
    await tick(f, 2000, (s) => s.exported === total);
    const s = f.exporter.stats();
    assert.equal(s.dropped, 0);
    assert.ok(s.retriedUploads >= 1);
    assertLedger(s);
    const { ports, objects } = await uploadedPorts(f.server);
    assert.deepEqual(ports, range(total), "every record exactly once");
    assert.equal(objects.size, s.objectsUploaded, "one object per upload, no duplicate");
  });
});

Deno.test("a retry after an ambiguous failure overwrites the same key (no duplicate)", async () => {
  const server = await S3Server.start({ buckets: [BUCKET] });
  const clock = new ManualClock();
  try {
    const { SdkObjectStore } = await import("../../../src/exporters/s3/store.ts");
    const exporter = new S3Exporter(
      s3UploaderConfig({ bucketName: BUCKET, endpoint: server.endpoint, uploadInterval: "1s" }),
      {
        clock,
        clusterUuid: U,
        store: { env: s3rverEnv(), maxAttempts: 1 },
        makeStore: (t, o) => landThenFail(1)(new SdkObjectStore(t, o)),
        spool: false,
      },
    );
    await exporter.start();
    for (const n of range(5)) exporter.addRecord(flowN(n));
    clock.advance(1000);
    await waitFor(() => exporter.stats().uploadFailures === 1, { timeoutMs: 20_000 });
    clock.advance(1000);
    await waitFor(() => exporter.stats().exported === 5, { timeoutMs: 20_000 });
    await exporter.stop();
    assert.equal((await server.keys(BUCKET)).length, 1);
    assert.deepEqual((await uploadedPorts(server)).ports, range(5));
    assert.equal(exporter.stats().retriedUploads, 1);
  } finally {
    await server.close();
  }
});

Deno.test("without a spool, pending objects are bounded by bytes: the oldest is dropped and counted", async () => {
  await withExporter(
    { uploadInterval: "1s", compress: false, maxRecordsPerFile: 10 },
    async (f) => {
      await tick(f, 1000, (s) => s.regionDiscoveries === 1);
      await f.server.stop();
      // 10 records per object; the bound has room for two and a half objects.
      for (const n of range(40, 10)) f.exporter.addRecord(flowN(n));
      await f.exporter.flush();
      const s = f.exporter.stats();
      assert.equal(s.pendingDropped, 20);
      assert.equal(s.dropped, 20);
      assert.equal(s.pendingObjects, 2);
      assert.equal(s.pendingBytes, 2 * OBJECT_BYTES);
      assertLedger(s);
      await f.server.restart();
      await tick(f, 1000, (x) => x.exported === 20);
      // Whole objects are kept or dropped: 20 distinct records of 2 of the 4 objects.
      const { ports, objects } = await uploadedPorts(f.server);
      assert.equal(new Set(ports).size, 20);
      assert.ok(ports.every((p) => p >= 10 && p < 50));
      assert.deepEqual([...objects.values()].map((l) => l.length), [10, 10]);
    },
    { maxPendingBytes: 2.5 * OBJECT_BYTES, spool: false },
  );
});

Deno.test("without a spool, a bucket that does not exist: clear error, records counted, none lost silently", async () => {
  const lines = await captureLog(async () => {
    const server = await S3Server.start({ buckets: [BUCKET] });
    const clock = new ManualClock();
    try {
      const exporter = new S3Exporter(
        s3UploaderConfig({ bucketName: "nope", endpoint: server.endpoint, uploadInterval: "1s" }),
        {
          clock,
          clusterUuid: U,
          stopDeadlineMs: 3000,
          store: { env: s3rverEnv(), maxAttempts: 1 },
          spool: false,
        },
      );
      await exporter.start();
      for (const n of range(3)) exporter.addRecord(flowN(n));
      clock.advance(1000);
      await waitFor(() => exporter.stats().uploadFailures === 1, { timeoutMs: 20_000 });
      assert.equal(exporter.stats().buffered, 3);
      assertLedger(exporter.stats());
      // The stop keeps retrying until its deadline, then counts what is left.
      let stopped = false;
      const stopping = exporter.stop().then(() => stopped = true);
      while (!stopped) {
        await Promise.race([clock.whenTimersPending(1), stopping]);
        if (!stopped) clock.advance(1000);
      }
      assert.ok(exporter.stats().uploadFailures >= 2, "retried during the stop");
      const s = exporter.stats();
      assert.equal(s.exported, 0);
      assert.equal(s.stopDropped, 3);
      assert.equal(s.dropped, 3);
      assertLedger(s);
    } finally {
      await server.close();
    }
  });
  assert.ok(
    lines.some((l) => /uploading file to S3/.test(l) && /NoSuchBucket/.test(l)),
    lines.join("\n"),
  );
  assert.ok(lines.some((l) => /stop deadline/.test(l) && /records=3/.test(l)), lines.join("\n"));
});

Deno.test("wrong credentials: the upload error names them, records stay counted", async () => {
  const lines = await captureLog(async () => {
    await withExporter({ uploadInterval: "1s" }, async (f) => {
      f.exporter.addRecord(flowN(1));
      await tick(f, 1000, (s) => s.uploadFailures === 1);
      const s = f.exporter.stats();
      assert.equal(s.buffered, 1);
      assertLedger(s);
    }, { env: { AWS_ACCESS_KEY_ID: "WRONG", AWS_SECRET_ACCESS_KEY: "WRONG" }, stopDeadlineMs: 0 });
  });
  assert.ok(lines.some((l) => /InvalidAccessKeyId/.test(l)), lines.join("\n"));
});

Deno.test("a reload changing only uploadInterval keeps uploading, at the new interval", async () => {
  await withExporter({ uploadInterval: "10s" }, async (f) => {
    f.exporter.addRecord(flowN(1));
    await tick(f, 10_000, (s) => s.exported === 1);
    await f.exporter.update(s3UploaderConfig({
      bucketName: BUCKET,
      endpoint: f.server.endpoint,
      uploadInterval: "2s",
    }));
    assert.deepEqual(f.clock.pendingTimers(), [2000]);
    f.exporter.addRecord(flowN(2));
    await tick(f, 2000, (s) => s.exported === 2);
    assert.deepEqual((await uploadedPorts(f.server)).ports, [1, 2]);
  });
});

Deno.test("S8: a reload to another bucket and prefix re-discovers and sends waiting objects there", async () => {
  await withExporter({ uploadInterval: "5s", bucketPrefix: "old" }, async (f) => {
    f.exporter.addRecord(flowN(1));
    await tick(f, 5000, (s) => s.exported === 1);
    await f.server.stop();
    f.exporter.addRecord(flowN(2));
    await tick(f, 5000, (s) => s.uploadFailures === 1);
    await f.server.restart();
    await f.exporter.update(s3UploaderConfig({
      bucketName: "flows-new",
      bucketPrefix: "new",
      endpoint: f.server.endpoint,
      uploadInterval: "5s",
      compress: false,
    }));
    assert.equal(f.exporter.config.bucketName, "flows-new");
    await waitFor(() => f.exporter.stats().regionDiscoveries === 2, { timeoutMs: 20_000 });
    await waitFor(() => f.exporter.stats().exported === 2, { timeoutMs: 20_000 });
    f.exporter.addRecord(flowN(3));
    await tick(f, 5000, (s) => s.exported === 3);
    assert.equal((await f.server.keys(BUCKET)).length, 1);
    const keys = await f.server.keys("flows-new");
    assert.equal(keys.length, 2);
    assert.ok(keys.every((k) => k.startsWith("new/records-")), keys.join());
    // The object finished before the reload stays gzip; the next one follows compress: false.
    assert.deepEqual(keys.map((k) => k.endsWith(".gz")).sort(), [false, true]);
  }, { buckets: [BUCKET, "flows-new"] });
});

Deno.test("the ledger holds at every step of a run", async () => {
  await withExporter({ uploadInterval: "1s", maxRecordsPerFile: 7 }, async (f) => {
    for (const n of range(100)) {
      f.exporter.addRecord(flowN(n));
      assertLedger(f.exporter.stats());
    }
    await pollUntil(() => {
      assertLedger(f.exporter.stats());
      return f.exporter.stats().exported === 98 ? true : undefined;
    }, { timeoutMs: 20_000 });
    await tick(f, 1000, (s) => s.exported === 100);
    assertLedger(f.exporter.stats());
  });
});
