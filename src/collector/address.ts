/**
 * Address helpers for the collector: parsing the listen address and turning a peer address into
 * the exporter address used to label records (ipfix.md §2.5 step 3, §2.15).
 */

/** A parsed listen address. */
export interface ListenAddress {
  /** Host to bind, without brackets; `::` for "all interfaces". */
  readonly hostname: string;
  /** Port to bind; 0 = any free port. */
  readonly port: number;
  /** True when the address means "all interfaces" (``, `::`, `0.0.0.0`): bind dual-stack. */
  readonly wildcard: boolean;
}

/** Default listen address: IANA IPFIX port on all interfaces, IPv4 and IPv6. */
export const DEFAULT_LISTEN_ADDRESS = "[::]:4739";

/**
 * Parses `host:port`, `[v6]:port` or `:port`. `0.0.0.0` and an empty host are treated like `::`
 * because Go (and so the upstream FA) turns the IPv4 wildcard into a dual-stack socket.
 */
export function parseListenAddress(address: string): ListenAddress {
  const colon = address.lastIndexOf(":");
  if (colon < 0) {
    throw new Error(`collector: address "${address}": missing port (want host:port)`);
  }
  const host = address.slice(0, colon).replace(/^\[(.*)\]$/, "$1");
  const portText = address.slice(colon + 1);
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port > 65535) {
    throw new Error(`collector: address "${address}": invalid port "${portText}"`);
  }
  const wildcard = host === "" || host === "::" || host === "0.0.0.0";
  return { hostname: wildcard ? "::" : host, port, wildcard };
}

/** A session's peer as logged and as the UDP session key: `[host]:port`, whatever the family. */
export function sessionPeer(hostname: string, port: number): string {
  return `[${hostname}]:${port}`;
}

/**
 * Exporter address of a peer: the IP without port or brackets, with IPv4-mapped IPv6
 * (`::ffff:10.0.0.1`) normalised to plain IPv4 so a dual-stack socket labels IPv4 agents as
 * an IPv4 socket would.
 */
export function exporterAddress(hostname: string): string {
  const h = hostname.replace(/^\[(.*)\]$/, "$1");
  const m = /^::ffff:(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})$/i.exec(h);
  return m ? m[1] : h;
}

/**
 * Opens a listener on `address`: on a wildcard address, the IPv6 wildcard (dual-stack, IPv4 as
 * mapped addresses), falling back to the IPv4 wildcard where IPv6 is unavailable
 * (`onFallback` is told why).
 */
export function bindDualStack<T>(
  address: ListenAddress,
  open: (hostname: string) => T,
  onFallback?: (err: unknown) => void,
): T {
  if (!address.wildcard) return open(address.hostname);
  try {
    return open("::");
  } catch (err) {
    onFallback?.(err);
    return open("0.0.0.0");
  }
}

/** Closes a socket, connection or listener, ignoring "already closed". */
export function closeQuietly(c: { close(): void }): void {
  try {
    c.close();
  } catch {
    // Already closed.
  }
}

/** True when reading `path` would neither be refused outright nor prompt the user. */
export function readGranted(path: string): boolean {
  return Deno.permissions.querySync({ name: "read", path }).state === "granted";
}

/**
 * The open connections of a listener counted in total and per source address, against a cap on
 * each: the admission rule of the collector's listeners and the API port's, and the IPFIX
 * exporter's bound on handshakes it gave up on (`src/net/transport.ts`).
 */
export class AddressCaps {
  readonly #maxTotal: number;
  readonly #maxPerAddress: number;
  readonly #perAddress = new Map<string, number>();
  #total = 0;

  /** Counts against `maxTotal` connections, `maxPerAddress` from one address (Infinity: none). */
  constructor(maxTotal: number, maxPerAddress: number) {
    this.#maxTotal = maxTotal;
    this.#maxPerAddress = maxPerAddress;
  }

  /** Connections counted. */
  get size(): number {
    return this.#total;
  }

  /**
   * The cap a new connection from `address` would exceed (the total first), or undefined when
   * it may be admitted ({@linkcode add}).
   */
  exceeded(address: string): "total" | "perAddress" | undefined {
    if (this.#total >= this.#maxTotal) return "total";
    if ((this.#perAddress.get(address) ?? 0) >= this.#maxPerAddress) return "perAddress";
    return undefined;
  }

  /** Counts an admitted connection from `address`. */
  add(address: string): void {
    this.#total++;
    this.#perAddress.set(address, (this.#perAddress.get(address) ?? 0) + 1);
  }

  /** Uncounts a connection from `address` that {@linkcode add} counted. */
  remove(address: string): void {
    this.#total--;
    const n = (this.#perAddress.get(address) ?? 1) - 1;
    if (n <= 0) this.#perAddress.delete(address);
    else this.#perAddress.set(address, n);
  }
}
