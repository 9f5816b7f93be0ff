/**
 * `deno task soak`: a long adversarial run of the real process (issue 10). Good Agents (flowgen,
 * TCP, 4 Agents) send at a steady rate for the whole run while attackers, on other connections,
 * mix every attack the collector is bounded against: 4,096-field templates with data, template
 * floods, records whose variable-length field overruns its set, garbage bytes, slowloris
 * connections (a message header and then silence) and idle connections. At the end it asserts:
 *
 * - the process never died, and its RSS stayed under a bound (`--rss-mib`, default 300) over its
 *   RSS after the warm-up;
 * - the ledger identity: records in = aggregated + rejected + non-flow + options (nothing
 *   unaccounted), and the flow log sink's received = exported + dropped + filtered + buffered;
 * - 0 good records lost: every record flowgen sent was aggregated, the sink dropped nothing;
 * - every attack was counted (refusals, drops, decode errors, timeouts).
 *
 *   deno task soak [--minutes=3] [--rate=5000] [--rss-mib=300]
 *
 * Minutes long, so not part of `deno task test`.
 *
 * @module
 */

import { encodeMessage, encodeTemplateSet, fieldsFor } from "../src/ipfix/mod.ts";
import { writeAll } from "../src/bytes.ts";
import { FLOWGEN_TS, rssBytes, startFlowAggregator } from "./bench/process.ts";

const flag = (name: string, def: number): number => {
  const a = Deno.args.find((x) => x.startsWith(`--${name}=`));
  return a === undefined ? def : Number(a.slice(name.length + 3));
};
const MINUTES = flag("minutes", 3);
const RATE = flag("rate", 5000);
const RSS_MIB = flag("rss-mib", 300);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function header(
  domain: number,
): { exportTime: number; sequenceNumber: number; observationDomainId: number } {
  return {
    exportTime: Math.floor(Date.now() / 1000),
    sequenceNumber: 0,
    observationDomainId: domain,
  };
}

/** A raw set of `records` records of `len` bytes each. */
function rawSet(id: number, len: number, records: number, fill = 1): Uint8Array {
  const out = new Uint8Array(4 + len * records).fill(fill);
  new DataView(out.buffer).setUint16(0, id);
  new DataView(out.buffer).setUint16(2, out.length);
  return out;
}

const WIDE = fieldsFor(["protocolIdentifier"]);
const wideTemplate = encodeMessage(header(901), [
  encodeTemplateSet([{
    id: 300,
    fields: Array.from({ length: 4096 }, () => WIDE[0]),
    scopeFieldCount: 0,
  }]),
]);
const wideData = encodeMessage(header(901), [rawSet(300, 4096, 3)]);

function floodMessage(domain: number, base: number): Uint8Array {
  return encodeMessage(header(domain), [encodeTemplateSet(
    Array.from({ length: 2000 }, (_, i) => ({
      id: 256 + i,
      fields: [{ id: 1 + ((base + i) % 30_000), enterprise: 4242, length: 1 + (i % 4) }],
      scopeFieldCount: 0,
    })),
  )]);
}

// A template with a variable-length string, then a set whose last record's length overruns.
const varTemplate = encodeMessage(header(902), [encodeTemplateSet([{
  id: 310,
  fields: [
    ...fieldsFor(["sourcePodName"]).map((f) => ({ ...f, length: 0xffff })),
    ...fieldsFor(["protocolIdentifier"]),
  ],
  scopeFieldCount: 0,
}])]);
function badRecords(): Uint8Array {
  const good = [3, 97, 98, 99, 6]; // "abc", protocol 6
  const body = [...Array(10).fill(good).flat(), 200, 1, 2]; // the 11th claims 200 bytes
  const set = new Uint8Array(4 + body.length);
  new DataView(set.buffer).setUint16(0, 310);
  new DataView(set.buffer).setUint16(2, set.length);
  set.set(body, 4);
  return encodeMessage(header(902), [set]);
}

/** Runs `fn` on a fresh TCP connection, closing it afterwards; errors (resets) are expected. */
async function onConnection(port: number, fn: (c: Deno.TcpConn) => Promise<void>): Promise<void> {
  let c: Deno.TcpConn | undefined;
  try {
    c = await Deno.connect({ hostname: "127.0.0.1", port });
    await fn(c);
  } catch {
    // the collector closed or refused the connection: what the limits are for
  } finally {
    try {
      c?.close();
    } catch {
      // already closed
    }
  }
}

/** One round of every attack; `round` varies the flood's layouts. */
async function attackRound(port: number, round: number, held: Deno.TcpConn[]): Promise<void> {
  const attacks = [
    onConnection(port, async (c) => {
      await writeAll(c, wideTemplate);
      for (let i = 0; i < 20; i++) await writeAll(c, wideData);
    }),
    onConnection(port, async (c) => {
      for (let i = 0; i < 5; i++) {
        await writeAll(c, floodMessage(1000 + round * 5 + i, round * 10_000 + i));
      }
    }),
    onConnection(port, async (c) => {
      await writeAll(c, varTemplate);
      for (let i = 0; i < 20; i++) await writeAll(c, badRecords());
    }),
    onConnection(port, async (c) => {
      const junk = crypto.getRandomValues(new Uint8Array(4096));
      junk[0] = 0;
      junk[1] = 10; // looks like IPFIX, then garbage
      await writeAll(c, junk);
    }),
  ];
  // Slowloris and idle connections are kept open (the collector's timeouts close them).
  for (let i = 0; i < 10; i++) {
    try {
      const c = await Deno.connect({ hostname: "127.0.0.1", port });
      if (i % 2 === 0) await writeAll(c, new Uint8Array([0, 10, 0xff, 0xff, 0, 0, 0, 0, 1, 2]));
      held.push(c);
    } catch {
      // refused at a cap: counted by the collector
    }
  }
  await Promise.all(attacks);
}

async function main(): Promise<number> {
  const dir = await Deno.makeTempDir({ prefix: "fa-soak-" });
  const conf = `${dir}/fa.conf`;
  await Deno.writeTextFile(
    conf,
    `activeFlowRecordTimeout: 5s
inactiveFlowRecordTimeout: 10s
aggregatorTransportProtocol: TCP
flowLogger:
  enable: true
  path: ${dir}/flows.log
  maxSize: 50
  maxBackups: 2
limits:
  readTimeout: 3s
  idleTimeout: 10s
  maxConnectionsPerAddress: 200
`,
  );
  const fa = await startFlowAggregator({ config: conf, cwd: dir, logLevel: "info" });
  const failures: string[] = [];
  const held: Deno.TcpConn[] = [];
  let peak = 0;
  let stop = false;
  const deadline = Date.now() + MINUTES * 60_000;
  console.log(`soak: ${MINUTES} min, good Agents at ${RATE}/s, pid ${fa.pid}`);
  const flowgen = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      FLOWGEN_TS,
      "--target",
      `127.0.0.1:${fa.port}`,
      "--proto",
      "tcp",
      "--agents",
      "4",
      "--flows",
      "2000",
      "--rate",
      String(RATE),
      "--duration",
      String(MINUTES * 60),
      "--json",
    ],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  await sleep(5000);
  const baseline = await rssBytes(fa.pid);
  const sampler = (async () => {
    while (!stop) {
      try {
        peak = Math.max(peak, await rssBytes(fa.pid));
      } catch {
        failures.push("the process died during the soak");
        return;
      }
      await sleep(500);
    }
  })();
  let rounds = 0;
  while (Date.now() < deadline) {
    await attackRound(fa.port, rounds++, held);
    // Keep the held connections bounded on our side too.
    while (held.length > 150) held.shift()?.close();
    await sleep(1000);
  }
  const sent = await flowgen;
  stop = true;
  await sampler;
  for (const c of held) {
    try {
      c.close();
    } catch {
      // closed by the collector's timeouts
    }
  }
  const report = JSON.parse(new TextDecoder().decode(sent.stdout));
  const exit = await fa.stop();
  const metrics = [...fa.events].reverse().find((e) => e.msg === "record metrics") ?? {};
  const n = (k: string) => Number(metrics[k] ?? NaN);
  const growthMiB = (peak - baseline) / 2 ** 20;
  console.log(JSON.stringify(
    {
      rounds,
      goodRecordsSent: report.records,
      rssBaselineMiB: +(baseline / 2 ** 20).toFixed(1),
      rssPeakMiB: +(peak / 2 ** 20).toFixed(1),
      exit,
      metrics,
    },
    null,
    2,
  ));
  if (exit.code !== 0) failures.push(`exit code ${exit.code}`);
  if (growthMiB > RSS_MIB) failures.push(`RSS grew ${growthMiB.toFixed(0)} MiB (bound ${RSS_MIB})`);
  const received = n("numRecordsReceived");
  const accounted = n("recordsAggregated") + n("rejected") + n("nonFlowRecords") +
    n("optionsRecordsIgnored");
  if (received !== accounted) {
    failures.push(`ledger: received ${received} != accounted ${accounted}`);
  }
  if (!(n("recordsAggregated") >= report.records)) {
    failures.push(
      `good records lost: ${report.records} sent, ${n("recordsAggregated")} aggregated`,
    );
  }
  const sink = (k: string) => n(`flowLogger.${k}`);
  if (sink("dropped") !== 0) failures.push(`flow log dropped ${sink("dropped")}`);
  if (
    sink("received") !==
      sink("exported") + sink("dropped") + sink("filtered") + sink("buffered")
  ) failures.push("flow log ledger does not add up");
  for (const k of ["templatesRefused", "recordsDropped", "decodeErrors", "connectionsTimedOut"]) {
    if (!(n(k) > 0)) failures.push(`attack not counted: ${k} = ${metrics[k]}`);
  }
  await Deno.remove(dir, { recursive: true }).catch(() => {});
  if (failures.length > 0) {
    console.error(`soak FAILED:\n- ${failures.join("\n- ")}`);
    return 1;
  }
  console.log(`soak passed: ${rounds} attack rounds, RSS +${growthMiB.toFixed(0)} MiB`);
  return 0;
}

if (import.meta.main) Deno.exit(await main());
