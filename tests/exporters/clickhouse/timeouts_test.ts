/**
 * The ClickHouse sink against a fake server that hangs or trickles (no real server needed):
 * a request given up closes its connection, so timeouts cannot fill the client's socket pool;
 * an answer that trickles is bounded by the request deadline; `stop()` is bounded by its
 * deadline whatever the server does, and the records of a request given up are spooled.
 * Real time (system clock): the deadlines are what is tested.
 */

import { withProcessEnv } from "../../_helpers/env_lock.ts";
import assert from "node:assert/strict";
import {
  ClickHouseExporter,
  type ClickHouseStats,
  INSERT_COLUMNS,
} from "../../../src/exporters/clickhouse/mod.ts";
import type { ClickHouseConfig } from "../../../src/exporters/clickhouse/config.ts";
import { classifyFailure } from "../../../src/exporters/clickhouse/connection.ts";
import { MAX_ERROR_TEXT } from "../../../src/log.ts";
import { waitFor } from "../../_helpers/wait.ts";
import { WorkerExporter } from "../../../src/exporters/worker_exporter.ts";
import { clickHouseComponent } from "../../../src/exporters/clickhouse/component.ts";
import { EXPORTER_STOP_TIMEOUT_MS } from "../../../src/exporters/exporter.ts";
import { within } from "../../../src/clock.ts";
import { fixtureFlow } from "../fixtures.ts";

const UUID = "5f3b4a3e-2c9a-4b0c-9d57-8a4e3c0f1b2a";

/**
 * What the fake server does with inserts (`/ping` with "trickle-ping", `version()` with
 * "endless-version"): "exception-200" answers 200 with an exception in the body (as a server
 * that began answering does), "endless" a 200 body that never ends, "error-18" a 500 with 18.16's
 * error text, "big-error" a 503 with a body of 4 MiB, "endless-error" a 503 whose body never
 * ends, "redirect" a 307.
 */
type Mode =
  | "ok"
  | "hang"
  | "trickle"
  | "trickle-ping"
  | "exception-200"
  | "endless"
  | "endless-version"
  | "endless-error"
  | "error-18"
  | "big-error"
  | "redirect";

/** A body of 64 KiB chunks that never ends (until the reader cancels). */
function endless(status = 200, served = (_bytes: number) => {}): Response {
  const chunk = new TextEncoder().encode(`{"v":"${"x".repeat(65_000)}"}\n`);
  return new Response(
    new ReadableStream({
      pull: (c) => {
        served(chunk.length);
        c.enqueue(chunk);
      },
    }),
    { status },
  );
}

/**
 * A fake ClickHouse HTTP interface (version 18.16, a table with the 50 columns) behind a TCP
 * relay that counts the client's open connections: a connection counts until the client
 * closes it (the relay then closes its side to the server).
 */
class FakeClickHouse {
  mode: Mode = "ok";
  /** INSERT requests received. */
  inserts = 0;
  /** INSERTs answered with success. */
  insertedBatches = 0;
  /** Bytes of endless answers handed to the server to send (read by the client, give or take
   * the buffers on the way). */
  servedBytes = 0;
  /** Client connections open now, and at most. */
  open = 0;
  maxOpen = 0;
  readonly #server: Deno.HttpServer<Deno.NetAddr>;
  readonly #listener: Deno.TcpListener;
  readonly #conns = new Set<Deno.Conn>();
  readonly #hung = new Set<(r: Response) => void>();
  readonly #timers = new Set<ReturnType<typeof setInterval>>();

  constructor() {
    this.#server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen() {} },
      (req) => this.#answer(req),
    );
    this.#listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    void this.#relay();
  }

  /** The URL the sink is given (the relay's). */
  get url(): string {
    return `http://127.0.0.1:${(this.#listener.addr as Deno.NetAddr).port}`;
  }

  #trickle(): Response {
    const timers = this.#timers;
    let t: ReturnType<typeof setInterval> | undefined;
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        t = setInterval(() => {
          try {
            c.enqueue(new Uint8Array([0x20]));
          } catch {
            clearInterval(t);
          }
        }, 100);
        timers.add(t!);
      },
      cancel() {
        clearInterval(t);
        timers.delete(t!);
      },
    });
    return new Response(body);
  }

  async #answer(req: Request): Promise<Response> {
    const url = new URL(req.url);
    const body = new TextDecoder().decode(await req.arrayBuffer());
    const q = (url.searchParams.get("query") ?? "") + body.slice(0, 200);
    if (url.pathname === "/ping") {
      return this.mode === "trickle-ping" ? this.#trickle() : new Response("Ok.\n");
    }
    if (/^INSERT INTO/.test(q)) {
      this.inserts++;
      if (this.mode === "hang") {
        const hung = Promise.withResolvers<Response>();
        this.#hung.add(hung.resolve);
        return await hung.promise;
      }
      if (this.mode === "trickle") return this.#trickle();
      if (this.mode === "exception-200") {
        return new Response(
          "Code: 241. DB::Exception: Memory limit (total) exceeded. (MEMORY_LIMIT_EXCEEDED)\n",
        );
      }
      const served = (n: number) => this.servedBytes += n;
      if (this.mode === "endless") return endless(200, served);
      if (this.mode === "endless-error") return endless(503, served);
      if (this.mode === "error-18") {
        return new Response(
          "Code: 60, e.displayText() = DB::Exception: Table default.flows doesn't exist., e.what() = DB::Exception\n",
          { status: 500 },
        );
      }
      if (this.mode === "big-error") return new Response("E".repeat(4 << 20), { status: 503 });
      if (this.mode === "redirect") {
        return new Response("", { status: 307, headers: { location: "http://127.0.0.1:1/" } });
      }
      this.insertedBatches++;
      return new Response("");
    }
    const json = { "content-type": "application/json", "X-ClickHouse-Format": "JSONEachRow" };
    const rows = (r: unknown[]) =>
      new Response(r.map((x) => JSON.stringify(x)).join("\n") + "\n", { headers: json });
    if (/version\(\)/.test(q)) {
      return this.mode === "endless-version"
        ? endless(200, (n) => this.servedBytes += n)
        : rows([{ v: "18.16.1" }]);
    }
    if (/DESCRIBE TABLE/.test(q)) return rows(INSERT_COLUMNS.map((name) => ({ name })));
    if (/SHOW CREATE TABLE/.test(q)) {
      return rows([{ statement: "CREATE TABLE flows () ENGINE = MergeTree" }]);
    }
    return new Response(`unknown query ${q}`, { status: 400 });
  }

  async #relay(): Promise<void> {
    for await (const client of this.#listener) {
      this.open++;
      this.maxOpen = Math.max(this.maxOpen, this.open);
      this.#conns.add(client);
      void (async () => {
        const upstream = await Deno.connect({
          hostname: "127.0.0.1",
          port: this.#server.addr.port,
        });
        this.#conns.add(upstream);
        const close = (c: Deno.Conn) => {
          this.#conns.delete(c);
          try {
            c.close();
          } catch {
            // closed already
          }
        };
        // Until the client closes (or the server does): then both sides are closed.
        await Promise.race([
          client.readable.pipeTo(upstream.writable, { preventClose: true }),
          upstream.readable.pipeTo(client.writable, { preventClose: true }),
        ]).catch(() => {});
        close(client);
        close(upstream);
      })().catch(() => {}).finally(() => this.open--);
    }
  }

  async close(): Promise<void> {
    this.#listener.close();
    for (const c of this.#conns) {
      try {
        c.close();
      } catch {
        // closed already
      }
    }
    for (const t of this.#timers) clearInterval(t);
    for (const answer of this.#hung) answer(new Response("", { status: 500 }));
    await this.#server.shutdown();
  }
}

function config(url: string, spoolDir: string): ClickHouseConfig {
  return {
    enable: true,
    database: "default",
    databaseURL: url,
    debug: false,
    compress: false,
    commitInterval: "1s",
    commitIntervalMs: 1000,
    tls: { insecureSkipVerify: false, caCert: false },
    spool: { dir: spoolDir, maxBytes: 1 << 24 },
  };
}

function sinkFor(
  fake: FakeClickHouse,
  dir: string,
  options: { requestTimeoutMs: number; stopTimeoutMs: number },
): ClickHouseExporter {
  return new ClickHouseExporter(config(fake.url, dir), UUID, {
    env: (n) => n === "CH_USERNAME" ? "u" : n === "CH_PASSWORD" ? "p" : undefined,
    backoffInitialMs: 50,
    backoffMaxMs: 100,
    maxBatchRows: 10,
    ...options,
  });
}

/** Stops the sink and the server, bounded (a failing test must end, not hang the run). */
async function cleanup(sink: ClickHouseExporter, fake: FakeClickHouse): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    sink.stop().then(() => fake.close()),
    new Promise((res) => timer = setTimeout(res, 10_000)),
  ]);
  clearTimeout(timer);
}

/** A fake server, a spool directory and a sink on them with `options`, for `body`; cleaned up. */
async function withSink(
  options: { requestTimeoutMs: number; stopTimeoutMs: number },
  body: (ctx: { sink: ClickHouseExporter; fake: FakeClickHouse; dir: string }) => Promise<void>,
): Promise<void> {
  const fake = new FakeClickHouse();
  const dir = await Deno.makeTempDir({ prefix: "ch-timeouts-" });
  const sink = sinkFor(fake, dir, options);
  try {
    await body({ sink, fake, dir });
  } finally {
    await cleanup(sink, fake);
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

let seq = 0;
/** One batch (10 rows: sealed and sent at once). */
function addBatch(sink: ClickHouseExporter): void {
  for (let i = 0; i < 10; i++) {
    sink.addRecord(fixtureFlow(false, { flowStartSeconds: 1_600_000_000 + seq++ }));
  }
}

/** received = exported + dropped + memory + spool (nothing in flight). */
/** Starts `sink` and waits until its first batch (10 records) is inserted. */
async function firstBatchInserted(sink: ClickHouseExporter): Promise<void> {
  await sink.start();
  addBatch(sink);
  await waitFor(async () => {
    await sink.flush();
    return sink.stats().exported === 10;
  }, { what: "the first batch inserted", timeoutMs: 20_000 });
}

function assertLedger(s: ClickHouseStats): void {
  assert.equal(
    s.received,
    s.exported + s.dropped + s.memoryRecords + s.spoolRecords,
    JSON.stringify(s),
  );
}

/** Calls `stop()` and returns how long it took; fails past 10 s (it must end by its deadline). */
async function timedStop(sink: ClickHouseExporter): Promise<number> {
  const t0 = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const ended = await Promise.race([
    sink.stop().then(() => true),
    new Promise<false>((res) => timer = setTimeout(() => res(false), 10_000)),
  ]);
  clearTimeout(timer);
  const ms = performance.now() - t0;
  assert.ok(ended, `stop() (deadline 1 s) still running after ${Math.round(ms)} ms`);
  return ms;
}

Deno.test("inserts that time out close their connections: past the pool's 10 the sink still tries, and delivers once the server answers", async () => {
  await withSink({ requestTimeoutMs: 300, stopTimeoutMs: 1000 }, async ({ sink, fake }) => {
    await sink.start();
    fake.mode = "hang";
    addBatch(sink);
    // Before: the 10th timeout left every socket of the pool held, and nothing was sent again.
    let feeder = setInterval(() => addBatch(sink), 200);
    await waitFor(() => fake.inserts >= 14, {
      what: "14 insert attempts against a server that never answers (the pool holds 10)",
      timeoutMs: 40_000,
      intervalMs: 50,
    });
    clearInterval(feeder);
    const hung = sink.stats();
    assert.ok(hung.insertErrors >= 13, JSON.stringify(hung));
    assert.ok(hung.spoolRecords > 0, "the batches wait in the spool");
    // One request at a time here (the spool is replayed batch by batch): the timed-out ones
    // are closed, not held (before: one more per timeout).
    assert.ok(fake.maxOpen <= 3, `at most ${fake.maxOpen} connections open at once`);

    fake.mode = "ok";
    feeder = setInterval(() => addBatch(sink), 200);
    await new Promise((r) => setTimeout(r, 600));
    clearInterval(feeder);
    await waitFor(async () => {
      await sink.flush();
      const s = sink.stats();
      return s.spoolRecords === 0 && s.memoryRecords === 0 && s.exported === s.received;
    }, { what: "every record inserted once the server answers", timeoutMs: 30_000 });
    assert.ok(fake.maxOpen <= 3, `at most ${fake.maxOpen} connections open at once`);
    await timedStop(sink);
    assertLedger(sink.stats());
    await waitFor(() => fake.open === 0, { what: "no connection left open after stop" });
  });
});

for (const mode of ["trickle", "trickle-ping"] as const) {
  const what = mode === "trickle" ? "an insert's answer" : "the ping's answer";
  Deno.test(`${what} trickling forever: the request deadline ends it, its records are spooled, its connection closed`, async () => {
    await withSink({ requestTimeoutMs: 500, stopTimeoutMs: 1000 }, async ({ sink, fake }) => {
      await firstBatchInserted(sink);
      // A failure first, so that the next attempt prepares again (and pings).
      if (mode === "trickle-ping") fake.mode = "hang";
      else fake.mode = "trickle";
      addBatch(sink);
      await waitFor(() => sink.stats().insertErrors >= 1, {
        what: "the insert given up",
        timeoutMs: 20_000,
      });
      fake.mode = mode;
      const errors = sink.stats().insertErrors;
      addBatch(sink);
      // Before: a trickled answer was read for as long as it trickled (no error, ever).
      await waitFor(() => sink.stats().insertErrors >= errors + 3, {
        what: "three more attempts given up at the request deadline",
        timeoutMs: 30_000,
      });
      const s = sink.stats();
      assert.equal(s.exported, 10);
      assert.ok(s.spoolRecords >= 20, `records spooled: ${JSON.stringify(s)}`);
      assert.ok(fake.maxOpen <= 3, `at most ${fake.maxOpen} connections open at once`);
      await timedStop(sink);
      const end = sink.stats();
      assertLedger(end);
      assert.equal(end.spoolRecords, end.received - 10);
      await waitFor(() => fake.open === 0, { what: "no connection left open after stop" });
    });
  });

  Deno.test(`stop while ${what} trickles (request timeout 60 s): stop ends by its 1 s deadline, the records are spooled`, async () => {
    await withSink(
      { requestTimeoutMs: 60_000, stopTimeoutMs: 1000 },
      async ({ sink, fake, dir }) => {
        await firstBatchInserted(sink);
        fake.mode = mode;
        if (mode === "trickle-ping") {
          // Force a preparation: a reload of a connection setting replaces the client.
          await sink.update({ ...config(fake.url, dir), compress: true });
        }
        addBatch(sink);
        await waitFor(() => mode === "trickle" ? fake.inserts >= 2 : fake.open >= 1, {
          what: "the request under way",
          timeoutMs: 20_000,
        });
        await new Promise((r) => setTimeout(r, 300)); // (trickling)
        const ms = await timedStop(sink);
        const s = sink.stats();
        assertLedger(s);
        assert.equal(s.exported, 10);
        assert.equal(s.spoolRecords, 10, `the batch given up is spooled: ${JSON.stringify(s)}`);
        assert.ok(ms < 10_000);
        await waitFor(() => fake.open === 0, { what: "no connection left open after stop" });
      },
    );
  });
}

Deno.test("an exception in a 200 answer is a failed insert of unknown outcome, not an export; delivered once the server recovers", async () => {
  await withSink({ requestTimeoutMs: 5_000, stopTimeoutMs: 1000 }, async ({ sink, fake }) => {
    await firstBatchInserted(sink);
    fake.mode = "exception-200";
    addBatch(sink);
    await waitFor(() => sink.stats().insertErrors >= 2, {
      what: "two failed attempts",
      timeoutMs: 20_000,
    });
    let s = sink.stats();
    // Before: counted inserted and exported, nothing stored, nothing logged.
    assert.equal(s.exported, 10, JSON.stringify(s));
    assert.equal(s.received - s.exported, 10);
    fake.mode = "ok";
    await waitFor(async () => {
      await sink.flush();
      return sink.stats().exported === 20;
    }, { what: "the batch inserted once the server recovers", timeoutMs: 20_000 });
    s = sink.stats();
    assert.equal(s.possiblyDuplicated, 10, "its earlier attempts may have written part of it");
    assertLedger(s);
  });
});

for (const mode of ["endless", "endless-version", "endless-error"] as const) {
  const what = {
    endless: "an insert's answer",
    "endless-version": "a preparation query's answer",
    "endless-error": "an insert's error answer (503)",
  }[mode];
  Deno.test(`${what} that never ends is given up after 1 MiB, long before the request deadline`, async () => {
    // A 60 s request deadline: only the answer's bound can end the attempts within the test.
    await withSink({ requestTimeoutMs: 60_000, stopTimeoutMs: 1000 }, async ({ sink, fake }) => {
      if (mode !== "endless-version") await firstBatchInserted(sink);
      else {
        fake.mode = mode;
        await sink.start();
      }
      fake.mode = mode;
      addBatch(sink);
      // Before: read for as long as it came (3.6 GB of RSS in 30 s in the sinks review).
      await waitFor(() => sink.stats().insertErrors >= 3, {
        what: "three attempts given up at the answer's bound",
        timeoutMs: 20_000,
      });
      const s = sink.stats();
      // Each attempt read about 1 MiB (before: the client read an error body until the string
      // could not grow, 512 MB each).
      const perAttempt = fake.servedBytes / s.insertErrors;
      assert.ok(perAttempt < 16 * 1024 * 1024, `${perAttempt} bytes served per attempt`);
      assert.equal(s.exported, mode === "endless-version" ? 0 : 10);
      assertLedger(s);
      await timedStop(sink);
      await waitFor(() => fake.open === 0, { what: "no connection left open after stop" });
    });
  });
}

Deno.test("18.16's error text is a refusal (not possibly inserted); a 4 MiB error body and a redirect give short, non-empty reasons", async () => {
  for (const mode of ["error-18", "big-error", "redirect"] as const) {
    await withSink({ requestTimeoutMs: 5_000, stopTimeoutMs: 1000 }, async ({ sink, fake }) => {
      await firstBatchInserted(sink);
      fake.mode = mode;
      addBatch(sink);
      await waitFor(() => sink.stats().insertErrors >= 2, {
        what: `${mode}: two failed attempts`,
        timeoutMs: 20_000,
      });
      fake.mode = "ok";
      await waitFor(async () => {
        await sink.flush();
        return sink.stats().exported === 20;
      }, { what: `${mode}: the batch inserted once the server recovers`, timeoutMs: 20_000 });
      const s = sink.stats();
      // Before: 18.16's refusals counted as possibly inserted (possiblyDuplicated 10).
      if (mode === "error-18") assert.equal(s.possiblyDuplicated, 0, JSON.stringify(s));
      assertLedger(s);
    });
  }
  // The reasons themselves (what the log line carries).
  const big = classifyFailure(new Error("E".repeat(4 << 20)));
  assert.ok(!big.ok && big.error.length < MAX_ERROR_TEXT + 100, `${!big.ok && big.error.length}`);
  assert.match(!big.ok ? big.error : "", /… \(4192256 more characters\)$/);
  const empty = classifyFailure(Object.assign(new Error(""), { name: "ClickHouseError" }));
  assert.equal(!empty.ok && empty.error, "ClickHouseError without a message");
  const old = classifyFailure(
    new Error("Code: 60, e.displayText() = DB::Exception: Table default.flows doesn't exist."),
  );
  assert.equal(!old.ok && old.unknown, false);
});

Deno.test("in its worker, a sink whose server hangs at stop keeps its records in the spool within the process's wait: none counted lost", async () => {
  // The worker reads the credentials from the process environment: held, and restored after,
  // so the other test files of the process (their sinks' workers) never see these.
  await withProcessEnv({ CH_USERNAME: "u", CH_PASSWORD: "p" }, stopHangs);
});

async function stopHangs(): Promise<void> {
  const fake = new FakeClickHouse();
  const dir = await Deno.makeTempDir({ prefix: "ch-stop-" });
  const e = new WorkerExporter(clickHouseComponent, config(fake.url, dir), {
    podLabels: false,
    clusterUuid: UUID,
  });
  try {
    await e.start();
    fake.mode = "hang";
    for (let i = 0; i < 50; i++) {
      e.addRecord(fixtureFlow(false, { flowStartSeconds: 1_600_000_000 + i }));
    }
    await waitFor(() => fake.inserts >= 1, { what: "the insert under way", timeoutMs: 20_000 });
    // As the process stops a sink: it waits EXPORTER_STOP_TIMEOUT_MS, then terminates the
    // worker and counts what it held lost. Before, the sink's own deadline was as long, so it
    // was terminated before it could spool anything (the sinks review: 2,486 records lost).
    assert.equal(await within(e.stop(), EXPORTER_STOP_TIMEOUT_MS), "done");
    const s = e.stats();
    assert.equal(s.lostInWorker, 0, JSON.stringify(s));
    assert.equal(s.dropped, 0);
    assert.equal(s.sink.spoolRecords, 50, JSON.stringify(s.sink));
    // Kept for the next start (its `recovered`): left in the spool, not buffered for good.
    assert.equal(s.leftInSpool, 50);
    assert.equal(s.buffered, 0);
    assert.equal(s.received, s.exported + s.dropped + s.buffered + s.unacknowledged);
  } finally {
    await within(e.stop(), 1000);
    await fake.close();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}
