/**
 * Test process for the S3 sink's SIGKILL case: a sink whose store never answers (its region
 * discovery hangs, so no upload starts) and whose memory bound holds no object, so every
 * finished object goes to the spool in `Deno.args[0]`; prints `spooled N` once 300 records are
 * on disk, then keeps running until killed.
 */

import { S3Exporter } from "../../../src/exporters/s3/exporter.ts";
import { s3UploaderConfig } from "../../_helpers/s3.ts";
import { flowN, U } from "../../_helpers/s3_exporter.ts";

const [dir] = Deno.args;
const sink = new S3Exporter(
  s3UploaderConfig({
    bucketName: "flows",
    endpoint: "http://127.0.0.1:9",
    maxRecordsPerFile: 100,
    uploadInterval: "1h",
    spool: { dir },
  }),
  {
    clusterUuid: U,
    maxPendingBytes: 1,
    makeStore: () => ({
      discoverRegion: () => new Promise<string>(() => {}),
      put: () => Promise.reject(new Error("unreachable")),
      destroy: () => {},
    }),
  },
);
await sink.start();
await new Promise((r) => setTimeout(r, 0));
while (!sink.stats().spoolOpen) await new Promise((r) => setTimeout(r, 10));
for (let i = 1; i <= 300; i++) sink.addRecord(flowN(i));
await sink.flush();
console.log(`spooled ${sink.stats().spoolRecords}`);
setInterval(() => {}, 1000);
