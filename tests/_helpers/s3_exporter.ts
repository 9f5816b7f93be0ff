/**
 * The S3 exporter's test fixture: an exporter on a manual clock against a real s3rver, with its
 * own spool directory, and the checks the S3 tests share (the ledger, every record once).
 */

import assert from "node:assert/strict";
import { ManualClock } from "../../src/clock.ts";
import {
  S3Exporter,
  type S3ExporterOptions,
  type S3ExporterStats,
} from "../../src/exporters/s3/exporter.ts";
import type { ExportedFlow } from "../../src/aggregation/record.ts";
import { formatCsvLine } from "../../src/exporters/s3/csv.ts";
import { setLogWriter } from "../../src/log.ts";
import type { ObjectStore } from "../../src/exporters/s3/store.ts";
import { fixtureFlow } from "../exporters/fixtures.ts";
import { s3rverEnv, S3Server, s3UploaderConfig } from "./s3.ts";
import { waitFor } from "./wait.ts";

/** Cluster UUID of the fixture. */
export const U = "11111111-2222-3333-4444-555555555555";
/** The bucket the fixture creates. */
export const BUCKET = "flows";

/** The ledger of the issue: every record taken is uploaded, dropped or buffered. */
export function assertLedger(s: S3ExporterStats): void {
  assert.equal(s.received, s.exported + s.dropped + s.buffered, JSON.stringify(s));
}

/** The fixture flow with a distinct source port, so each record can be found once. */
export function flowN(n: number): ExportedFlow {
  return fixtureFlow(false, { sourceTransportPort: n });
}

/** Source ports of every line of every object, and the objects. */
export async function uploadedPorts(
  server: S3Server,
  bucket = BUCKET,
): Promise<{ ports: number[]; objects: Map<string, string[]> }> {
  const objects = await server.objects(bucket);
  const ports = [...objects.values()].flat().map((l) => Number(l.split(",")[7]));
  return { ports: ports.sort((a, b) => a - b), objects };
}

/** `n` consecutive numbers from `from`. */
export function range(n: number, from = 1): number[] {
  return Array.from({ length: n }, (_, i) => from + i);
}

/** What a test run by {@linkcode withExporter} gets. */
export interface Fixture {
  server: S3Server;
  clock: ManualClock;
  exporter: S3Exporter;
  /** The test's spool directory. */
  spoolDir: string;
}

/** A fresh spool directory for one test (the default one under /tmp is shared). */
export function tempSpoolDir(): Promise<string> {
  return Deno.makeTempDir({ prefix: "s3-spool-" });
}

/**
 * Runs `fn` with an started exporter of `fields` against a fresh s3rver and spool directory,
 * then stops the exporter and removes both.
 */
export async function withExporter(
  fields: Record<string, string | number | boolean>,
  fn: (f: Fixture) => Promise<void>,
  options: S3ExporterOptions & {
    /** Buckets the server creates (default the fixture's). */
    buckets?: string[];
    /** Extra environment of the store (e.g. wrong credentials). */
    env?: Record<string, string>;
    /** Bound of the spool. Default 1 GiB. */
    spoolMaxBytes?: number;
  } = {},
): Promise<void> {
  const server = await S3Server.start({ buckets: options.buckets ?? [BUCKET] });
  const clock = new ManualClock();
  const spoolDir = await tempSpoolDir();
  const exporter = new S3Exporter(
    s3UploaderConfig({
      bucketName: BUCKET,
      endpoint: server.endpoint,
      spool: { dir: spoolDir, maxBytes: options.spoolMaxBytes ?? 1 << 30 },
      ...fields,
    }),
    {
      clock,
      clusterUuid: U,
      // One upload attempt at stop: the manual clock never reaches a retry pause.
      stopDeadlineMs: 0,
      ...options,
      store: { env: s3rverEnv(options.env), maxAttempts: 1, ...options.store },
    },
  );
  try {
    await exporter.start();
    // The spool opens in the background: tests that count spooled records start once it is.
    if (options.spool !== false) {
      await waitFor(() => exporter.stats().spoolOpen, { what: "spool open", timeoutMs: 20_000 });
    }
    await fn({ server, clock, exporter, spoolDir });
  } finally {
    await exporter.stop();
    await server.close();
    await Deno.remove(spoolDir, { recursive: true });
  }
}

/** Advances to the next upload tick and waits until the pass it starts is over. */
export async function tick(
  f: Fixture,
  ms: number,
  until: (s: S3ExporterStats) => boolean,
): Promise<void> {
  f.clock.advance(ms);
  await waitFor(() => until(f.exporter.stats()), { what: "upload pass", timeoutMs: 20_000 });
}

/** Bytes of an uncompressed object of 10 records of {@linkcode flowN} (ports 10..99). */
export const OBJECT_BYTES = 10 *
  formatCsvLine(flowN(10), {
    clusterUuid: U,
    timeInsertedSeconds: new ManualClock().wallMs() / 1000,
  }).length;

/** A store whose `put` lands the object and then reports a failure, `failures` times. */
export function landThenFail(failures: number): (store: ObjectStore) => ObjectStore {
  return (store) => ({
    discoverRegion: (signal) => store.discoverRegion(signal),
    async put(key, body, signal) {
      await store.put(key, body, signal);
      if (failures-- > 0) throw new Error("connection reset after upload");
    },
    destroy: () => store.destroy(),
  });
}

/** Captures the log lines written while `fn` runs. */
export async function captureLog(fn: () => Promise<void>): Promise<string[]> {
  const lines: string[] = [];
  const prev = setLogWriter((l) => lines.push(l));
  try {
    await fn();
  } finally {
    setLogWriter(prev);
  }
  return lines;
}
