/**
 * Traffic generator CLI: simulates N Antrea v1.13 Agents sending M concurrent flows to an IPFIX
 * collector at a target rate, then prints what it sent.
 *
 *   deno run --allow-net --allow-read scripts/flowgen.ts --target 127.0.0.1:4739 --proto udp \
 *     --agents 4 --flows 1000 --rate 20000 --records 100000 [--seed 1] [--json]
 *   TLS: --proto tls --ca ca.pem --cert client.pem --key client-key.pem
 */

import { parseArgs } from "node:util";
import { formatReport, runFlowgen } from "../src/flowgen/mod.ts";

const USAGE = `usage: flowgen --target host:port [--proto udp|tcp|tls] [--agents N] [--flows M]
       [--rate R] [--records K | --duration S] [--seed X] [--json]
       [--ca FILE --cert FILE --key FILE]`;

function num(name: string, v: string | undefined, dflt: number | undefined): number | undefined {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${name}: "${v}" is not a number >= 0`);
  return n;
}

async function main(): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({
      args: Deno.args,
      options: {
        target: { type: "string" },
        proto: { type: "string", default: "udp" },
        agents: { type: "string" },
        flows: { type: "string" },
        rate: { type: "string" },
        records: { type: "string" },
        duration: { type: "string" },
        seed: { type: "string" },
        ca: { type: "string" },
        cert: { type: "string" },
        key: { type: "string" },
        json: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    }));
  } catch (e) {
    console.error(`${e instanceof Error ? e.message : e}\n${USAGE}`);
    return 2;
  }
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  try {
    if (values.target === undefined) throw new Error("--target is required");
    const proto = values.proto;
    if (proto !== "udp" && proto !== "tcp" && proto !== "tls") {
      throw new Error(`--proto: "${proto}" is not udp, tcp or tls`);
    }
    if (values.records !== undefined && values.duration !== undefined) {
      throw new Error("--records and --duration are exclusive");
    }
    const tls = proto === "tls"
      ? {
        ca: values.ca ? await Deno.readTextFile(values.ca) : undefined,
        cert: values.cert ? await Deno.readTextFile(values.cert) : undefined,
        key: values.key ? await Deno.readTextFile(values.key) : undefined,
      }
      : undefined;
    const ac = new AbortController();
    Deno.addSignalListener("SIGINT", () => ac.abort());
    const report = await runFlowgen({
      target: values.target,
      proto,
      agents: num("agents", values.agents, 2)!,
      flows: num("flows", values.flows, 100)!,
      rate: num("rate", values.rate, 1000),
      records: num("records", values.records, undefined),
      durationSec: num("duration", values.duration, undefined),
      seed: num("seed", values.seed, 1),
      tls,
      signal: ac.signal,
    });
    console.log(values.json ? JSON.stringify(report) : formatReport(report));
    return 0;
  } catch (e) {
    console.error(`flowgen: ${e instanceof Error ? e.message : e}`);
    return 1;
  }
}

if (import.meta.main) Deno.exit(await main());
