/**
 * Smoke check that `npm:@aws-sdk/client-s3` talks to `npm:s3rver` under Deno with path-style
 * addressing: starts s3rver in process on a free port and a temporary directory, then
 * HeadBucket, PutObject, ListObjectsV2 and GetObject through the SDK. Exits non-zero on any
 * mismatch. `deno run -A scripts/s3_smoke.ts`
 *
 * @module
 */

import {
  GetObjectCommand,
  HeadBucketCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import { startS3rver } from "./s3rver.ts";

const dir = await Deno.makeTempDir({ prefix: "s3smoke" });
const server = await startS3rver({ dir, buckets: ["smoke"] });
const port = server.port;
const client = new S3Client({
  endpoint: `http://127.0.0.1:${port}`,
  forcePathStyle: true,
  region: "us-east-1",
  credentials: { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" },
});
try {
  const head = await client.send(new HeadBucketCommand({ Bucket: "smoke" }));
  console.log("HeadBucket", head.$metadata.httpStatusCode, "region header", head.BucketRegion);
  const body = new TextEncoder().encode("hello,s3\n");
  await client.send(new PutObjectCommand({ Bucket: "smoke", Key: "p/a.csv", Body: body }));
  const list = await client.send(new ListObjectsV2Command({ Bucket: "smoke" }));
  const keys = (list.Contents ?? []).map((o) => o.Key);
  console.log("ListObjectsV2", keys);
  const got = await client.send(new GetObjectCommand({ Bucket: "smoke", Key: "p/a.csv" }));
  const text = await got.Body!.transformToString();
  if (keys.join() !== "p/a.csv" || text !== "hello,s3\n") throw new Error("mismatch");
  console.log("ok: client-s3 and s3rver agree under Deno (path-style)");
} finally {
  client.destroy();
  await server.close();
  await Deno.remove(dir, { recursive: true });
}
