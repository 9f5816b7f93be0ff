import assert from "node:assert/strict";
import {
  resolveEndpoint,
  resolveRegionHint,
  SdkObjectStore,
} from "../../../src/exporters/s3/store.ts";
import { s3rverEnv, S3Server } from "../../_helpers/s3.ts";

const BUCKET = "flows";

/**
 * An HTTP proxy in front of s3rver that answers a bucket's HEAD with `x-amz-bucket-region`, as
 * S3 does (s3rver itself sends no region). Requests are forwarded with their Host header, so
 * s3rver still checks their signatures.
 */
function regionProxy(server: S3Server, region: string): Deno.HttpServer<Deno.NetAddr> {
  return Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const url = new URL(req.url);
    const res = await fetch(`${server.endpoint}${url.pathname}${url.search}`, {
      method: req.method,
      headers: req.headers,
      body: req.body,
    });
    const headers = new Headers(res.headers);
    const isBucket = url.pathname.split("/").filter((p) => p !== "").length === 1;
    if (req.method === "HEAD" && isBucket) headers.set("x-amz-bucket-region", region);
    return new Response(req.method === "HEAD" ? null : res.body, {
      status: res.status,
      headers,
    });
  });
}

Deno.test("region discovery: the bucket's region comes from x-amz-bucket-region, then uploads go there", async () => {
  const server = await S3Server.start({ buckets: [BUCKET] });
  const proxy = regionProxy(server, "eu-central-1");
  const store = new SdkObjectStore(
    { bucket: BUCKET, region: "us-west-2", endpoint: `http://127.0.0.1:${proxy.addr.port}` },
    { env: s3rverEnv(), maxAttempts: 1 },
  );
  try {
    assert.equal(store.region, "us-west-2");
    assert.equal(await store.discoverRegion(), "eu-central-1");
    assert.equal(store.region, "eu-central-1", "the client is rebuilt for the bucket's region");
    await store.put("a/records-000000000000.csv", new TextEncoder().encode("x\n"));
    assert.deepEqual(await server.keys(BUCKET), ["a/records-000000000000.csv"]);
  } finally {
    store.destroy();
    await proxy.shutdown();
    await server.close();
  }
});

Deno.test("region discovery: a store that sends no region header keeps the hint", async () => {
  const server = await S3Server.start({ buckets: [BUCKET] });
  const store = new SdkObjectStore(
    { bucket: BUCKET, region: "ap-south-1", endpoint: server.endpoint },
    { env: s3rverEnv(), maxAttempts: 1 },
  );
  try {
    assert.equal(await store.discoverRegion(), "ap-south-1");
  } finally {
    store.destroy();
    await server.close();
  }
});

Deno.test("endpoint and region hint: configuration first, then the environment, then defaults", () => {
  const env = s3rverEnv({ AWS_ENDPOINT_URL: "http://generic:1", AWS_REGION: "eu-west-3" });
  assert.equal(resolveEndpoint("http://conf:9000", env), "http://conf:9000");
  assert.equal(resolveEndpoint("", env), "http://generic:1");
  assert.equal(
    resolveEndpoint("", s3rverEnv({ AWS_ENDPOINT_URL_S3: "http://s3:2", AWS_ENDPOINT_URL: "x" })),
    "http://s3:2",
  );
  assert.equal(resolveEndpoint("", s3rverEnv()), "");
  assert.equal(resolveRegionHint("us-east-2", env), "us-east-2");
  assert.equal(resolveRegionHint("", env), "eu-west-3");
  assert.equal(resolveRegionHint("", s3rverEnv()), "us-west-2");
});
