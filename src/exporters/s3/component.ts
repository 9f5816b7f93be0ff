/**
 * The S3 exporter component (exporters.md §4): CSV objects in a bucket, uploaded from a worker
 * that has only these permissions:
 *
 * - `net`: an S3-compatible endpoint's `host:port` when one is configured
 *   (`s3Uploader.endpoint`, else `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, which the permission
 *   computation therefore reads: its `permissionEnv`, in every process's and the launcher's
 *   `--allow-env`); for AWS,
 *   `*.amazonaws.com:443` (the bucket's region is discovered at run time, so its regional
 *   endpoint cannot be named in advance; STS for web identity is there too) and the instance
 *   metadata service `169.254.169.254:80` (instance-role credentials);
 * - `env`: {@linkcode AWS_ENV}, the variables the AWS SDK reads (found by running it in a worker
 *   narrowed to them: an unlisted read throws `NotCapable`, counted as `permissionDenied`);
 * - `read` and `write` of the spool directory (`s3Uploader.spool.dir`);
 * - no other file access, no `sys`, `run` or `ffi`.
 *
 * The sink itself (`exporter.ts`) is imported by `create`, so a process or worker without
 * the S3 sink never loads it; the registry (src/components.ts) imports this file, not `mod.ts`.
 *
 * @module
 */

import {
  type ExporterComponent,
  HTTPS_CLIENT_PERMISSIONS,
  readPermissionEnv,
} from "../component.ts";
import { endpointHostPort, type S3UploaderConfig, s3UploaderSection } from "./config.ts";
import { ENDPOINT_ENV, resolveEndpoint } from "./store.ts";
import { workerModule } from "../../worker_module.ts";
import { spoolPermissionPaths } from "../spool_config.ts";

/**
 * Environment variables the sink's worker may read: the credential chain and region, the
 * endpoint override, and what the AWS SDK probes while building a client and signing requests
 * (each read of an unlisted variable would throw in the worker).
 */
export const AWS_ENV = [
  // Credentials, region, endpoint (exporters.md §4.1).
  "AWS_ACCESS_KEY_ID",
  "AWS_SECRET_ACCESS_KEY",
  "AWS_SESSION_TOKEN",
  "AWS_REGION",
  "AWS_DEFAULT_REGION",
  "AWS_PROFILE",
  "AWS_ROLE_ARN",
  "AWS_ROLE_SESSION_NAME",
  "AWS_WEB_IDENTITY_TOKEN_FILE",
  ...ENDPOINT_ENV,
  "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
  // Read by the SDK's credential providers and shared-config loader.
  "AWS_SHARED_CREDENTIALS_FILE",
  "AWS_CONFIG_FILE",
  "AWS_CREDENTIAL_EXPIRATION",
  "AWS_CREDENTIAL_SCOPE",
  "AWS_ACCOUNT_ID",
  "HOME",
  "USERPROFILE",
  "HOMEPATH",
  "HOMEDRIVE",
  // Probed by the SDK runtime on load and per request.
  "AWS_LAMBDA_NODEJS_NO_GLOBAL_AWSLAMBDA",
  "AWS_LAMBDA_BENCHMARK_MODE",
  "AWS_LAMBDA_FUNCTION_NAME",
  "AWS_LAMBDA_MAX_CONCURRENCY",
  "AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED",
  "_X_AMZN_TRACE_ID",
];

/** Instance metadata service (instance-role credentials). */
const IMDS = "169.254.169.254:80";

/** The S3 exporter component. */
export const s3Component: ExporterComponent<"s3Uploader", S3UploaderConfig> = {
  name: "s3",
  section: s3UploaderSection,
  // The endpoint may come from the environment (`AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`).
  permissionEnv: ENDPOINT_ENV,
  permissions(config) {
    const endpoint = resolveEndpoint(config.endpoint, readPermissionEnv);
    const spool = spoolPermissionPaths(config.spool);
    // AWS itself, or an endpoint over https.
    const https = endpoint === "" || endpoint.toLowerCase().startsWith("https:");
    return {
      net: endpoint === "" ? ["*.amazonaws.com:443", IMDS] : [endpointHostPort(endpoint)],
      read: spool,
      write: spool,
      env: https ? [...AWS_ENV, ...HTTPS_CLIENT_PERMISSIONS.env] : AWS_ENV,
      ...(https ? { sys: HTTPS_CLIENT_PERMISSIONS.sys } : {}),
    };
  },
  async create(config, ctx) {
    const { S3Exporter } = await import("./exporter.ts");
    return new S3Exporter(config, { clusterUuid: ctx.clusterUuid });
  },
  workerModule: workerModule("s3"),
};
