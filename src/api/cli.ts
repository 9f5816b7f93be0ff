/**
 * The CLI in the binary (the image has no antctl): `get flowrecords`, `get recordmetrics`,
 * `log-level [N]` and `version`, talking to the local API with the loopback token and in
 * antctl's output shapes (control-plane.md §5.8):
 *
 *   flow-aggregator get flowrecords [--srcip X] [--dstip X] [--proto N] [--srcport N]
 *     [--dstport N] [-o table|json|yaml]
 *   flow-aggregator get recordmetrics [-o table|json|yaml]
 *   flow-aggregator log-level [N]
 *   flow-aggregator version
 *   common: [--server https://127.0.0.1:10348] [--token-file FILE]
 *
 * The server's certificate is verified against the CA the server wrote next to the token.
 *
 * @module
 */

import { stringify } from "yaml";
import { stringifyExact } from "../aggregation/records_json.ts";
import { caFileOf, DEFAULT_TOKEN_FILE } from "./server.ts";

/** The subcommands this module serves (main.ts dispatches on them). */
export const CLI_COMMANDS: readonly string[] = ["get", "log-level", "version"];

const FLOW_FILTERS = ["srcip", "dstip", "proto", "srcport", "dstport"];

/** Where output goes (tests capture it). */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
}

const STD_IO: CliIo = {
  out: (t) => console.log(t),
  err: (t) => console.error(t),
};

interface Parsed {
  words: string[];
  flags: Record<string, string>;
}

function parse(args: readonly string[]): Parsed {
  const words: string[] = [];
  const flags: Record<string, string> = {};
  for (let i = 0; i < args.length; i++) {
    const m = /^--?([A-Za-z-]+)(?:=(.*))?$/.exec(args[i]);
    if (m === null) {
      words.push(args[i]);
      continue;
    }
    const v = m[2] ?? args[++i];
    if (v === undefined) throw new Error(`flag ${args[i - 1]} needs a value`);
    flags[m[1] === "o" ? "output" : m[1]] = v;
  }
  return { words, flags };
}

/** Where the CLI asks by default (antctl's hard-coded address, control-plane.md §5.8). */
export const DEFAULT_SERVER = "https://127.0.0.1:10348";

/**
 * The API address and token file a CLI command line names (the defaults when it does not):
 * what the command needs permission for (the image's launcher grants exactly that).
 */
export function cliTarget(args: readonly string[]): { server: string; tokenFile: string } {
  const { flags } = parse(args);
  return {
    server: flags.server ?? DEFAULT_SERVER,
    tokenFile: flags["token-file"] ?? DEFAULT_TOKEN_FILE,
  };
}

/** JSON text to values, 64-bit integers kept exact (as BigInt). */
function parseExact(text: string): unknown {
  return JSON.parse(
    text,
    ((_k: string, v: unknown, ctx?: { source?: string }) =>
      typeof v === "number" && !Number.isSafeInteger(v) && ctx?.source !== undefined &&
        /^-?\d+$/.test(ctx.source)
        ? BigInt(ctx.source)
        : v) as (k: string, v: unknown) => unknown,
  );
}

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => i === cells.length - 1 ? c : c.padEnd(widths[i] + 1)).join(" ")
      .trimEnd();
  return [line(header), ...rows.map(line)].join("\n");
}

type Rec = Record<string, unknown>;

function flowTable(records: Rec[]): string {
  const s = (v: unknown) => v === undefined || v === null ? "" : String(v);
  return table(
    [
      "SRC_IP",
      "DST_IP",
      "SPORT",
      "DPORT",
      "PROTO",
      "SRC_POD",
      "DST_POD",
      "SRC_NS",
      "DST_NS",
      "SERVICE",
    ],
    records.map((r) => {
      const v4 = r.sourceIPv4Address !== undefined;
      return [
        s(v4 ? r.sourceIPv4Address : r.sourceIPv6Address),
        s(v4 ? r.destinationIPv4Address : r.destinationIPv6Address),
        s(r.sourceTransportPort),
        s(r.destinationTransportPort),
        s(r.protocolIdentifier),
        s(r.sourcePodName),
        s(r.destinationPodName),
        s(r.sourcePodNamespace),
        s(r.destinationPodNamespace),
        s(r.destinationServicePortName),
      ];
    }),
  );
}

function metricsTable(m: Rec): string {
  const n = (k: string) => String(m[k] ?? 0);
  const b = (k: string) => String(m[k] ?? false);
  return table(
    [
      "RECORDS-EXPORTED",
      "RECORDS-RECEIVED",
      "FLOWS",
      "EXPORTERS-CONNECTED",
      "RECORDS-DROPPED",
      "CLICKHOUSE-EXPORTER",
      "S3-EXPORTER",
      "LOG-EXPORTER",
      "IPFIX-EXPORTER",
    ],
    [[
      n("numRecordsExported"),
      n("numRecordsReceived"),
      n("numFlows"),
      n("numConnToCollector"),
      n("numRecordsDropped"),
      b("withClickHouseExporter"),
      b("withS3Exporter"),
      b("withLogExporter"),
      b("withIPFIXExporter"),
    ]],
  );
}

function render(value: unknown, format: string, asTable: (v: never) => string): string {
  if (format === "json") return stringifyExact(value, 2);
  if (format === "yaml") return stringify(value).trimEnd();
  return asTable(value as never);
}

/**
 * Runs a CLI command; returns the exit code (0 ok, 1 usage or API error). `io` defaults to the
 * console.
 */
export async function runCli(args: readonly string[], io: CliIo = STD_IO): Promise<number> {
  let p: Parsed;
  try {
    p = parse(args);
  } catch (e) {
    io.err((e as Error).message);
    return 1;
  }
  const { server, tokenFile } = cliTarget(args);
  const format = p.flags.output ?? "table";
  if (!["table", "json", "yaml"].includes(format)) {
    io.err(`-o ${format}: use table, json or yaml`);
    return 1;
  }
  let path: string;
  const [cmd, what] = p.words;
  if (cmd === "get" && what === "flowrecords") {
    const q = new URLSearchParams();
    for (const f of FLOW_FILTERS) if (p.flags[f] !== undefined) q.set(f, p.flags[f]);
    path = `/flowrecords${q.size > 0 ? `?${q}` : ""}`;
  } else if (cmd === "get" && what === "recordmetrics") {
    path = "/recordmetrics";
  } else if (cmd === "log-level") {
    path = what === undefined ? "/loglevel" : `/loglevel?level=${encodeURIComponent(what)}`;
  } else if (cmd === "version") {
    path = "/version";
  } else {
    io.err("usage: get flowrecords|recordmetrics [-o table|json|yaml], log-level [N], version");
    return 1;
  }
  let body: string;
  try {
    const token = (await Deno.readTextFile(tokenFile)).trim();
    const client = Deno.createHttpClient({
      caCerts: [await Deno.readTextFile(caFileOf(tokenFile))],
    });
    try {
      const res = await fetch(`${server}${path}`, {
        headers: { authorization: `Bearer ${token}` },
        client,
      });
      body = await res.text();
      if (!res.ok) {
        io.err(`${res.status}: ${body.trim()}`);
        return 1;
      }
    } finally {
      client.close();
    }
  } catch (e) {
    io.err(`cannot reach the flow aggregator API at ${server}: ${(e as Error).message}`);
    return 1;
  }
  if (cmd === "log-level") {
    if (what === undefined) io.out(body.trim());
    return 0;
  }
  const value = parseExact(body);
  if (cmd === "version") {
    io.out(`flowAggregatorVersion: ${(value as Rec).gitVersion}`);
  } else if (what === "flowrecords") {
    io.out(render(value ?? [], format, flowTable));
  } else {
    io.out(render(value, format, metricsTable));
  }
  return 0;
}
