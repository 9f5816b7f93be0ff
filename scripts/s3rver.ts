/**
 * Starts `npm:s3rver`, a local S3 API server, for the S3 sink's tests, smoke check and
 * benchmark. As a script it prints one line `s3rver listening on http://127.0.0.1:<port>` once it
 * accepts connections, then `request <METHOD> <URL>` per request, and stops on SIGTERM or SIGINT; {@linkcode startS3rver} runs one in the
 * calling process. Objects live under the directory (kept across restarts on the same
 * directory, which the outage tests rely on). Credentials: `S3RVER` / `S3RVER` (signatures are
 * checked, so wrong credentials are refused as by AWS).
 *
 * Usage: deno run -A scripts/s3rver.ts --dir DIR [--port 0] [--bucket NAME ...]
 *
 * @module
 */

import S3rver from "s3rver";
import { parseArgs } from "node:util";

/** A running server. */
export interface RunningS3rver {
  /** The port it listens on (127.0.0.1). */
  port: number;
  /** Stops it. */
  close(): Promise<void>;
}

/** Starts s3rver on 127.0.0.1 (`port` 0: a free one), with `buckets` created. */
export async function startS3rver(
  options: {
    dir: string;
    port?: number;
    buckets?: readonly string[];
    /** Called with the method and URL of every request, before s3rver handles it. */
    onRequest?: (method: string, url: string) => void;
  },
): Promise<RunningS3rver> {
  const server = new S3rver({
    address: "127.0.0.1",
    port: options.port ?? 0,
    directory: options.dir,
    silent: true,
    configureBuckets: (options.buckets ?? []).map((name) => ({ name, configs: [] })),
  });
  const onRequest = options.onRequest;
  if (onRequest !== undefined) {
    // s3rver is a Koa application: a middleware placed first sees every request.
    (server as unknown as { middleware: unknown[] }).middleware.unshift(
      async (ctx: { method: string; url: string }, next: () => Promise<void>) => {
        onRequest(ctx.method, ctx.url);
        await next();
      },
    );
  }
  const { port } = await server.run() as { port: number };
  return { port, close: () => server.close() };
}

if (import.meta.main) {
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
  const server = await startS3rver({
    dir: values.dir,
    port: Number(values.port),
    buckets: values.bucket,
    onRequest: (method, url) => console.log(`request ${method} ${url}`),
  });
  console.log(`s3rver listening on http://127.0.0.1:${server.port}`);
  let closing = false;
  const close = async (): Promise<void> => {
    if (closing) return;
    closing = true;
    await server.close();
    Deno.exit(0);
  };
  Deno.addSignalListener("SIGTERM", close);
  Deno.addSignalListener("SIGINT", close);
}
