/**
 * The S3 side of the sink: a client of `npm:@aws-sdk/client-s3` for one bucket, the bucket's
 * region discovery (exporters.md §4.1) and object uploads (a single PutObject, or a multipart
 * upload through `npm:@aws-sdk/lib-storage` above the multipart threshold).
 *
 * Credentials and region follow upstream: the AWS SDK default chain, with the static keys of
 * the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`; an empty
 * session token is unset) read here so they work in a permission-narrowed worker; without them
 * the SDK's chain runs (web identity, instance role). The configured region is a hint: a
 * HeadBucket is sent to it and the bucket's real region is taken from the `x-amz-bucket-region`
 * header, which S3 sends on success and on the 301/403 answers alike.
 *
 * S3-compatible stores (MinIO, Ceph RGW, s3rver): an endpoint (`s3Uploader.endpoint`, else
 * `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`) switches to path-style addressing; a store
 * that sends no region header keeps the hint (or `us-east-1`).
 *
 * Answers: the SDK reads an answer's body whole into memory; a body over
 * {@linkcode MAX_ANSWER_BYTES} (an S3 answer is a few KB) fails the call instead, read no further.
 *
 * The SDK is imported on first use (see {@linkcode loadSdk}). Its own user-agent probe reads the OS release (`--allow-sys`), which a sink's worker is
 * not given: the user agent is set here instead.
 *
 * @module
 */

import type { S3Client } from "@aws-sdk/client-s3";
import { pipeline, Readable, Transform } from "node:stream";
import { CallGivenUp, withDeadline } from "../../deadline.ts";
import { envOrUnset } from "../../permission_entry.ts";

/**
 * The SDK, loaded on first use: it reads environment variables as it loads, which a process
 * with no S3 sink enabled (the main thread, which imports every component) may not read.
 */
let sdk:
  | Promise<[typeof import("@aws-sdk/client-s3"), typeof import("@aws-sdk/lib-storage")]>
  | undefined;
function loadSdk(): Promise<
  [typeof import("@aws-sdk/client-s3"), typeof import("@aws-sdk/lib-storage")]
> {
  sdk ??= Promise.all([import("@aws-sdk/client-s3"), import("@aws-sdk/lib-storage")]);
  return sdk;
}

/** Reads one environment variable (injectable: tests pass a map, the sink `Deno.env`). */
export type EnvReader = (name: string) => string | undefined;

/** Where objects go and how. */
export interface ObjectStoreTarget {
  /** Bucket name. */
  bucket: string;
  /** Region hint ("" = `AWS_REGION`, then `us-west-2`). */
  region: string;
  /** Endpoint URL of an S3-compatible store; "" = the environment's, else AWS. */
  endpoint: string;
}

/** Tuning of {@linkcode SdkObjectStore}. */
export interface ObjectStoreOptions {
  /** Bodies above this many bytes upload as multipart. Default 16 MiB. */
  multipartBytes?: number;
  /** Part size of a multipart upload (S3's minimum is 5 MiB). Default 8 MiB. */
  partBytes?: number;
  /** Attempts of one request inside the SDK (its own quick retries). Default 3. */
  maxAttempts?: number;
  /**
   * Wall-clock bound of one call: a PutObject or HeadBucket (the SDK's own retries and the
   * reading of the answer included) that has not completed after this long is aborted and
   * fails; a multipart upload gets this long per part, plus two. Default 60 s.
   */
  requestTimeoutMs?: number;
  /** Environment reader; default `Deno.env.get` (a denied variable reads as unset). */
  env?: EnvReader;
}

/** The operations the sink needs from S3; one implementation per bucket and endpoint. */
export interface ObjectStore {
  /** The bucket's region (discovered), or the hint when the store does not say. */
  discoverRegion(signal?: AbortSignal): Promise<string>;
  /**
   * Uploads `body` under `key` (an existing object of that key is overwritten). Rejects at once
   * when `signal` aborts, whatever the server does.
   */
  put(key: string, body: Uint8Array, signal?: AbortSignal): Promise<void>;
  /** Releases the client's connections. */
  destroy(): void;
}

const USER_AGENT: [string, string][] = [["flow-aggregator", "s3-sink"]];
const DEFAULT_REGION = "us-west-2";
const ENDPOINT_REGION = "us-east-1";

/**
 * Bytes of an answer's body the client reads at most. S3's answers are a few KB (an error's XML,
 * a multipart upload's result); the SDK reads a body whole into memory, so a larger one (a
 * broken or hostile endpoint) fails the call instead.
 */
export const MAX_ANSWER_BYTES = 1024 * 1024;

/** An answer whose body is over {@linkcode MAX_ANSWER_BYTES}: the call fails, the body unread. */
export class AnswerTooLarge extends Error {
  /** `length`: the answer's content-length (undefined: the bytes that arrived went over). */
  constructor(status: number, length?: number) {
    const what = length === undefined ? "body" : `of content-length ${length}`;
    super(`HTTP ${status} answer ${what} over the ${MAX_ANSWER_BYTES}-byte bound: not read`);
    this.name = "AnswerTooLarge";
  }
}

/** The parts of an SDK HTTP answer {@linkcode boundAnswer} reads and replaces. */
interface HttpAnswer {
  statusCode: number;
  headers: Record<string, string | undefined>;
  body?: unknown;
}

/**
 * Bounds the body of `answer` to {@linkcode MAX_ANSWER_BYTES} before the SDK reads it: throws
 * {@linkcode AnswerTooLarge} when its content-length is over (a HEAD's describes no body), and
 * replaces the body by a stream that fails with it once more bytes than that arrive; either way
 * the connection is closed.
 */
function boundAnswer(method: string, answer: HttpAnswer): void {
  const body = answer.body;
  const length = Number(answer.headers["content-length"]);
  if (method !== "HEAD" && length > MAX_ANSWER_BYTES) {
    if (body instanceof Readable) body.destroy();
    throw new AnswerTooLarge(answer.statusCode, length);
  }
  if (!(body instanceof Readable)) return;
  let read = 0;
  const bounded = new Transform({
    transform(chunk: Uint8Array, _encoding, done) {
      read += chunk.byteLength;
      if (read <= MAX_ANSWER_BYTES) done(null, chunk);
      else done(new AnswerTooLarge(answer.statusCode));
    },
  });
  // On the bound's error the answer's stream is destroyed too (its connection closed).
  pipeline(body, bounded, () => {});
  answer.body = bounded;
}

/**
 * The environment variables that name the endpoint when the configuration does not, in order
 * (the AWS SDK's): read by {@linkcode resolveEndpoint}, so by the S3 component's permission
 * computation too (its `permissionEnv`).
 */
export const ENDPOINT_ENV: readonly ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"] = [
  "AWS_ENDPOINT_URL_S3",
  "AWS_ENDPOINT_URL",
];

/** The endpoint in force: the configured one, else `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`. */
export function resolveEndpoint(configured: string, env: EnvReader = envOrUnset): string {
  return configured || ENDPOINT_ENV.map((name) => env(name)).find((v) => v) || "";
}

/** The region hint in force: the configured one, else `AWS_REGION`, else `us-west-2`. */
export function resolveRegionHint(configured: string, env: EnvReader = envOrUnset): string {
  return configured || env("AWS_REGION") || DEFAULT_REGION;
}

function headerRegion(err: unknown): string | undefined {
  const e = err as {
    BucketRegion?: string;
    $response?: { headers?: Record<string, string | undefined> };
  };
  return e?.BucketRegion ?? e?.$response?.headers?.["x-amz-bucket-region"] ?? undefined;
}

/** The HTTP status of an SDK error's answer, if it had one. */
function httpStatus(err: unknown): number | undefined {
  return (err as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode;
}

/** A short description of an SDK error: code, HTTP status and message. */
export function describeS3Error(err: unknown): string {
  const e = err as { name?: string; message?: string };
  const status = httpStatus(err);
  const name = e?.name ?? "Error";
  const msg = e?.message || (status === undefined ? String(err) : "");
  return `${name}${status === undefined ? "" : ` (HTTP ${status})`}${msg ? `: ${msg}` : ""}`;
}

/**
 * S3's error codes that retrying does not cure: the credentials, the bucket or the region are
 * wrong (a reload, new credentials or a fixed policy may cure them).
 */
const PERMANENT_CODES = new Set([
  "AccessDenied",
  "AccountProblem",
  "AllAccessDisabled",
  "AuthorizationHeaderMalformed",
  "InvalidAccessKeyId",
  "InvalidBucketName",
  "NoSuchBucket",
  "PermanentRedirect",
  "SignatureDoesNotMatch",
]);

/** The error's S3 code (`AccessDenied`, `SlowDown`, ...), else its name. */
export function s3ErrorCode(err: unknown): string {
  const e = err as { Code?: string; name?: string };
  return e?.Code ?? e?.name ?? "Error";
}

/**
 * Whether S3 refused the call for good (see {@linkcode PERMANENT_CODES}; also any 301, and any
 * 403 but a clock skew, which the SDK corrects), as opposed to a failure a retry may cure.
 */
export function isPermanentS3Error(err: unknown): boolean {
  const status = httpStatus(err);
  const code = s3ErrorCode(err);
  return PERMANENT_CODES.has(code) || status === 301 ||
    (status === 403 && code !== "RequestTimeTooSkewed");
}

/**
 * The region a 301 answer (`PermanentRedirect`: the bucket is in another region than the one
 * the call was signed for) names in `x-amz-bucket-region`; undefined for any other error.
 */
export function movedToRegion(err: unknown): string | undefined {
  const status = httpStatus(err);
  if (status !== 301 && s3ErrorCode(err) !== "PermanentRedirect") return undefined;
  return headerRegion(err) || undefined;
}

/** An {@linkcode ObjectStore} on the AWS SDK. */
export class SdkObjectStore implements ObjectStore {
  readonly #target: ObjectStoreTarget;
  readonly #opts: Required<Omit<ObjectStoreOptions, "env">>;
  readonly #env: EnvReader;
  readonly #endpoint: string;
  #region: string;
  /** The client for {@linkcode #region}, built on first use. */
  #client: Promise<S3Client> | undefined;

  /** A store for `target`; no request is sent until a call. */
  constructor(target: ObjectStoreTarget, options: ObjectStoreOptions = {}) {
    this.#target = { ...target };
    this.#env = options.env ?? envOrUnset;
    this.#opts = {
      multipartBytes: options.multipartBytes ?? 16 * 1024 * 1024,
      partBytes: options.partBytes ?? 8 * 1024 * 1024,
      maxAttempts: options.maxAttempts ?? 3,
      requestTimeoutMs: options.requestTimeoutMs ?? 60_000,
    };
    this.#endpoint = resolveEndpoint(target.endpoint, this.#env);
    this.#region = this.#endpoint !== "" && target.region === ""
      ? ENDPOINT_REGION
      : resolveRegionHint(target.region, this.#env);
  }

  /** The region the client is built for. */
  get region(): string {
    return this.#region;
  }

  /** The endpoint in use ("" = AWS). */
  get endpoint(): string {
    return this.#endpoint;
  }

  #credentials():
    | { accessKeyId: string; secretAccessKey: string; sessionToken?: string }
    | undefined {
    const id = this.#env("AWS_ACCESS_KEY_ID");
    const secret = this.#env("AWS_SECRET_ACCESS_KEY");
    if (!id || !secret) return undefined; // the SDK's default chain
    const token = this.#env("AWS_SESSION_TOKEN");
    return token ? { accessKeyId: id, secretAccessKey: secret, sessionToken: token } : {
      accessKeyId: id,
      secretAccessKey: secret,
    };
  }

  #clientFor(): Promise<S3Client> {
    this.#client ??= loadSdk().then(([{ S3Client }]) => this.#makeClient(S3Client, this.#region));
    return this.#client;
  }

  #makeClient(Client: typeof S3Client, region: string): S3Client {
    const client = new Client({
      region,
      ...(this.#endpoint === "" ? {} : { endpoint: this.#endpoint, forcePathStyle: true }),
      credentials: this.#credentials(),
      maxAttempts: this.#opts.maxAttempts,
      requestHandler: {
        requestTimeout: this.#opts.requestTimeoutMs,
        // Without it @smithy/node-http-handler 4.x only logs a warning and keeps waiting.
        throwOnRequestTimeout: true,
        // No reused connections: under Deno 2.9 a request aborted on a reused keep-alive
        // connection is sent again by the runtime on a new one, which nothing then ends (a
        // PUT to a server that never answers left one more connection open at every attempt).
        httpAgent: { keepAlive: false },
        httpsAgent: { keepAlive: false },
        connectionTimeout: Math.min(this.#opts.requestTimeoutMs, 10_000),
      },
      // Checksums only where S3 requires them: S3-compatible stores differ in their support.
      requestChecksumCalculation: "WHEN_REQUIRED",
      responseChecksumValidation: "WHEN_REQUIRED",
      defaultUserAgentProvider: () => Promise.resolve(USER_AGENT),
    });
    // Every answer passes here before any of the SDK's middleware reads its body.
    const handler = client.config.requestHandler;
    const handle = handler.handle.bind(handler);
    handler.handle = async (request, options) => {
      const out = await handle(request, options);
      boundAnswer(request.method, out.response);
      return out;
    };
    return client;
  }

  /**
   * Sends HeadBucket to the hint's region and rebuilds the client for the region the answer
   * names. Without a region in the answer: an S3-compatible store keeps the hint; AWS fails
   * with upstream's message. Bounded by `requestTimeoutMs` and `signal`.
   */
  async discoverRegion(signal?: AbortSignal): Promise<string> {
    const [{ HeadBucketCommand }] = await loadSdk();
    const client = await this.#clientFor();
    let region: string | undefined;
    let failure: unknown;
    try {
      const out = await withDeadline(
        "HeadBucket",
        this.#opts.requestTimeoutMs,
        signal,
        (abortSignal) =>
          client.send(new HeadBucketCommand({ Bucket: this.#target.bucket }), { abortSignal }),
      );
      region = out.BucketRegion;
    } catch (err) {
      if (signal?.aborted || err instanceof CallGivenUp) throw err;
      region = headerRegion(err);
      failure = err;
    }
    if (region === undefined || region === "") {
      if (this.#endpoint !== "") return this.#region;
      throw new Error(
        `unable to determine region for bucket '${this.#target.bucket}', make sure the bucket ` +
          `exists and set the region parameter appropriately: ${describeS3Error(failure)}`,
      );
    }
    if (region !== this.#region) {
      client.destroy();
      this.#region = region;
      this.#client = undefined;
    }
    return region;
  }

  /**
   * Uploads one object (multipart above the threshold), bounded by `requestTimeoutMs` and
   * `signal`; rejects with the SDK's error or `CallGivenUp` (deadline.ts).
   */
  async put(key: string, body: Uint8Array, signal?: AbortSignal): Promise<void> {
    const [{ PutObjectCommand }, { Upload }] = await loadSdk();
    const client = await this.#clientFor();
    const params = { Bucket: this.#target.bucket, Key: key, Body: body };
    const ms = this.#opts.requestTimeoutMs;
    if (body.byteLength <= this.#opts.multipartBytes) {
      await withDeadline(
        "PutObject",
        ms,
        signal,
        (abortSignal) => client.send(new PutObjectCommand(params), { abortSignal }),
      );
      return;
    }
    const parts = Math.ceil(body.byteLength / this.#opts.partBytes);
    try {
      await withDeadline("multipart upload", ms * (parts + 2), signal, async (abortSignal) => {
        const upload = new Upload({ client, params, partSize: this.#opts.partBytes, queueSize: 2 });
        const abort = () => void upload.abort();
        abortSignal.addEventListener("abort", abort, { once: true });
        try {
          await upload.done();
        } finally {
          abortSignal.removeEventListener("abort", abort);
        }
      });
    } catch (err) {
      // lib-storage sends its parts without the signal: closing the client's connections ends
      // the requests still running; the next call builds a new client.
      if (signal?.aborted || err instanceof CallGivenUp) this.destroy();
      throw err;
    }
  }

  /** Closes the client's connections. */
  destroy(): void {
    void this.#client?.then((c) => c.destroy());
    this.#client = undefined;
  }
}
