/**
 * Client transports to one IPFIX collector: TCP, TLS (optionally mutual) and UDP, shared by the
 * IPFIX exporter and the traffic generator (it knows neither). A transport only moves bytes:
 * `send` writes a list of messages (stream transports concatenate them into one write; UDP sends
 * one datagram each) and fails on any short write, and stream transports watch the socket so a
 * collector that goes away is noticed at once instead of on the next write (collectors never
 * send us data, so any read result means the peer is gone). Reconnecting is the caller's policy.
 *
 * What a transport can say about delivery (the caller's accounting builds on it): a failed
 * `send` reports how many bytes the kernel (or the TLS library) had accepted before it failed
 * ({@linkcode SendError.written}), and `shutdown` ends the stream cleanly and tells whether the
 * peer then read to the end (it closed its side after our end of stream). Without FFI there is
 * no `SIOCOUTQ`, so nothing in between is known.
 *
 * Needs `--allow-net` (and `--allow-read` only if the caller reads PEM files).
 */

import { concatBytes } from "../bytes.ts";
import { closeQuietly } from "../collector/address.ts";
import { within } from "../clock.ts";
import { logger } from "../log.ts";

const log = logger("transport");

/** Transport kinds (the `:proto` suffix of a collector address). */
export type TransportKind = "tcp" | "udp" | "tls";

/** TLS settings for the `tls` transport (PEM texts, never paths). */
export interface TransportTlsOptions {
  /** CA certificate(s) that sign the collector's certificate; default: system roots. */
  ca?: string;
  /** Client certificate chain for mutual TLS. */
  cert?: string;
  /** Client private key for mutual TLS. */
  key?: string;
  /**
   * How long to wait after the handshake for the server to refuse the client certificate
   * (TLS 1.3 reports it only then); default 200 ms, 0 disables.
   */
  settleMs?: number;
}

/** Where and how to connect. */
export interface TransportTarget {
  /** Host name or IP literal (IPv6 without brackets). */
  host: string;
  /** Port. */
  port: number;
  /** Transport kind. */
  kind: TransportKind;
  /** TLS settings (kind `tls` only). */
  tls?: TransportTlsOptions;
  /** Connect (and TLS handshake) timeout; default 5000 ms. */
  connectTimeoutMs?: number;
  /** Abandons a pending connect (say, the caller stopping), like the timeout does. */
  signal?: AbortSignal;
  /**
   * TLS by `node` (default: over our own socket, a handshake given up closes it) or by `deno`
   * (Deno's own TLS: ~1.7 times the throughput per core, but a handshake given up at a peer that
   * never answers leaves its socket open; for the load generators, whose peer is ours).
   */
  tlsEngine?: "node" | "deno";
}

/** A failed {@linkcode Transport.send}: how far it got before the error. */
export class SendError extends Error {
  /** Bytes of the messages (in order, concatenated) accepted before the failure. */
  readonly written: number;

  /** Wraps `cause` with the count of bytes written before it. */
  constructor(message: string, options: { written: number; cause?: unknown }) {
    super(message, { cause: options.cause });
    this.name = "SendError";
    this.written = options.written;
  }
}

/** An open connection to a collector. */
export interface Transport {
  /** Transport kind. */
  readonly kind: TransportKind;
  /** True until closed locally or by the peer. */
  readonly open: boolean;
  /** Resolves once the transport is closed (locally or by the peer). */
  readonly closed: Promise<void>;
  /**
   * Writes every message completely; rejects with a {@linkcode SendError} on any error (the
   * caller should close), saying how many bytes were accepted before it.
   */
  send(messages: readonly Uint8Array[]): Promise<void>;
  /**
   * Ends the stream cleanly (FIN, or TLS close_notify then FIN) and waits for the peer to close
   * its side: true when it did (a collector closes after reading our end of stream, so it read
   * everything), false on a reset, an error, or a local `close()` ending the wait (the caller
   * bounds it that way). UDP: closes and resolves true (nothing to wait for). Closes the
   * transport either way.
   */
  shutdown(): Promise<boolean>;
  /** Closes the socket; idempotent. */
  close(): void;
}

/**
 * `p` within `ms` (or until `signal` aborts); on giving up, what `p` resolves with later is
 * handed to `discard` (a connection: closed).
 */
function withTimeout<T>(
  p: Promise<T>,
  ms: number,
  what: string,
  signal?: AbortSignal,
  discard: (late: T) => void = () => {},
): Promise<T> {
  return new Promise((resolve, reject) => {
    let done = false;
    const finish = (): boolean => {
      if (done) return false;
      done = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      return true;
    };
    const give = (reason: string): void => {
      if (!finish()) return;
      // The pending work cannot be cancelled: discard what it gives after all.
      p.then(discard, () => {});
      reject(new Error(`${what}: ${reason}`));
    };
    const onAbort = (): void => give("aborted");
    const timer = setTimeout(() => give(`timeout after ${ms} ms`), ms);
    if (signal?.aborted) {
      give("aborted");
      return;
    }
    signal?.addEventListener("abort", onAbort, { once: true });
    p.then((v) => {
      if (finish()) resolve(v);
    }, (e) => {
      if (finish()) reject(e);
    });
  });
}

function concat(messages: readonly Uint8Array[]): Uint8Array {
  return messages.length === 1 ? messages[0] : concatBytes(messages);
}

/** What the stream and datagram transports share: the open flag, `closed` and `close()`. */
abstract class SocketTransport implements Transport {
  readonly kind: TransportKind;
  readonly closed: Promise<void>;
  readonly #socket: { close(): void };
  #open = true;
  #resolveClosed!: () => void;

  constructor(kind: TransportKind, socket: { close(): void }) {
    this.kind = kind;
    this.#socket = socket;
    this.closed = new Promise((r) => (this.#resolveClosed = r));
  }

  get open(): boolean {
    return this.#open;
  }

  abstract send(messages: readonly Uint8Array[]): Promise<void>;

  abstract shutdown(): Promise<boolean>;

  close(): void {
    if (!this.#open) return;
    this.#open = false;
    try {
      this.#socket.close();
    } catch {
      // Already closed (by the runtime, after a reset).
    }
    this.#resolveClosed();
  }
}

class StreamTransport extends SocketTransport {
  readonly #conn: Deno.Conn;
  /** The peer ended its side cleanly (EOF), as opposed to a reset or a local close. */
  #peerEnded = false;
  /** Our end of stream was sent: a later EOF answers it. */
  #ended = false;

  constructor(kind: TransportKind, conn: Deno.Conn) {
    super(kind, conn);
    this.#conn = conn;
    this.#watch();
  }

  async #watch(): Promise<void> {
    const buf = new Uint8Array(512);
    try {
      // Collectors never talk back: EOF or an error means the session is over.
      while (this.open) {
        const n = await this.#conn.read(buf);
        if (n === null) {
          // Only an EOF after our end of stream answers it; one before is the peer leaving.
          this.#peerEnded = this.#ended;
          break;
        }
      }
    } catch {
      // Reset or locally closed: either way the transport is finished.
    }
    this.close();
  }

  async send(messages: readonly Uint8Array[]): Promise<void> {
    if (!this.open || this.#ended) throw new SendError("connection closed", { written: 0 });
    const data = concat(messages);
    let off = 0;
    try {
      while (off < data.length) {
        const n = await this.#conn.write(off === 0 ? data : data.subarray(off));
        if (n <= 0) throw new Error("could not send the complete message on the connection");
        off += n;
      }
    } catch (e) {
      throw new SendError(e instanceof Error ? e.message : String(e), { written: off, cause: e });
    }
  }

  async shutdown(): Promise<boolean> {
    if (!this.open) return false;
    this.#ended = true;
    try {
      await this.#conn.closeWrite();
    } catch {
      this.close();
      return false;
    }
    await this.closed;
    return this.#peerEnded;
  }
}

/** Bytes of one TLS write awaited on its own: a failed send says how far it got to this grain. */
const TLS_WRITE_PIECE_BYTES = 64 * 1024;

/**
 * TLS by `node:tls` over our own TCP connection (not Deno's TLS, whose pending handshake cannot
 * be cancelled without leaving its socket open: a collector that accepts and never answers would
 * keep one socket per attempt). Closing it closes our socket, always. A send counts as written
 * what the TLS layer wrote to the socket (piece by piece).
 */
class NodeTlsTransport extends SocketTransport {
  readonly #tls: import("node:tls").TLSSocket;
  /** Fails the write under way, if any, when the transport closes. */
  #failWrite: ((e: Error) => void) | undefined;
  /** The peer ended its side cleanly after our end of stream (its answer to it). */
  #peerEnded = false;
  #ended = false;

  constructor(socket: import("node:tls").TLSSocket, conn: Deno.TcpConn) {
    super("tls", {
      close: () => {
        socket.destroy();
        closeQuietly(conn);
      },
    });
    this.#tls = socket;
    // Collectors never talk back: their end of stream, an error or a close ends the session.
    socket.on("end", () => {
      this.#peerEnded = this.#ended;
      this.close();
    });
    socket.on("error", () => this.close());
    socket.on("close", () => this.close());
  }

  async send(messages: readonly Uint8Array[]): Promise<void> {
    if (!this.open || this.#ended) throw new SendError("connection closed", { written: 0 });
    const data = concat(messages);
    let off = 0;
    try {
      while (off < data.length) {
        const piece = data.subarray(off, off + TLS_WRITE_PIECE_BYTES);
        await new Promise<void>((resolve, reject) => {
          this.#failWrite = reject;
          this.#tls.write(piece, (e?: Error | null) => (e ? reject(e) : resolve()));
        }).finally(() => (this.#failWrite = undefined));
        off += piece.length;
      }
    } catch (e) {
      throw new SendError(e instanceof Error ? e.message : String(e), { written: off, cause: e });
    }
  }

  async shutdown(): Promise<boolean> {
    if (!this.open) return false;
    this.#ended = true;
    // close_notify, then the TCP half-close; the collector answers with its own end and close.
    this.#tls.end();
    await this.closed;
    return this.#peerEnded;
  }

  override close(): void {
    this.#failWrite?.(new Error("connection closed"));
    super.close();
  }
}

/** A TCP connection to `target` within `timeout` (or until its signal aborts), no delay. */
async function connectTcp(target: TransportTarget, timeout: number): Promise<Deno.TcpConn> {
  const conn = await withTimeout(
    Deno.connect({ hostname: target.host, port: target.port }),
    timeout,
    "connect",
    target.signal,
    closeQuietly,
  );
  conn.setNoDelay(true);
  return conn;
}

/** Opens a TLS transport with Deno's TLS (see {@linkcode TransportTarget.tlsEngine}). */
async function openDenoTls(target: TransportTarget, timeout: number): Promise<Transport> {
  const t = target.tls ?? {};
  const opts: Deno.ConnectTlsOptions = { hostname: target.host, port: target.port };
  if (t.ca) opts.caCerts = [t.ca];
  const conn = await withTimeout(
    (async () => {
      const c = t.cert && t.key
        ? await Deno.connectTls({ ...opts, cert: t.cert, key: t.key })
        : await Deno.connectTls(opts);
      try {
        await c.handshake();
      } catch (e) {
        closeQuietly(c);
        throw e;
      }
      return c;
    })(),
    timeout,
    "tls handshake",
    target.signal,
    closeQuietly,
  );
  return new StreamTransport("tls", conn);
}

/**
 * Opens a TLS transport: TCP by Deno (so the `net` permission and name resolution are Deno's),
 * then the handshake by `node:tls` over it, both within `timeout` (or until `signal` aborts);
 * giving up closes the socket.
 */
async function openTls(target: TransportTarget, timeout: number): Promise<Transport> {
  const [{ default: tls }, { socketDuplex }] = await Promise.all([
    import("node:tls"),
    import("./socket_duplex.ts"),
  ]);
  const conn = await connectTcp(target, timeout);
  // The encrypted side: what the TLS layer wants to read is pumped from the socket.
  let pumping = false;
  let gone = false;
  const raw: import("node:stream").Duplex = socketDuplex(conn, () => void pump(), () => {
    gone = true;
  });
  const pump = async (): Promise<void> => {
    if (pumping) return;
    pumping = true;
    const buf = new Uint8Array(16 * 1024);
    try {
      for (;;) {
        if (gone) return;
        const n = await conn.read(buf);
        if (n === null) {
          raw.push(null);
          return;
        }
        if (!raw.push(buf.slice(0, n))) return; // read() is called again when it wants more
      }
    } catch (e) {
      raw.destroy(e as Error);
    } finally {
      pumping = false;
    }
  };
  const t = target.tls ?? {};
  const socket = tls.connect({
    socket: raw,
    // SNI and the certificate's name: the host as given (an IP is checked against IP SANs).
    servername: isIpLiteral(target.host) ? undefined : target.host,
    host: target.host,
    ca: t.ca ? [t.ca] : undefined,
    cert: t.cert,
    key: t.key,
    minVersion: "TLSv1.2",
  });
  const transport = new NodeTlsTransport(socket, conn);
  await new Promise<void>((resolve, reject) => {
    const fail = (why: string) => {
      clearTimeout(timer);
      target.signal?.removeEventListener("abort", onAbort);
      transport.close();
      reject(new Error(`tls handshake: ${why}`));
    };
    const onAbort = () => fail("aborted");
    const timer = setTimeout(() => fail(`timeout after ${timeout} ms`), timeout);
    if (target.signal?.aborted) return onAbort();
    target.signal?.addEventListener("abort", onAbort, { once: true });
    socket.once("secureConnect", () => {
      clearTimeout(timer);
      target.signal?.removeEventListener("abort", onAbort);
      resolve();
    });
    socket.once("error", (e: Error) => fail(e.message));
    void transport.closed.then(() => fail("connection closed"));
  });
  return transport;
}

/**
 * Datagrams to the collector's address, resolved once at open. Where the `net` permission names
 * the collector by its host name only (a worker, or `deno task start`), resolving it or sending
 * to the resolved address is denied: the transport then sends to the name, which the system
 * resolves at each datagram (~60 µs from /etc/hosts, a DNS query otherwise), logged once.
 */
export class UdpTransport extends SocketTransport {
  readonly #sock: Deno.DatagramConn;
  #addr: Deno.NetAddr;
  readonly #name: string;

  constructor(sock: Deno.DatagramConn, addr: Deno.NetAddr, name: string) {
    super("udp", sock);
    this.#sock = sock;
    this.#addr = addr;
    this.#name = name;
    if (addr.hostname === name && !isIpLiteral(name)) byName(name, addr.port);
  }

  async #sendOne(m: Uint8Array): Promise<number> {
    try {
      return await this.#sendTo(m);
    } catch (e) {
      if (!(e instanceof Deno.errors.NotCapable) || this.#addr.hostname === this.#name) throw e;
      this.#addr = { ...this.#addr, hostname: this.#name };
      byName(this.#name, this.#addr.port);
      return await this.#sendTo(m);
    }
  }

  /** The pending send to a name's reject (see {@linkcode #sendTo}). */
  #failPending: ((e: Error) => void) | undefined;

  /**
   * Sends `m`. Sent to a name, the system resolves it in the send, which a resolver that does
   * not answer holds for about 30 s and closing the socket does not end: such a send is given
   * up on at `close()` (the stop's timeout), so the sink's stop is not held by it (was 27 s).
   */
  #sendTo(m: Uint8Array): Promise<number> {
    const sending = this.#sock.send(m, this.#addr);
    if (isIpLiteral(this.#addr.hostname)) return sending;
    return new Promise((resolve, reject) => {
      this.#failPending = reject;
      sending.then(resolve, reject).finally(() => {
        if (this.#failPending === reject) this.#failPending = undefined;
      });
    });
  }

  override close(): void {
    super.close();
    const fail = this.#failPending;
    this.#failPending = undefined;
    fail?.(new Error("connection closed"));
  }

  async send(messages: readonly Uint8Array[]): Promise<void> {
    let written = 0;
    for (const m of messages) {
      if (!this.open) throw new SendError("connection closed", { written });
      let n: number;
      try {
        n = await this.#sendOne(m);
      } catch (e) {
        throw new SendError(e instanceof Error ? e.message : String(e), { written, cause: e });
      }
      if (n !== m.length) {
        throw new SendError("could not send the complete message on the connection", { written });
      }
      written += n;
    }
  }

  shutdown(): Promise<boolean> {
    this.close();
    return Promise.resolve(true);
  }
}

/** Whether `host` is an IP address (IPv4 dotted or IPv6) rather than a name. */
function isIpLiteral(host: string): boolean {
  return /^[0-9.]+$/.test(host) || host.includes(":");
}

/** The local address a UDP transport to `ip` binds, on an ephemeral port (port 0). */
function udpBindHost(ip: string): string {
  return ip.includes(":") ? "::" : "0.0.0.0";
}

/**
 * What a UDP transport to `host` needs of the `net` permission besides `host:port`: its local
 * socket's bind (`0.0.0.0:0` or `[::]:0`; both for a name, resolved only when sending).
 */
export function udpBindPermissions(host: string): string[] {
  const hosts = isIpLiteral(host)
    ? [udpBindHost(host)]
    : [udpBindHost("0.0.0.0"), udpBindHost("::")];
  return hosts.map((h) => (h.includes(":") ? `[${h}]:0` : `${h}:0`));
}

/** See {@linkcode UdpTransport}. */
function byName(host: string, port: number): void {
  log.warn(
    "UDP collector: the net permission names it by host name only: resolving it at each " +
      "datagram (give its IP address, or grant net to the address, to avoid that)",
    { host, port },
  );
}

/**
 * `host`'s address, resolved once; `host` itself when the process may not resolve it (a `net`
 * permission for the name with a port: see {@linkcode UdpTransport}).
 */
async function resolveHost(host: string): Promise<string> {
  if (isIpLiteral(host)) return host;
  if (host === "localhost") return "127.0.0.1";
  const { lookup } = await import("node:dns/promises");
  try {
    return (await lookup(host)).address;
  } catch (e) {
    if ((e as { code?: string }).code === "EPERM" || e instanceof Deno.errors.NotCapable) {
      return host;
    }
    throw e;
  }
}

/** Opens a transport to `target`; rejects with a message naming the target on failure. */
export async function openTransport(target: TransportTarget): Promise<Transport> {
  const timeout = target.connectTimeoutMs ?? 5000;
  const where = `${target.kind} ${
    target.host.includes(":") ? `[${target.host}]` : target.host
  }:${target.port}`;
  try {
    if (target.kind === "udp") {
      // Bounded like a TCP connect: a resolver that does not answer held the open (and the
      // sink's stop) about 30 s (found by review).
      const ip = await withTimeout(resolveHost(target.host), timeout, "resolve", target.signal);
      const sock = Deno.listenDatagram({
        transport: "udp",
        hostname: udpBindHost(ip),
        port: 0,
      });
      return new UdpTransport(
        sock,
        { transport: "udp", hostname: ip, port: target.port },
        target.host,
      );
    }
    if (target.kind === "tcp") return new StreamTransport("tcp", await connectTcp(target, timeout));
    const t = target.tlsEngine === "deno"
      ? await openDenoTls(target, timeout)
      : await openTls(target, timeout);
    // TLS 1.3 servers verify the client certificate after the client's handshake has finished,
    // so a refusal arrives as an alert right after it. Wait briefly for it: otherwise the first
    // records would be written into a session the collector is about to abort.
    const settle = target.tls?.settleMs ?? 200;
    if (settle > 0) {
      const refused = await within(t.closed, settle) === "done";
      if (refused) throw new Error("connection closed by the peer after the TLS handshake");
    }
    return t;
  } catch (e) {
    throw new Error(`dial ${where}: ${e instanceof Error ? e.message : String(e)}`);
  }
}
