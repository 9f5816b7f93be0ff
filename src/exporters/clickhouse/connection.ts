/**
 * One connection to ClickHouse over HTTP(S) through `@clickhouse/client`: what the sink needs
 * and nothing more. `prepare` checks the server (ping, version, the `flows` table's columns
 * and engine) before inserts, so a missing table or column is an error that names it (upstream
 * "error when preparing insert statement"); `insert` sends one pre-rendered body as bytes
 * (`INSERT INTO flows (<columns>) FORMAT <RowBinary|JSONEachRow>` through the client's `exec`,
 * so its auth, TLS, gzip request compression and settings apply as to any other query).
 *
 * Works with ClickHouse 18.16 (no query parameters, no async insert): the client sends no
 * setting the old server rejects unless asked, and `insert_deduplication_token` is only sent
 * where the server has it (≥ 22.2).
 *
 * Every call is bounded as a whole by `requestTimeoutMs` (the client's own timeout only
 * bounds the silence of a socket: an answer that trickles, or a preparation's four requests,
 * ran on). At the deadline, or when the caller's signal aborts, the request is aborted and
 * its answer's stream destroyed, which closes its connection. Each request has a connection
 * of its own (no keep-alive): under Deno's `node:http`, a request timed out on a reused
 * keep-alive socket took a fresh socket from the pool after being destroyed and held it for
 * good, so ten timeouts left the pool (10 sockets) full and the sink stuck.
 *
 * @module
 */

import type { ClickHouseClient } from "@clickhouse/client";
import { withDeadline } from "../../deadline.ts";
import { readAtMost } from "../../bytes.ts";
import { clipText } from "../../log.ts";
import {
  EGRESS_NODE_NAME_COLUMN,
  INSERT_COLUMNS,
  type InsertFormat,
  serverHasDedupToken,
} from "./table.ts";

/** Settings that identify a connection: a change of any of them means a new client. */
export interface ConnectionSettings {
  /** HTTP(S) URL (native URLs already mapped). */
  url: string;
  /** Session default database. */
  database: string;
  /** `CH_USERNAME`. */
  username: string;
  /** `CH_PASSWORD`. */
  password: string;
  /** gzip request bodies (level 1: the cheap end, as upstream's LZ4 is). */
  compress: boolean;
  /** Skip server certificate verification (https). */
  insecureSkipVerify: boolean;
  /** PEM of a custom CA (https), read by the caller. */
  caPem?: string;
  /** Deadline of one `prepare` or `insert`, reading the answer included. */
  requestTimeoutMs: number;
}

/** What `prepare` learned about the server and the table. */
export interface ServerInfo {
  /** `SELECT version()`. */
  version: string;
  /** Columns to insert: the 50, plus `egressNodeName` when the table has it. */
  columns: string[];
  /** The server knows `insert_deduplication_token` (≥ 22.2): retries carry the batch id. */
  dedupToken: boolean;
  /**
   * Retries of a batch are deduplicated exactly: the token is supported and the table
   * deduplicates inserts (a Replicated*MergeTree, or a MergeTree with
   * `non_replicated_deduplication_window` > 0).
   */
  dedupExact: boolean;
  /** The `flows` table's engine. */
  engine: string;
}

/** How an insert ended. */
export type InsertOutcome =
  | { ok: true }
  /** Not inserted: the server answered with an error, or the connection was never made. */
  | { ok: false; unknown: false; error: string }
  /** Maybe inserted: the request may have reached the server (timeout, reset). */
  | { ok: false; unknown: true; error: string };

/** What an insert needs besides its body. */
export interface InsertOptions {
  /** How the body is encoded. */
  format: InsertFormat;
  /** The columns the body's rows hold, in order. */
  columns: readonly string[];
  /** `insert_deduplication_token` (only where the server has it). */
  token?: string;
  /** Aborts the request. */
  signal?: AbortSignal;
}

/** A connection as the sink uses it (the real one, or a test double). */
export interface Connection {
  /**
   * Checks the server and the table; throws naming what is wrong, or when `signal` aborts
   * (the requests are then aborted).
   */
  prepare(signal?: AbortSignal): Promise<ServerInfo>;
  /** Inserts one body of rows in `options.format`. Never throws. */
  insert(body: Uint8Array, options: InsertOptions): Promise<InsertOutcome>;
  /** Closes the client's sockets. */
  close(): Promise<void>;
}

/** Error codes of a connection that was never made: the request did not leave. */
const NOT_SENT = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"]);

/**
 * Longest answer read from a preparation query (the table's columns: a few KB) or an insert
 * (empty when it worked): past it the request is given up, its connection closed.
 */
export const MAX_ANSWER_BYTES = 1024 * 1024;

function errorText(err: unknown): string {
  const e = err as { message?: string; code?: string; name?: string };
  const message = e?.message ?? String(err);
  const code = e?.code && !String(message).includes(e.code) ? ` (${e.code})` : "";
  // An error with no text (the client's for an answer it cannot parse, e.g. a redirect): its
  // name at least, never an empty reason in the log.
  return clipText(
    message === "" ? `${e?.name ?? "Error"} without a message${code}` : message + code,
  );
}

/** ClickHouse's exception text, in either version's shape: `Code: 60. DB::Exception: …` (now) or
 * `Code: 60, e.displayText() = DB::Exception: …` (18.16). */
const SERVER_EXCEPTION = /Code: \d+[.,] (?:e\.displayText\(\) = )?DB::Exception/;

/** An answer over {@linkcode MAX_ANSWER_BYTES}. */
class AnswerTooLarge extends Error {
  constructor(what: string) {
    super(`${what}: answer larger than ${MAX_ANSWER_BYTES} bytes, given up`);
    this.name = "AnswerTooLarge";
  }
}

/**
 * Reads `stream` to its end, at most {@linkcode MAX_ANSWER_BYTES} (else throws AnswerTooLarge;
 * the stream is destroyed, which closes its connection).
 */
async function readBounded(stream: AsyncIterable<Uint8Array>, what: string): Promise<string> {
  const bytes = await readAtMost(stream, MAX_ANSWER_BYTES);
  if (bytes === undefined) throw new AnswerTooLarge(what);
  return new TextDecoder().decode(bytes);
}

/** Runs `read`, calling `end` (which must make it settle) if `signal` aborts before it does. */
async function endOnAbort<T>(
  signal: AbortSignal,
  end: () => void,
  read: () => Promise<T>,
): Promise<T> {
  if (signal.aborted) end();
  signal.addEventListener("abort", end, { once: true });
  try {
    return await read();
  } finally {
    signal.removeEventListener("abort", end);
  }
}

/**
 * The name of the error of an exception in a 200 answer: the server began answering before it
 * failed, so what it inserted is not known.
 */
const SERVER_EXCEPTION_IN_ANSWER = "ExceptionInAnswer";

/** Outcome of a failed request: did it certainly not insert anything? */
export function classifyFailure(err: unknown): InsertOutcome {
  const e = err as { code?: unknown; cause?: { code?: unknown }; name?: string };
  const error = errorText(err);
  // An answer from the server (ClickHouseError has a numeric code as text; 18.16's error text
  // is not the shape the client parses, so it arrives as a plain error): nothing inserted.
  if (
    e?.name === "ClickHouseError" || /^\d+$/.test(String(e?.code ?? "")) ||
    (e?.name !== SERVER_EXCEPTION_IN_ANSWER && SERVER_EXCEPTION.test(error))
  ) {
    return { ok: false, unknown: false, error };
  }
  const code = String(e?.code ?? e?.cause?.code ?? "");
  if (NOT_SENT.has(code) || /connection refused/i.test(error)) {
    return { ok: false, unknown: false, error };
  }
  return { ok: false, unknown: true, error };
}

type ClientLibrary = typeof import("@clickhouse/client");
let library: Promise<ClientLibrary> | undefined;

/**
 * `@clickhouse/client`, imported on first use: a process (or a worker) without the ClickHouse
 * sink never loads it (about 10 MiB of RSS).
 */
export function clickHouseLibrary(): Promise<ClientLibrary> {
  return library ??= import("@clickhouse/client");
}

/** The Node.js modules a connection uses, imported with the client (not by an idle process). */
interface NodeModules {
  Buffer: typeof import("node:buffer").Buffer;
  HttpsAgent: typeof import("node:https").Agent;
  Readable: typeof import("node:stream").Readable;
}
let nodeModules: Promise<NodeModules> | undefined;

function nodeLibrary(): Promise<NodeModules> {
  return nodeModules ??= Promise.all([
    import("node:buffer"),
    import("node:https"),
    import("node:stream"),
  ]).then(([buffer, https, stream]) => ({
    Buffer: buffer.Buffer,
    HttpsAgent: https.Agent,
    Readable: stream.Readable,
  }));
}

/** The client and the Node.js modules, once both are loaded. */
interface Connected {
  client: ClickHouseClient;
  node: NodeModules;
}

/** The real connection over `@clickhouse/client` (loaded by the first request). */
export class ClientConnection implements Connection {
  readonly #settings: ConnectionSettings;
  #client: Promise<Connected> | undefined;

  /** Keeps the settings; the library and the client come with the first request. */
  constructor(s: ConnectionSettings) {
    this.#settings = s;
  }

  #connected(): Promise<Connected> {
    return this.#client ??= Promise.all([clickHouseLibrary(), nodeLibrary()]).then((
      [lib, node],
    ) => ({ client: newClient(lib, node, this.#settings), node }));
  }

  async #connect(): Promise<ClickHouseClient> {
    return (await this.#connected()).client;
  }

  /**
   * Runs `params` through the client's `exec` and reads the answer here, at most
   * {@linkcode MAX_ANSWER_BYTES}, an error answer included (`ignore_error_response`: the client
   * would read an error body whole, however large: 50 MiB took the sink to 752 MB of RSS in the
   * sinks review). Throws for an error status: named `ClickHouseError` (nothing inserted) when
   * the server's own exception, else a plain error (a proxy's answer: outcome unknown).
   */
  async #exec(
    params: Parameters<ClickHouseClient["exec"]>[0],
    what: string,
    signal: AbortSignal,
  ): Promise<string> {
    const client = await this.#connect();
    const r = await client.exec({ ...params, abort_signal: signal, ignore_error_response: true });
    // The client stops watching the signal once the headers are in: destroying the answer's
    // stream ends a read that trickles, and closes its connection.
    const text = await endOnAbort(
      signal,
      () => r.stream.destroy(),
      () => readBounded(r.stream, what),
    );
    const status = r.http_status_code ?? 0;
    const exceptionCode = r.response_headers["x-clickhouse-exception-code"] !== undefined;
    const body = text.trim();
    if (status >= 200 && status < 300 && !exceptionCode) {
      // An exception after the server began answering (it sends 200 first when it streams):
      // the query failed, and what an insert wrote before is not known.
      if (!SERVER_EXCEPTION.test(body)) return text;
      const e = new Error(`exception in the answer to ${what}: ${clipText(body)}`);
      e.name = SERVER_EXCEPTION_IN_ANSWER;
      throw e;
    }
    const e = new Error(
      clipText(body === "" ? `HTTP ${status} without a body` : `${body} (HTTP ${status})`),
    );
    if (SERVER_EXCEPTION.test(body) || exceptionCode) e.name = "ClickHouseError";
    throw e;
  }

  async #select(query: string, signal: AbortSignal): Promise<Record<string, unknown>[]> {
    // `exec`, not `query`: the answer is read here, bounded (the client's `json()` read an
    // endless answer into memory for as long as it came: 3.6 GB in 30 s in the sinks review).
    const text = await this.#exec({ query: `${query} FORMAT JSONEachRow` }, query, signal);
    return text.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l));
  }

  prepare(signal?: AbortSignal): Promise<ServerInfo> {
    // (The ping drains its answer inside the client, which aborts that read on the signal.)
    return withDeadline(
      "preparing ClickHouse",
      this.#settings.requestTimeoutMs,
      signal,
      (bounded) => this.#prepare(bounded),
    );
  }

  async #prepare(signal: AbortSignal): Promise<ServerInfo> {
    const ping = await (await this.#connect()).ping({ select: false, abort_signal: signal });
    if (!ping.success) throw new Error(`failed to ping ClickHouse: ${errorText(ping.error)}`);
    signal.throwIfAborted();
    const version = String((await this.#select("SELECT version() AS v", signal))[0]?.v ?? "");
    let names: Set<string>;
    let create = "";
    try {
      names = new Set(
        (await this.#select("DESCRIBE TABLE flows", signal)).map((r) => String(r.name)),
      );
      create = String(
        (await this.#select("SHOW CREATE TABLE flows", signal))[0]?.statement ?? "",
      );
    } catch (err) {
      throw new Error(`error when preparing insert statement, ${errorText(err)}`);
    }
    const missing = INSERT_COLUMNS.filter((c) => !names.has(c));
    if (missing.length > 0) {
      throw new Error(
        `error when preparing insert statement, table flows has no column ${missing.join(", ")}`,
      );
    }
    const engine = /ENGINE = (\w+)/.exec(create)?.[1] ?? "";
    const dedupToken = serverHasDedupToken(version);
    const dedupExact = dedupToken &&
      (/^Replicated\w*MergeTree$/.test(engine) ||
        /non_replicated_deduplication_window\s*=\s*[1-9]/.test(create));
    return {
      version,
      columns: names.has(EGRESS_NODE_NAME_COLUMN)
        ? [...INSERT_COLUMNS, EGRESS_NODE_NAME_COLUMN]
        : [...INSERT_COLUMNS],
      dedupToken,
      dedupExact,
      engine,
    };
  }

  async insert(body: Uint8Array, options: InsertOptions): Promise<InsertOutcome> {
    try {
      await withDeadline(
        "ClickHouse insert",
        this.#settings.requestTimeoutMs,
        options.signal,
        (signal) => this.#insert(body, options, signal),
      );
      return { ok: true };
    } catch (err) {
      return classifyFailure(err);
    }
  }

  async #insert(body: Uint8Array, options: InsertOptions, signal: AbortSignal): Promise<void> {
    const { node: { Buffer, Readable } } = await this.#connected();
    // The answer of an insert is empty; it is read to the end (bounded), which frees the socket.
    await this.#exec(
      {
        query: `INSERT INTO flows (${options.columns.join(", ")}) FORMAT ${options.format}`,
        values: Readable.from([Buffer.from(body.buffer, body.byteOffset, body.byteLength)]),
        clickhouse_settings: options.token === undefined
          ? {}
          : { insert_deduplication_token: options.token },
      } as Parameters<ClickHouseClient["exec"]>[0],
      "ClickHouse insert",
      signal,
    );
  }

  async close(): Promise<void> {
    const client = this.#client;
    this.#client = undefined;
    if (client !== undefined) await (await client.catch(() => undefined))?.client.close();
  }
}

function newClient(
  lib: ClientLibrary,
  { Buffer, HttpsAgent }: NodeModules,
  s: ConnectionSettings,
): ClickHouseClient {
  const secure = s.url.startsWith("https:");
  const ca = s.caPem === undefined ? undefined : Buffer.from(s.caPem);
  return lib.createClient({
    url: s.url,
    username: s.username,
    password: s.password,
    database: s.database,
    request_timeout: s.requestTimeoutMs,
    // One connection per request: see the module's doc.
    keep_alive: { enabled: false },
    compression: { request: s.compress ? { codec: "gzip", level: 1 } : false, response: false },
    ...(secure && s.insecureSkipVerify
      ? {
        http_agent: new HttpsAgent({ keepAlive: false, rejectUnauthorized: false, ca }),
        set_basic_auth_header: true,
      }
      : secure && ca !== undefined
      ? { tls: { ca_cert: ca } }
      : {}),
    log: { level: lib.ClickHouseLogLevel.OFF },
  });
}
