/**
 * The UDP receive path behind a small interface, so a faster receive path (several sockets with
 * SO_REUSEPORT, batching) can be added next to this one without touching session handling.
 * Each datagram is one IPFIX message; it is read into a 65536-byte buffer so nothing is truncated
 * (upstream's 1024-byte buffer truncates, ipfix.md §2.4).
 */

import { bindDualStack, closeQuietly, type ListenAddress } from "./address.ts";
import { logger, RateLimitedLog } from "../log.ts";
import { datagramAt, splitPeer, startUdpReceiver, type UdpBatch } from "./udp_fast.ts";

/**
 * Called synchronously for every datagram. `data` is a view into a reused receive buffer, valid
 * only during the call (decoded values are copies, so decoding synchronously is safe).
 */
export type DatagramHandler = (data: Uint8Array, hostname: string, port: number) => void;

/** A bound UDP socket (or group of sockets) delivering datagrams to one handler. */
export interface UdpReceiver {
  /** The bound port. */
  readonly port: number;
  /** Receives until {@linkcode close}; resolves once the loop has ended. Never rejects. */
  run(handler: DatagramHandler): Promise<void>;
  /** Closes the socket(s); `run` then resolves. Idempotent. */
  close(): void | Promise<void>;
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

/** The default receive path: one `Deno.listenDatagram` socket, one receive loop. */
export class DenoUdpReceiver implements UdpReceiver {
  readonly #conn: Deno.DatagramConn;
  readonly #buf = new Uint8Array(RECEIVE_BUFFER);
  readonly #rateLog = new RateLimitedLog(10_000);
  #closed = false;

  /** Binds the socket. A wildcard address binds `::` (dual-stack), else falls back to IPv4. */
  constructor(address: ListenAddress) {
    this.#conn = bind(address);
  }

  /** The bound port. */
  get port(): number {
    return (this.#conn.addr as Deno.NetAddr).port;
  }

  /** Receive loop: errors other than closing are logged and the loop goes on. */
  async run(handler: DatagramHandler): Promise<void> {
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
      try {
        handler(data, addr.hostname, addr.port);
      } catch (e) {
        // The handler counts its own errors; anything escaping is a bug, never a reason to stop.
        if (this.#rateLog.allow("handler") >= 0) log.error("datagram handler threw", { error: e });
      }
    }
  }

  /** Closes the socket. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    closeQuietly(this.#conn);
  }
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

/** Counters of a UDP receive path (kernel and queue drops are only visible to the fast path). */
export interface UdpReceiverCounters {
  /** Implementation in use: `socket` (Deno.listenDatagram) or `ffi` (recvmmsg workers). */
  readonly mode: string;
  /** Datagrams the kernel dropped because the socket buffer was full (fast path only). */
  readonly kernelDrops: number;
  /** Datagrams dropped because the main thread fell behind the receive workers. */
  readonly queueDrops: number;
  /** Datagrams longer than 65535 bytes, dropped. */
  readonly oversized: number;
  /** Kernel receive buffer per socket as reported by the kernel (0 when unknown). */
  readonly recvBufferBytes: number;
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
        for (let i = 0; i < batch.count; i++) {
          const { hostname, port } = splitPeer(batch.peers[i]);
          handler(datagramAt(batch, i), hostname, port);
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
          queueDrops: s.dropped + early,
          oversized: s.truncated,
          recvBufferBytes: s.recvBufferBytes,
        };
      },
    };
  };
}
