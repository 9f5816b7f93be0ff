/**
 * The UDP receive path behind a small interface, so a faster receive path (several sockets with
 * SO_REUSEPORT, batching) can be added next to this one without touching session handling.
 * Each datagram is one IPFIX message; it is read into a 65536-byte buffer so nothing is truncated
 * (upstream's 1024-byte buffer truncates, ipfix.md §2.4).
 *
 * The plain socket path cannot ask the kernel for drop counts (no SO_RXQ_OVFL without FFI), so it
 * reads them from Linux's per-socket table (`/proc/net/udp`, `/proc/net/udp6`, column `drops`).
 * Deno (2.x) lets a process read anything under `/proc` only with `--allow-all`, whatever
 * `--allow-read` says; without it the count is reported as unknown, never as 0.
 */

import {
  bindDualStack,
  closeQuietly,
  type ListenAddress,
  readGranted,
  sessionPeer,
} from "./address.ts";
import { logger, RateLimitedLog } from "../log.ts";
import { type DrainOptions, drainRound } from "./drain.ts";
import { splitPeer, startUdpReceiver, type UdpBatch } from "./udp_fast.ts";

/**
 * Called synchronously for every datagram: the datagram is `data[start..end)`, in a reused
 * receive buffer, valid only during the call (decoded values are copies, so decoding
 * synchronously is safe).
 */
export type DatagramHandler = (data: Uint8Array, start: number, end: number, peer: UdpPeer) => void;

/** A datagram's sender, made once per sender by the fast path (the same object repeats). */
export interface UdpPeer {
  readonly hostname: string;
  readonly port: number;
  /** {@linkcode sessionPeer}: the collector's session key and the session's `peer`. */
  readonly key: string;
}

/** The {@linkcode UdpPeer} of a sender. */
export function udpPeer(hostname: string, port: number): UdpPeer {
  return { hostname, port, key: sessionPeer(hostname, port) };
}

/**
 * Senders whose {@linkcode UdpPeer} the fast path keeps (a Map from its peer strings): past it,
 * the map starts over, so a flood of spoofed sources costs what it did before, not memory.
 */
const MAX_KNOWN_PEERS = 65_536;

/** A bound UDP socket (or group of sockets) delivering datagrams to one handler. */
export interface UdpReceiver {
  /** The bound port. */
  readonly port: number;
  /** Receives until {@linkcode close}; resolves once the loop has ended. Never rejects. */
  run(handler: DatagramHandler): Promise<void>;
  /**
   * Closes the socket(s); `run` then resolves. With `drain`, datagrams already queued are
   * received and handled first (until a quiet period passes, within the deadline). Idempotent.
   */
  close(drain?: DrainOptions): void | Promise<void>;
  /** Receive-path counters, where the implementation can observe them. */
  counters?(): UdpReceiverCounters;
}

/**
 * Opens a {@linkcode UdpReceiver} on an address; pluggable via the collector options. May be
 * async (e.g. a receive path that starts worker threads before it is ready).
 */
export type UdpReceiverFactory = (address: ListenAddress) => UdpReceiver | Promise<UdpReceiver>;

/** Largest IPFIX message (u16 length); one byte more detects an oversized datagram. */
const RECEIVE_BUFFER = 65536;

const log = logger("collector.udp");

/** Socket receive buffer below which a start-up warning is logged (the fast path asks 4 MiB). */
export const SMALL_RECV_BUFFER = 4 << 20;

/** Options of {@linkcode DenoUdpReceiver} (the defaults are the real kernel files). */
export interface DenoUdpReceiverOptions {
  /** Directory holding the kernel's `udp` and `udp6` socket tables; default `/proc/net`. */
  procNetDir?: string;
  /** Directory holding `rmem_default` and `rmem_max`; default `/proc/sys/net/core`. */
  sysctlDir?: string;
  /** How often the drop counter is read while receiving; default 1000 ms, 0: only on demand. */
  kernelDropsIntervalMs?: number;
}

/** Drops of the sockets bound to one port in a `/proc/net/udp{,6}` table. */
export interface UdpTableDrops {
  /** Rows whose local port is the port (normally 1: our socket). */
  readonly rows: number;
  /** Sum of their `drops` column. */
  readonly drops: number;
}

/**
 * Sums the `drops` column (the last one) of the rows of a `/proc/net/udp` or `/proc/net/udp6`
 * table whose local port is `port`. Deno does not expose a socket's inode, so rows cannot be
 * told apart by inode: with several sockets on the port (another address, SO_REUSEPORT) the sum
 * includes theirs, and `rows` says so.
 */
export function udpTableDrops(table: string, port: number): UdpTableDrops {
  let rows = 0;
  let drops = 0;
  for (const line of table.split("\n").slice(1)) {
    const cols = line.trim().split(/\s+/);
    if (cols.length < 13) continue;
    const local = cols[1];
    if (parseInt(local.slice(local.lastIndexOf(":") + 1), 16) !== port) continue;
    rows++;
    drops += Number(cols[cols.length - 1]) || 0;
  }
  return { rows, drops };
}

/** Why a `/proc` read failed, and how to make it work. */
function procReadProblem(e: unknown): string {
  if (e instanceof Deno.errors.NotCapable) {
    // Deno checks /proc, /sys and /dev against --allow-all, not against --allow-read.
    return "Deno reads /proc only with --allow-all";
  }
  if (e instanceof Deno.errors.NotFound) return "no /proc (not Linux?)";
  return e instanceof Error ? e.message : String(e);
}

/** The default receive path: one `Deno.listenDatagram` socket, one receive loop. */
export class DenoUdpReceiver implements UdpReceiver {
  readonly #conn: Deno.DatagramConn;
  readonly #buf = new Uint8Array(RECEIVE_BUFFER);
  readonly #rateLog = new RateLimitedLog(10_000);
  readonly #table: string | undefined;
  readonly #intervalMs: number;
  readonly #recvBufferBytes: number;
  #kernelDrops = 0;
  #kernelDropsKnown = false;
  #timer: ReturnType<typeof setInterval> | undefined;
  #reading: Promise<void> | undefined;
  #closing: Promise<void> | undefined;
  #closed = false;
  #running = false;
  /** Datagrams received (the drain watches it move). */
  #received = 0;
  #handlerErrors = 0;

  /**
   * Binds the socket (a wildcard address binds `::`, dual-stack, else falls back to IPv4), then
   * reads the kernel's drop counter and buffer sizes once, logging what cannot be observed.
   */
  constructor(address: ListenAddress, options: DenoUdpReceiverOptions = {}) {
    this.#conn = bind(address);
    const family = (this.#conn.addr as Deno.NetAddr).hostname.includes(":") ? "udp6" : "udp";
    const table = `${options.procNetDir ?? "/proc/net"}/${family}`;
    this.#intervalMs = options.kernelDropsIntervalMs ?? 1000;
    const problem = this.#readDropsSync(table);
    if (problem === undefined) {
      this.#table = table;
    } else {
      log.warn("UDP kernel drops are not observable on the socket receive path", {
        table,
        reason: problem,
        hint: "run with --allow-ffi (the fast receive path counts them) or --allow-all",
      });
    }
    this.#recvBufferBytes = checkRecvBuffer(options.sysctlDir ?? "/proc/sys/net/core");
  }

  /** The bound port. */
  get port(): number {
    return (this.#conn.addr as Deno.NetAddr).port;
  }

  /** Receive loop: errors other than closing are logged and the loop goes on. */
  async run(handler: DatagramHandler): Promise<void> {
    if (this.#table !== undefined && this.#intervalMs > 0 && this.#closing === undefined) {
      const timer = setInterval(() => void this.refreshKernelDrops(), this.#intervalMs);
      Deno.unrefTimer(timer);
      this.#timer = timer;
    }
    this.#running = true;
    while (!this.#closed) {
      let data: Uint8Array;
      let addr: Deno.NetAddr;
      try {
        const [d, a] = await this.#conn.receive(this.#buf);
        data = d;
        addr = a as Deno.NetAddr;
      } catch (e) {
        if (this.#closed) break;
        if (this.#rateLog.allow("receive") >= 0) log.warn("receive failed", { error: e });
        // Avoid a hot loop if the socket keeps failing (it should not, but the loop must live).
        await new Promise((r) => setTimeout(r, 10));
        continue;
      }
      this.#received++;
      try {
        handler(data, 0, data.length, udpPeer(addr.hostname, addr.port));
      } catch (e) {
        // The handler counts its own errors; anything escaping is a bug, never a reason to stop.
        this.#handlerErrors++;
        if (this.#rateLog.allow("handler") >= 0) log.error("datagram handler threw", { error: e });
      }
    }
  }

  /**
   * Reads the kernel's drop counter now (also done every `kernelDropsIntervalMs` while
   * receiving, and at close). Resolves once read; never rejects.
   */
  refreshKernelDrops(): Promise<void> {
    const table = this.#table;
    if (table === undefined || this.#closing !== undefined) {
      return this.#reading ?? Promise.resolve();
    }
    this.#reading ??= (async () => {
      try {
        this.#applyDrops(udpTableDrops(await Deno.readTextFile(table), this.port));
      } catch (e) {
        if (this.#rateLog.allow("drops") >= 0) {
          log.warn("cannot read UDP kernel drops", { table, reason: procReadProblem(e) });
        }
      } finally {
        this.#reading = undefined;
      }
    })();
    return this.#reading;
  }

  /**
   * Receives what is queued (with `drain`), reads the drop counter a last time (the socket's
   * row goes with it), then closes.
   */
  close(drain?: DrainOptions): Promise<void> {
    this.#closing ??= (async () => {
      if (this.#timer !== undefined) clearInterval(this.#timer);
      if (drain !== undefined && this.#running) await this.#drainQueued(drain);
      await this.#reading;
      if (this.#table !== undefined) this.#readDropsSync(this.#table);
      this.#closed = true;
      closeQuietly(this.#conn);
    })();
    return this.#closing;
  }

  /** Waits until the receive loop has read everything queued: a quiet round, or the deadline. */
  async #drainQueued(drain: DrainOptions): Promise<void> {
    const deadline = performance.now() + drain.deadlineMs;
    let seen = this.#received;
    for (;;) {
      const round = await drainRound(drain, deadline);
      if (round === "deadline") {
        log.warn("UDP datagrams still arriving at the drain deadline", { ...drain });
        return;
      }
      if (round === "judge" && this.#received === seen) return;
      seen = this.#received;
    }
  }

  /** Receive-path counters; `kernelDrops` as of the last read of the kernel's table. */
  counters(): UdpReceiverCounters {
    return {
      mode: "socket",
      kernelDrops: this.#kernelDrops,
      kernelDropsKnown: this.#kernelDropsKnown,
      queueDrops: 0,
      oversized: 0,
      handlerErrors: this.#handlerErrors,
      recvBufferBytes: this.#recvBufferBytes,
      sockets: 1,
      socketDatagrams: [this.#received],
    };
  }

  /** Reads the table synchronously; returns what went wrong, if anything. */
  #readDropsSync(table: string): string | undefined {
    try {
      // Checked first: a read outside the permissions would prompt on a terminal.
      if (!readGranted(table)) return `no read permission for ${table}`;
      const d = udpTableDrops(Deno.readTextFileSync(table), this.port);
      if (d.rows === 0) return `no socket with local port ${this.port} in the table`;
      this.#applyDrops(d);
      return undefined;
    } catch (e) {
      return procReadProblem(e);
    }
  }

  #applyDrops(d: UdpTableDrops): void {
    if (d.rows === 0) return; // the socket is gone (closing): keep the last count
    if (d.rows > 1 && this.#rateLog.allow("rows") >= 0) {
      log.warn("several sockets share the UDP port: kernel drops are their sum", {
        port: this.port,
        sockets: d.rows,
      });
    }
    // The kernel's counter is per socket and never decreases; a lower sum means a socket that
    // shared the port went away, and the ledger must stay monotonic.
    this.#kernelDrops = Math.max(this.#kernelDrops, d.drops);
    this.#kernelDropsKnown = true;
  }
}

/**
 * Reads `rmem_default` (what a Deno socket's receive buffer is: it never sets SO_RCVBUF) and
 * `rmem_max` (the cap of what the fast path asks for), warns when either is below
 * {@linkcode SMALL_RECV_BUFFER}, and returns the socket's buffer (0 when unknown).
 */
function checkRecvBuffer(dir: string): number {
  const read = (name: string): number | undefined => {
    const path = `${dir}/${name}`;
    try {
      if (!readGranted(path)) return undefined;
      const v = Number(Deno.readTextFileSync(path).trim());
      return Number.isFinite(v) ? v : undefined;
    } catch {
      return undefined;
    }
  };
  const rmemDefault = read("rmem_default");
  const rmemMax = read("rmem_max");
  if (rmemDefault === undefined && rmemMax === undefined) {
    log.info("UDP socket receive buffer unknown (Deno reads /proc only with --allow-all)", {
      check: "sysctl net.core.rmem_default net.core.rmem_max",
      recommended: SMALL_RECV_BUFFER,
    });
    return 0;
  }
  const small = (v: number | undefined) => v !== undefined && v < SMALL_RECV_BUFFER;
  if (small(rmemDefault) || small(rmemMax)) {
    log.warn("UDP socket receive buffer is small: bursts will be dropped by the kernel", {
      recvBufferBytes: rmemDefault,
      rmemMax,
      fix: "sysctl -w net.core.rmem_max=8388608 net.core.rmem_default=8388608",
    });
  }
  return rmemDefault ?? 0;
}

function bind(address: ListenAddress): Deno.DatagramConn {
  return bindDualStack(
    address,
    (hostname) => Deno.listenDatagram({ transport: "udp", hostname, port: address.port }),
    (e) => log.warn("cannot bind [::], falling back to IPv4 only", { error: e }),
  );
}

/** The default {@linkcode UdpReceiverFactory}. */
export function openDenoUdpReceiver(address: ListenAddress): UdpReceiver {
  return new DenoUdpReceiver(address);
}

/** Counters of a UDP receive path (queue drops only happen on the fast path). */
export interface UdpReceiverCounters {
  /** Implementation in use: `socket` (Deno.listenDatagram) or `ffi` (recvmmsg workers). */
  readonly mode: string;
  /**
   * Datagrams the kernel dropped for the socket (buffer full): from SO_RXQ_OVFL (and SO_MEMINFO
   * when the socket is quiet and at stop) on the fast path, from `/proc/net/udp{,6}` on the
   * socket path. 0 while {@linkcode kernelDropsKnown} is false.
   */
  readonly kernelDrops: number;
  /** False when the receive path cannot observe kernel drops (socket path without `/proc`). */
  readonly kernelDropsKnown: boolean;
  /** Datagrams dropped because the main thread fell behind the receive workers. */
  readonly queueDrops: number;
  /** Datagrams longer than 65535 bytes, dropped. */
  readonly oversized: number;
  /**
   * Datagrams whose handler threw (a bug: the collector counts its own errors), each logged
   * (rate-limited); the next datagram is handled as usual.
   */
  readonly handlerErrors: number;
  /** Kernel receive buffer per socket as reported by the kernel (0 when unknown). */
  readonly recvBufferBytes: number;
  /** Sockets sharing the port (SO_REUSEPORT on the fast path; the socket path has one). */
  readonly sockets: number;
  /**
   * Datagrams received per socket (the kernel keeps each Agent on one socket: a socket far
   * busier than the others holds the busiest Agents). In `/metrics`
   * (`flow_aggregator_udp_socket_datagrams{socket="i"}`), not in the metrics log line.
   */
  readonly socketDatagrams: readonly number[];
}

/** Options of {@linkcode fastUdpReceiverFactory}. */
export interface FastUdpOptions {
  /** Sockets/worker threads sharing the port with SO_REUSEPORT (default 1). */
  workers?: number;
  /** Requested kernel receive buffer per socket (default 4 MiB). */
  recvBufferBytes?: number;
  /** `auto` (default): recvmmsg workers when FFI is permitted on Linux, else Deno sockets. */
  mode?: "auto" | "ffi" | "deno";
}

/**
 * The fast receive path (`udp_fast.ts`: libc `recvmmsg` in worker threads, batches handed to
 * the main thread) behind the collector's {@linkcode UdpReceiver} interface. It needs
 * `--allow-ffi`; without it (or off Linux) `auto` falls back to Deno sockets.
 */
export function fastUdpReceiverFactory(options: FastUdpOptions = {}): UdpReceiverFactory {
  return async (address: ListenAddress): Promise<UdpReceiver> => {
    let handler: DatagramHandler | undefined;
    let early = 0;
    let handlerErrors = 0;
    const rateLog = new RateLimitedLog(10_000);
    const peers = new Map<string, UdpPeer>();
    const done = Promise.withResolvers<void>();
    const rx = await startUdpReceiver({
      hostname: address.wildcard ? "::" : address.hostname,
      port: address.port,
      mode: options.mode,
      workers: options.workers,
      recvBufferBytes: options.recvBufferBytes,
      onDatagrams(batch: UdpBatch): void {
        if (handler === undefined) {
          early += batch.count; // before run(): cannot happen in the collector, but counted
          return;
        }
        const { data, offsets, lengths } = batch;
        for (let i = 0; i < batch.count; i++) {
          const from = batch.peers[i];
          let peer = peers.get(from);
          if (peer === undefined) {
            if (peers.size >= MAX_KNOWN_PEERS) peers.clear();
            const { hostname, port } = splitPeer(from);
            peer = udpPeer(hostname, port);
            peers.set(from, peer);
          }
          const start = offsets[i];
          // One datagram's failure must not lose the rest of its batch.
          try {
            handler(data, start, start + lengths[i], peer);
          } catch (e) {
            handlerErrors++;
            if (rateLog.allow("handler") >= 0) log.error("datagram handler threw", { error: e });
          }
        }
      },
    });
    log.info("UDP receive path", {
      mode: rx.mode,
      workers: rx.stats().workers,
      recvBufferBytes: rx.stats().recvBufferBytes,
    });
    let closed = false;
    return {
      port: rx.addr.port,
      run(h: DatagramHandler): Promise<void> {
        handler = h;
        return done.promise;
      },
      async close(): Promise<void> {
        if (closed) return;
        closed = true;
        await rx.close();
        done.resolve();
      },
      counters(): UdpReceiverCounters {
        const s = rx.stats();
        return {
          mode: s.mode === "deno" ? "socket" : s.mode,
          kernelDrops: s.kernelDrops,
          kernelDropsKnown: s.mode === "ffi",
          queueDrops: s.dropped + early,
          oversized: s.truncated,
          handlerErrors,
          recvBufferBytes: s.recvBufferBytes,
          sockets: s.workers,
          socketDatagrams: s.perWorker,
        };
      },
    };
  };
}
