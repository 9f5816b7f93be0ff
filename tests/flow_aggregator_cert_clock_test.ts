/**
 * The TLS collector's certificates are made from the wall clock at start, valid from an hour
 * before it (control-plane.md §3.2). A process that started with its clock ahead by more than
 * that (a VM booted with a wrong clock, set right by NTP later) held certificates "not valid
 * yet" for every Agent, and its collector refused their client certificate, until real time
 * caught up or a restart. The running process compares the wall clock with their validity on a
 * monotonic timer and issues them again, through the start's path (a new CA, handed out to be
 * published) or the address change's (a new server certificate from the same CA).
 *
 * The Agents here are real TLS clients checking certificates at real time; the aggregator's
 * clock is a manual one whose wall time is stepped as NTP would.
 */

import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import tls from "node:tls";
import { parseConfig } from "../src/components.ts";
import { FlowAggregator } from "../src/flow_aggregator.ts";
import { setLogWriter } from "../src/log.ts";
import {
  generateCertificates,
  type GeneratedCertificates,
  reissueServerCertificate,
} from "../src/pki/mod.ts";
import { concat, GOLDEN_DATA, GOLDEN_TEMPLATE } from "./collector/helpers.ts";
import { clientTls } from "./_helpers/tls.ts";
import { waitFor } from "./_helpers/wait.ts";
import { WallStepClock } from "./_helpers/wall_step_clock.ts";

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
const SERVICE_NAME = "flow-aggregator.flow-aggregator.svc";
/** The period of the validity check (`VALIDITY_CHECK_INTERVAL_MS`, the default). */
const CHECK_MS = 60_000;

const TLS_CONFIG = parseConfig("aggregatorTransportProtocol: TLS\n", {
  onWarning: () => {}, // no sink: expected here
});

/**
 * An Agent: connects verifying the collector as the Service name with `certs`' CA, presents
 * their client certificate, sends a template and a data record and closes. "ok" or the error.
 */
function agentSends(port: number, certs: GeneratedCertificates): Promise<string> {
  return new Promise((resolve) => {
    let result = "ok";
    const s = tls.connect({
      host: "127.0.0.1",
      port,
      servername: SERVICE_NAME,
      ...clientTls(certs),
    }, () => s.write(concat(GOLDEN_TEMPLATE, GOLDEN_DATA), () => s.end()));
    s.on("error", (e: Error) => result = e.message);
    s.on("close", () => resolve(result));
    s.resume();
  });
}

interface Started {
  fa: FlowAggregator;
  clock: WallStepClock;
  published: GeneratedCertificates[];
  lines: string[];
}

/**
 * A TLS aggregator on 127.0.0.1 with `clock`, given `certificates` or making its own; each set
 * it hands out is offered to `handOut` first (which may throw: a failed hand-out), then kept.
 */
async function withAggregator(
  clock: WallStepClock,
  certificates: GeneratedCertificates | undefined,
  body: (s: Started) => Promise<void>,
  handOut: (c: GeneratedCertificates) => void = () => {},
): Promise<void> {
  const lines: string[] = [];
  const restore = setLogWriter((l) => lines.push(l));
  const published: GeneratedCertificates[] = [];
  const fa = new FlowAggregator(TLS_CONFIG, {
    clock,
    manualSweep: true,
    listenAddress: "127.0.0.1:0",
    metricsLogIntervalMs: 0,
    namespace: "flow-aggregator",
    certificates,
    onCertificates: (c) => {
      handOut(c);
      published.push(c);
    },
  });
  try {
    await fa.start();
    await body({ fa, clock, published, lines });
  } finally {
    await fa.stop();
    setLogWriter(restore);
  }
}

/** Fires the validity check's timer and waits until the aggregator has handed out `count` sets. */
async function nextCheck(s: Started, count: number): Promise<void> {
  s.clock.advance(CHECK_MS);
  await waitFor(() => s.published.length >= count, {
    timeoutMs: 10_000,
    what: `certificate set ${count} handed out`,
  });
}

/** Waits until the check is done and armed again (its timer the only one pending). */
function checkArmed(clock: WallStepClock): Promise<void> {
  return waitFor(() => clock.pendingTimers().length === 1, {
    what: "the validity check armed again",
  });
}

Deno.test("collector certificates made with the wall clock 2 h ahead are issued again once NTP sets it back: Agents with the new CA connect", async () => {
  // Booted with the clock 2 h ahead: the certificates are made then (as start-up makes them).
  const ahead = Date.now() + 2 * HOUR_MS;
  const made = generateCertificates({ namespace: "flow-aggregator", now: new Date(ahead) });
  const clock = new WallStepClock(ahead);
  await withAggregator(clock, made, async (s) => {
    const [first] = s.published;
    const port = s.fa.collectorPort;
    assert.equal(s.published.length, 1);
    // NTP corrects the clock: the material the Agents have is not valid yet.
    clock.stepWall(-2 * HOUR_MS);
    assert.match(await agentSends(port, first), /certificate/);

    await nextCheck(s, 2);
    const second = s.published[1];
    assert.notEqual(second.ca.certPem, first.ca.certPem, "a new CA (the old one is not valid yet)");
    assert.notEqual(second.client.certPem, first.client.certPem, "and client certificate");
    const ca = new X509Certificate(second.ca.certPem);
    assert.ok(Date.parse(ca.validFrom) <= Date.now(), `valid from ${ca.validFrom}`);
    assert.ok(new X509Certificate(second.server.certPem).checkIssued(ca));
    assert.deepEqual(s.fa.stats().collectorCertificatesReissued, { notValidYet: 1, expiring: 0 });
    assert.ok(
      s.lines.some((l) =>
        l.includes("wall clock moved before the collector certificates") && /warn/i.test(l)
      ),
      "warned",
    );

    // An Agent that read the newly published CA and client Secret connects and is collected.
    assert.equal(await agentSends(port, second), "ok");
    await waitFor(() => s.fa.stats().numRecordsReceived === 1, { what: "the Agent's record" });
    // One with the old material is still refused: it has to read the new one.
    assert.notEqual(await agentSends(port, first), "ok");

    // The next checks find them valid: nothing more is issued, the check stays armed.
    clock.advance(CHECK_MS);
    await checkArmed(clock);
    assert.equal(s.published.length, 2);
    assert.deepEqual(clock.pendingTimers(), [CHECK_MS]);
  });
});

Deno.test("a server certificate issued with the clock ahead from a persisted CA still valid: only it is issued again, by the same CA", async () => {
  const now = Date.now();
  // The CA and client pair persisted earlier, and a server certificate issued at this start
  // from them while the clock was 3 h ahead.
  const persisted = generateCertificates({ namespace: "flow-aggregator", now: new Date(now) });
  const started = reissueServerCertificate(persisted, {
    namespace: "flow-aggregator",
    now: new Date(now + 3 * HOUR_MS),
  });
  const clock = new WallStepClock(now); // already set right
  await withAggregator(clock, started, async (s) => {
    const port = s.fa.collectorPort;
    assert.match(await agentSends(port, started), /certificate/);
    await nextCheck(s, 2);
    const second = s.published[1];
    assert.equal(second.ca.certPem, persisted.ca.certPem, "same CA");
    assert.deepEqual(second.client, persisted.client, "same client certificate");
    assert.notEqual(second.server.certPem, started.server.certPem);
    assert.deepEqual(s.fa.stats().collectorCertificatesReissued, { notValidYet: 1, expiring: 0 });
    // The Agents' material did not change: they connect again without reading anything.
    assert.equal(await agentSends(port, persisted), "ok");
  });
});

Deno.test("collector certificates with under 90 days left are issued again; an Agent connected before keeps its connection", async () => {
  const now = Date.now();
  const old = generateCertificates({
    namespace: "flow-aggregator",
    now: new Date(now - 300 * DAY_MS),
  });
  const clock = new WallStepClock(now);
  await withAggregator(clock, old, async (s) => {
    const port = s.fa.collectorPort;
    // Still valid (65 days left): an Agent connects and stays connected.
    const records = concat(GOLDEN_TEMPLATE, GOLDEN_DATA);
    const kept = tls.connect({
      host: "127.0.0.1",
      port,
      servername: SERVICE_NAME,
      ...clientTls(old),
    });
    await new Promise<void>((resolve, reject) => {
      kept.once("secureConnect", resolve);
      kept.once("error", reject);
    });
    kept.write(records);
    await waitFor(() => s.fa.stats().numRecordsReceived === 1, { what: "the first record" });

    await nextCheck(s, 2);
    const second = s.published[1];
    assert.notEqual(second.ca.certPem, old.ca.certPem, "a new CA");
    assert.deepEqual(s.fa.stats().collectorCertificatesReissued, { notValidYet: 0, expiring: 1 });
    assert.ok(s.lines.some((l) => l.includes("expires soon")));

    // The open connection goes on; new ones need the new CA.
    kept.write(GOLDEN_DATA);
    await waitFor(() => s.fa.stats().numRecordsReceived === 2, { what: "the kept connection's" });
    assert.equal(await agentSends(port, second), "ok");
    await waitFor(() => s.fa.stats().numRecordsReceived === 3, { what: "the new Agent's" });
    // An Agent that has the new CA but not yet its new client certificate (the Secret read
    // later) is still accepted while the old CA is valid.
    assert.equal(await agentSends(port, { ...second, client: old.client }), "ok");
    await waitFor(() => s.fa.stats().numRecordsReceived === 4, { what: "the old client's" });
    kept.end();
    await new Promise((r) => kept.once("close", r));
  });
});

// A renewal (under 90 days left) switched to the new CA before handing it out: a failed
// hand-out (a --cert-dir write on a full disk) left the collector serving a CA no Agent had.
Deno.test("renewed collector certificates are used only once handed out; a failed hand-out keeps the current ones", async () => {
  const now = Date.now();
  const old = generateCertificates({
    namespace: "flow-aggregator",
    now: new Date(now - 300 * DAY_MS),
  });
  const clock = new WallStepClock(now);
  let fail = true;
  const handOut = (c: GeneratedCertificates) => {
    if (c !== old && fail) throw new Error("no space left on device");
  };
  await withAggregator(clock, old, async ({ fa, published, lines }) => {
    clock.advance(CHECK_MS);
    await waitFor(() => lines.some((l) => l.includes("could not be handed out")), {
      what: "the failed hand-out",
    });
    await checkArmed(clock);
    assert.deepEqual(fa.stats().collectorCertificatesReissued, { notValidYet: 0, expiring: 0 });
    assert.equal(await agentSends(fa.collectorPort, old), "ok", "the current ones still served");
    fail = false;
    clock.advance(CHECK_MS);
    await waitFor(() => published.length === 2, { what: "the renewed set handed out" });
    await checkArmed(clock);
    assert.deepEqual(fa.stats().collectorCertificatesReissued, { notValidYet: 0, expiring: 1 });
    assert.equal(await agentSends(fa.collectorPort, published[1]), "ok");
  }, handOut);
});

Deno.test("valid collector certificates are left as they are at every check", async () => {
  const clock = new WallStepClock(Date.now());
  await withAggregator(clock, undefined, async (s) => {
    for (let i = 0; i < 3; i++) {
      clock.advance(CHECK_MS);
      await checkArmed(clock);
    }
    assert.equal(s.published.length, 1);
    assert.deepEqual(s.fa.stats().collectorCertificatesReissued, { notValidYet: 0, expiring: 0 });
    assert.equal(await agentSends(s.fa.collectorPort, s.published[0]), "ok");
  });
});
