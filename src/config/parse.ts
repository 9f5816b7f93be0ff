/**
 * The configuration load pipeline (control-plane.md §1.2): strict decode (unknown keys,
 * duplicates and wrongly typed scalars are errors naming the key path and line), defaults,
 * validation in the upstream order (§1.5, first failure wins) and derivation of parsed values.
 * Pure: no I/O besides reading `TMPDIR` for the default flow log path.
 *
 * Scalars follow YAML 1.1 as upstream's yaml.v2 does: `yes/no/on/off` are bools, `1_000` and
 * `0777` are ints, and a plain scalar decoded into a string field is taken verbatim (so
 * `activeFlowRecordTimeout: 60` is the string "60" and then fails with a missing-unit error).
 */

import {
  type Document,
  isAlias,
  isMap,
  isScalar,
  isSeq,
  LineCounter,
  type Node,
  parseDocument,
} from "yaml";
import { parseCollectorAddress } from "./address.ts";
import { DEFAULTS } from "./defaults.ts";
import { parseDuration } from "./duration.ts";
import type { FlowAggregatorConfig, FlowLoggerFilter, TransportProtocol } from "./types.ts";

/** Prefix of every decode error, as upstream writes it. */
export const DECODE_ERROR_PREFIX = "failed to unmarshal FlowAggregator config from ConfigMap: ";

/** A configuration error; `path` is the offending key path (`clickHouse.commitInterval`) or "". */
export class ConfigError extends Error {
  /** Key path the error is about, "" for whole-file errors. */
  readonly path: string;

  /** Creates an error about `path`. */
  constructor(message: string, path = "") {
    super(message);
    this.name = "ConfigError";
    this.path = path;
  }
}

/** Options of {@linkcode parseConfig}. */
export interface ParseConfigOptions {
  /** Directory of the default flow log; default `$TMPDIR`, else `/tmp`. */
  tmpDir?: string;
}

// ---------------------------------------------------------------------------------------------
// Strict decoding against a schema.

type Kind = "str" | "bool" | "int" | "i32" | "u32" | "strlist";
interface MapSchema {
  [key: string]: Kind | MapSchema | { list: MapSchema };
}

const FILTER_SCHEMA: MapSchema = {
  ingressNetworkPolicyRuleActions: "strlist",
  egressNetworkPolicyRuleActions: "strlist",
};

const SCHEMA: MapSchema = {
  activeFlowRecordTimeout: "str",
  inactiveFlowRecordTimeout: "str",
  aggregatorTransportProtocol: "str",
  flowAggregatorAddress: "str",
  recordContents: { podLabels: "bool" },
  apiServer: { apiPort: "int", tlsCipherSuites: "str", tlsMinVersion: "str" },
  flowCollector: {
    enable: "bool",
    address: "str",
    observationDomainID: "u32",
    recordFormat: "str",
  },
  clickHouse: {
    enable: "bool",
    database: "str",
    databaseURL: "str",
    debug: "bool",
    compress: "bool",
    commitInterval: "str",
    tls: { insecureSkipVerify: "bool", caCert: "bool" },
  },
  s3Uploader: {
    enable: "bool",
    bucketName: "str",
    bucketPrefix: "str",
    region: "str",
    recordFormat: "str",
    compress: "bool",
    maxRecordsPerFile: "i32",
    uploadInterval: "str",
  },
  flowLogger: {
    enable: "bool",
    path: "str",
    maxSize: "i32",
    maxBackups: "i32",
    maxAge: "i32",
    compress: "bool",
    recordFormat: "str",
    filters: { list: FILTER_SCHEMA },
    prettyPrint: "bool",
  },
};

/** Decoded values keyed by name; absent or `null` keys are missing. */
type Raw = { [key: string]: string | number | boolean | string[] | Raw | Raw[] };

class Decoder {
  readonly #doc: Document;
  readonly #lines: LineCounter;

  constructor(doc: Document, lines: LineCounter) {
    this.#doc = doc;
    this.#lines = lines;
  }

  #fail(node: Node | null | undefined, path: string, msg: string): never {
    const offset = node?.range?.[0];
    const where = offset === undefined ? "" : `line ${this.#lines.linePos(offset).line}: `;
    throw new ConfigError(`${DECODE_ERROR_PREFIX}${where}${path}: ${msg}`, path);
  }

  #resolve(node: unknown): Node | null {
    if (node === null || node === undefined) return null;
    if (isAlias(node)) return this.#resolve(node.resolve(this.#doc));
    return node as Node;
  }

  #describe(node: Node): string {
    if (isScalar(node)) {
      const v = node.value;
      if (typeof v === "string") return `string ${JSON.stringify(v)}`;
      return `${typeof v} ${String(v)}`;
    }
    if (isMap(node)) return "a mapping";
    if (isSeq(node)) return "a list";
    return "an unsupported node";
  }

  map(nodeIn: unknown, schema: MapSchema, path: string): Raw | undefined {
    const node = this.#resolve(nodeIn);
    if (node === null || (isScalar(node) && node.value === null)) return undefined;
    if (!isMap(node)) {
      this.#fail(node, path || "(top level)", `expected a mapping, got ${this.#describe(node)}`);
    }
    const out: Raw = {};
    for (const pair of node.items) {
      const keyNode = this.#resolve(pair.key);
      const key = keyNode !== null && isScalar(keyNode) ? String(keyNode.value) : "";
      const keyPath = path === "" ? key : `${path}.${key}`;
      const kind = Object.hasOwn(schema, key) ? schema[key] : undefined;
      if (kind === undefined) this.#fail(keyNode, keyPath, "unknown key");
      const value = this.#value(pair.value, kind, keyPath);
      if (value !== undefined) out[key] = value;
    }
    return out;
  }

  #value(
    nodeIn: unknown,
    kind: Kind | MapSchema | { list: MapSchema },
    path: string,
  ): Raw[string] | undefined {
    if (typeof kind === "object") {
      if ("list" in kind && Object.keys(kind).length === 1 && typeof kind.list === "object") {
        return this.#list(nodeIn, kind.list as MapSchema, path);
      }
      return this.map(nodeIn, kind as MapSchema, path);
    }
    const node = this.#resolve(nodeIn);
    if (node === null || (isScalar(node) && node.value === null)) return undefined;
    if (kind === "strlist") {
      if (!isSeq(node)) {
        this.#fail(node, path, `expected a list of strings, got ${this.#describe(node)}`);
      }
      return node.items.map((item, i) => this.#scalar(item, "str", `${path}[${i}]`) as string);
    }
    return this.#scalar(node, kind, path);
  }

  #list(nodeIn: unknown, schema: MapSchema, path: string): Raw[] | undefined {
    const node = this.#resolve(nodeIn);
    if (node === null || (isScalar(node) && node.value === null)) return undefined;
    if (!isSeq(node)) this.#fail(node, path, `expected a list, got ${this.#describe(node)}`);
    return node.items.map((item, i) => this.map(item, schema, `${path}[${i}]`) ?? {});
  }

  #scalar(nodeIn: unknown, kind: Kind, path: string): string | number | boolean {
    const node = this.#resolve(nodeIn);
    if (node === null || !isScalar(node)) {
      this.#fail(
        node,
        path,
        `expected a ${kind === "str" ? "string" : kind}, got ${
          node ? this.#describe(node) : "nothing"
        }`,
      );
    }
    const v = node.value;
    if (kind === "str") {
      // A plain scalar is a string verbatim, whatever YAML 1.1 would resolve it to.
      if (node.type === "PLAIN" && typeof node.source === "string") return node.source;
      if (typeof v === "string") return v;
      this.#fail(node, path, `expected a string, got ${this.#describe(node)}`);
    }
    if (kind === "bool") {
      if (typeof v !== "boolean") {
        this.#fail(node, path, `expected a bool, got ${this.#describe(node)}`);
      }
      return v;
    }
    // Integers: only an unquoted integer literal; `1.0`, `1e3` and quoted numbers are rejected.
    const src = typeof node.source === "string" ? node.source : "";
    if (
      typeof v !== "number" || !Number.isInteger(v) || node.type !== "PLAIN" ||
      (!/^[-+]?0x/i.test(src) && /[.eE]/.test(src))
    ) {
      this.#fail(node, path, `expected an integer, got ${this.#describe(node)}`);
    }
    const [lo, hi] = kind === "i32"
      ? [-(2 ** 31), 2 ** 31 - 1]
      : kind === "u32"
      ? [0, 2 ** 32 - 1]
      : [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER];
    if (v < lo || v > hi) {
      this.#fail(
        node,
        path,
        `integer ${src || v} overflows ${
          kind === "int" ? "int" : kind === "i32" ? "int32" : "uint32"
        }`,
      );
    }
    return v;
  }
}

function decode(text: string): Raw {
  const lines = new LineCounter();
  const doc = parseDocument(text, {
    version: "1.1",
    uniqueKeys: true,
    prettyErrors: false,
    lineCounter: lines,
  });
  if (doc.errors.length > 0) {
    const e = doc.errors[0];
    const line = lines.linePos(e.pos[0]).line;
    const near = /^[^\s:,[\]{}]*/.exec(text.slice(e.pos[0]))?.[0] ?? "";
    const msg = e.message.split("\n")[0] + (near === "" ? "" : ` (at ${JSON.stringify(near)})`);
    throw new ConfigError(`${DECODE_ERROR_PREFIX}line ${line}: ${msg}`);
  }
  return new Decoder(doc, lines).map(doc.contents, SCHEMA, "") ?? {};
}

// ---------------------------------------------------------------------------------------------
// Defaults, validation, derivation.

function sub(raw: Raw, key: string): Raw {
  const v = raw[key];
  return typeof v === "object" && v !== null && !Array.isArray(v) ? v : {};
}

function str(raw: Raw, key: string, def = ""): string {
  const v = raw[key];
  return typeof v === "string" && v !== "" ? v : def;
}

function bool(raw: Raw, key: string, def: boolean): boolean {
  const v = raw[key];
  return typeof v === "boolean" ? v : def;
}

/** Upstream semantics: 0 means unset. */
function intOr(raw: Raw, key: string, def: number): number {
  const v = raw[key];
  return typeof v === "number" && v !== 0 ? v : def;
}

function defaultTmpDir(): string {
  try {
    const t = Deno.env.get("TMPDIR");
    if (t) return t.replace(/\/+$/, "") || "/";
  } catch {
    // No env permission: fall back to the standard Unix temp directory.
  }
  return "/tmp";
}

function durationOrThrow(path: string, text: string): number {
  try {
    return parseDuration(text);
  } catch (e) {
    throw new ConfigError(
      `config: ${path} ${JSON.stringify(text)}: not a duration (${(e as Error).message})`,
      path,
    );
  }
}

function durationOrDefault(text: string, def: string): number {
  try {
    return parseDuration(text);
  } catch {
    return parseDuration(def);
  }
}

function minOneSecond(path: string, name: string, text: string): number {
  const ms = durationOrThrow(path, text);
  if (ms < 1000) {
    throw new ConfigError(
      `config: ${path} ${JSON.stringify(text)}: ${name} ${text} is too small: ` +
        "shortest supported interval is 1s",
      path,
    );
  }
  return ms;
}

function positiveTimeout(path: string, text: string): number {
  const ms = durationOrThrow(path, text);
  // Upstream accepts 0 and negatives, which make the expiry loop spin (§8 L19).
  if (ms <= 0) {
    throw new ConfigError(`config: ${path} ${JSON.stringify(text)}: must be positive`, path);
  }
  return ms;
}

function fail(path: string, msg: string): never {
  throw new ConfigError(path === "" ? `config: ${msg}` : `config: ${path}: ${msg}`, path);
}

function checkFormat(path: string, value: string, allowed: readonly string[]): void {
  if (!allowed.includes(value)) fail(path, `record format ${value} is not supported`);
}

function nonNegative(path: string, v: number): void {
  if (v < 0) fail(path, `must not be negative, got ${v}`);
}

/**
 * Parses and validates a configuration file's text. Throws a {@linkcode ConfigError} whose
 * message names the key path; decode errors start with {@linkcode DECODE_ERROR_PREFIX}.
 */
export function parseConfig(text: string, options: ParseConfigOptions = {}): FlowAggregatorConfig {
  const raw = decode(text);
  const rc = sub(raw, "recordContents");
  const api = sub(raw, "apiServer");
  const fc = sub(raw, "flowCollector");
  const ch = sub(raw, "clickHouse");
  const chTls = sub(ch, "tls");
  const s3 = sub(raw, "s3Uploader");
  const fl = sub(raw, "flowLogger");

  const tmpDir = options.tmpDir ?? defaultTmpDir();
  const filters: FlowLoggerFilter[] = (Array.isArray(fl.filters) ? fl.filters as Raw[] : []).map(
    (f) => ({
      ingressNetworkPolicyRuleActions: [...(f.ingressNetworkPolicyRuleActions as string[] ?? [])],
      egressNetworkPolicyRuleActions: [...(f.egressNetworkPolicyRuleActions as string[] ?? [])],
    }),
  );
  const transportText = str(
    raw,
    "aggregatorTransportProtocol",
    DEFAULTS.aggregatorTransportProtocol,
  );
  const commitInterval = str(ch, "commitInterval", DEFAULTS.clickHouseCommitInterval);
  const uploadInterval = str(s3, "uploadInterval", DEFAULTS.s3UploadInterval);

  const cfg: FlowAggregatorConfig = {
    activeFlowRecordTimeout: str(raw, "activeFlowRecordTimeout", DEFAULTS.activeFlowRecordTimeout),
    activeFlowRecordTimeoutMs: 0,
    inactiveFlowRecordTimeout: str(
      raw,
      "inactiveFlowRecordTimeout",
      DEFAULTS.inactiveFlowRecordTimeout,
    ),
    inactiveFlowRecordTimeoutMs: 0,
    aggregatorTransportProtocol: transportText.toUpperCase() as TransportProtocol,
    flowAggregatorAddress: str(raw, "flowAggregatorAddress"),
    recordContents: { podLabels: bool(rc, "podLabels", false) },
    apiServer: {
      apiPort: intOr(api, "apiPort", DEFAULTS.apiPort),
      tlsCipherSuites: str(api, "tlsCipherSuites"),
      tlsMinVersion: str(api, "tlsMinVersion"),
    },
    flowCollector: {
      enable: bool(fc, "enable", false),
      address: str(fc, "address"),
      recordFormat: str(fc, "recordFormat", DEFAULTS.flowCollectorRecordFormat),
    },
    clickHouse: {
      enable: bool(ch, "enable", false),
      database: str(ch, "database", DEFAULTS.clickHouseDatabase),
      databaseURL: str(ch, "databaseURL", DEFAULTS.clickHouseDatabaseURL),
      debug: bool(ch, "debug", false),
      compress: bool(ch, "compress", true),
      commitInterval,
      commitIntervalMs: durationOrDefault(commitInterval, DEFAULTS.clickHouseCommitInterval),
      tls: {
        insecureSkipVerify: bool(chTls, "insecureSkipVerify", false),
        caCert: bool(chTls, "caCert", false),
      },
    },
    s3Uploader: {
      enable: bool(s3, "enable", false),
      bucketName: str(s3, "bucketName"),
      bucketPrefix: str(s3, "bucketPrefix"),
      region: str(s3, "region"),
      recordFormat: str(s3, "recordFormat", DEFAULTS.s3RecordFormat),
      compress: bool(s3, "compress", true),
      maxRecordsPerFile: intOr(s3, "maxRecordsPerFile", DEFAULTS.s3MaxRecordsPerFile),
      uploadInterval,
      uploadIntervalMs: durationOrDefault(uploadInterval, DEFAULTS.s3UploadInterval),
    },
    flowLogger: {
      enable: bool(fl, "enable", false),
      path: str(fl, "path", `${tmpDir === "/" ? "" : tmpDir}/${DEFAULTS.flowLoggerFileName}`),
      maxSize: intOr(fl, "maxSize", DEFAULTS.flowLoggerMaxSize),
      // Presence-aware (§8 L22): an explicit 0 means "keep all", as documented upstream.
      maxBackups: typeof fl.maxBackups === "number" ? fl.maxBackups : DEFAULTS.flowLoggerMaxBackups,
      maxAge: intOr(fl, "maxAge", DEFAULTS.flowLoggerMaxAge),
      compress: bool(fl, "compress", true),
      recordFormat: str(fl, "recordFormat", DEFAULTS.flowLoggerRecordFormat),
      filters,
      prettyPrint: bool(fl, "prettyPrint", true),
    },
  };
  if (typeof fc.observationDomainID === "number") {
    cfg.flowCollector.observationDomainID = fc.observationDomainID;
  }

  // Validation, in upstream order (§1.5); first failure wins.
  if (cfg.flowCollector.enable && cfg.flowCollector.address === "") {
    fail("flowCollector.address", "external flow collector enabled without providing address");
  }
  if (cfg.s3Uploader.enable && cfg.s3Uploader.bucketName === "") {
    fail("s3Uploader.bucketName", "s3Uploader enabled without specifying bucket name");
  }
  if (
    !cfg.flowCollector.enable && !cfg.clickHouse.enable && !cfg.s3Uploader.enable &&
    !cfg.flowLogger.enable
  ) {
    fail(
      "",
      "external flow collector or ClickHouse or S3Uploader should be configured " +
        "(enable one of flowCollector, clickHouse, s3Uploader, flowLogger)",
    );
  }
  cfg.activeFlowRecordTimeoutMs = positiveTimeout(
    "activeFlowRecordTimeout",
    cfg.activeFlowRecordTimeout,
  );
  cfg.inactiveFlowRecordTimeoutMs = positiveTimeout(
    "inactiveFlowRecordTimeout",
    cfg.inactiveFlowRecordTimeout,
  );
  if (!["TLS", "TCP", "UDP"].includes(cfg.aggregatorTransportProtocol)) {
    fail(
      "aggregatorTransportProtocol",
      `collecting process over ${transportText} proto is not supported`,
    );
  }
  if (cfg.flowCollector.enable) {
    try {
      cfg.flowCollector.collector = parseCollectorAddress(cfg.flowCollector.address);
    } catch (e) {
      fail(
        "flowCollector.address",
        `${JSON.stringify(cfg.flowCollector.address)}: ${(e as Error).message}`,
      );
    }
    checkFormat("flowCollector.recordFormat", cfg.flowCollector.recordFormat, ["IPFIX", "JSON"]);
  }
  if (cfg.clickHouse.enable) {
    cfg.clickHouse.commitIntervalMs = minOneSecond(
      "clickHouse.commitInterval",
      "commitInterval",
      commitInterval,
    );
  }
  if (cfg.s3Uploader.enable) {
    checkFormat("s3Uploader.recordFormat", cfg.s3Uploader.recordFormat, ["CSV"]);
    cfg.s3Uploader.uploadIntervalMs = minOneSecond(
      "s3Uploader.uploadInterval",
      "uploadInterval",
      uploadInterval,
    );
  }
  if (cfg.flowLogger.enable) {
    checkFormat("flowLogger.recordFormat", cfg.flowLogger.recordFormat, ["CSV"]);
  }
  // Our additions (upstream accepts these and misbehaves later).
  const port = cfg.apiServer.apiPort;
  if (port < 1 || port > 65535) fail("apiServer.apiPort", `port ${port} is not in 1..65535`);
  if (cfg.s3Uploader.maxRecordsPerFile < 0) {
    nonNegative("s3Uploader.maxRecordsPerFile", cfg.s3Uploader.maxRecordsPerFile);
  }
  if (cfg.flowLogger.maxSize < 0) nonNegative("flowLogger.maxSize", cfg.flowLogger.maxSize);
  nonNegative("flowLogger.maxBackups", cfg.flowLogger.maxBackups);
  nonNegative("flowLogger.maxAge", cfg.flowLogger.maxAge);
  return cfg;
}
