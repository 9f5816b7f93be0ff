/**
 * The S3 sink against a server that never answers: a PUT accepted and never answered, a PUT
 * answered with headers and then a body trickled forever, a HeadBucket never answered. Every
 * upload attempt must end (bounded by `requestTimeoutMs`, counted) and `stop()` must end by its
 * deadline, keeping what waits in the spool.
 */

import assert from "node:assert/strict";
import { S3Exporter, type S3ExporterOptions } from "../../../src/exporters/s3/exporter.ts";
import { s3rverEnv, s3UploaderConfig } from "../../_helpers/s3.ts";
import { assertLedger, BUCKET, flowN, range, tempSpoolDir } from "../../_helpers/s3_exporter.ts";
import { waitFor } from "../../_helpers/wait.ts";

type Fault = "hang" | "trickle" | "hanghead";
const FAULTS: Fault[] = ["hang", "trickle", "hanghead"];

/**
 * A fake S3 endpoint on raw TCP (so a connection closed by the client is seen at once): answers
 * HeadBucket (unless `hanghead`) and never completes a PUT.
 */
class Unanswering {
  readonly #listener: Deno.TcpListener;
  readonly #conns = new Set<Deno.TcpConn>();
  readonly #done: Promise<void>;
  puts = 0;
  heads = 0;
  /** Connections the client has not closed yet. */
  open = 0;

  constructor(fault: Fault) {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.#listener = listener;
    this.#done = (async () => {
      const served: Promise<void>[] = [];
      for await (const conn of listener) served.push(this.#serve(conn, fault));
      await Promise.all(served);
    })();
  }

  get endpoint(): string {
    return `http://127.0.0.1:${this.#listener.addr.port}`;
  }

  async #serve(conn: Deno.TcpConn, fault: Fault): Promise<void> {
    this.#conns.add(conn);
    this.open++;
    const enc = new TextEncoder();
    let trickle: ReturnType<typeof setInterval> | undefined;
    let buf = new Uint8Array(0);
    const chunk = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        const n = await conn.read(chunk);
        if (n === null) return; // closed by the client
        buf = new Uint8Array([...buf, ...chunk.subarray(0, n)]);
        const text = new TextDecoder().decode(buf);
        const end = text.indexOf("\r\n\r\n");
        if (end < 0) continue;
        const head = text.slice(0, end);
        const length = Number(/^content-length: *(\d+)/im.exec(head)?.[1] ?? 0);
        if (buf.length < end + 4 + length) continue;
        buf = buf.subarray(end + 4 + length);
        const method = head.split(" ")[0];
        if (method === "HEAD") {
          this.heads++;
          if (fault === "hanghead") continue;
          await conn.write(enc.encode(
            "HTTP/1.1 200 OK\r\nx-amz-bucket-region: us-east-1\r\ncontent-length: 0\r\n\r\n",
          ));
        } else if (method === "PUT") {
          this.puts++;
          if (fault !== "trickle" || trickle !== undefined) continue;
          await conn.write(enc.encode(
            'HTTP/1.1 200 OK\r\netag: "x"\r\ntransfer-encoding: chunked\r\n\r\n',
          ));
          trickle = setInterval(() => conn.write(enc.encode("1\r\n \r\n")).catch(() => {}), 100);
        } else {
          await conn.write(enc.encode("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"));
        }
      }
    } catch {
      // reset by the client, or closed by close()
    } finally {
      clearInterval(trickle);
      this.open--;
      this.#conns.delete(conn);
      try {
        conn.close();
      } catch {
        // already closed
      }
    }
  }

  /** Closes the listener and every connection still open. */
  async close(): Promise<void> {
    this.#listener.close();
    for (const c of this.#conns) c.close();
    await this.#done;
  }
}

/** Runs `fn` with a started exporter (real clock, 1 s ticks, a spool) against `fault`. */
async function withUnanswering(
  fault: Fault,
  options: S3ExporterOptions,
  fn: (exporter: S3Exporter, server: Unanswering) => Promise<void>,
): Promise<void> {
  const server = new Unanswering(fault);
  const spoolDir = await tempSpoolDir();
  const exporter = new S3Exporter(
    s3UploaderConfig({
      bucketName: BUCKET,
      endpoint: server.endpoint,
      uploadInterval: "1s",
      spool: { dir: spoolDir, maxBytes: 1 << 24 },
    }),
    { stopRetryMs: 200, ...options, store: { env: s3rverEnv(), maxAttempts: 1, ...options.store } },
  );
  let stopped = false;
  try {
    await exporter.start();
    await waitFor(() => exporter.stats().spoolOpen, { what: "spool open", timeoutMs: 20_000 });
    for (const n of range(100)) exporter.addRecord(flowN(n));
    await fn(exporter, server);
    stopped = true;
  } finally {
    // A test that failed may leave a stop that never ends: the cleanup does not wait for it.
    if (!stopped) void exporter.stop();
    await server.close();
    await Deno.remove(spoolDir, { recursive: true });
  }
}

/** Whether `p` settles within `ms`. */
async function settlesWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), ms));
  try {
    return await Promise.race([p.then(() => true), late]);
  } finally {
    clearTimeout(timer);
  }
}

for (const fault of FAULTS) {
  Deno.test(`a server that never answers (${fault}): each attempt fails at requestTimeoutMs and is counted`, async () => {
    await withUnanswering(
      fault,
      { stopDeadlineMs: 1000, store: { requestTimeoutMs: 1000 } },
      async (exporter, server) => {
        // Before the fix the attempt never ended (the SDK only warned at its requestTimeout).
        const failed = () => {
          const s = exporter.stats();
          return fault === "hanghead" ? s.regionFailures >= 2 : s.uploadFailures >= 2;
        };
        await waitFor(failed, { what: "two failed attempts", timeoutMs: 30_000 });
        let s = exporter.stats();
        assert.equal(s.buffered, 100, "the records stay buffered");
        assert.equal(s.dropped, 0);
        assertLedger(s);
        if (fault === "hanghead") assert.equal(server.puts, 0);
        else assert.ok(server.puts >= 2, "retried at the next ticks");
        assert.ok(await settlesWithin(exporter.stop(), 10_000), "stop ends");
        s = exporter.stats();
        assert.equal(s.spooled, 100, "kept in the spool for the next start");
        assert.equal(s.stopDropped, 0);
        assertLedger(s);
        await waitFor(() => server.open === 0, { what: "connections closed", timeoutMs: 10_000 });
      },
    );
  });

  Deno.test(`a server that never answers (${fault}): stop ends by its deadline, what waits is spooled`, async () => {
    await withUnanswering(
      fault,
      // Only the stop deadline can end the request in flight.
      { stopDeadlineMs: 1000, store: { requestTimeoutMs: 600_000 } },
      async (exporter, server) => {
        await waitFor(() => (fault === "hanghead" ? server.heads : server.puts) > 0, {
          what: "request in flight",
          timeoutMs: 30_000,
        });
        // Before the fix stop() awaited the running pass, whose request never ended.
        assert.ok(await settlesWithin(exporter.stop(), 10_000), "stop ends by its deadline");
        const s = exporter.stats();
        if (fault === "hanghead") assert.equal(s.regionFailures, 1, "the aborted attempt counted");
        else assert.equal(s.uploadFailures, 1, "the aborted attempt counted");
        assert.equal(s.spooled, 100, "kept in the spool for the next start");
        assert.equal(s.buffered, 100);
        assert.equal(s.dropped, 0);
        assertLedger(s);
        await waitFor(() => server.open === 0, { what: "connections closed", timeoutMs: 10_000 });
      },
    );
  });
}
