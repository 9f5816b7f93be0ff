/**
 * `deno task soak`: a long adversarial run of the real process (issue 10). Good Agents (flowgen,
 * TCP, 4 Agents) send at a steady rate for the whole run while attackers, on other connections,
 * mix every attack the collector is bounded against: 4,096-field templates with data, template
 * floods, records whose variable-length field overruns its set, garbage bytes, slowloris
 * connections (a message header and then silence) and idle connections. The API port faces the
 * cluster too: from 127.0.0.1 attackers open bursts of silent connections past the per-address cap,
 * begin a request head and go silent, send plaintext to the TLS port, garbage and oversized heads,
 * while a good client on `::1` (another source address, so the per-address cap is the attackers'
 * alone) scrapes `/metrics` every second. At the end it asserts:
 *
 * - the process never died, and its RSS stayed under a bound (`--rss-mib`, default 300) over its
 *   RSS after the warm-up;
 * - the ledger identity: records in = aggregated + rejected + non-flow + options + in flight
 *   (nothing unaccounted; in flight is 0 at stop), and the flow log sink's received = exported + dropped + filtered + buffered;
 * - 0 good records lost: every record flowgen sent was aggregated, the sink dropped nothing;
 * - every attack was counted (refusals, drops, decode errors, timeouts), on the API port too;
 * - the API answered every scrape of the good client, and closed every silent connection.
 *
 *   deno task soak [--minutes=3] [--rate=5000] [--rss-mib=300]
 *
 * Minutes long, so not part of `deno task test`.
 *
 * @module
 */

import { encodeMessage, encodeTemplateSet, fieldsFor } from "../src/ipfix/mod.ts";
import { writeAll } from "../src/bytes.ts";
import { caFileOf } from "../src/api/server.ts";
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

/** The API port's limits in the soak's configuration (short, so each round exercises them). */
const API_PER_ADDRESS = 16;
const API_REQUEST_TIMEOUT_S = 1;
/** Silent connections an API burst opens, past {@linkcode API_PER_ADDRESS}. */
const API_BURST = API_PER_ADDRESS + 4;

/** The API port, its CA and token, as a client of the process sees them. */
interface ApiTarget {
  port: number;
  ca: string;
  token: string;
}

/** Resolves when the process closes `c` (a read ends), or with false after `ms`. */
async function closedWithin(c: Deno.Conn, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const read = (async () => {
    const buf = new Uint8Array(1024);
    try {
      while ((await c.read(buf)) !== null) { /* drain */ }
    } catch {
      // reset: closed
    }
    return true;
  })();
  const late = new Promise<boolean>((r) => timer = setTimeout(() => r(false), ms));
  const closed = await Promise.race([read, late]);
  clearTimeout(timer);
  try {
    c.close();
  } catch {
    // already closed
  }
  return closed;
}

/** Writes `bytes` over TLS to the API and reads the answer's status line (or "" when closed). */
async function apiExchange(api: ApiTarget, bytes: Uint8Array): Promise<string> {
  let c: Deno.TlsConn | undefined;
  try {
    c = await Deno.connectTls({ hostname: "127.0.0.1", port: api.port, caCerts: [api.ca] });
    await writeAll(c, bytes);
    const buf = new Uint8Array(256);
    const n = await c.read(buf);
    return n === null ? "" : new TextDecoder().decode(buf.subarray(0, n)).split("\r\n")[0];
  } catch {
    return ""; // refused at a cap or closed: counted by the process
  } finally {
    try {
      c?.close();
    } catch {
      // already closed
    }
  }
}

/**
 * One round against the API port. Even rounds: bad requests over TLS (garbage, an oversized head,
 * no credentials), plaintext to the TLS port, and a head begun then left silent; odd rounds: a
 * burst of silent connections past the per-address cap. Each round first waits until the
 * process closed the previous round's silent connections (its request timeout); false when it
 * did not within 5 s of the timeout.
 */
async function apiAttackRound(api: ApiTarget, round: number, held: Deno.Conn[]): Promise<boolean> {
  const closed = await Promise.all(
    held.splice(0).map((c) => closedWithin(c, API_REQUEST_TIMEOUT_S * 1000 + 5000)),
  );
  if (closed.includes(false)) return false;
  const enc = new TextEncoder();
  if (round % 2 === 1) {
    for (let i = 0; i < API_BURST; i++) {
      try {
        held.push(await Deno.connect({ hostname: "127.0.0.1", port: api.port }));
      } catch {
        // refused: counted by the process
      }
    }
    return true;
  }
  const junk = crypto.getRandomValues(new Uint8Array(512));
  junk.set(enc.encode("\r\n\r\n"), junk.length - 4);
  await Promise.all([
    apiExchange(api, junk),
    apiExchange(api, enc.encode(`GET /metrics HTTP/1.1\r\nx: ${"a".repeat(20_000)}`)),
    apiExchange(api, enc.encode("GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")),
    onConnection(api.port, async (c) => {
      await writeAll(c, enc.encode("GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n"));
      await closedWithin(c, 5000);
    }),
  ]);
  try {
    const c = await Deno.connectTls({ hostname: "127.0.0.1", port: api.port, caCerts: [api.ca] });
    await writeAll(c, enc.encode("GET /metrics HTTP/1.1\r\n"));
    held.push(c);
  } catch {
    // refused: counted by the process
  }
  return true;
}

/**
 * The good API client: scrapes `/metrics` over `::1` every second until `stop()`, counting
 * answers that were not 200 (or failed).
 */
function apiScraper(api: ApiTarget): { stop(): Promise<{ ok: number; failed: string[] }> } {
  let running = true;
  const client = Deno.createHttpClient({ caCerts: [api.ca] });
  const done = (async () => {
    let ok = 0;
    const failed: string[] = [];
    while (running) {
      try {
        const res = await fetch(`https://[::1]:${api.port}/metrics`, {
          headers: { authorization: `Bearer ${api.token}` },
          client,
        });
        const body = await res.text();
        if (res.status === 200 && body.includes("flow_aggregator_api_connections")) ok++;
        else failed.push(`status ${res.status}`);
      } catch (e) {
        failed.push(String(e));
      }
      await sleep(1000);
    }
    client.close();
    return { ok, failed };
  })();
  return {
    stop: () => {
      running = false;
      return done;
    },
  };
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
  maxApiConnectionsPerAddress: ${API_PER_ADDRESS}
  apiRequestTimeout: ${API_REQUEST_TIMEOUT_S}s
  apiIdleTimeout: 10s
`,
  );
  const tokenFile = `${dir}/api/token`;
  const fa = await startFlowAggregator({
    config: conf,
    cwd: dir,
    logLevel: "info",
    // Dual-stack: the good client comes from ::1, the attackers from 127.0.0.1.
    args: ["--api-listen", "[::]:0", "--api-token-file", tokenFile],
  });
  const listening = await fa.waitFor((e) => e.msg === "API server listening", 30_000);
  const api: ApiTarget = {
    port: Number(listening.port),
    ca: await Deno.readTextFile(caFileOf(tokenFile)),
    token: (await Deno.readTextFile(tokenFile)).trim(),
  };
  const failures: string[] = [];
  const held: Deno.TcpConn[] = [];
  const apiHeld: Deno.Conn[] = [];
  let apiUnclosed = 0;
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
  const scraper = apiScraper(api);
  let rounds = 0;
  while (Date.now() < deadline) {
    const [, apiClosed] = await Promise.all([
      attackRound(fa.port, rounds, held),
      apiAttackRound(api, rounds, apiHeld),
    ]);
    if (!apiClosed) apiUnclosed++;
    rounds++;
    // Keep the held connections bounded on our side too.
    while (held.length > 150) held.shift()?.close();
    await sleep(1000);
  }
  const sent = await flowgen;
  const scrapes = await scraper.stop();
  for (const c of apiHeld) c.close();
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
      apiScrapes: scrapes.ok,
      apiScrapesFailed: scrapes.failed.length,
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
    n("optionsRecordsIgnored") + n("recordsInFlight");
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
  for (
    const k of [
      "templatesRefused",
      "recordsDropped",
      "decodeErrors",
      "connectionsTimedOut",
      "api.connectionsRefused",
      "api.connectionsTimedOut",
      "api.handshakeFailures",
      "api.badRequests",
    ]
  ) {
    if (!(n(k) > 0)) failures.push(`attack not counted: ${k} = ${metrics[k]}`);
  }
  if (scrapes.failed.length > 0 || scrapes.ok === 0) {
    failures.push(
      `the good API client: ${scrapes.ok} scrapes answered, ${scrapes.failed.length} not ` +
        `(${[...new Set(scrapes.failed)].slice(0, 3).join("; ")})`,
    );
  }
  if (apiUnclosed > 0) {
    failures.push(
      `API silent connections left open past the request timeout in ${apiUnclosed} rounds`,
    );
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
