/**
 * `set flow-aggregator KEY=VALUE...` (control-plane.md §2.5; the image's `antctl set
 * flow-aggregator`): edits the Flow Aggregator's own configuration in its ConfigMap (named by
 * `FA_CONFIG_MAP_NAME`, key `flow-aggregator.conf`) through the Kubernetes API; the running
 * process sees the mounted file change and reloads it. Upstream's keys, values and messages;
 * better than upstream in three ways: the ConfigMap is read and written in the same namespace
 * (`$POD_NAMESPACE`, default `flow-aggregator`; upstream read `flow-aggregator` and wrote
 * `$POD_NAMESPACE`), the file is edited as a YAML document (comments, key order, unknown keys and
 * the rest of the file stay as they were; upstream decoded and re-encoded it, losing all of
 * them), and the update carries the `resourceVersion` read, so a concurrent change is never
 * overwritten: a `409 Conflict` reads the ConfigMap again and re-applies the edit, a few times.
 *
 * @module
 */

import { isDeepStrictEqual } from "node:util";
import {
  Document,
  isCollection,
  isMap,
  isPair,
  isScalar,
  isSeq,
  parseAllDocuments,
  Scalar,
} from "yaml";
import { minOneSecond } from "../config/schema.ts";
import { parseConfig, SECTIONS } from "../components.ts";
import { fullSchema } from "../config/parse.ts";
import { DUPLICATE_KEY_MESSAGE, firstDuplicateKey } from "../config/unique_keys.ts";
import type { MapSchema } from "../config/schema.ts";
import { goBool } from "../config/duration.ts";
import { envOrUnset } from "../permission_entry.ts";
import { typeName } from "../type_name.ts";
import { DEFAULT_NAMESPACE } from "../pki/common.ts";
import { connectKube, type KubeApi, type KubeTarget, resolveKubeTarget } from "./client.ts";
import { AnswerAborted } from "./http.ts";
import { ATTEMPT_TIMEOUT_MS, describe, statusOf } from "./retry.ts";
import {
  type CliIo,
  CONSOLE_IO,
  isGlobalFlag,
  parseCommandLine,
  type Parsed,
  SET_COMMAND,
} from "../api/cli.ts";

export { SET_COMMAND };

/** What `set` edits: upstream's only `antctl set` object in the Flow Aggregator's Pod. */
export const SET_OBJECT = "flow-aggregator";

/** The environment variable naming the ConfigMap (the manifest's Deployment sets it). */
export const CONFIG_MAP_ENV = "FA_CONFIG_MAP_NAME";
/** The ConfigMap's key holding the configuration file. */
export const CONFIG_KEY = "flow-aggregator.conf";

/**
 * The environment the command reads: the ConfigMap's name and namespace, the in-cluster API
 * server, a kubeconfig's path, and npm:yaml's two debug switches (read on every parse). The
 * launcher grants these and no other.
 */
export const SET_ENV: readonly string[] = [
  CONFIG_MAP_ENV,
  "POD_NAMESPACE",
  "KUBERNETES_SERVICE_HOST",
  "KUBERNETES_SERVICE_PORT",
  "KUBECONFIG",
  "LOG_TOKENS",
  "LOG_STREAM",
];

/** How a settable key's value is read. */
type ValueKind = "bool" | "string" | "commitInterval";

/**
 * The keys upstream's command sets (§2.5), and how each value is read: as its type in the
 * configuration's schema, the commit interval also checked as the configuration checks it.
 */
export const SETTABLE_KEYS: Readonly<Record<string, ValueKind>> = Object.fromEntries(
  [
    "clickHouse.enable",
    "clickHouse.database",
    "clickHouse.databaseURL",
    "clickHouse.debug",
    "clickHouse.compress",
    "clickHouse.commitInterval",
    "flowCollector.enable",
    "flowCollector.address",
  ].map((key) => [key, settableKind(key)]),
);

/** How `key` is read: its schema type (bool or string), or the commit interval's check. */
function settableKind(key: string): ValueKind {
  const [section, name] = pathOf(key);
  const type = (fullSchema(SECTIONS)[section] as MapSchema)[name];
  if (type === "bool") return "bool";
  if (type !== "str") throw new Error(`${key}: a ${String(type)} cannot be set`);
  return name === "commitInterval" ? "commitInterval" : "string";
}

/** Upstream's messages (its tests check them). */
export const MESSAGES = {
  oneEquals: "query should contain exactly one '='",
  unknownKey: "unknown configuration parameter, please check antctl set flow-aggregator -h",
  noConfigMap: "failed to locate flow-aggregator-config ConfigMap volume",
} as const;

/** Most attempts of the read-edit-update when the ConfigMap keeps changing under us (409). */
export const MAX_CONFLICT_ATTEMPTS = 5;

/** The usage text (`-h`, and after a usage error). */
export const SET_USAGE = `Usage (as antctl in the Flow Aggregator's Pod):
  set flow-aggregator KEY=VALUE [KEY=VALUE...] [--kubeconfig FILE]
  Edits the Flow Aggregator's configuration in its ConfigMap ($${CONFIG_MAP_ENV}, key
  ${CONFIG_KEY}, namespace $POD_NAMESPACE or ${DEFAULT_NAMESPACE}); the running process
  reloads it. Comments and the other keys of the file are kept. Keys:
${
  Object.entries(SETTABLE_KEYS).map(([k, kind]) =>
    `    ${k.padEnd(27)}${
      kind === "bool"
        ? "true or false (also 1, t, T, TRUE, True, 0, f, F, FALSE, False)"
        : kind === "commitInterval"
        ? "a duration of at least 1s (10s, 1m30s)"
        : "a string"
    }`
  ).join("\n")
}
  Example: antctl set flow-aggregator clickHouse.enable=true clickHouse.commitInterval=10s
Flags:
  --kubeconfig FILE   the API server and credentials outside the Pod (default: the Pod's
                      service account, else the first file of $KUBECONFIG)
  -h, --help          this text`;

/** A usage or input error: its message is printed and the exit code is 1. */
export class ConfigSetError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "ConfigSetError";
  }
}

/** One `KEY=VALUE`, its value read. */
export interface Assignment {
  /** The key, one of {@linkcode SETTABLE_KEYS}. */
  key: string;
  /** A bool for the bool keys, else the text as given. */
  value: boolean | string;
}

/** A `set` command line, parsed. */
export interface SetCommandLine {
  /** `-h` / `--help`: print the usage, nothing else. */
  help: boolean;
  /** `--kubeconfig FILE`. */
  kubeconfig?: string;
  /** The edits, in order (a key given twice: the last wins, as upstream's). */
  assignments: Assignment[];
}

/** Go's `strconv.ParseBool`, with its error text. */
export function parseGoBool(text: string): boolean {
  const on = goBool(text);
  if (on === undefined) {
    throw new ConfigSetError(`strconv.ParseBool: parsing ${JSON.stringify(text)}: invalid syntax`);
  }
  return on;
}

/** One `KEY=VALUE` argument read as upstream's command reads it; throws {@linkcode ConfigSetError}. */
export function parseAssignment(arg: string): Assignment {
  const parts = arg.split("=");
  if (parts.length !== 2) throw new ConfigSetError(MESSAGES.oneEquals);
  const [key, text] = parts;
  const kind = Object.hasOwn(SETTABLE_KEYS, key) ? SETTABLE_KEYS[key] : undefined;
  if (kind === undefined) throw new ConfigSetError(MESSAGES.unknownKey);
  if (kind === "bool") {
    try {
      return { key, value: parseGoBool(text) };
    } catch (err) {
      throw new ConfigSetError(`${key}: ${(err as Error).message}`);
    }
  }
  if (kind === "commitInterval") {
    try {
      // The configuration's own check: a Go duration, at least 1 s (upstream's message).
      minOneSecond(key, "commitInterval", text);
    } catch (err) {
      throw new ConfigSetError((err as Error).message);
    }
  }
  return { key, value: text };
}

/**
 * Parses `args` (`set flow-aggregator ...`, the subcommand included) as cobra would: `-h`,
 * `--help`, `--kubeconfig FILE` / `--kubeconfig=FILE` anywhere, `--` ends the flags. Throws a
 * {@linkcode ConfigSetError} for an unknown flag or word, no edit, or an edit upstream refuses.
 */
export function parseSetArgs(args: readonly string[]): SetCommandLine {
  // antctl's command line, its global flags included (`-k/--kubeconfig`, and with no effect on
  // `set`: `-v/--verbose`, `-s/--server`, `-t/--timeout`, `--token-file`).
  let parsed: Parsed;
  try {
    parsed = parseCommandLine(args[0] === SET_COMMAND ? args.slice(1) : args);
  } catch (err) {
    throw new ConfigSetError((err as Error).message);
  }
  const { words, flags } = parsed;
  for (const name of Object.keys(flags)) {
    if (!isGlobalFlag(name)) throw new ConfigSetError(`unknown flag: --${name}`);
  }
  const help = flags.help !== undefined;
  const kubeconfig = flags.kubeconfig;
  if (kubeconfig === "") throw new ConfigSetError("flag needs an argument: --kubeconfig");
  if (help) return { help, kubeconfig, assignments: [] };
  if (words[0] !== SET_OBJECT) {
    throw new ConfigSetError(
      words.length === 0
        ? `set: what to set is missing: "${SET_OBJECT}"`
        : `set: unknown object ${JSON.stringify(words[0])}: only "${SET_OBJECT}"`,
    );
  }
  if (words.length === 1) throw new ConfigSetError("set flow-aggregator: no KEY=VALUE given");
  return { help, kubeconfig, assignments: words.slice(1).map(parseAssignment) };
}

/** A key path's section and name: `clickHouse.enable` → `["clickHouse", "enable"]`. */
function pathOf(key: string): [string, string] {
  const dot = key.indexOf(".");
  return [key.slice(0, dot), key.slice(dot + 1)];
}

/** Applies `a` to `doc` (the file's first document); throws naming the key when it cannot. */
function setIn(doc: Document, a: Assignment): void {
  const [section, name] = pathOf(a.key);
  if (doc.contents === null || (isScalar(doc.contents) && doc.contents.value === null)) {
    doc.contents = doc.createNode({}) as unknown as typeof doc.contents;
  }
  if (!isMap(doc.contents)) {
    throw new ConfigSetError(`${CONFIG_KEY} is not a YAML mapping: ${a.key} cannot be set`);
  }
  const node = doc.getIn([section], true);
  if (node === undefined || node === null || (isScalar(node) && node.value === null)) {
    // Absent or empty (`clickHouse:` with nothing after it): a mapping with the key.
    // `createNode` of a plain object: a JS Map would be tagged !!omap under YAML 1.1.
    doc.set(section, doc.createNode({ [name]: a.value }));
    return;
  }
  if (!isMap(node)) {
    throw new ConfigSetError(
      `${CONFIG_KEY}: ${section} is not a mapping${
        isCollection(node) ? "" : " (an alias or a scalar)"
      }: ${a.key} cannot be set`,
    );
  }
  // An existing scalar keeps its node (its comments); its style is kept when it can hold the
  // value (a string that would read as another type is quoted).
  node.set(name, a.value);
}

/**
 * How the file is read: YAML 1.1, as the configuration is. npm:yaml's duplicate-key check is
 * quadratic (`set` took 78 s on 32,000 keys): off, and done by firstDuplicateKey in one pass.
 * Its warnings (a collection as a key, "will be stringified", printed twice) are not printed:
 * `set` is silent on success, as upstream's.
 */
const YAML_OPTIONS = {
  version: "1.1",
  uniqueKeys: false,
  prettyErrors: false,
  logLevel: "error",
} as const;

/** No folding of long strings when a document is written. */
const WRITE_OPTIONS = { lineWidth: 0 } as const;

/** A text's first document, and how many it holds. */
interface FirstDocument {
  doc?: Document.Parsed;
  count: number;
}

/** The first document of `text`, or undefined when it has none (empty, comments only). */
function firstDocument(text: string): FirstDocument {
  const docs = parseAllDocuments(text, YAML_OPTIONS);
  const doc = docs[0];
  if (doc !== undefined && doc.errors.length > 0) {
    throw new ConfigSetError(
      `${CONFIG_KEY} is not valid YAML, not changed: ${doc.errors[0].message.split("\n")[0]}`,
    );
  }
  const dup = doc === undefined ? undefined : firstDuplicateKey(doc.contents);
  if (dup !== undefined) {
    throw new ConfigSetError(
      `${CONFIG_KEY} is not valid YAML, not changed: ${DUPLICATE_KEY_MESSAGE} ` +
        `(${JSON.stringify(dup.text)} repeated)`,
    );
  }
  return { doc, count: docs.length };
}

/** Reads a text's first document (documents read are not modified). */
type Reader = (text: string) => FirstDocument;

/**
 * {@linkcode firstDocument}, remembering the last text read: an edit reads the same text for its
 * values and then its shape (it was parsed about five times per `set`).
 */
function cachedReader(): Reader {
  let last: { text: string; read: FirstDocument } | undefined;
  return (text) => {
    if (last?.text !== text) last = { text, read: firstDocument(text) };
    return last.read;
  };
}

/** `value` as a YAML 1.1 scalar, in the style of `like` when it can hold it, on one line. */
function scalarText(value: boolean | string, like?: Scalar): string {
  if (typeof value === "boolean") return String(value);
  const scalar = new Scalar(value);
  if (like?.type === "PLAIN" || like?.type === "QUOTE_SINGLE" || like?.type === "QUOTE_DOUBLE") {
    scalar.type = like.type;
  }
  const doc = new Document(null, { version: "1.1" });
  doc.contents = scalar as unknown as typeof doc.contents;
  return doc.toString(WRITE_OPTIONS).replace(/\n$/, "");
}

/** The column of offset `at` in `text`. */
function column(text: string, at: number): number {
  return at - (text.lastIndexOf("\n", at - 1) + 1);
}

/**
 * `text` with `a` applied by replacing or inserting only the text of that value, every other
 * byte as it was; undefined when the document's shape asks for the document editor instead (a
 * flow mapping, an empty or aliased section, a block scalar, several documents).
 */
function spliced(text: string, a: Assignment, read: Reader): string | undefined {
  const { doc, count } = read(text);
  if (doc === undefined || count > 1) return undefined;
  const root = doc.contents;
  if (!isMap(root) || root.flow) return undefined;
  const [section, name] = pathOf(a.key);
  const keyIs = (k: string) => (p: { key: unknown }) => isScalar(p.key) && p.key.value === k;
  const sec = root.items.find(keyIs(section));
  if (sec === undefined) {
    // A new section at the end of the file.
    const sep = text === "" || text.endsWith("\n") ? "" : "\n";
    return `${text}${sep}${section}:\n  ${name}: ${scalarText(a.value)}\n`;
  }
  const map = sec.value;
  if (!isMap(map) || map.flow || map.items.length === 0 || !isScalar(map.items[0].key)) {
    return undefined;
  }
  const pair = map.items.find(keyIs(name));
  if (pair === undefined) {
    // A new key after the section's last line, indented as its first key.
    // The section's last scalar (descending into nested block collections), whose line ends it.
    let end: unknown = map;
    while ((isMap(end) || isSeq(end)) && !end.flow) {
      const item: unknown = end.items.at(-1);
      if (item === undefined) return undefined;
      end = isPair(item) ? (item.value ?? item.key) : item;
    }
    if (isScalar(end) && (end.type === "BLOCK_LITERAL" || end.type === "BLOCK_FOLDED")) {
      return undefined;
    }
    const range = (end as { range?: [number, number, number] }).range;
    if (range === undefined || map.items[0].key.range === undefined) return undefined;
    const lineEnd = text.indexOf("\n", range[1]);
    const at = lineEnd < 0 ? text.length : lineEnd + 1;
    const indent = " ".repeat(column(text, map.items[0].key.range[0]));
    const line = `${indent}${name}: ${scalarText(a.value)}\n`;
    return text.slice(0, at) + (lineEnd < 0 ? "\n" : "") + line + text.slice(at);
  }
  const v = pair.value;
  if (!isScalar(v) || v.range === undefined || v.value === null) return undefined;
  if (v.type === "BLOCK_LITERAL" || v.type === "BLOCK_FOLDED") return undefined;
  const [start, end] = v.range;
  return text.slice(0, start) + scalarText(a.value, v) + text.slice(end);
}

/** `text` with `assignments` applied through the document editor (comments kept, re-written). */
function documentEdited(text: string, assignments: readonly Assignment[]): string {
  const docs = parseAllDocuments(text, YAML_OPTIONS);
  if (docs.length === 0) {
    // Empty, or comments only (no document to edit): the edits as a new document after them.
    const doc = new Document(null, { version: "1.1" });
    for (const a of assignments) setIn(doc, a);
    const prefix = text.trimEnd();
    return (prefix === "" ? "" : `${prefix}\n`) + doc.toString(WRITE_OPTIONS);
  }
  firstDocument(text); // its errors
  for (const a of assignments) setIn(docs[0], a);
  return docs.map((d) => d.toString(WRITE_OPTIONS)).join("");
}

/**
 * The first document of `text` as plain values (what the configuration's reader sees), with
 * npm:yaml's bound on alias expansion: an alias bomb (anchors of lists of aliases of lists,
 * nine deep) expanded without it, and the comparison of the edited file's values with the
 * expected ones walked the exponential tree, never to finish. Such a file is refused.
 */
function valuesOf(text: string, read: Reader): unknown {
  const { doc } = read(text);
  try {
    return doc?.toJS() ?? null;
  } catch (err) {
    if (err instanceof ReferenceError && /Excessive alias count/.test(err.message)) {
      throw new ConfigSetError(
        `${CONFIG_KEY}: its aliases (*name) expand to too much (over npm:yaml's bound of 100 ` +
          "alias expansions, an alias bomb?): not changed; edit the ConfigMap with kubectl edit",
      );
    }
    throw err;
  }
}

/** What `before` should read as once `assignments` are applied. */
function expectedValues(before: unknown, assignments: readonly Assignment[]): unknown {
  const out = structuredClone(
    before !== null && typeof before === "object" ? before : {},
  ) as Record<string, unknown>;
  for (const a of assignments) {
    const [section, name] = pathOf(a.key);
    const sec = out[section];
    out[section] = sec !== null && typeof sec === "object" && !Array.isArray(sec)
      ? { ...sec, [name]: a.value }
      : { [name]: a.value };
  }
  return out;
}

/**
 * `text` (the configuration file) with `assignments` applied, read as the configuration is (YAML
 * 1.1): bools are written as bools, strings quoted when they would read as something else (in a
 * value's own quoting style otherwise). Only the edited values' text changes: an existing value
 * is replaced in place, a missing key is added as the section's last line, a missing section at
 * the end of the file, so comments, key order, unknown keys and number spellings (`1e+06`) stay
 * byte for byte. A file whose shape does not allow that (flow style, several documents, an empty
 * section) goes through npm:yaml's document editor, which keeps comments and re-writes the rest.
 * The result is checked to read as the file did with the edits, and nothing else. Throws a
 * {@linkcode ConfigSetError} when the file is not YAML or a key's section is not a mapping.
 */
export function editConfig(text: string, assignments: readonly Assignment[]): string {
  const read = cachedReader();
  const want = expectedValues(valuesOf(text, read), assignments);
  let out: string | undefined = text;
  for (const a of assignments) {
    try {
      out = spliced(out, a, read);
    } catch {
      out = undefined; // an edit that broke the file: checked below, and done the other way
    }
    if (out === undefined) break;
  }
  if (out !== undefined && isDeepStrictEqual(valuesOf(out, read), want)) return out;
  out = documentEdited(text, assignments);
  if (!isDeepStrictEqual(valuesOf(out, read), want)) {
    throw new ConfigSetError(
      `${CONFIG_KEY}: the edited file would not read as intended (its YAML is unusual): not ` +
        "changed; edit the ConfigMap with kubectl edit",
    );
  }
  return out;
}

/**
 * Throws when `next` is a configuration the aggregator refuses and `text` was not: the running
 * process would reject the reload, and the next start (a restart, a new Pod) would fail on it.
 * A file refused already is not made worse: the edit may be the one that mends it.
 */
function refuseBroken(text: string, next: string): void {
  const refusal = (t: string): Error | undefined => {
    try {
      // Silent: its warnings (no sink enabled, unknown keys) are the aggregator's to log.
      parseConfig(t, { onWarning: () => {} });
      return undefined;
    } catch (err) {
      return err as Error;
    }
  };
  const after = refusal(next);
  if (after === undefined || refusal(text) !== undefined) return;
  throw new ConfigSetError(
    `the edited configuration would be refused by the flow aggregator (${after.message}): ` +
      "not changed; set the keys it needs in the same command",
  );
}

/** Where the ConfigMap is. */
export interface ConfigMapRef {
  /** Its namespace. */
  namespace: string;
  /** Its name. */
  name: string;
}

/** Options of {@linkcode updateConfigMap}. */
export interface UpdateOptions {
  /** Most attempts on conflicts; default {@linkcode MAX_CONFLICT_ATTEMPTS}. */
  attempts?: number;
  /** Longest wait for one API call, ms; default `ATTEMPT_TIMEOUT_MS` (10 s). */
  callTimeoutMs?: number;
}

/**
 * True when `err` is a call given up on its timeout: before the answer's headers (fetch's
 * `TimeoutError`) or while its body was coming (`AnswerAborted`).
 */
function isTimeout(err: unknown): boolean {
  if (err instanceof AnswerAborted) return err.timedOut;
  const e = err as { name?: unknown; cause?: { name?: unknown } } | undefined;
  return e?.name === "TimeoutError" || e?.cause?.name === "TimeoutError";
}

/** `err` described, with what to do about a 401/403 or a timeout. */
function apiError(
  what: "get" | "update",
  ref: ConfigMapRef,
  err: unknown,
  timeoutMs: number,
): ConfigSetError {
  if (isTimeout(err)) {
    return new ConfigSetError(
      `failed to ${what} ConfigMap ${ref.namespace}/${ref.name}: the request timed out (no ` +
        `complete answer from the API server within ${timeoutMs} ms)${
          what === "update"
            ? ": the update may or may not have been applied; look at the ConfigMap " +
              `(kubectl get configmap -n ${ref.namespace} ${ref.name} -o yaml) before trying again`
            : ": not changed"
        }`,
    );
  }
  const code = statusOf(err);
  const hint = code === 401 || code === 403
    ? ` (the ServiceAccount needs get and update on ConfigMap ${ref.name} in ${ref.namespace}: ` +
      "deploy/flow-aggregator.yml's Role flow-aggregator-role grants them)"
    : "";
  return new ConfigSetError(
    `failed to ${what} ConfigMap ${ref.namespace}/${ref.name}: ${describe(err)}${hint}`,
  );
}

/**
 * Reads the ConfigMap, applies `assignments` to its `flow-aggregator.conf` and updates it with
 * the `resourceVersion` read; on `409 Conflict` (someone else updated it meanwhile) it starts
 * again from a fresh read, at most `attempts` times, so their change is kept. Nothing is written
 * when the text does not change. Throws a {@linkcode ConfigSetError} saying what failed.
 */
export async function updateConfigMap(
  api: KubeApi,
  ref: ConfigMapRef,
  assignments: readonly Assignment[],
  options: UpdateOptions = {},
): Promise<void> {
  const attempts = options.attempts ?? MAX_CONFLICT_ATTEMPTS;
  const timeoutMs = options.callTimeoutMs ?? ATTEMPT_TIMEOUT_MS;
  const timeout = () => AbortSignal.timeout(timeoutMs);
  for (let attempt = 1;; attempt++) {
    let cm;
    try {
      cm = await api.getConfigMap(ref.namespace, ref.name, timeout());
    } catch (err) {
      throw apiError("get", ref, err, timeoutMs);
    }
    if (cm === undefined) {
      throw new ConfigSetError(
        `failed to get ConfigMap ${ref.name}: not found in namespace ${ref.namespace} ` +
          `(${CONFIG_MAP_ENV} names it, POD_NAMESPACE its namespace)`,
      );
    }
    const text: unknown = cm.data?.[CONFIG_KEY];
    if (text === undefined) {
      throw new ConfigSetError(
        `ConfigMap ${ref.namespace}/${ref.name} has no key ${CONFIG_KEY}: not changed`,
      );
    }
    if (typeof text !== "string") {
      // (It said "ConfigMap undefined/flow-aggregator-configmap: refused".)
      throw new ConfigSetError(
        `ConfigMap ${ref.namespace}/${ref.name}: the API server's answer holds ` +
          `${typeName(text)} as ${CONFIG_KEY}, not a string: not ` +
          "changed",
      );
    }
    if (text.includes("\uFFFD")) {
      // The API server answers JSON, which has no way to carry bytes that are no UTF-8: it
      // replaces them with U+FFFD, so the file the aggregator reads (and refuses) holds other
      // bytes than this text. Writing it back would replace them silently.
      const line = text.slice(0, text.indexOf("\uFFFD")).split("\n").length;
      throw new ConfigSetError(
        `ConfigMap ${ref.namespace}/${ref.name}: ${CONFIG_KEY} holds U+FFFD (line ${line}), ` +
          "the replacement of bytes that are not UTF-8: the file is not UTF-8 text, not changed; " +
          "fix it with kubectl edit",
      );
    }
    const resourceVersion = cm.metadata?.resourceVersion;
    if (!resourceVersion) {
      throw new ConfigSetError(
        `ConfigMap ${ref.namespace}/${ref.name}: the API server's answer has no ` +
          "resourceVersion, so a concurrent change could be overwritten: not changed",
      );
    }
    const next = editConfig(text, assignments);
    if (next === text) return;
    refuseBroken(text, next);
    try {
      await api.replaceConfigMap(ref.namespace, {
        ...cm,
        // The name and namespace we mean, and the version we read: a change since is a 409.
        metadata: { ...cm.metadata, name: ref.name, namespace: ref.namespace, resourceVersion },
        data: { ...cm.data, [CONFIG_KEY]: next },
      }, timeout());
      return;
    } catch (err) {
      if (statusOf(err) !== 409) throw apiError("update", ref, err, timeoutMs);
      if (attempt >= attempts) {
        throw new ConfigSetError(
          `failed to update ConfigMap ${ref.namespace}/${ref.name}: it changed under us ` +
            `${attempt} times in a row (409 Conflict): not changed, try again`,
        );
      }
    }
  }
}

/** Where output goes (tests capture it): the CLI's. */
export type SetIo = CliIo;

/** What {@linkcode runConfigSet} reads from its surroundings (tests replace them). */
export interface SetEnvironment {
  /** Environment lookup; default `Deno.env.get` (unset when not granted). */
  env?: (name: string) => string | undefined;
  /** The API server; default found as the aggregator finds it (`resolveKubeTarget`). */
  kubeTarget?: (kubeconfig: string | undefined) => Promise<KubeTarget | undefined>;
  /** See {@linkcode UpdateOptions}. */
  update?: UpdateOptions;
}

/**
 * Runs `set flow-aggregator ...` (`args` with the subcommand); returns the exit code: 0 (silent,
 * as upstream's), 1 for a usage error or a failure, its message on stderr.
 */
export async function runConfigSet(
  args: readonly string[],
  io: SetIo = CONSOLE_IO,
  surroundings: SetEnvironment = {},
): Promise<number> {
  const env = surroundings.env ?? envOrUnset;
  let cmd: SetCommandLine;
  try {
    cmd = parseSetArgs(args);
  } catch (err) {
    if (!(err instanceof ConfigSetError)) throw err;
    const usage = /^(set|flag|unknown (shorthand )?flag|invalid argument)/.test(err.message)
      ? `\n${SET_USAGE}`
      : "";
    io.err(`${err.message}${usage}`);
    return 1;
  }
  if (cmd.help) {
    io.out(SET_USAGE);
    return 0;
  }
  let api: KubeApi | undefined;
  try {
    const name = env(CONFIG_MAP_ENV) ?? "";
    if (name === "") throw new ConfigSetError(MESSAGES.noConfigMap);
    const namespace = env("POD_NAMESPACE") || DEFAULT_NAMESPACE;
    let target: KubeTarget | undefined;
    try {
      target = await (surroundings.kubeTarget ?? ((kubeconfig) =>
        resolveKubeTarget({ kubeconfig, env: surroundings.env, processEnv: SET_ENV })))(
          cmd.kubeconfig,
        );
    } catch (err) {
      throw new ConfigSetError((err as Error).message);
    }
    if (target === undefined) {
      throw new ConfigSetError(
        "no Kubernetes API: not in a Pod (no KUBERNETES_SERVICE_HOST and service account " +
          "token) and no --kubeconfig or $KUBECONFIG",
      );
    }
    api = await connectKube(target, { processEnv: SET_ENV });
    await updateConfigMap(api, { namespace, name }, cmd.assignments, surroundings.update);
    return 0;
  } catch (err) {
    if (!(err instanceof ConfigSetError)) {
      io.err(`set flow-aggregator: ${(err as Error).message}`);
      return 1;
    }
    io.err(err.message);
    return 1;
  } finally {
    api?.close();
  }
}
