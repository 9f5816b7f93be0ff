/**
 * A Deno TCP connection as the `Duplex` that `node:tls` reads and writes the encrypted side of a
 * connection through: the collector's and the API's TLS servers (Deno's own TLS cannot ask for
 * client certificates) and the IPFIX exporter's TLS client (Deno cannot cancel its own pending
 * TLS handshake without leaving the socket open; over our socket, closing it always closes).
 *
 * @module
 */

import { Duplex } from "node:stream";
import { writeAll } from "../bytes.ts";
import { closeQuietly } from "../collector/address.ts";
import type { Clock } from "../clock.ts";

/**
 * How long a server's TLS layer may still take to finish a handshake with what it read once the
 * peer closed its side (a peer's last flight followed by its FIN). Past it the connection
 * fails (the collector counts it in `tlsHandshakeFailures`, the API in `handshakeFailures`):
 * fed the end of its input mid-handshake, the TLS layer neither finishes nor fails, so a peer
 * gone early (a TCP health check, a port scan, an Agent giving up) would otherwise keep its
 * places under the caps until the handshake timeout.
 */
export const HANDSHAKE_EOF_GRACE_MS = 1000;

/**
 * Called when a server connection's input ended during its handshake: `fail` runs after
 * {@linkcode HANDSHAKE_EOF_GRACE_MS} on `clock` if the handshake is still `undecided` then.
 */
export function failHandshakeAfterEof(
  clock: Clock,
  undecided: () => boolean,
  fail: () => void,
): void {
  clock.setTimer(HANDSHAKE_EOF_GRACE_MS, () => {
    if (undecided()) fail();
  }, { unref: true });
}

/**
 * The encrypted side of a TLS connection on our own socket, as `node:tls` reads and writes it:
 * what the TLS layer writes goes to `conn` whole, its end half-closes `conn`; `read` is called
 * when the layer wants more (the caller pushes what it reads from `conn`), `destroyed` once the
 * Duplex is destroyed (`conn` is closed by then), `wrote` (optional) after each write reached
 * the socket.
 */
export function socketDuplex(
  conn: Deno.TcpConn,
  read: () => void,
  destroyed: () => void,
  wrote?: () => void,
): Duplex {
  return new Duplex({
    read,
    write(chunk: Uint8Array, _encoding: string, done: (e?: Error | null) => void): void {
      writeAll(conn, chunk).then(() => {
        wrote?.();
        done();
      }, (e) => done(e as Error));
    },
    final(done: (e?: Error | null) => void): void {
      conn.closeWrite().then(() => done(), () => done());
    },
    destroy(err: Error | null, done: (e?: Error | null) => void): void {
      closeQuietly(conn);
      destroyed();
      done(err);
    },
  });
}
