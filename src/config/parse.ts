/**
 * The configuration load pipeline (control-plane.md §1.2): decode (duplicates and wrongly typed
 * scalars are errors naming the key path and line), defaults, validation in the upstream order
 * (§1.5, first failure wins) and derivation of parsed values. Pure: no I/O besides reading
 * `TMPDIR` for the default flow log path.
 *
 * Scalars follow YAML 1.1 as upstream's yaml.v2 does: `yes/no/on/off` are bools, `1_000` and
 * `0777` are ints, and a plain scalar decoded into a string field is taken verbatim (so
 * `activeFlowRecordTimeout: 60` is the string "60" and then fails with a missing-unit error).
 *
 * Where the stock v1.13 files would otherwise not load, the decoder is as lenient as upstream's
 * (or newer Antrea's) and says so through {@linkcode ParseConfigOptions.onWarning}: a float
 * for an integer key (Helm renders `1000000` as `1e+06`) is taken, truncated toward zero like
 * yaml.v2 does; only the first document of a multi-document file is read; an unknown key (a
 * newer chart's) is ignored; a file with no sink enabled loads (the process runs idle).
 */

import {
  type Document,
  isAlias,
  isMap,
  isScalar,
  isSeq,
  LineCounter,
  type Node,
  parseAllDocuments,
} from "yaml";
import { logger } from "../log.ts";
import { DUPLICATE_KEY_MESSAGE, firstDuplicateKey } from "./unique_keys.ts";
import { DEFAULTS } from "./defaults.ts";
import { envOrUnset } from "../permission_entry.ts";
import { buildLimits, defaultLimits, LIMITS_SCHEMA } from "./limits.ts";
import {
  bool,
  ConfigError,
  durationOrThrow,
  fail,
  intOr,
  type Kind,
  type MapSchema,
  type Raw,
  str,
  sub,
} from "./schema.ts";
import type { BuildContext, ConfigSection, SectionConfig, SectionConfigs } from "./section.ts";
import type { GlobalConfig, TransportProtocol } from "./types.ts";

/** Prefix of every decode error, as upstream writes it. */
export const DECODE_ERROR_PREFIX = "failed to unmarshal FlowAggregator config from ConfigMap: ";

/** Something in a configuration file that loads but deserves the operator's attention. */
export interface ConfigWarning {
  /** Key path the warning is about (`flowLogger.maxsize`), "" for the whole file. */
  readonly path: string;
  /** What was found and what was done about it, with the line when known. */
  readonly message: string;
}

/** Options of {@linkcode parseConfigWith}. */
export interface ParseConfigOptions {
  /** Directory of the default flow log; default `$TMPDIR`, else `/tmp`. */
  tmpDir?: string;
  /**
   * Receives each warning of a file that loads (unknown keys, truncated numbers, extra
   * documents, no sink enabled). Default: logged at warn level (component `config`), so every
   * load, at start and at each reload, reports them. Warnings of a file that then fails
   * validation are reported too: they may explain the failure.
   */
  onWarning?: (warning: ConfigWarning) => void;
}

const log = logger("config");

function logWarning(w: ConfigWarning): void {
  log.warn(w.message, w.path === "" ? {} : { path: w.path });
}

// ---------------------------------------------------------------------------------------------
// Strict decoding against a schema.

/** A mapping key's text ("" for a key that is no scalar). */
function keyText(node: Node | null): string {
  return node !== null && isScalar(node) ? String(node.value) : "";
}

/** A YAML 1.1 merge key (`<<`), which the parser reads as a symbol. */
function isMergeKey(node: Node | null): boolean {
  return node !== null && isScalar(node) && typeof node.value === "symbol";
}

/**
 * Unknown keys named one warning each, at most; the rest are counted in one line (a file of
 * 32,000 unknown keys logged 32,010 lines at each load).
 */
export const MAX_UNKNOWN_KEY_WARNINGS = 20;

class Decoder {
  readonly #doc: Document;
  readonly #lines: LineCounter;
  readonly #warn: (warning: ConfigWarning) => void;
  #unknownKeys = 0;

  constructor(doc: Document, lines: LineCounter, warn: (warning: ConfigWarning) => void) {
    this.#doc = doc;
    this.#lines = lines;
    this.#warn = warn;
  }

  #where(node: Node | null | undefined): string {
    const offset = node?.range?.[0];
    return offset === undefined ? "" : `line ${this.#lines.linePos(offset).line}: `;
  }

  #fail(node: Node | null | undefined, path: string, msg: string): never {
    throw new ConfigError(`${DECODE_ERROR_PREFIX}${this.#where(node)}${path}: ${msg}`, path);
  }

  #warning(node: Node | null | undefined, path: string, msg: string): void {
    this.#warn({ path, message: `config: ${this.#where(node)}${path}: ${msg}` });
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
    const seen = new Set<string>();
    const merged: unknown[] = [];
    for (const pair of node.items) {
      const keyNode = this.#resolve(pair.key);
      if (isMergeKey(keyNode)) merged.push(pair.value);
      else this.#entry(keyNode, pair.value, schema, path, out, seen);
    }
    // YAML 1.1 merge keys (`<<: *anchor`, `<<: [*a, *b]`), which yaml.v2, upstream's parser,
    // applies: a key of this mapping wins over a merged one, a mapping merged first over a later
    // one. (They were dropped with an "unknown key" warning: a sink enabled through one did not
    // run.)
    const at = path === "" ? "<<" : `${path}.<<`;
    for (const value of merged) {
      const v = this.#resolve(value);
      for (const item of v !== null && isSeq(v) ? v.items : [value]) {
        const from = this.#resolve(item);
        if (from === null || !isMap(from)) {
          this.#fail(
            from ?? node,
            at,
            `expected a mapping to merge, got ${from === null ? "nothing" : this.#describe(from)}`,
          );
        }
        for (const pair of from.items) {
          const keyNode = this.#resolve(pair.key);
          if (isMergeKey(keyNode)) this.#fail(keyNode, at, "a merged mapping's own merge key");
          if (!seen.has(keyText(keyNode))) {
            this.#entry(keyNode, pair.value, schema, path, out, seen);
          }
        }
      }
    }
    return out;
  }

  /** Decodes one key of a mapping into `out` (an unknown key is warned about, not kept). */
  #entry(
    keyNode: Node | null,
    valueNode: unknown,
    schema: MapSchema,
    path: string,
    out: Raw,
    seen: Set<string>,
  ): void {
    const key = keyText(keyNode);
    seen.add(key);
    const keyPath = path === "" ? key : `${path}.${key}`;
    const kind = Object.hasOwn(schema, key) ? schema[key] : undefined;
    if (kind === undefined) {
      // Newer Antrea's behaviour (§8 L21): a newer chart's key must not stop the process.
      if (++this.#unknownKeys > MAX_UNKNOWN_KEY_WARNINGS) return;
      if (keyNode !== null && !isScalar(keyNode)) {
        // `? [a, b]`: printed ": unknown key" with an empty name.
        this.#warning(
          keyNode,
          path === "" ? "(top level)" : path,
          `a key that is ${this.#describe(keyNode)}, not a name: ignored`,
        );
      } else this.#warning(keyNode, keyPath, "unknown key, ignored");
      return;
    }
    const value = this.#value(valueNode, kind, keyPath);
    if (value !== undefined) out[key] = value;
  }

  /** Reports the unknown keys past {@linkcode MAX_UNKNOWN_KEY_WARNINGS} in one warning. */
  summarizeUnknown(): void {
    const more = this.#unknownKeys - MAX_UNKNOWN_KEY_WARNINGS;
    if (more <= 0) return;
    this.#warn({
      path: "",
      message: `config: ${more} more unknown keys, ignored (${this.#unknownKeys} in all; ` +
        `only the first ${MAX_UNKNOWN_KEY_WARNINGS} are named)`,
    });
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
    // Integers: only an unquoted number. yaml.v2 also takes a float and converts it as Go's
    // int64(f) does (toward zero): Helm renders large integers as `1e+06`.
    const src = typeof node.source === "string" ? node.source : String(v);
    if (typeof v !== "number" || !Number.isFinite(v) || node.type !== "PLAIN") {
      this.#fail(node, path, `expected an integer, got ${this.#describe(node)}`);
    }
    const n = Math.trunc(v) + 0; // + 0: no -0
    const [lo, hi] = kind === "i32"
      ? [-(2 ** 31), 2 ** 31 - 1]
      : kind === "u32"
      ? [0, 2 ** 32 - 1]
      : [Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER];
    if (n < lo || n > hi) {
      this.#fail(
        node,
        path,
        `integer ${src} overflows ${kind === "int" ? "int" : kind === "i32" ? "int32" : "uint32"}`,
      );
    }
    if (n !== v) this.#warning(node, path, `${src} is not a whole number, truncated to ${n}`);
    return n;
  }
}

function decode(
  text: string,
  schema: MapSchema,
  warn: (warning: ConfigWarning) => void,
): Raw {
  const lines = new LineCounter();
  // npm:yaml's own duplicate check is quadratic in a mapping's keys (60,000 keys under `limits:`
  // held the main thread 34 s at a reload): it is off, and firstDuplicateKey checks in one pass.
  const docs = parseAllDocuments(text, {
    version: "1.1",
    uniqueKeys: false,
    prettyErrors: false,
    lineCounter: lines,
  });
  // Like yaml.v2's Unmarshal, only the first document counts; the rest is not even checked.
  const doc = docs[0];
  if (doc === undefined) return {};
  if (docs.length > 1) {
    warn({
      path: "",
      message: `config: the file holds ${docs.length} YAML documents, only the first is used`,
    });
  }
  const fail = (pos: number, message: string): never => {
    const line = lines.linePos(pos).line;
    const near = /^[^\s:,[\]{}]*/.exec(text.slice(pos, pos + 200))?.[0] ?? "";
    const msg = message.split("\n")[0] + (near === "" ? "" : ` (at ${JSON.stringify(near)})`);
    throw new ConfigError(`${DECODE_ERROR_PREFIX}line ${line}: ${msg}`);
  };
  if (doc.errors.length > 0) fail(doc.errors[0].pos[0], doc.errors[0].message);
  const dup = firstDuplicateKey(doc.contents);
  if (dup !== undefined) fail(dup.key.range[0], DUPLICATE_KEY_MESSAGE);
  const decoder = new Decoder(doc, lines, warn);
  const raw = decoder.map(doc.contents, schema, "") ?? {};
  decoder.summarizeUnknown();
  return raw;
}

// ---------------------------------------------------------------------------------------------
// The global keys (everything outside the exporter sections), then the assembly.

/** Decode schema of the keys the config layer owns itself. */
export const GLOBAL_SCHEMA: MapSchema = {
  activeFlowRecordTimeout: "str",
  inactiveFlowRecordTimeout: "str",
  aggregatorTransportProtocol: "str",
  flowAggregatorAddress: "str",
  clusterID: "str",
  recordContents: { podLabels: "bool" },
  apiServer: { apiPort: "int", tlsCipherSuites: "str", tlsMinVersion: "str" },
  limits: LIMITS_SCHEMA,
};

function defaultTmpDir(): string {
  // Unset, or no env permission: the standard Unix temp directory.
  const t = envOrUnset("TMPDIR");
  return t ? t.replace(/\/+$/, "") || "/" : "/tmp";
}

/** What a flow timeout under 1 s (0 or less included) is taken as (newer Antrea's floor). */
export const MIN_FLOW_TIMEOUT_MS = 1000;

/**
 * A flow timeout, in ms. Upstream v1.13 accepts 0 and negatives (§8 L19), with which its expiry
 * loop spins, exporting every flow at each check (as it does at `1ns` or a few ms); refusing them
 * would make such a file, which v1.13 ran, crash-loop here. So a timeout under
 * {@linkcode MIN_FLOW_TIMEOUT_MS} (the floor newer Antrea applies) is taken as it, with a warning.
 */
function flowTimeout(
  path: string,
  text: string,
  warn: (warning: ConfigWarning) => void,
): number {
  const ms = durationOrThrow(path, text);
  if (ms >= MIN_FLOW_TIMEOUT_MS) return ms;
  warn({
    path,
    message: `config: ${path}: ${JSON.stringify(text)} is under ${MIN_FLOW_TIMEOUT_MS / 1000}s ` +
      `(v1.13 took it and exported every flow at each expiry check): taken as ` +
      `${MIN_FLOW_TIMEOUT_MS / 1000}s`,
  });
  return MIN_FLOW_TIMEOUT_MS;
}

function buildGlobal(raw: Raw): GlobalConfig {
  const rc = sub(raw, "recordContents");
  const api = sub(raw, "apiServer");
  const transportText = str(
    raw,
    "aggregatorTransportProtocol",
    DEFAULTS.aggregatorTransportProtocol,
  );
  return {
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
    clusterID: str(raw, "clusterID"),
    recordContents: { podLabels: bool(rc, "podLabels", false) },
    apiServer: {
      apiPort: intOr(api, "apiPort", DEFAULTS.apiPort),
      tlsCipherSuites: str(api, "tlsCipherSuites"),
      tlsMinVersion: str(api, "tlsMinVersion"),
    },
    // Validated after the upstream checks (our addition): see parseConfigWith.
    limits: defaultLimits(),
  };
}

/** A full configuration: the global keys plus the sections of `S`. */
export type ConfigOf<S extends readonly ConfigSection<string, SectionConfig>[]> =
  & GlobalConfig
  & SectionConfigs<S>;

/** The whole decode schema: global keys plus every section's. */
export function fullSchema(sections: readonly ConfigSection<string, SectionConfig>[]): MapSchema {
  const schema: MapSchema = { ...GLOBAL_SCHEMA };
  for (const s of sections) schema[s.key] = s.schema;
  return schema;
}

/**
 * Parses and validates a configuration file's text against the global keys and `sections`
 * (in their order). Throws a {@linkcode ConfigError} whose message names the key path; decode
 * errors start with {@linkcode DECODE_ERROR_PREFIX}. Validation follows the upstream order
 * (control-plane.md §1.5, first failure wins): every section's presence checks, timeouts,
 * transport, then every section's own checks, then our additions. "No sink enabled" (upstream's
 * V3 error) is a warning, reported once everything else is valid.
 */
export function parseConfigWith<S extends readonly ConfigSection<string, SectionConfig>[]>(
  text: string,
  sections: S,
  options: ParseConfigOptions = {},
): ConfigOf<S> {
  const warn = options.onWarning ?? logWarning;
  const raw = decode(text, fullSchema(sections), warn);
  const ctx: BuildContext = { tmpDir: options.tmpDir ?? defaultTmpDir() };
  const cfg = buildGlobal(raw) as ConfigOf<S>;
  const built: [ConfigSection<string, SectionConfig>, SectionConfig][] = [];
  for (const s of sections) {
    const c = s.build(sub(raw, s.key), ctx);
    (cfg as Record<string, unknown>)[s.key] = c;
    built.push([s, c]);
  }

  for (const [s, c] of built) s.required?.(c);
  cfg.activeFlowRecordTimeoutMs = flowTimeout(
    "activeFlowRecordTimeout",
    cfg.activeFlowRecordTimeout,
    warn,
  );
  cfg.inactiveFlowRecordTimeoutMs = flowTimeout(
    "inactiveFlowRecordTimeout",
    cfg.inactiveFlowRecordTimeout,
    warn,
  );
  if (!["TLS", "TCP", "UDP"].includes(cfg.aggregatorTransportProtocol)) {
    fail(
      "aggregatorTransportProtocol",
      `collecting process over ${str(raw, "aggregatorTransportProtocol")} proto is not supported`,
    );
  }
  for (const [s, c] of built) s.validate?.(c);
  // Our addition (upstream accepts it and fails later).
  const port = cfg.apiServer.apiPort;
  if (port < 1 || port > 65535) fail("apiServer.apiPort", `port ${port} is not in 1..65535`);
  cfg.limits = buildLimits(sub(raw, "limits"));
  if (!built.some(([, c]) => c.enable)) {
    // Upstream v1.13 refused this (V3), so its own stock manifest crash-looped; newer Antrea
    // runs idle (§8 L2). Records are still received, aggregated and counted.
    warn({
      path: "",
      message: "config: No collector / sink has been configured, so no flow data will be " +
        `exported (enable one of ${sections.map((s) => s.key).join(", ")})`,
    });
  }
  return cfg;
}
