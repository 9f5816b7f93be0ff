/**
 * `flowCollector.address` grammar (control-plane.md §1.6): `host[:port][:proto]`, IPv6 hosts in
 * brackets. Upstream keeps an empty port empty and never checks it; we default it to 4739 and
 * require 1..65535 so a typo fails at load time instead of at every export (§8 L20). `tls` is
 * accepted because our IPFIX exporter implements it (upstream parsed it but could not use it).
 */

import type { CollectorAddress, CollectorProto } from "./config.ts";

/** Default IPFIX port. */
export const DEFAULT_COLLECTOR_PORT = 4739;

const PROTOS: readonly CollectorProto[] = ["tcp", "udp", "tls"];

/** Joins host and port, bracketing IPv6 literals. */
export function joinHostPort(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * Parses a collector address. Throws with the upstream texts
 * (`flow collector address is given in invalid format`,
 * `connection over <proto> transport proto is not supported`) or a port error.
 */
export function parseCollectorAddress(address: string): CollectorAddress {
  let parts: string[];
  if (/\[.*\]:.*/.test(address)) {
    const open = address.indexOf("[");
    const close = address.indexOf("]");
    if (close < open) throw new Error("flow collector address is given in invalid format");
    const host = address.slice(open + 1, close);
    const rest = address.slice(close + 1);
    if (!rest.startsWith(":")) throw new Error("flow collector address is given in invalid format");
    parts = [host, ...rest.slice(1).split(":")];
  } else {
    parts = address.split(":");
  }
  let host: string;
  let portText = "";
  let proto: string = "tcp";
  if (parts.length === 1) {
    host = parts[0];
  } else if (parts.length === 2) {
    [host, portText] = parts;
  } else if (parts.length === 3) {
    [host, portText, proto] = parts;
    if (!(PROTOS as readonly string[]).includes(proto)) {
      // `fe80::1` splits into three parts too: an IPv6 literal without brackets, not a proto.
      if (/^[0-9a-fA-F]*$/.test(proto)) {
        throw new Error(
          "flow collector address is given in invalid format (bracket IPv6 hosts: [addr]:port)",
        );
      }
      throw new Error(`connection over ${proto} transport proto is not supported`);
    }
  } else {
    throw new Error("flow collector address is given in invalid format");
  }
  if (host === "") throw new Error("flow collector address is given in invalid format");
  let port = DEFAULT_COLLECTOR_PORT;
  if (portText !== "") {
    if (!/^[0-9]+$/.test(portText) || Number(portText) < 1 || Number(portText) > 65535) {
      throw new Error(`flow collector port "${portText}" is not a number in 1..65535`);
    }
    port = Number(portText);
  }
  return { host, port, proto: proto as CollectorProto, hostPort: joinHostPort(host, port) };
}
