/**
 * The S3 sink against an endpoint that answers badly: bodies far larger than any S3 answer,
 * errors on every upload, and a bucket that has moved to another region. A small in-test server
 * (Deno.serve) answers HeadBucket with a region header and every other request as the test says.
 */

import assert from "node:assert/strict";
import { ManualClock } from "../../../src/clock.ts";
import { S3Exporter } from "../../../src/exporters/s3/exporter.ts";
import { MAX_ANSWER_BYTES, SdkObjectStore } from "../../../src/exporters/s3/store.ts";
import { s3rverEnv, s3UploaderConfig } from "../../_helpers/s3.ts";
import { assertLedger, BUCKET, captureLog, flowN, U } from "../../_helpers/s3_exporter.ts";
import { waitFor } from "../../_helpers/wait.ts";

/** One request the fake endpoint received. */
interface Seen {
  method: string;
  /** The region of the request's signature (its credential scope). */
  signedFor: string;
}

/** A fake S3 endpoint: HeadBucket answered with `region()`, the rest by `answer`. */
class FakeS3 {
  readonly seen: Seen[] = [];
  /** Bytes of answer bodies the server has handed to its connections. */
  bodyBytesSent = 0;
  readonly #server: Deno.HttpServer<Deno.NetAddr>;

  constructor(
    answer: (req: Request, s: FakeS3) => Response,
    region: () => string = () => "us-east-1",
  ) {
    this.#server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
      await req.arrayBuffer();
      const signedFor = /Credential=[^/]+\/[^/]+\/([^/]+)\//.exec(
        req.headers.get("authorization") ?? "",
      )?.[1] ?? "";
      this.seen.push({ method: req.method, signedFor });
      if (req.method === "HEAD") {
        return new Response(null, { headers: { "x-amz-bucket-region": region() } });
      }
      return answer(req, this);
    });
  }

  get endpoint(): string {
    return `http://127.0.0.1:${this.#server.addr.port}`;
  }

  /** Requests of `method` received so far. */
  count(method: string): number {
    return this.seen.filter((r) => r.method === method).length;
  }

  /** A body of `total` bytes made as the connection reads it, counted in `bodyBytesSent`. */
  stream(total: number): ReadableStream<Uint8Array> {
    const chunk = new Uint8Array(64 * 1024).fill(65);
    let sent = 0;
    return new ReadableStream({
      pull: (c) => {
        if (sent >= total) return c.close();
        c.enqueue(chunk.slice());
        sent += chunk.byteLength;
        this.bodyBytesSent += chunk.byteLength;
      },
    });
  }

  close(): Promise<void> {
    return this.#server.shutdown();
  }
}

/** An S3 error answer as S3 writes it. */
function s3Error(status: number, code: string, headers: Record<string, string> = {}): Response {
  const xml = `<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>${code}</Code>` +
    `<Message>${code}</Message><RequestId>R1</RequestId><HostId>H1</HostId></Error>`;
  return new Response(xml, { status, headers: { "content-type": "application/xml", ...headers } });
}

/** Runs `fn` with a store (one attempt per call) on a fresh fake endpoint. */
async function withStore(
  answer: (req: Request, s: FakeS3) => Response,
  fn: (store: SdkObjectStore, server: FakeS3) => Promise<void>,
): Promise<void> {
  const server = new FakeS3(answer);
  const store = new SdkObjectStore(
    { bucket: BUCKET, region: "", endpoint: server.endpoint },
    { env: s3rverEnv(), maxAttempts: 1, requestTimeoutMs: 30_000 },
  );
  try {
    await fn(store, server);
  } finally {
    store.destroy();
    await server.close();
  }
}

const HUGE = 64 * 1024 * 1024;
const body = new TextEncoder().encode("x\n");

for (const status of [503, 200]) {
  Deno.test(`an answer body (HTTP ${status}) larger than any S3 answer fails the upload, read only up to the bound`, async () => {
    await withStore(
      (_req, s) => new Response(s.stream(HUGE), { status, headers: { etag: '"x"' } }),
      async (store, server) => {
        // Before the fix the SDK read all 64 MiB into memory (a 503) or resolved (a 200).
        await assert.rejects(store.put("k.csv", body), (err: Error) => {
          assert.equal(err.name, "AnswerTooLarge", String(err));
          assert.match(err.message, /over the 1048576-byte bound/);
          return true;
        });
        // The connection is closed at the bound: what was sent is the bound plus buffers.
        assert.ok(
          server.bodyBytesSent < 16 * MAX_ANSWER_BYTES,
          `${server.bodyBytesSent} bytes sent`,
        );
      },
    );
  });
}

Deno.test("an answer whose content-length is over the bound fails the upload unread", async () => {
  const big = new Uint8Array(4 * MAX_ANSWER_BYTES);
  await withStore(
    () => new Response(big, { status: 503 }),
    async (store) => {
      await assert.rejects(store.put("k.csv", body), (err: Error) => {
        assert.equal(err.name, "AnswerTooLarge", String(err));
        assert.match(err.message, new RegExp(`content-length ${big.byteLength} over`));
        return true;
      });
    },
  );
});

Deno.test("answers within the bound are read as before (an S3 error keeps its code)", async () => {
  await withStore(() => s3Error(503, "SlowDown"), async (store) => {
    await assert.rejects(store.put("k.csv", body), { name: "SlowDown" });
  });
});

/** What a test run by {@linkcode withFakeExporter} gets. */
interface FakeFixture {
  server: FakeS3;
  clock: ManualClock;
  exporter: S3Exporter;
}

/**
 * Runs `fn` with a started exporter of `fields` (manual clock, no spool, one attempt per call)
 * on a fresh fake endpoint, then stops it.
 */
async function withFakeExporter(
  answer: (req: Request, s: FakeS3) => Response,
  fields: Record<string, string | number | boolean>,
  fn: (f: FakeFixture) => Promise<void>,
  region?: () => string,
): Promise<void> {
  const server = new FakeS3(answer, region);
  const clock = new ManualClock();
  const exporter = new S3Exporter(
    s3UploaderConfig({ bucketName: BUCKET, endpoint: server.endpoint, ...fields }),
    {
      clock,
      clusterUuid: U,
      stopDeadlineMs: 0,
      spool: false,
      store: { env: s3rverEnv(), maxAttempts: 1 },
    },
  );
  try {
    await exporter.start();
    await waitFor(() => exporter.stats().regionDiscoveries === 1, { what: "region discovered" });
    await fn({ server, clock, exporter });
  } finally {
    await exporter.stop();
    await server.close();
  }
}

/** Lets the passes the last finished objects may start run (the endpoint is local). */
function settle(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 100));
}

/** Adds record `n` as one object (maxRecordsPerFile 1) and waits for it to be finished. */
async function addObject(f: FakeFixture, n: number): Promise<void> {
  f.exporter.addRecord(flowN(n));
  await f.exporter.flush();
  await settle();
}

/** Waits until `f`'s sink has counted `n` failed uploads. */
function failures(f: FakeFixture, n: number): Promise<void> {
  return waitFor(() => f.exporter.stats().uploadFailures === n, { what: `${n} failures` });
}

Deno.test("after a failed upload, finished objects start no pass until the backoff (1 s, doubled) is over", async () => {
  let failing = true;
  await withFakeExporter(
    () =>
      failing ? s3Error(500, "InternalError") : new Response(null, { headers: { etag: '"x"' } }),
    { uploadInterval: "60s", maxRecordsPerFile: 1, compress: false },
    async (f) => {
      await addObject(f, 1);
      await failures(f, 1);
      // Before the fix every finished object started a pass: a PUT each.
      for (let n = 2; n <= 6; n++) await addObject(f, n);
      assert.equal(f.server.count("PUT"), 1, "no PUT within the first second");
      f.clock.advance(1000);
      await addObject(f, 7);
      await failures(f, 2);
      assert.equal(f.server.count("PUT"), 2);
      // The second pause is 2 s.
      f.clock.advance(1000);
      await addObject(f, 8);
      assert.equal(f.server.count("PUT"), 2, "no PUT within 2 s of the second failure");
      f.clock.advance(1000);
      await addObject(f, 9);
      await failures(f, 3);
      assert.equal(f.server.count("PUT"), 3);
      // The tick still runs its pass; a success ends the backoff.
      failing = false;
      f.clock.advance(57_000);
      await waitFor(() => f.exporter.stats().exported === 9, { what: "all uploaded" });
      failing = true;
      await addObject(f, 10);
      await failures(f, 4);
      f.clock.advance(1000);
      await addObject(f, 11);
      await failures(f, 5);
      const s = f.exporter.stats();
      assert.equal(s.buffered, 2);
      assertLedger(s);
    },
  );
});

Deno.test("a permanent refusal (403 AccessDenied) is counted apart and logged with its code, even after a flood of 503s", async () => {
  let code = "SlowDown";
  const lines = await captureLog(async () => {
    await withFakeExporter(
      () => s3Error(code === "SlowDown" ? 503 : 403, code),
      { uploadInterval: "60s", maxRecordsPerFile: 1, compress: false },
      async (f) => {
        await addObject(f, 1);
        await failures(f, 1);
        code = "AccessDenied";
        f.clock.advance(1000);
        await addObject(f, 2);
        await failures(f, 2);
        f.clock.advance(2000);
        await addObject(f, 3);
        await failures(f, 3);
        const s = f.exporter.stats();
        assert.equal(s.permanentFailures, 2, "the 403s, not the 503");
        assert.equal(s.buffered, 3, "kept for the retries");
        assertLedger(s);
      },
    );
  });
  const logged = (c: string) =>
    lines.filter((l) => /uploading file to S3/.test(l) && l.includes(`err="${c} (HTTP`));
  assert.equal(logged("SlowDown").length, 1, lines.join("\n"));
  // Before the fix the 403 shared the 503's rate limit (one message key): never logged.
  const denied = logged("AccessDenied");
  assert.equal(denied.length, 1, "logged once within the rate limit's 10 s");
  assert.match(denied[0], /level=error .*permanent error when uploading file to S3/);
});

Deno.test("a 301 PermanentRedirect naming the bucket's region makes the next pass discover it again", async () => {
  let bucketRegion = "us-east-1";
  await withFakeExporter(
    (_req, s) =>
      s.seen.at(-1)!.signedFor === bucketRegion
        ? new Response(null, { headers: { etag: '"x"' } })
        : s3Error(301, "PermanentRedirect", { "x-amz-bucket-region": bucketRegion }),
    { uploadInterval: "60s", maxRecordsPerFile: 1, compress: false },
    async (f) => {
      await addObject(f, 1);
      await waitFor(() => f.exporter.stats().exported === 1, { what: "first upload" });
      // The bucket is now in another region: its answers say so.
      bucketRegion = "eu-west-1";
      await addObject(f, 2);
      await waitFor(() => f.exporter.stats().uploadFailures === 1, { what: "the 301" });
      f.clock.advance(1000);
      await addObject(f, 3);
      // Before the fix no HeadBucket was sent again: every PUT kept its old region (a 301).
      await waitFor(() => f.exporter.stats().exported === 3, {
        what: "uploaded to the new region",
      });
      const s = f.exporter.stats();
      assert.equal(s.regionDiscoveries, 2);
      assert.equal(f.server.count("HEAD"), 2);
      assert.deepEqual(
        f.server.seen.filter((r) => r.method === "PUT").map((r) => r.signedFor),
        ["us-east-1", "us-east-1", "eu-west-1", "eu-west-1"],
      );
      assertLedger(s);
    },
    () => bucketRegion,
  );
});
