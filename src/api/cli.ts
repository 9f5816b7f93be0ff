/**
 * The CLI in the binary (antctl's commands): `get flowrecords`, `get recordmetrics`,
 * `log-level [N]` and `version`, talking to the local API with the loopback token and in
 * antctl's output shapes (control-plane.md §5.8):
 *
 *   flow-aggregator get flowrecords [--srcip X] [--dstip X] [--proto N] [--srcport N]
 *     [--dstport N] [--limit N] [-o table|json|yaml]
 *   flow-aggregator get recordmetrics [-o table|json|yaml]
 *   flow-aggregator log-level [N]
 *   flow-aggregator version
 *   common: [--server https://127.0.0.1:10348] [--token-file FILE] [--timeout 30s]
 *
 * The server's certificate is verified against the CA the server wrote next to the token.
 *
 * @module
 */

import { stringify } from "yaml";
import { stringifyExact } from "../aggregation/records_json.ts";
import { caFileOf, DEFAULT_TOKEN_FILE } from "./server.ts";
import { RECORD_LIMIT_HEADER } from "./handler.ts";
import { goBool, parseWaitDuration } from "../config/duration.ts";
import { readAtMost, readRegularText } from "../bytes.ts";
import { clipText } from "../log.ts";

/** The subcommands this module serves (main.ts dispatches on them). */
export const CLI_COMMANDS: readonly string[] = ["get", "log-level", "version"];

/** antctl's `set flow-aggregator KEY=VALUE...` (src/k8s/config_set.ts). */
export const SET_COMMAND = "set";

/** Every command of the image's antctl: the API client's and `set`. */
export const ANTCTL_COMMANDS: readonly string[] = [...CLI_COMMANDS, SET_COMMAND];

/**
 * The first argument the image's `antctl` passes to the launcher, then its own arguments: an
 * antctl command line (its global flags may come before the command, as cobra takes them), never
 * the aggregator's, whatever follows.
 */
export const ANTCTL = "antctl";

const FLOW_FILTERS = ["srcip", "dstip", "proto", "srcport", "dstport"];

/** Where output goes (tests capture it). */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
}

/** The console, where a command's output goes unless a test captures it. */
export const CONSOLE_IO: CliIo = {
  out: (t) => console.log(t),
  err: (t) => console.error(t),
};

/** A flag: whether it takes a value, and for which commands (absent: every command). */
interface FlagSpec {
  value: boolean;
  commands?: readonly string[];
}

const FLOWS = "get flowrecords";
const METRICS = "get recordmetrics";

/** Longest filter value taken. */
const MAX_FILTER_CHARS = 256;

/** Every flag the CLI knows, by its long name (`-o` is `--output`, `-h` is `--help`). */
const FLAGS: Record<string, FlagSpec> = {
  server: { value: true },
  "token-file": { value: true },
  timeout: { value: true },
  help: { value: false },
  // antctl's other global flags, taken so that scripts written for it run: no effect here (the
  // Flow Aggregator mode of antctl reads no kubeconfig; the CLI logs nothing).
  verbose: { value: false },
  kubeconfig: { value: true },
  output: { value: true, commands: [FLOWS, METRICS] },
  limit: { value: true, commands: [FLOWS] },
  srcip: { value: true, commands: [FLOWS] },
  dstip: { value: true, commands: [FLOWS] },
  proto: { value: true, commands: [FLOWS] },
  srcport: { value: true, commands: [FLOWS] },
  dstport: { value: true, commands: [FLOWS] },
};

/** antctl's shorthands (its root command's `-s -t -v -k`, and `-o -h`). */
const SHORT: Record<string, string> = {
  o: "output",
  h: "help",
  s: "server",
  t: "timeout",
  v: "verbose",
  k: "kubeconfig",
};

/** A command line's words and flags (by long name). */
export interface Parsed {
  words: string[];
  flags: Record<string, string>;
}

/** True for antctl's global flags (every command takes them, `set` too). */
export function isGlobalFlag(name: string): boolean {
  return FLAGS[name] !== undefined && FLAGS[name].commands === undefined;
}

/**
 * `arg` as a flag (`--name`, `--name=value`, `-o`, `-ovalue`, `-o=value`): its long name
 * (undefined for a shorthand antctl does not have) and the value written with it; undefined
 * for a word.
 */
function flagOf(arg: string): { name: string | undefined; value: string | undefined } | undefined {
  const long = /^--([^=]+)(?:=([^]*))?$/.exec(arg);
  if (long !== null) return { name: long[1], value: long[2] };
  const short = /^-([^-])(=?)([^]*)$/.exec(arg);
  if (short === null) return undefined;
  return {
    name: SHORT[short[1]],
    value: short[2] === "=" || short[3] !== "" ? short[3] : undefined,
  };
}

/**
 * Splits a command line as cobra (antctl) does: `--name value`, `--name=value`, `-o value`,
 * `-ovalue`, `-o=value`; `--` ends the flags. Throws for an unknown flag or a missing value.
 */
export function parseCommandLine(args: readonly string[]): Parsed {
  const words: string[] = [];
  const flags: Record<string, string> = {};
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--") {
      words.push(...args.slice(i + 1));
      break;
    }
    const flag = flagOf(arg);
    if (flag === undefined) {
      words.push(arg);
      continue;
    }
    if (flag.name === undefined) throw new Error(`unknown shorthand flag: ${arg}`);
    const name = flag.name;
    let value = flag.value;
    const spec = FLAGS[name];
    if (spec === undefined) throw new Error(`unknown flag: --${name}`);
    if (!spec.value) {
      const on = goBool(value ?? "true");
      if (on === undefined) throw new Error(`invalid argument ${JSON.stringify(value)} for ${arg}`);
      if (on) flags[name] = "true";
      else delete flags[name];
      continue;
    }
    value ??= args[++i];
    if (value === undefined) throw new Error(`flag needs an argument: ${arg}`);
    flags[name] = value;
  }
  return { words, flags };
}

/**
 * `args` (an antctl command line) with the global flags written before the command moved after
 * it, as cobra takes them anywhere: `-v get recordmetrics` → `get recordmetrics -v`. Stops at
 * the first word, at `--` and at a flag it does not know (left where it is).
 */
export function commandFirst(args: readonly string[]): string[] {
  let i = 0;
  while (i < args.length && args[i] !== "--") {
    const flag = flagOf(args[i]);
    if (flag?.name === undefined || FLAGS[flag.name] === undefined) break;
    i += FLAGS[flag.name].value && flag.value === undefined ? 2 : 1;
  }
  const cut = Math.min(i, args.length);
  return [...args.slice(cut), ...args.slice(0, cut)];
}

/** Where the CLI asks by default (antctl's hard-coded address, control-plane.md §5.8). */
export const DEFAULT_SERVER = "https://127.0.0.1:10348";

/** How long a command waits for the API's whole answer, unless `--timeout` says otherwise. */
export const DEFAULT_TIMEOUT = "30s";

/** The largest answer read: `/flowrecords` at its 10,000-record cap is about 22 MB. */
export const MAX_ANSWER_BYTES = 64 * 1024 * 1024;

/**
 * The API address and token file a CLI command line names (the defaults when it does not):
 * what the command needs permission for (the image's launcher grants exactly that). Undefined
 * when the command line does not parse ({@linkcode runCli} then says why, needing nothing).
 */
export function cliTarget(
  args: readonly string[],
): { server: string; tokenFile: string } | undefined {
  try {
    return targetOf(parseCommandLine(args).flags);
  } catch {
    return undefined;
  }
}

/** The API address and token file `flags` name, the defaults where they do not. */
function targetOf(flags: Record<string, string>): { server: string; tokenFile: string } {
  return {
    server: flags.server ?? DEFAULT_SERVER,
    tokenFile: flags["token-file"] ?? DEFAULT_TOKEN_FILE,
  };
}

/** JSON text to values, 64-bit integers kept exact (as BigInt). */
function parseExact(text: string): unknown {
  return JSON.parse(
    text,
    ((_k: string, v: unknown, ctx?: { source?: string }) =>
      typeof v === "number" && !Number.isSafeInteger(v) && ctx?.source !== undefined &&
        /^-?\d+$/.test(ctx.source)
        ? BigInt(ctx.source)
        : v) as (k: string, v: unknown) => unknown,
  );
}

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => i === cells.length - 1 ? c : c.padEnd(widths[i] + 1)).join(" ")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}

type Rec = Record<string, unknown>;

/**
 * `text` with every control character (C0, DEL, C1: a newline and a tab too) written as `\xNN`
 * and every format character (a bidirectional override, a zero width) as `\u{NNNN}`:
 * what the API relays (Pod names from the Agents, an error body) reaches a terminal as text,
 * never as an escape sequence that retitles or clears it.
 */
export function printable(text: string): string {
  return text.replace(
    // Controls (C0, DEL, C1), and format characters (bidirectional overrides and isolates, zero
    // widths), which reorder or hide what the terminal shows.
    /[\p{Cc}\p{Cf}\u2028\u2029]/gu,
    (c) => {
      const code = c.codePointAt(0)!;
      return code <= 0xff
        ? `\\x${code.toString(16).padStart(2, "0")}`
        : `\\u{${code.toString(16)}}`;
    },
  );
}

function flowTable(records: Rec[]): string {
  const s = (v: unknown) => v === undefined || v === null ? "" : printable(String(v));
  return table(
    [
      "SRC_IP",
      "DST_IP",
      "SPORT",
      "DPORT",
      "PROTO",
      "SRC_POD",
      "DST_POD",
      "SRC_NS",
      "DST_NS",
      "SERVICE",
    ],
    records.map((r) => {
      const v4 = r.sourceIPv4Address !== undefined;
      return [
        s(v4 ? r.sourceIPv4Address : r.sourceIPv6Address),
        s(v4 ? r.destinationIPv4Address : r.destinationIPv6Address),
        s(r.sourceTransportPort),
        s(r.destinationTransportPort),
        s(r.protocolIdentifier),
        s(r.sourcePodName),
        s(r.destinationPodName),
        s(r.sourcePodNamespace),
        s(r.destinationPodNamespace),
        s(r.destinationServicePortName),
      ];
    }),
  );
}

function metricsTable(m: Rec): string {
  const n = (k: string) => String(m[k] ?? 0);
  const b = (k: string) => String(m[k] ?? false);
  return table(
    [
      "RECORDS-EXPORTED",
      "RECORDS-RECEIVED",
      "FLOWS",
      "EXPORTERS-CONNECTED",
      "RECORDS-DROPPED",
      "CLICKHOUSE-EXPORTER",
      "S3-EXPORTER",
      "LOG-EXPORTER",
      "IPFIX-EXPORTER",
    ],
    [[
      n("numRecordsExported"),
      n("numRecordsReceived"),
      n("numFlows"),
      n("numConnToCollector"),
      n("numRecordsDropped"),
      b("withClickHouseExporter"),
      b("withS3Exporter"),
      b("withLogExporter"),
      b("withIPFIXExporter"),
    ]],
  );
}

function render(value: unknown, format: string, asTable: (v: never) => string): string {
  if (format === "json") return stringifyExact(value, 2);
  if (format === "yaml") return stringify(value).trimEnd();
  return asTable(value as never);
}

/** The usage text (`--help`, and after a usage error). */
export const CLI_USAGE = `Usage (as antctl in the Flow Aggregator's Pod):
  get flowrecords [--srcip X] [--dstip X] [--proto N] [--srcport N] [--dstport N]
                  [--limit N] [-o table|json|yaml]
  get recordmetrics [-o table|json|yaml]
  log-level [N]
  version
Flags of every command (before or after it):
  -s, --server URL        the API (default ${DEFAULT_SERVER})
      --token-file FILE   its bearer token; its CA is api-ca.crt beside it
                          (default ${DEFAULT_TOKEN_FILE})
  -t, --timeout DURATION  give up after this long (default ${DEFAULT_TIMEOUT})
  -v, --verbose, -k, --kubeconfig FILE
                          antctl's, taken with no effect here
  -h, --help              this text`;

/** A failure of a command: its message is printed and the exit code is 1. */
class CliError extends Error {}

/** The request a command line makes, checked; throws CliError. */
function request(p: Parsed): { command: string; path: string } {
  const [cmd, what] = p.words;
  const command = cmd === "get" ? `get ${what ?? ""}`.trim() : cmd ?? "";
  const arity: Record<string, [number, number]> = {
    [FLOWS]: [2, 2],
    [METRICS]: [2, 2],
    "log-level": [1, 2],
    version: [1, 1],
  };
  const counts = arity[command];
  if (counts === undefined) {
    throw new CliError(`unknown command ${JSON.stringify(p.words.join(" "))}\n${CLI_USAGE}`);
  }
  if (p.words.length > counts[1]) {
    throw new CliError(
      `${command}: unexpected argument ${JSON.stringify(p.words[counts[1]])}\n${CLI_USAGE}`,
    );
  }
  for (const name of Object.keys(p.flags)) {
    const only = FLAGS[name].commands;
    if (only !== undefined && !only.includes(command)) {
      throw new CliError(`${command}: unknown flag: --${name}`);
    }
  }
  const format = p.flags.output ?? "table";
  if (!["table", "json", "yaml"].includes(format)) {
    throw new CliError(`-o ${format}: use table, json or yaml`);
  }
  if (command === FLOWS) {
    const q = new URLSearchParams();
    for (const f of [...FLOW_FILTERS, "limit"]) {
      const v = p.flags[f];
      if (v === undefined) continue;
      // The longest address text is 45 characters: a filter far longer is a mistake (and would
      // make a URL the API refuses, 431).
      if (v.length > MAX_FILTER_CHARS) {
        throw new CliError(`--${f}: ${v.length} characters, at most ${MAX_FILTER_CHARS}`);
      }
      q.set(f, v);
    }
    return { command, path: `/flowrecords${q.size > 0 ? `?${q}` : ""}` };
  }
  if (command === METRICS) return { command, path: "/recordmetrics" };
  if (command === "version") return { command, path: "/version" };
  return {
    command,
    path: what === undefined ? "/loglevel" : `/loglevel?level=${encodeURIComponent(what)}`,
  };
}

/** `base` (an https URL, maybe with a path prefix) joined with `path`. */
function endpoint(base: string, path: string): string {
  let url: URL;
  try {
    url = new URL(base);
  } catch {
    throw new CliError(`--server ${JSON.stringify(base)}: not a URL`);
  }
  if (url.protocol !== "https:") {
    throw new CliError(`--server ${JSON.stringify(base)}: the API is served over https://`);
  }
  if (url.search !== "" || url.hash !== "" || url.username !== "" || url.password !== "") {
    throw new CliError(
      `--server ${JSON.stringify(base)}: give the scheme, host, port and path only`,
    );
  }
  return `${url.origin}${url.pathname.replace(/\/+$/, "")}${path}`;
}

/** Reads a file the CLI needs, with a message naming it and what it is. */
async function readNeeded(path: string, what: string): Promise<string> {
  try {
    // A regular file of at most 64 KiB (a token is 36 bytes, the CA about 600): not a FIFO,
    // whose open would wait for a writer, nor a device such as /dev/zero, read without end.
    return await readRegularText(path, MAX_SECRET_FILE_BYTES);
  } catch (e) {
    throw new CliError(`cannot read ${what} ${path}: ${(e as Error).message}`);
  }
}

/** Largest token or CA file read. */
const MAX_SECRET_FILE_BYTES = 64 * 1024;

/** `e`'s message with its causes' (fetch's "fetch failed" says nothing on its own). */
function reasons(e: unknown): string {
  const parts: string[] = [];
  for (let c: unknown = e; c instanceof Error && parts.length < 4; c = c.cause) {
    if (!parts.includes(c.message)) parts.push(c.message);
  }
  return parts.join(": ") || String(e);
}

/** The answer's body as text, at most `maxBytes`; throws CliError past it. */
async function boundedText(res: Response, maxBytes: number): Promise<string> {
  const bytes = res.body === null ? new Uint8Array() : await readAtMost(res.body, maxBytes);
  if (bytes === undefined) {
    throw new CliError(`the API's answer is larger than ${maxBytes} bytes: not read`);
  }
  return new TextDecoder().decode(bytes);
}

/** What the API answered, parsed and of the shape `command` expects; throws CliError. */
function answer(command: string, body: string): unknown {
  const bad = (what: string) =>
    new CliError(
      `the API answered ${what}, not ${command}'s answer: ${JSON.stringify(body.slice(0, 120))}`,
    );
  let value: unknown;
  try {
    value = parseExact(body);
  } catch {
    throw bad("something other than JSON");
  }
  const isObject = typeof value === "object" && value !== null && !Array.isArray(value);
  if (command === FLOWS) {
    const record = (r: unknown) => typeof r === "object" && r !== null && !Array.isArray(r);
    if (value !== null && !(Array.isArray(value) && value.every(record))) throw bad("JSON");
  } else if (command === "log-level") {
    if (typeof value !== "number" || !Number.isInteger(value)) throw bad("JSON");
  } else if (command === "version") {
    if (!isObject || typeof (value as Rec).gitVersion !== "string") throw bad("JSON");
  } else if (!isObject) {
    throw bad("JSON");
  } else {
    // recordmetrics: counters are integers, the sink flags booleans (each may be absent).
    for (const [k, v] of Object.entries(value as Rec)) {
      const ok = k.startsWith("with")
        ? typeof v === "boolean"
        : typeof v === "bigint" || (typeof v === "number" && Number.isInteger(v));
      if (!ok) throw bad(`${k} ${JSON.stringify(typeof v === "bigint" ? String(v) : v)} in JSON`);
    }
  }
  return value;
}

/** antctl's version text: `<gitVersion>-<gitCommit>.<gitTreeState>`, empty parts left out. */
function versionText(v: Rec): string {
  const commit = typeof v.gitCommit === "string" && v.gitCommit !== "" ? `-${v.gitCommit}` : "";
  const tree = typeof v.gitTreeState === "string" && v.gitTreeState !== ""
    ? `.${v.gitTreeState}`
    : "";
  return printable(`${v.gitVersion}${commit}${tree}`);
}

/**
 * Runs a CLI command; returns the exit code (0 ok, 1 usage or API error). `io` defaults to the
 * console; an answer over `maxAnswerBytes` is not read (an error).
 */
export async function runCli(
  args: readonly string[],
  io: CliIo = CONSOLE_IO,
  maxAnswerBytes = MAX_ANSWER_BYTES,
): Promise<number> {
  try {
    return await run(args, io, maxAnswerBytes);
  } catch (e) {
    if (!(e instanceof CliError)) throw e;
    io.err(e.message);
    return 1;
  }
}

async function run(args: readonly string[], io: CliIo, maxAnswerBytes: number): Promise<number> {
  let p: Parsed;
  try {
    p = parseCommandLine(args);
  } catch (e) {
    throw new CliError(`${(e as Error).message}\n${CLI_USAGE}`);
  }
  // Help asked for, or nothing at all (as cobra's root command).
  if (p.flags.help !== undefined || args.length === 0) {
    io.out(CLI_USAGE);
    return 0;
  }
  const { command, path } = request(p);
  const { server, tokenFile } = targetOf(p.flags);
  const url = endpoint(server, path);
  const timeoutText = p.flags.timeout ?? DEFAULT_TIMEOUT;
  let timeoutMs: number;
  try {
    timeoutMs = parseWaitDuration(timeoutText);
  } catch (e) {
    throw new CliError(`--timeout ${JSON.stringify(timeoutText)}: ${(e as Error).message}`);
  }
  if (!(timeoutMs > 0)) {
    throw new CliError(`--timeout ${JSON.stringify(timeoutText)}: must be positive`);
  }
  const token = (await readNeeded(tokenFile, "the API token file")).trim();
  if (token === "") throw new CliError(`the API token file ${tokenFile} is empty`);
  const caFile = caFileOf(tokenFile);
  const client = Deno.createHttpClient({
    caCerts: [await readNeeded(caFile, "the API's CA certificate")],
  });
  const signal = AbortSignal.timeout(timeoutMs);
  let body: string;
  let res: Response;
  try {
    res = await fetch(url, {
      headers: { authorization: `Bearer ${token}` },
      client,
      signal,
      // The API never redirects: one that does is not followed (the token stays with it).
      redirect: "manual",
    });
    body = await boundedText(res, maxAnswerBytes);
  } catch (e) {
    if (e instanceof CliError) throw e;
    if (signal.aborted) {
      throw new CliError(
        `the flow aggregator API at ${server} did not answer within ${timeoutText}`,
      );
    }
    throw new CliError(
      `cannot reach the flow aggregator API at ${server} (certificate checked against ` +
        `${caFile}): ${reasons(e)}`,
    );
  } finally {
    client.close();
  }
  if (res.status >= 300 && res.status < 400) {
    throw new CliError(
      `the API at ${server} answered a redirect (${res.status} to ` +
        `${printable(res.headers.get("location") ?? "nowhere")}): not followed`,
    );
  }
  if (!res.ok) {
    // An error body as text, cut and without control characters.
    const text = body.trim();
    io.err(`${res.status}: ${printable(clipText(text))}`);
    return 1;
  }
  if (command === "log-level" && p.words.length === 2) return 0;
  const value = answer(command, body);
  if (command === "log-level") {
    io.out(String(value));
  } else if (command === "version") {
    io.out(`flowAggregatorVersion: ${versionText(value as Rec)}`);
  } else if (command === FLOWS) {
    const records = (value ?? []) as Rec[];
    io.out(render(records, p.flags.output ?? "table", flowTable));
    const limit = Number(res.headers.get(RECORD_LIMIT_HEADER));
    // As many as asked for with --limit is what was asked; as many as the API's own cap may
    // have left some out.
    const asked = p.flags.limit === undefined ? Infinity : Number(p.flags.limit);
    if (limit > 0 && records.length >= limit && asked > limit) {
      io.err(
        `note: ${records.length} records shown, the most the API returns for one query; more ` +
          `may be held: narrow the query with --srcip, --dstip, --proto, --srcport, --dstport`,
      );
    }
  } else {
    io.out(render(value, p.flags.output ?? "table", metricsTable));
  }
  return 0;
}
