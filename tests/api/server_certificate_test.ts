/**
 * The API's self-signed certificate is made from the wall clock at start, valid from an hour
 * before it (control-plane.md §5.1). Made with the clock ahead by more (then set back by NTP),
 * it was "not valid yet" for every client until a restart; the server compares the wall clock
 * with its validity on a monotonic timer and makes a new one, serves it, and writes its CA for
 * the CLI. The clients here are real TLS clients checking at real time.
 */

import assert from "node:assert/strict";
import { type ApiServer, caFileOf, startApiServer } from "../../src/api/server.ts";
import { setLogWriter } from "../../src/log.ts";
import { zeroStats } from "../_helpers/stats.ts";
import { waitFor } from "../_helpers/wait.ts";
import { WallStepClock } from "../_helpers/wall_step_clock.ts";

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
/** The period of the validity check (`VALIDITY_CHECK_INTERVAL_MS`, the default). */
const CHECK_MS = 60_000;

async function withApi(
  clock: WallStepClock,
  body: (api: ApiServer, tokenFile: string, lines: string[]) => Promise<void>,
): Promise<void> {
  const lines: string[] = [];
  const restore = setLogWriter((l) => lines.push(l));
  const dir = await Deno.makeTempDir({ prefix: "fa-api-cert-" });
  const tokenFile = `${dir}/token`;
  const api = await startApiServer({
    records: () => "null",
    stats: () => zeroStats(),
    ready: () => true,
  }, {
    hostname: "127.0.0.1",
    port: 0,
    tokenFile,
    version: "0.1.0",
    limits: {
      maxConnections: 16,
      maxConnectionsPerAddress: 16,
      requestTimeoutMs: 10_000,
      idleTimeoutMs: 60_000,
    },
    clock,
  });
  try {
    await body(api, tokenFile, lines);
  } finally {
    await api.close();
    setLogWriter(restore);
    await Deno.remove(dir, { recursive: true });
  }
}

/** `GET /healthz` trusting `caPem`: the status and body, or the error. */
async function healthz(port: number, caPem: string): Promise<string> {
  const client = Deno.createHttpClient({ caCerts: [caPem] });
  try {
    const r = await fetch(`https://127.0.0.1:${port}/healthz`, { client });
    return `${r.status} ${await r.text()}`;
  } catch (e) {
    return String((e as Error).cause ?? e);
  } finally {
    client.close();
  }
}

Deno.test("API certificate made with the wall clock 2 h ahead is made again once NTP sets it back: fetch trusting the new CA works", async () => {
  const clock = new WallStepClock(Date.now() + 2 * HOUR_MS);
  await withApi(clock, async (api, tokenFile, lines) => {
    const first = api.caPem;
    clock.stepWall(-2 * HOUR_MS);
    assert.match(await healthz(api.port, first), /not valid yet|NotValidYet/i);

    clock.advance(CHECK_MS);
    await waitFor(() => api.stats().certificatesReissued.notValidYet === 1, {
      what: "the API certificate made again",
    });
    assert.notEqual(api.caPem, first);
    assert.equal(await Deno.readTextFile(caFileOf(tokenFile)), api.caPem, "the CLI's CA file");
    assert.equal(await healthz(api.port, api.caPem), "200 ok");
    assert.deepEqual(api.stats().certificatesReissued, { notValidYet: 1, expiring: 0 });
    assert.ok(lines.some((l) => l.includes("wall clock moved before the API certificate")));

    // Valid now: the next check leaves it.
    const second = api.caPem;
    clock.advance(CHECK_MS);
    await waitFor(() => clock.pendingTimers().length === 1, { what: "the next check" });
    assert.equal(api.caPem, second);
    assert.deepEqual(api.stats().certificatesReissued, { notValidYet: 1, expiring: 0 });
  });
});

Deno.test("API certificate with under 90 days left is made again", async () => {
  const clock = new WallStepClock(Date.now() - 300 * DAY_MS);
  await withApi(clock, async (api) => {
    const first = api.caPem;
    clock.stepWall(300 * DAY_MS);
    assert.equal(await healthz(api.port, first), "200 ok", "still valid, 65 days left");
    clock.advance(CHECK_MS);
    await waitFor(() => api.stats().certificatesReissued.expiring === 1, {
      what: "the API certificate made again",
    });
    assert.notEqual(api.caPem, first);
    assert.equal(await healthz(api.port, api.caPem), "200 ok");
  });
});
