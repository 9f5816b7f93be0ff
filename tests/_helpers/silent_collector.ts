/**
 * A real TCP collector on loopback that reads nothing until told to, for the delivery tests
 * (issue 10): what an exporter writes piles up in the two kernels' buffers, as with a stuck or
 * dead collector process. It can be killed (connections closed with their unread data, which
 * the kernel discards and answers with a reset), drained and decoded, and it can say how many
 * bytes the kernel holds for it unread (`/proc/net/tcp`, so the caller needs `--allow-read`
 * there, which `--allow-all` gives).
 */

import { decodeMessage, readMessageLength, TemplateStore } from "../../src/ipfix/mod.ts";
import { concat } from "./bytes.ts";

/** A TCP collector on 127.0.0.1 that accepts connections and reads nothing until drained. */
export class SilentCollector {
  readonly #listener: Deno.Listener;
  /** Accepted connections, in order. */
  readonly conns: Deno.Conn[] = [];
  readonly #accepting: Promise<void>;
  #closed = new Set<Deno.Conn | Deno.Listener>();

  /** Listens on an ephemeral port at once. */
  constructor() {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.#listener = listener;
    this.#accepting = (async () => {
      try {
        for await (const c of listener) this.conns.push(c);
      } catch {
        // listener closed
      }
    })();
  }

  /** The listening port. */
  get port(): number {
    return (this.#listener.addr as Deno.NetAddr).port;
  }

  /** Stops listening (connections stay as they are). Idempotent, as is `kill`. */
  async stopListening(): Promise<void> {
    this.#close(this.#listener);
    await this.#accepting;
  }

  #close(c: Deno.Conn | Deno.Listener): void {
    if (this.#closed.has(c)) return;
    this.#closed.add(c);
    c.close();
  }

  /**
   * The process dies: every connection is closed with its unread data, which the kernel
   * discards (and answers with a reset).
   */
  async kill(): Promise<void> {
    for (const c of this.conns) this.#close(c);
    await this.stopListening();
  }

  /**
   * Reads connection `i` to its end and decodes it: the data records of its complete messages
   * (by `flowEndSeconds`; a message cut short at the end is not decoded) and the bytes read.
   * Then closes it, unless `keepOpen` (a collector that never answers our end of stream).
   */
  async drain(i = 0, { keepOpen = false } = {}): Promise<{ ids: number[]; bytes: number }> {
    const conn = this.conns[i];
    const chunks: Uint8Array[] = [];
    const buf = new Uint8Array(1 << 16);
    for (;;) {
      const n = await conn.read(buf);
      if (n === null) break;
      chunks.push(buf.slice(0, n));
    }
    if (!keepOpen) this.#close(conn);
    const bytes = concat(...chunks);
    const store = new TemplateStore();
    const ids: number[] = [];
    let off = 0;
    while (bytes.length - off >= 4 && bytes.length - off >= readMessageLength(bytes, off)) {
      const len = readMessageLength(bytes, off);
      for (const set of decodeMessage(bytes.subarray(off, off + len), store).dataSets) {
        for (const r of set.records) ids.push(Number(r.flowEndSeconds));
      }
      off += len;
    }
    return { ids, bytes: bytes.length };
  }
}

/**
 * Bytes received and not yet read on the established IPv4 TCP sockets whose local port is
 * `port` (the `rx_queue` column of `/proc/net/tcp`).
 */
export async function unreadBytes(port: number): Promise<number> {
  const text = await Deno.readTextFile("/proc/net/tcp");
  let total = 0;
  for (const line of text.split("\n").slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 5 || f[3] !== "01") continue; // 01: ESTABLISHED
    if (parseInt(f[1].split(":")[1], 16) !== port) continue;
    total += parseInt(f[4].split(":")[1], 16);
  }
  return total;
}
