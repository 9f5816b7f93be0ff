/**
 * HTTP/1.1 on one connection, as small as the API needs (`front.ts`): the API's endpoints are
 * read-only and take no body, so a request is its head (request line and header fields, at most
 * {@linkcode MAX_HEAD_BYTES}), a body announced by `content-length` is read and dropped (at most
 * {@linkcode MAX_BODY_BYTES}), and a chunked request body is refused. A response with a known
 * length is sent with `content-length`, a stream (the live view's events) chunked. Requests are
 * answered one after the other on a kept-alive connection.
 *
 * @module
 */

/** Longest request head (request line and fields) read. */
export const MAX_HEAD_BYTES = 16 * 1024;

/** Longest request body read (and dropped): the API's requests have none. */
export const MAX_BODY_BYTES = 64 * 1024;

/** A parsed request head. */
export interface RequestHead {
  method: string;
  /** The request target (origin form: path and query). */
  target: string;
  /** `HTTP/1.1` or `HTTP/1.0`. */
  version: string;
  headers: Headers;
}

/** Why a request cannot be served; its status, and the connection is closed after it. */
export class HttpError extends Error {
  /** The status answered. */
  readonly status: number;

  /** An error answered with `status`. */
  constructor(status: number, message: string) {
    super(message);
    this.status = status;
  }
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const decoder = new TextDecoder("latin1");

/** Index of the end of the head (the byte after CRLF CRLF) in `buf[0, end)`, or -1. */
export function headEnd(buf: Uint8Array, end: number, from = 0): number {
  for (let i = Math.max(3, from); i < end; i++) {
    if (
      buf[i] === 10 && buf[i - 1] === 13 && buf[i - 2] === 10 && buf[i - 3] === 13
    ) return i + 1;
  }
  return -1;
}

/** Parses a request head (its bytes up to and including the blank line). */
export function parseHead(bytes: Uint8Array): RequestHead {
  const lines = decoder.decode(bytes).split("\r\n");
  const [method, target, version, ...rest] = lines[0].split(" ");
  if (
    rest.length > 0 || !TOKEN.test(method ?? "") || !(target ?? "").startsWith("/") ||
    (version !== "HTTP/1.1" && version !== "HTTP/1.0")
  ) {
    throw new HttpError(400, "bad request line");
  }
  const headers = new Headers();
  let hosts = 0;
  for (const line of lines.slice(1)) {
    if (line === "") continue;
    const colon = line.indexOf(":");
    const name = line.slice(0, colon);
    if (colon <= 0 || !TOKEN.test(name)) throw new HttpError(400, "bad header field");
    if (name.length === 4 && name.toLowerCase() === "host") hosts++;
    try {
      headers.append(name, line.slice(colon + 1).trim());
    } catch {
      throw new HttpError(400, "bad header field");
    }
  }
  // RFC 9112 §3.2: an HTTP/1.1 request without a Host field, or any with more than one, is
  // answered 400 (as upstream's Go server does).
  if (hosts > 1) throw new HttpError(400, "too many Host headers");
  if (hosts === 0 && version === "HTTP/1.1") {
    throw new HttpError(400, "missing required Host header");
  }
  return { method, target, version, headers };
}

/** The body length a request announces (0 without one); throws for one not served. */
export function bodyLength(head: RequestHead): number {
  if (head.headers.has("transfer-encoding")) {
    throw new HttpError(501, "chunked request bodies are not served");
  }
  const text = head.headers.get("content-length");
  if (text === null) return 0;
  if (!/^\d+$/.test(text)) throw new HttpError(400, "bad content-length");
  const n = Number(text);
  if (n > MAX_BODY_BYTES) throw new HttpError(413, "request body too large");
  return n;
}

/** Whether the connection stays open after answering `head`. */
export function keepsAlive(head: RequestHead): boolean {
  const c = (head.headers.get("connection") ?? "").toLowerCase();
  return head.version === "HTTP/1.1" ? !c.includes("close") : c.includes("keep-alive");
}

const REASONS: Record<number, string> = {
  200: "OK",
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  404: "Not Found",
  408: "Request Timeout",
  413: "Content Too Large",
  429: "Too Many Requests",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  501: "Not Implemented",
  503: "Service Unavailable",
};

/**
 * How a response's body is delimited: its length, `chunked` (HTTP/1.1) or `close` (the end of the
 * connection: a streamed body to an HTTP/1.0 client, which must not get chunked framing).
 */
export type BodyFraming = number | "chunked" | "close";

/**
 * The status line and header fields of `res`, with `content-length` when `framing` is a length,
 * `transfer-encoding: chunked` when it is `chunked`, neither when `close`; `connection: close`
 * unless `keepAlive` (never kept alive with `close` framing).
 */
export function responseHead(res: Response, framing: BodyFraming, keepAlive: boolean): string {
  let s = `HTTP/1.1 ${res.status} ${REASONS[res.status] ?? res.statusText ?? "Status"}\r\n`;
  for (const [k, v] of res.headers) {
    if (k === "content-length" || k === "transfer-encoding" || k === "connection") continue;
    s += `${k}: ${v}\r\n`;
  }
  if (framing === "chunked") s += "transfer-encoding: chunked\r\n";
  else if (framing !== "close") s += `content-length: ${framing}\r\n`;
  if (!keepAlive || framing === "close") s += "connection: close\r\n";
  return s + "\r\n";
}

/** A short plain-text answer to a request that cannot be served (`connection: close`). */
export function errorResponse(e: HttpError): Uint8Array {
  const body = `${e.message}\n`;
  const res = new Response(null, { status: e.status, headers: { "content-type": "text/plain" } });
  return new TextEncoder().encode(responseHead(res, body.length, false) + body);
}
