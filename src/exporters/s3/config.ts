/**
 * The `s3Uploader` section, owned by the S3 exporter component: types, defaults, validation
 * (upstream texts) and reload rule (exporters.md §4.1).
 *
 * @module
 */

import {
  bool,
  checkFormat,
  durationOrDefault,
  fail,
  intOr,
  minOneSecond,
  nonNegative,
  type Raw,
  str,
} from "../../config/schema.ts";
import type { ConfigSection } from "../../config/section.ts";

/** `s3Uploader` section. */
export interface S3UploaderConfig {
  /**
   * Sink enabled.
   * @default {false}
   */
  enable: boolean;
  /** Bucket (required when enabled). */
  bucketName: string;
  /** Object key prefix. */
  bucketPrefix: string;
  /** Region hint; "" = `AWS_REGION`, then `us-west-2` (resolved by the exporter). */
  region: string;
  /**
   * Only `CSV` (validated only when enabled).
   * @default {"CSV"}
   */
  recordFormat: string;
  /**
   * gzip objects.
   * @default {true}
   */
  compress: boolean;
  /**
   * Records per object (0 means the default).
   * @default {1000000}
   */
  maxRecordsPerFile: number;
  /**
   * Upload interval as written (Go duration).
   * @default {"60s"}
   */
  uploadInterval: string;
  /** Parsed upload interval in ms (default 60000 when disabled and unparsable). */
  uploadIntervalMs: number;
}

/** Defaults of the section (Antrea v1.13 `default.go`). */
export const S3_DEFAULTS = {
  recordFormat: "CSV",
  compress: true,
  maxRecordsPerFile: 1_000_000,
  uploadInterval: "60s",
} as const;

/** The `s3Uploader` configuration section. */
export const s3UploaderSection: ConfigSection<"s3Uploader", S3UploaderConfig> = {
  key: "s3Uploader",
  schema: {
    enable: "bool",
    bucketName: "str",
    bucketPrefix: "str",
    region: "str",
    recordFormat: "str",
    compress: "bool",
    maxRecordsPerFile: "i32",
    uploadInterval: "str",
  },
  build(raw: Raw): S3UploaderConfig {
    const uploadInterval = str(raw, "uploadInterval", S3_DEFAULTS.uploadInterval);
    return {
      enable: bool(raw, "enable", false),
      bucketName: str(raw, "bucketName"),
      bucketPrefix: str(raw, "bucketPrefix"),
      region: str(raw, "region"),
      recordFormat: str(raw, "recordFormat", S3_DEFAULTS.recordFormat),
      compress: bool(raw, "compress", S3_DEFAULTS.compress),
      maxRecordsPerFile: intOr(raw, "maxRecordsPerFile", S3_DEFAULTS.maxRecordsPerFile),
      uploadInterval,
      uploadIntervalMs: durationOrDefault(uploadInterval, S3_DEFAULTS.uploadInterval),
    };
  },
  required(c): void {
    if (c.enable && c.bucketName === "") {
      fail("s3Uploader.bucketName", "s3Uploader enabled without specifying bucket name");
    }
  },
  validate(c): void {
    if (c.enable) {
      checkFormat("s3Uploader.recordFormat", c.recordFormat, ["CSV"]);
      c.uploadIntervalMs = minOneSecond(
        "s3Uploader.uploadInterval",
        "uploadInterval",
        c.uploadInterval,
      );
    }
    // Our addition (upstream accepts a negative count and misbehaves later).
    nonNegative("s3Uploader.maxRecordsPerFile", c.maxRecordsPerFile);
  },
  reload: { live: [], dependsOn: ["clusterID"] },
};
