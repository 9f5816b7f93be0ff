/**
 * End to end: the real process, on exactly the flags `permissions` prints, with the S3 sink (in
 * its worker) and the flow log enabled, uploading to s3rver. With timeouts of one hour nothing
 * expires on its own and the upload interval is an hour, so every object after SIGTERM comes
 * from the shutdown: the flows held are exported, the S3 sink finishes its current object and
 * uploads it before the process exits, or, with the server down, keeps it in its spool for the
 * next process.
 */

import assert from "node:assert/strict";
import { S3_COLUMNS } from "../../../src/record/schema.ts";
import { sendScenarioFlows } from "../../integration/helpers/agent.ts";
import { byKey, readFlowLog } from "../../integration/helpers/flow_log.ts";

import {
  apiArgs,
  DENO_JSON,
  FaProcess,
  flowLogConfig,
  printedPermissions,
} from "../../_helpers/process.ts";
import { S3RVER_CREDENTIALS, S3Server } from "../../_helpers/s3.ts";
import { waitFor } from "../../_helpers/wait.ts";

const BUCKET = "flows";

/** The flow log's 5-tuple key of an S3 CSV line. */
function csvKey(line: string): string {
  const c = line.split(",");
  const at = (name: string) => c[S3_COLUMNS.indexOf(name as typeof S3_COLUMNS[number])];
  return `${at("sourceIP")}:${at("sourceTransportPort")}->${at("destinationIP")}:${
    at("destinationTransportPort")
  }/${at("protocolIdentifier")}`;
}

/**
 * Starts the process on a configuration with the flow log in `dir` and the S3 sink uploading
 * to `server` (spool in `dir/s3-spool`), on exactly the flags `permissions` prints for it.
 */
async function startFa(dir: string, server: S3Server): Promise<FaProcess> {
  const config = flowLogConfig(`${dir}/flows.log`, {
    activeTimeout: "1h",
    inactiveTimeout: "1h",
    prettyPrint: false,
  }) +
    `s3Uploader:
  enable: true
  bucketName: ${BUCKET}
  bucketPrefix: e2e
  endpoint: ${server.endpoint}
  uploadInterval: 1h
  spool:
    dir: ${dir}/s3-spool
`;
  // The process runs on exactly the flags `permissions` prints for this configuration: the
  // S3 sink's worker (and the AWS SDK in it) gets the endpoint's host and the AWS variables.
  await Deno.writeTextFile(`${dir}/fa.conf`, config);
  // Its API token and cluster UUID state under the test's directory, on both sides.
  const extra = ["--state-dir", dir, ...apiArgs(`${dir}/api`)];
  const flags = await printedPermissions([
    ...["--config", `${dir}/fa.conf`, "--listen", "127.0.0.1:0", ...extra],
  ]);
  assert.ok(flags.includes(`--allow-net=127.0.0.1:0,${server.hostPort}`), flags.join(" "));
  return await FaProcess.startWithConfig(dir, config, {
    denoFlags: [...flags, "--config", DENO_JSON],
    args: ["--log-level", "debug", ...extra],
    env: {
      AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey,
    },
  });
}

/** Sends the scenario flows from two Agents over TCP and waits until both sessions closed. */
async function sendFlows(fa: FaProcess, portBase: number): Promise<number> {
  const port = await fa.collectorPort();
  const { agents, flows } = await sendScenarioFlows(port, portBase);
  for (const a of agents) a.close();
  await fa.waitFor(() => fa.find({ msg: "session closed" }).length >= 2, 20_000);
  return flows.length;
}

Deno.test("e2e S3: flows held at SIGTERM are in S3 objects once each, as in the flow log", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-s3-" });
  const server = await S3Server.start({ buckets: [BUCKET] });
  let fa: FaProcess | undefined;
  try {
    const logPath = `${dir}/flows.log`;
    fa = await startFa(dir, server);
    const sent = await sendFlows(fa, 47_000);
    assert.deepEqual(await server.keys(BUCKET), [], "nothing uploaded before the signal");

    const status = await fa.stop("SIGTERM");
    assert.equal(status.code, 0, fa.stderr);
    const objects = await server.objects(BUCKET);
    assert.equal(objects.size, 1, "the one current object, finished at stop");
    const [key] = objects.keys();
    assert.match(key, /^e2e\/records-[a-z0-9]{12}\.csv\.gz$/);
    const lines = [...objects.values()].flat();
    const logKeys = [...byKey(await readFlowLog(logPath)).keys()].sort();
    assert.equal(lines.length, sent);
    assert.deepEqual(lines.map(csvKey).sort(), logKeys, "each flow once, as in the flow log");
    const stopped = fa.find({ msg: "S3 uploader stopped" });
    assert.equal(stopped.length, 1, fa.stderr);
    assert.equal(Number(stopped[0].fields.exported), sent);
    assert.equal(Number(stopped[0].fields.dropped), 0);
  } finally {
    await fa?.dispose();
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("e2e S3: SIGTERM with the server down keeps the object in the spool; the next process uploads it once, under its key", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-e2e-s3-" });
  const server = await S3Server.start({ buckets: [BUCKET] });
  let fa: FaProcess | undefined;
  try {
    fa = await startFa(dir, server);
    const sent = await sendFlows(fa, 48_000);
    await server.stop();
    let status = await fa.stop("SIGTERM");
    assert.equal(status.code, 0, fa.stderr);
    const first = fa.find({ msg: "S3 uploader stopped" });
    assert.equal(first.length, 1, fa.stderr);
    assert.equal(Number(first[0].fields.dropped), 0, fa.stderr);
    assert.equal(Number(first[0].fields.spoolRecords), sent);
    const failed = fa.find({ msg: /error when uploading file to S3/ });
    assert.ok(failed.length >= 1, fa.stderr);
    const key = String(failed[0].fields.key);
    const logKeys = [...byKey(await readFlowLog(`${dir}/flows.log`)).keys()].sort();
    await fa.dispose();

    await server.restart();
    fa = await startFa(dir, server);
    await fa.waitFor(() => fa!.find({ msg: "S3 spool opened" }).length >= 1, 20_000);
    // The replay starts with the sink: wait for the object, then stop.
    await waitFor(async () => (await server.keys(BUCKET)).length > 0, {
      timeoutMs: 30_000,
      intervalMs: 100,
      what: "the spooled object uploaded",
    });
    status = await fa.stop("SIGTERM");
    assert.equal(status.code, 0, fa.stderr);
    const objects = await server.objects(BUCKET);
    assert.deepEqual([...objects.keys()], [key], "the spooled object, under the key it had");
    const lines = [...objects.values()].flat();
    assert.deepEqual(lines.map(csvKey).sort(), logKeys, "each flow once, as in the flow log");
    const second = fa.find({ msg: "S3 uploader stopped" });
    assert.equal(Number(second[0].fields.recovered), sent, fa.stderr);
    assert.equal(Number(second[0].fields.recoveredUploaded), sent, fa.stderr);
  } finally {
    await fa?.dispose();
    await server.close();
    await Deno.remove(dir, { recursive: true });
  }
});
