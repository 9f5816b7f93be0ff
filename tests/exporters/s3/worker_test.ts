import assert from "node:assert/strict";
import { missingPermissions, WorkerExporter } from "../../../src/exporters/worker_exporter.ts";
import { AWS_ENV, s3Component } from "../../../src/exporters/s3/mod.ts";
import { fixtureFlow } from "../fixtures.ts";
import { S3RVER_CREDENTIALS, S3Server, s3UploaderConfig } from "../../_helpers/s3.ts";

const CTX = { podLabels: true, clusterUuid: "2a1c5d0e-3c8f-4b5e-9d4f-0123456789ab" };
const BUCKET = "flows";

Deno.test("permissions: an endpoint's host:port, or AWS's hosts; the SDK's env; the spool dir", () => {
  const withEndpoint = s3Component.permissions(
    s3UploaderConfig({
      bucketName: "b",
      endpoint: "http://minio.example:9000",
      spool: { dir: "/var/spool/fa-s3" },
    }),
  );
  assert.deepEqual(withEndpoint, {
    net: ["minio.example:9000"],
    read: ["/var/spool/fa-s3"],
    write: ["/var/spool/fa-s3"],
    env: AWS_ENV,
  });
  const byDefault = s3Component.permissions(s3UploaderConfig({ bucketName: "b" }));
  assert.deepEqual(byDefault.write, ["/tmp/flow-aggregator-spool/s3"]);
  const https = s3Component.permissions(
    s3UploaderConfig({ bucketName: "b", endpoint: "https://s3.internal" }),
  );
  assert.deepEqual(https.net, ["s3.internal:443"]);
  // Over https (and to AWS) node:https reads the runtime's root certificates: --allow-sys.
  assert.equal(https.sys, true);
  assert.ok(https.env.includes("NODE_USE_SYSTEM_CA"));
  const aws = s3Component.permissions(s3UploaderConfig({ bucketName: "b", region: "eu-west-1" }));
  if (Deno.env.get("AWS_ENDPOINT_URL_S3") === undefined) {
    assert.deepEqual(aws.net, ["*.amazonaws.com:443", "169.254.169.254:80"]);
    assert.equal(aws.sys, true);
  }
  for (const name of ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"]) {
    assert.ok(AWS_ENV.includes(name), name);
  }
});

Deno.test("the S3 sink uploads from its permission-narrowed worker (SDK env reads, net host)", async () => {
  // The worker reads the credentials from the environment, as in a Pod.
  Deno.env.set("AWS_ACCESS_KEY_ID", S3RVER_CREDENTIALS.accessKeyId);
  Deno.env.set("AWS_SECRET_ACCESS_KEY", S3RVER_CREDENTIALS.secretAccessKey);
  const server = await S3Server.start({ buckets: [BUCKET] });
  const spoolDir = await Deno.makeTempDir({ prefix: "s3-spool-" });
  const config = s3UploaderConfig({
    bucketName: BUCKET,
    bucketPrefix: "w",
    endpoint: server.endpoint,
    maxRecordsPerFile: 40,
    spool: { dir: spoolDir },
  });
  // Under `deno test` the worker module (and the AWS SDK under it) is type-checked as it loads.
  const e = new WorkerExporter(s3Component, config, CTX, { heartbeatTimeoutMs: 90_000 });
  try {
    assert.deepEqual(e.permissions.net, [server.hostPort]);
    await e.start();
    for (let i = 1; i <= 100; i++) {
      e.addRecord(fixtureFlow(i % 2 === 0, { sourceTransportPort: i }));
    }
    await e.flush();
    await e.stop();
    const s = e.stats();
    assert.equal(s.received, 100);
    assert.equal(s.exported, 100, JSON.stringify(s));
    assert.equal(s.dropped, 0);
    assert.equal(s.buffered, 0);
    assert.equal(s.permissionDenied, 0, "the SDK read nothing outside the worker's permissions");
    assert.equal(s.uncaught, 0);
    const objects = await server.objects(BUCKET);
    assert.equal(objects.size, 3, "40 + 40 + 20 records");
    assert.ok([...objects.keys()].every((k) => /^w\/records-[a-z0-9]{12}\.csv\.gz$/.test(k)));
    const ports = [...objects.values()].flat().map((l) => Number(l.split(",")[7]));
    assert.deepEqual(ports.sort((a, b) => a - b), Array.from({ length: 100 }, (_, i) => i + 1));
  } finally {
    await e.stop();
    await server.close();
    await Deno.remove(spoolDir, { recursive: true });
    Deno.env.delete("AWS_ACCESS_KEY_ID");
    Deno.env.delete("AWS_SECRET_ACCESS_KEY");
  }
});

Deno.test("the AWS wildcard host is checked against the process's own grant, not refused", () => {
  const p = s3Component.permissions(s3UploaderConfig({ bucketName: "b", endpoint: "" }));
  // Under --allow-all every host is granted: nothing is missing, and the wildcard does not throw.
  assert.deepEqual(missingPermissions({ ...p, net: ["*.amazonaws.com:443"] }), []);
});
