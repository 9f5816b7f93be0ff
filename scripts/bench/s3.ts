/**
 * The S3 sink's benchmarks: the CSV + gzip encoding rate of the sink alone (the sink's path:
 * each record's CSV line written as bytes by `CsvWriter` into the object, through the streaming
 * gzip compressor at the given level, objects finished every 100k records), and the upload
 * throughput of finished objects to a local S3 API server (npm:s3rver, in this process, on a
 * temp dir). Rates are per wall-clock second and per CPU second of the process (on a loaded
 * machine the second is the steadier figure).
 */

import process from "node:process";

import type { ExportedFlow } from "../../src/aggregation/record.ts";
import { CsvWriter } from "../../src/exporters/s3/csv.ts";
import { ObjectWriter } from "../../src/exporters/s3/object.ts";
import { SdkObjectStore } from "../../src/exporters/s3/store.ts";
import { fixtureFlow } from "../../tests/exporters/fixtures.ts";
import { startS3rver } from "../s3rver.ts";

/** What {@linkcode benchS3} measured. */
export interface S3BenchResult {
  /** Records/s formatted and compressed into finished objects. */
  recordsPerS: number;
  /** The same per CPU second of the process. */
  recordsPerCpuS: number;
  /** gzip level used. */
  gzipLevel: number;
  /** Compressed bytes / CSV bytes. */
  compressionRatio: number;
  /** MiB/s of objects uploaded to the local server. */
  uploadMiBPerS: number;
}

const OBJECT_RECORDS = 100_000;
const CLUSTER_UUID = "2a1c5d0e-3c8f-4b5e-9d4f-0123456789ab";

/** 1,000 distinct flows (ports, counters, throughput vary as in real traffic). */
function sampleFlows(): ExportedFlow[] {
  return Array.from({ length: 1000 }, (_, i) =>
    fixtureFlow(i % 10 === 0, {
      sourceTransportPort: 30000 + i,
      flowStartSeconds: 1637706961 + i,
      packetTotalCount: BigInt(823188 + i * 7919),
      octetTotalCount: BigInt(30472817041 + i * 104729),
      throughput: BigInt(15902813472 + i * 3),
      sourcePodName: `perftest-${i % 37}`,
    }));
}

/** One object of `OBJECT_RECORDS` records, as the sink writes it. */
async function encodeObject(
  flows: ExportedFlow[],
  csv: CsvWriter,
  options: { compress: boolean; gzipLevel: number },
): Promise<Uint8Array> {
  const w = new ObjectWriter(options);
  const t = Math.floor(Date.now() / 1000);
  for (let i = 0; i < OBJECT_RECORDS; i++) w.addFlow(csv, flows[i % flows.length], t);
  return (await w.finish()).body;
}

/**
 * Runs the encoding loop at `gzipLevel` for about `seconds`, then (unless `upload` is false)
 * uploads for about `seconds`.
 */
export async function benchS3(
  seconds: number,
  options: { gzipLevel: number; upload?: boolean },
): Promise<S3BenchResult> {
  const flows = sampleFlows();
  const csv = new CsvWriter(CLUSTER_UUID);
  const level = options.gzipLevel;
  const csvBytes = (await encodeObject(flows, csv, { compress: false, gzipLevel: level }))
    .byteLength;
  let records = 0;
  let gzBytes = 0;
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  const bodies: Uint8Array[] = [];
  while (performance.now() < end) {
    const body = await encodeObject(flows, csv, { compress: true, gzipLevel: level });
    gzBytes += body.byteLength;
    records += OBJECT_RECORDS;
    if (bodies.length < 4) bodies.push(body);
  }
  const wallS = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(c0);
  return {
    recordsPerS: records / wallS,
    recordsPerCpuS: records / ((cpu.user + cpu.system) / 1e6),
    gzipLevel: level,
    compressionRatio: gzBytes / (csvBytes * (records / OBJECT_RECORDS)),
    uploadMiBPerS: options.upload === false ? 0 : await uploadRate(bodies, seconds),
  };
}

async function uploadRate(bodies: Uint8Array[], seconds: number): Promise<number> {
  const dir = await Deno.makeTempDir({ prefix: "bench-s3rver-" });
  const server = await startS3rver({ dir, buckets: ["bench"] });
  const port = server.port;
  const env: Record<string, string> = {
    AWS_ACCESS_KEY_ID: "S3RVER",
    AWS_SECRET_ACCESS_KEY: "S3RVER",
  };
  const store = new SdkObjectStore(
    { bucket: "bench", region: "", endpoint: `http://127.0.0.1:${port}` },
    { env: (n) => env[n] },
  );
  try {
    let bytes = 0;
    let n = 0;
    const t0 = performance.now();
    const end = t0 + seconds * 1000;
    while (performance.now() < end || n === 0) {
      const body = bodies[n % bodies.length];
      await store.put(`records-${String(n).padStart(12, "0")}.csv.gz`, body);
      bytes += body.byteLength;
      n++;
    }
    return bytes / 1024 / 1024 / ((performance.now() - t0) / 1000);
  } finally {
    store.destroy();
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
}
