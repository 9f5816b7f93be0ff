/**
 * The S3 exporter component (exporters.md §4). This build owns the `s3Uploader` section
 * (defaults, validation, reload rule) and the sink's permissions, but has no sink yet:
 * enabling it is reported as an error and records are counted, not sent.
 *
 * Permissions (for the sink): `net` to the bucket's regional endpoints on 443, `env` of the AWS
 * SDK credential chain.
 *
 * @module
 */

import type { ExporterComponent } from "../component.ts";
import { type S3UploaderConfig, s3UploaderSection } from "./config.ts";

export * from "./config.ts";

/** Environment variables of the AWS SDK default credential chain and region lookup. */
export const AWS_ENV = [
  "AWS_ACCESS_KEY_ID",
  "AWS_SECRET_ACCESS_KEY",
  "AWS_SESSION_TOKEN",
  "AWS_REGION",
  "AWS_DEFAULT_REGION",
  "AWS_PROFILE",
  "AWS_ROLE_ARN",
  "AWS_WEB_IDENTITY_TOKEN_FILE",
  "AWS_ENDPOINT_URL_S3",
];

/** The S3 exporter component (configuration and permissions only in this build). */
export const s3Component: ExporterComponent<"s3Uploader", S3UploaderConfig> = {
  name: "s3",
  section: s3UploaderSection,
  permissions(config) {
    const region = config.region || "us-west-2";
    return {
      net: [
        `s3.${region}.amazonaws.com:443`,
        `${config.bucketName}.s3.${region}.amazonaws.com:443`,
        "s3.amazonaws.com:443",
        `${config.bucketName}.s3.amazonaws.com:443`,
      ].filter((h) => !h.startsWith(".")),
      read: [],
      write: [],
      env: AWS_ENV,
    };
  },
};
