/**
 * The kernel's own count of the datagrams it dropped for a UDP port (socket receive buffer
 * full), for tests that account for every datagram sent over loopback: what the collector read
 * plus what the kernel dropped must be what was sent, and the collector's own drop counter must
 * agree with the kernel's.
 */

import { udpTableDrops } from "../../src/collector/udp.ts";

/** Drops of the sockets bound to one port, as `/proc/net/udp` and `/proc/net/udp6` show them. */
export interface KernelUdpDrops {
  /** Sockets bound to the port (0: none, e.g. already closed). */
  readonly sockets: number;
  /** Sum of their `drops` column. */
  readonly drops: number;
}

/**
 * Reads the kernel's drop counters of the sockets bound to `port` (Linux; Deno reads `/proc`
 * only with `--allow-all`). Read it while the socket is open: its row goes with it.
 */
export function kernelUdpDrops(port: number): KernelUdpDrops {
  let sockets = 0;
  let drops = 0;
  for (const table of ["/proc/net/udp", "/proc/net/udp6"]) {
    const d = udpTableDrops(Deno.readTextFileSync(table), port);
    sockets += d.rows;
    drops += d.drops;
  }
  return { sockets, drops };
}
