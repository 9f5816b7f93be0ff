/**
 * Replay sender CLI (src/flowgen/replay.ts): encodes one round of a realistic Agent stream once
 * and sends it again and again with only headers, flow end and totals patched, so the sender
 * costs a few % of a core and a benchmark measures the collector. Prints what it sent.
 *
 *   deno run --allow-net --allow-read scripts/replay.ts --target 127.0.0.1:4739 --proto tcp \
 *     --agents 4 --flows 20000 [--rate 0] [--duration 10 | --rounds N] [--unique-names 1]
 *     [--seed 1] [--json]
 *   mutual TLS: --proto tls --ca ca.crt --cert tls.crt --key tls.key (PEM files; the collector's
 *     `--cert-dir` writes these three)
 *
 * `--rate 0` (the default) sends as fast as the collector reads (TCP back-pressure). TLS frames
 * the stream as TCP does (messages back to back).
 */

import { parseArgs } from "node:util";
import { runReplay } from "../src/flowgen/mod.ts";

const USAGE = `usage: replay --target host:port [--proto tcp|udp|tls] [--agents N] [--flows M]
       [--rate R] [--duration S | --rounds N] [--unique-names X] [--seed X] [--json]
       [--ca FILE --cert FILE --key FILE]   (tls: PEM files)`;

async function main(): Promise<number> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      target: { type: "string" },
      proto: { type: "string", default: "tcp" },
      agents: { type: "string", default: "4" },
      flows: { type: "string", default: "20000" },
      rate: { type: "string", default: "0" },
      duration: { type: "string" },
      rounds: { type: "string" },
      "unique-names": { type: "string", default: "1" },
      seed: { type: "string", default: "1" },
      ca: { type: "string" },
      cert: { type: "string" },
      key: { type: "string" },
      json: { type: "boolean", default: false },
    },
  });
  const proto = values.proto;
  if (values.target === undefined || (proto !== "tcp" && proto !== "udp" && proto !== "tls")) {
    console.error(USAGE);
    return 2;
  }
  const pem = (path: string | undefined): Promise<string | undefined> =>
    path === undefined ? Promise.resolve(undefined) : Deno.readTextFile(path);
  const tls = proto === "tls"
    ? { ca: await pem(values.ca), cert: await pem(values.cert), key: await pem(values.key) }
    : undefined;
  const n = (v: string | undefined): number | undefined => v === undefined ? undefined : Number(v);
  const ac = new AbortController();
  Deno.addSignalListener("SIGINT", () => ac.abort());
  const r = await runReplay({
    target: values.target,
    proto,
    tls,
    agents: n(values.agents)!,
    flows: n(values.flows)!,
    rate: n(values.rate),
    durationSec: n(values.duration),
    rounds: n(values.rounds),
    uniqueNames: n(values["unique-names"]),
    seed: n(values.seed),
    startSeconds: Math.floor(Date.now() / 1000) - 3600,
    signal: ac.signal,
  });
  console.log(
    values.json ? JSON.stringify(r) : `replay: ${r.records} records from ${r.agents} agents ` +
      `over ${r.proto} in ${r.elapsedSec.toFixed(3)} s: ${r.rate.toFixed(0)} records/s ` +
      `(${r.recordsPerRound} per round, built in ${r.buildMs.toFixed(0)} ms)`,
  );
  return 0;
}

if (import.meta.main) {
  try {
    Deno.exit(await main());
  } catch (e) {
    console.error(e instanceof Error ? e.message : `replay: ${e}`);
    Deno.exit(1);
  }
}
