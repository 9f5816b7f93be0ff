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
import type { BuildContext, ConfigSection } from "../../config/section.ts";
import {
  buildSpoolConfig,
  SPOOL_SCHEMA,
  type SpoolConfig,
  validateSpoolConfig,
} from "../spool_config.ts";
import { addressProblem } from "../../permission_entry.ts";

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
  /**
   * Region hint; "" = `AWS_REGION`, then `us-west-2` (resolved by the exporter). The bucket's
   * real region is discovered from it (HeadBucket), at start and after a reload.
   */
  region: string;
  /**
   * Endpoint URL of an S3-compatible store (MinIO, Ceph RGW), e.g. `http://minio:9000`, used
   * with path-style addressing; "" = `AWS_ENDPOINT_URL_S3`, else AWS. Our extension.
   * @default {""}
   */
  endpoint: string;
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
   * zlib level of the gzip objects, 1 (fastest) … 9 (smallest); 0 means the default. Our
   * extension: upstream always used Go's default (6). Every level writes valid gzip, one member
   * per object; the default 3 compresses these CSV lines about twice as fast as 6 for objects
   * about 11% larger (measured in `scripts/bench/s3.ts`; README "S3 uploads").
   * @default {3}
   */
  gzipLevel: number;
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
  /**
   * The durable spool of objects that do not fit in memory or could not be uploaded by the stop
   * deadline (ours, not upstream; `../spool_config.ts`). The directory defaults to
   * `$TMPDIR/flow-aggregator-spool/s3`.
   */
  spool: SpoolConfig;
}

/**
 * The `host:port` of an endpoint URL (the port defaults by scheme); throws a ConfigError naming
 * `s3Uploader.endpoint` when it is not an http(s) URL.
 */
export function endpointHostPort(endpoint: string): string {
  let url: URL;
  try {
    url = new URL(endpoint);
  } catch {
    fail("s3Uploader.endpoint", `${JSON.stringify(endpoint)} is not a URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    fail("s3Uploader.endpoint", `${JSON.stringify(endpoint)}: only http and https are supported`);
  }
  return `${url.hostname}:${url.port || (url.protocol === "https:" ? "443" : "80")}`;
}

/** Defaults of the section (Antrea v1.13 `default.go`). */
export const S3_DEFAULTS = {
  endpoint: "",
  recordFormat: "CSV",
  compress: true,
  gzipLevel: 3,
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
    endpoint: "str",
    recordFormat: "str",
    compress: "bool",
    gzipLevel: "i32",
    maxRecordsPerFile: "i32",
    uploadInterval: "str",
    spool: SPOOL_SCHEMA,
  },
  build(raw: Raw, ctx: BuildContext): S3UploaderConfig {
    const uploadInterval = str(raw, "uploadInterval", S3_DEFAULTS.uploadInterval);
    return {
      enable: bool(raw, "enable", false),
      bucketName: str(raw, "bucketName"),
      bucketPrefix: str(raw, "bucketPrefix"),
      region: str(raw, "region"),
      endpoint: str(raw, "endpoint", S3_DEFAULTS.endpoint),
      recordFormat: str(raw, "recordFormat", S3_DEFAULTS.recordFormat),
      compress: bool(raw, "compress", S3_DEFAULTS.compress),
      gzipLevel: intOr(raw, "gzipLevel", S3_DEFAULTS.gzipLevel),
      maxRecordsPerFile: intOr(raw, "maxRecordsPerFile", S3_DEFAULTS.maxRecordsPerFile),
      uploadInterval,
      uploadIntervalMs: durationOrDefault(uploadInterval, S3_DEFAULTS.uploadInterval),
      spool: buildSpoolConfig(raw, ctx, "s3"),
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
      validateSpoolConfig("s3Uploader", c.spool);
    }
    // Our additions (upstream accepts a negative count and misbehaves later).
    nonNegative("s3Uploader.maxRecordsPerFile", c.maxRecordsPerFile);
    if (!Number.isInteger(c.gzipLevel) || c.gzipLevel < 1 || c.gzipLevel > 9) {
      fail("s3Uploader.gzipLevel", `must be 1 to 9 (0 for the default), got ${c.gzipLevel}`);
    }
    const problem = c.endpoint === "" ? undefined : addressProblem(endpointHostPort(c.endpoint));
    if (problem !== undefined) {
      fail("s3Uploader.endpoint", `${JSON.stringify(c.endpoint)}: ${problem}`);
    }
  },
  // Bucket, prefix, region and interval live as upstream; compress, gzipLevel and
  // maxRecordsPerFile from the next object on (upstream ignored them). A new endpoint changes the sink's `net`
  // permission and `spool.*` its files: those rebuild it (the old sink keeps what it holds in
  // the spool, the new one waits for the spool's lock and replays it).
  reload: {
    live: [
      "bucketName",
      "bucketPrefix",
      "region",
      "compress",
      "gzipLevel",
      "maxRecordsPerFile",
      "uploadInterval",
    ],
    // The clusterUUID column.
    dependsOn: ["clusterID"],
  },
};
