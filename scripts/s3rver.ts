/**
 * Starts `npm:s3rver`, a local S3 API server, for the S3 sink's tests and benchmark. Prints one
 * line `s3rver listening on http://127.0.0.1:<port>` once it accepts connections, and stops on
 * SIGTERM or SIGINT. Objects live under `--dir` (kept across restarts on the same directory,
 * which the outage tests rely on). Credentials: `S3RVER` / `S3RVER` (signatures are checked,
 * so wrong credentials are refused as by AWS).
 *
 * Usage: deno run -A scripts/s3rver.ts --dir DIR [--port 0] [--bucket NAME ...]
 *
 * @module
 */

import S3rver from "s3rver";
import { parseArgs } from "node:util";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    dir: { type: "string" },
    port: { type: "string", default: "0" },
    bucket: { type: "string", multiple: true, default: [] },
  },
});
if (values.dir === undefined) {
  console.error("usage: s3rver.ts --dir DIR [--port N] [--bucket NAME ...]");
  Deno.exit(2);
}

const server = new S3rver({
  address: "127.0.0.1",
  port: Number(values.port),
  directory: values.dir,
  silent: true,
  configureBuckets: values.bucket.map((name) => ({ name, configs: [] })),
});
const { port } = await server.run() as { port: number };
console.log(`s3rver listening on http://127.0.0.1:${port}`);

let closing = false;
async function close(): Promise<void> {
  if (closing) return;
  closing = true;
  await server.close();
  Deno.exit(0);
}
Deno.addSignalListener("SIGTERM", close);
Deno.addSignalListener("SIGINT", close);
