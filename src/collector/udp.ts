/**
 * The UDP receive path behind a small interface, so a faster receive path (several sockets with
 * SO_REUSEPORT, batching) can be added next to this one without touching session handling.
 * Each datagram is one IPFIX message; it is read into a 65536-byte buffer so nothing is truncated
 * (upstream's 1024-byte buffer truncates, ipfix.md §2.4).
 */

import type { ListenAddress } from "./address.ts";
import { logger, RateLimitedLog } from "../log.ts";

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
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }
}

function bind(address: ListenAddress): Deno.DatagramConn {
  const open = (hostname: string): Deno.DatagramConn =>
    Deno.listenDatagram({ transport: "udp", hostname, port: address.port });
  if (!address.wildcard) return open(address.hostname);
  try {
    return open("::");
  } catch (e) {
    log.warn("cannot bind [::], falling back to IPv4 only", { error: e });
    return open("0.0.0.0");
  }
}

/** The default {@linkcode UdpReceiverFactory}. */
export function openDenoUdpReceiver(address: ListenAddress): UdpReceiver {
  return new DenoUdpReceiver(address);
}
