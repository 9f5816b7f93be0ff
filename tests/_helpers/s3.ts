/**
 * A real S3 API server for the S3 sink's tests: `scripts/s3rver.ts` (npm:s3rver) run as a child
 * process on a free port and a temporary directory, so a test can stop it (an outage) and start
 * it again on the same port and data. Also a client to read back what was uploaded: keys,
 * object bytes, and CSV lines (gunzipped when the key ends in `.gz`).
 */

import {
  GetObjectCommand,
  ListObjectsV2Command,
  S3Client,
  type S3ClientConfig,
} from "@aws-sdk/client-s3";
import { gunzipSync } from "node:zlib";
import { DENO_JSON, REPO } from "./process.ts";
import { type S3UploaderConfig, s3UploaderSection } from "../../src/exporters/s3/config.ts";

/** exporters.md §8.3 S1 (the fixture record's CSV line, no newline), spelled out as the spec writes it. */
export function s1Line(clusterUuid: string, timeInserted: number): string {
  return "1637706961,1637706973,1637706974,1637706975,3,10.10.0.79,10.10.0.80," +
    "44752,5201,6,823188,30472817041,241333,8982624938,471111,24500996,136211,7083284," +
    "perftest-a,antrea-test,k8s-node-control-plane,perftest-b,antrea-test-b," +
    "k8s-node-control-plane-b,10.10.1.10,5202,perftest," +
    "test-flow-aggregator-networkpolicy-ingress-allow,antrea-test-ns," +
    "test-flow-aggregator-networkpolicy-rule,2,1,test-flow-aggregator-networkpolicy-egress-allow," +
    "antrea-test-ns-e,test-flow-aggregator-networkpolicy-rule-e,5,4,TIME_WAIT,11," +
    `'{"antrea-e2e":"perftest-a","app":"iperf"}','{"antrea-e2e":"perftest-b","app":"iperf"}',` +
    `15902813472,12381344,15902813473,15902813474,12381345,12381346,${clusterUuid},${timeInserted},test-egress,172.18.0.1`;
}

/** Credentials s3rver accepts (it checks signatures). */
export const S3RVER_CREDENTIALS = { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" } as const;

/** How to start the server. */
export interface S3ServerOptions {
  /** Buckets created at start. */
  buckets?: readonly string[];
}

/** One running (or stopped) s3rver child process. */
export class S3Server {
  readonly #dir: string;
  readonly #buckets: readonly string[];
  #port = 0;
  #child: Deno.ChildProcess | undefined;
  #client: S3Client | undefined;
  /** `METHOD URL` of every request the server received, in order (across restarts). */
  readonly requests: string[] = [];

  private constructor(dir: string, buckets: readonly string[]) {
    this.#dir = dir;
    this.#buckets = buckets;
  }

  /** Starts a server on a free port with a fresh directory. */
  static async start(options: S3ServerOptions = {}): Promise<S3Server> {
    const dir = await Deno.makeTempDir({ prefix: "s3rver-" });
    const s = new S3Server(dir, options.buckets ?? []);
    await s.#spawn();
    return s;
  }

  /** `http://127.0.0.1:<port>`. */
  get endpoint(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  /** `127.0.0.1:<port>`. */
  get hostPort(): string {
    return `127.0.0.1:${this.#port}`;
  }

  /** True while the child runs. */
  get running(): boolean {
    return this.#child !== undefined;
  }

  async #spawn(): Promise<void> {
    const args = [
      "run",
      "-A",
      "--config",
      DENO_JSON,
      `${REPO}scripts/s3rver.ts`,
      "--dir",
      this.#dir,
      "--port",
      String(this.#port),
      ...this.#buckets.flatMap((b) => ["--bucket", b]),
    ];
    const child = new Deno.Command(Deno.execPath(), {
      args,
      stdout: "piped",
      stderr: "inherit",
      stdin: "null",
    }).spawn();
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        await child.status;
        throw new Error(`s3rver exited before listening: ${text}`);
      }
      text += value;
      const m = text.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        this.#port = Number(m[1]);
        break;
      }
    }
    // Keep reading stdout (the child never blocks on a full pipe): one line per request.
    let rest = text.slice(text.indexOf("\n") + 1);
    const record = (chunk: string) => {
      rest += chunk;
      const lines = rest.split("\n");
      rest = lines.pop()!;
      for (const l of lines) if (l.startsWith("request ")) this.requests.push(l.slice(8));
    };
    record("");
    void (async () => {
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          record(value);
        }
      } catch { /* closed */ }
    })();
    this.#child = child;
  }

  /** Stops the server (SIGTERM); its data stays for {@linkcode restart}. */
  async stop(): Promise<void> {
    const child = this.#child;
    if (child === undefined) return;
    this.#child = undefined;
    try {
      child.kill("SIGTERM");
    } catch { /* already gone */ }
    await child.status;
  }

  /** Starts the server again on the same port and directory. */
  async restart(): Promise<void> {
    await this.stop();
    await this.#spawn();
  }

  /** Stops the server, destroys the client and removes the data directory. */
  async close(): Promise<void> {
    this.#client?.destroy();
    await this.stop();
    await Deno.remove(this.#dir, { recursive: true }).catch(() => {});
  }

  /** Client options for this server (path-style, s3rver's credentials). */
  clientConfig(): S3ClientConfig {
    return {
      endpoint: this.endpoint,
      forcePathStyle: true,
      region: "us-east-1",
      credentials: S3RVER_CREDENTIALS,
    };
  }

  #s3(): S3Client {
    this.#client ??= new S3Client(this.clientConfig());
    return this.#client;
  }

  /** Every key in `bucket`, sorted. */
  async keys(bucket: string): Promise<string[]> {
    const out: string[] = [];
    let token: string | undefined;
    do {
      const page = await this.#s3().send(
        new ListObjectsV2Command({ Bucket: bucket, ContinuationToken: token }),
      );
      for (const o of page.Contents ?? []) out.push(o.Key!);
      token = page.NextContinuationToken;
    } while (token !== undefined);
    return out.sort();
  }

  /** The bytes of one object. */
  async object(bucket: string, key: string): Promise<Uint8Array> {
    const got = await this.#s3().send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    return await got.Body!.transformToByteArray();
  }

  /** The CSV lines of one object (gunzipped when the key ends in `.gz`). */
  async lines(bucket: string, key: string): Promise<string[]> {
    const bytes = await this.object(bucket, key);
    const raw = key.endsWith(".gz") ? gunzipSync(bytes) : bytes;
    const text = new TextDecoder().decode(raw);
    assertLines(text, key);
    return text === "" ? [] : text.slice(0, -1).split("\n");
  }

  /** Every object of `bucket` with its CSV lines. */
  async objects(bucket: string): Promise<Map<string, string[]>> {
    const out = new Map<string, string[]>();
    for (const key of await this.keys(bucket)) out.set(key, await this.lines(bucket, key));
    return out;
  }
}

function assertLines(text: string, key: string): void {
  if (text !== "" && !text.endsWith("\n")) {
    throw new Error(`object ${key}: last CSV line is not newline-terminated`);
  }
}

/** An environment reader with s3rver's credentials (and nothing else). */
export function s3rverEnv(
  extra: Record<string, string> = {},
): (name: string) => string | undefined {
  const env: Record<string, string> = {
    AWS_ACCESS_KEY_ID: S3RVER_CREDENTIALS.accessKeyId,
    AWS_SECRET_ACCESS_KEY: S3RVER_CREDENTIALS.secretAccessKey,
    ...extra,
  };
  return (name) => env[name];
}

/**
 * A validated, enabled `s3Uploader` section with `fields` over the defaults (give tests their
 * own `spool: { dir }`: the default directory under `/tmp` is shared).
 */
export function s3UploaderConfig(
  fields: Record<string, string | number | boolean | Record<string, string | number>>,
): S3UploaderConfig {
  const c = s3UploaderSection.build({ enable: true, ...fields }, { tmpDir: "/tmp" });
  s3UploaderSection.required?.(c);
  s3UploaderSection.validate?.(c);
  return c;
}
