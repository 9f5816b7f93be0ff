/**
 * What one entry of a Deno permission list (`--allow-net=a,b`, `--allow-write=…`) can be. Deno
 * splits the lists at commas, with no escape, refuses an empty entry and parses each host with
 * its own rules (no bare `*`; `*.` only as a subdomain wildcard). One rule for the two places
 * that check: the permission computation (`processPermissions` of src/permissions.ts), which
 * refuses a value it cannot name rather than widen a grant or hand Deno a flag it rejects, and
 * the configuration's validation of the keys that become entries (`flowCollector.address`,
 * `clickHouse.databaseURL`, `s3Uploader.endpoint`, `flowLogger.path`, `<sink>.spool.dir`).
 *
 * @module
 */

/** The permission lists whose entries are checked. */
export type PermissionListKind = "net" | "read" | "write" | "env";

/**
 * A `host:port` as Deno's permission queries take it: a wildcard host (`*.amazonaws.com:443`)
 * cannot be queried itself, one of its subdomains can (and is granted through the same grant).
 */
export function queryableHost(hostPort: string): string {
  return hostPort.replace(/^\*\./, "wildcard-probe.");
}

/** `host[:port]`: a bracketed IPv6 address or a name (or IPv4 address), and a decimal port. */
const HOST_PORT = /^(?:\[[0-9A-Fa-f:.]+\]|([^:[\]]+))(?::([0-9]+))?$/;

/** A label of a host name as Deno's permission lists take it (ASCII, `_` accepted). */
const HOST_LABEL = /^[A-Za-z0-9_-]+$/;

/** Why Deno's net permission list would refuse `hostPort`, by its grammar (no query). */
function hostPortProblem(hostPort: string): string | undefined {
  const m = HOST_PORT.exec(hostPort);
  if (m === null) return "Deno refuses it (not a host:port)";
  if (m[2] !== undefined && Number(m[2]) > 65535) return "Deno refuses it (port over 65535)";
  const name = m[1];
  if (name === undefined) return undefined;
  // A wildcard only as a whole first label (`*.example.com`); a final dot is the root's.
  const labels = name.replace(/^\*\./, "").replace(/\.$/, "").split(".");
  if (labels.every((l) => HOST_LABEL.test(l))) return undefined;
  return `Deno refuses it (invalid host ${JSON.stringify(name)}: the labels of a name are ` +
    "ASCII letters, digits, - and _, none empty; a wildcard is only `*.` before a name)";
}

/** Why `value` cannot be an entry of a `kind` permission list, or undefined when it can. */
export function permissionEntryProblem(
  kind: PermissionListKind,
  value: string,
): string | undefined {
  if (value === "") return "it is empty";
  if (value.includes(",")) {
    return "it contains a comma, which Deno's permission lists cannot carry (they are " +
      "separated by commas, with no escape)";
  }
  if (kind === "net") {
    const problem = hostPortProblem(value);
    if (problem !== undefined) return problem;
  }
  // Deno's own parser besides: a query of a value it would refuse in a flag throws (unless the
  // process holds every permission of the kind, when it answers without parsing).
  const d: Deno.PermissionDescriptor = kind === "net"
    ? { name: "net", host: queryableHost(value) }
    : kind === "env"
    ? { name: "env", variable: value }
    : { name: kind, path: value };
  try {
    Deno.permissions.querySync(d);
  } catch (err) {
    return `Deno refuses it (${(err as Error).message})`;
  }
  return undefined;
}

/**
 * Why `hostPort` (`host:port`, IPv6 in brackets), an address the process connects to, cannot
 * be connected to and granted, or undefined: a permission entry, and no wildcard.
 */
export function addressProblem(hostPort: string): string | undefined {
  if (hostPort.includes("*")) return "a wildcard (*) is not a host to connect to";
  return permissionEntryProblem("net", hostPort);
}

/**
 * `Deno.env.get(name)`, a variable the process may not read (no `--allow-env` for it) taken as
 * unset: the one lookup of the sinks, the Kubernetes client, `antctl set` and the launcher.
 */
export function envOrUnset(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch {
    return undefined;
  }
}
