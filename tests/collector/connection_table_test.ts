/**
 * {@linkcode ConnectionTable} on its own, with fake connections and an injected clock: the
 * caps' bookkeeping as connections come and go, each timeout counted once even when the
 * listener closes the socket later, and the drain judging peers by their progress; the
 * admission rule and sweep period it shares with the API port ({@linkcode AddressCaps},
 * {@linkcode sweepPeriodMs}).
 */

import assert from "node:assert/strict";
import { ManualClock } from "../../src/clock.ts";
import { AddressCaps } from "../../src/collector/address.ts";
import {
  checkOpenFilesLimit,
  ConnectionTable,
  sweepPeriodMs,
} from "../../src/collector/connections.ts";
import { Session, type SessionEnv } from "../../src/collector/session.ts";
import { Counters } from "../../src/collector/stats.ts";
import { StreamSession } from "../../src/collector/stream.ts";
import { logger, RateLimitedLog, setLogLevel, setLogWriter } from "../../src/log.ts";
import { GOLDEN_TEMPLATE } from "./helpers.ts";

setLogLevel("error");

/** A fake connection: records what the table asked of it; a `busy` one always progresses. */
class FakeConnection {
  closed: string[] = [];
  halfClosed = 0;
  #progress = 0;
  readonly handle = {
    close: (reason: string): void => void this.closed.push(reason),
    closeWrite: (): void => void this.halfClosed++,
    progress: (): number => this.busy ? ++this.#progress : this.#progress,
  };
  constructor(readonly busy = false) {}
}

function env(clock: ManualClock): SessionEnv {
  return {
    counters: new Counters("tcp"),
    sink: () => {},
    log: logger("test"),
    rateLog: new RateLimitedLog(10_000, () => clock.nowMs()),
    clock,
  };
}

function stream(e: SessionEnv): StreamSession {
  const session = new Session(e, {
    transport: "tcp",
    exporterAddress: "10.0.0.1",
    peer: "[10.0.0.1]:1",
    templateTtlMs: 0,
  });
  return new StreamSession(session, e.clock);
}

Deno.test("connection table: places are given back as connections go; refusals counted by limit", () => {
  const clock = new ManualClock();
  const e = env(clock);
  const t = new ConnectionTable(e, {
    limits: { maxConnections: 3, maxConnectionsPerAddress: 2, maxTlsHandshakes: 1 },
  });
  const a1 = t.admit("10.0.0.1", new FakeConnection().handle)!;
  const a2 = t.admit("10.0.0.1", new FakeConnection().handle)!;
  assert.equal(t.admit("10.0.0.1", new FakeConnection().handle), undefined);
  const h = t.admit("10.0.0.2", new FakeConnection().handle, { handshake: true })!;
  assert.equal(t.admit("10.0.0.3", new FakeConnection().handle), undefined, "total");
  t.remove(a1);
  t.remove(a1); // idempotent
  assert.equal(t.admit("10.0.0.4", new FakeConnection().handle, { handshake: true }), undefined);
  t.attach(h, stream(e)); // handshake done: its handshake place is free
  const h2 = t.admit("10.0.0.4", new FakeConnection().handle, { handshake: true });
  assert.ok(h2 !== undefined);
  t.remove(h2);
  t.remove(a2);
  assert.ok(t.admit("10.0.0.1", new FakeConnection().handle) !== undefined, "address freed");
  assert.deepEqual(e.counters.snapshot().connectionsRefused, {
    maxConnectionsPerAddress: 1,
    maxConnections: 1,
    maxTlsHandshakes: 1,
  });
});

Deno.test("connection table: a timeout is counted once although the socket closes later", () => {
  const clock = new ManualClock();
  const e = env(clock);
  const t = new ConnectionTable(e, {
    limits: { idleTimeoutMs: 1000, readTimeoutMs: 400, tlsHandshakeTimeoutMs: 200 },
  });
  t.start();
  const idle = new FakeConnection();
  const started = new FakeConnection();
  const handshaking = new FakeConnection();
  const ci = t.admit("10.0.0.1", idle.handle)!;
  t.attach(ci, stream(e));
  const cs = t.admit("10.0.0.1", started.handle)!;
  const s = stream(e);
  t.attach(cs, s);
  assert.equal(s.feed(GOLDEN_TEMPLATE.subarray(0, 100)).ok, true);
  t.admit("10.0.0.2", handshaking.handle, { handshake: true });
  clock.advance(5000); // many sweeps; none of the sockets is removed (the handlers lag)
  assert.deepEqual(handshaking.closed, ["tlsHandshakeTimeout"]);
  assert.deepEqual(started.closed, ["readTimeout"]);
  assert.deepEqual(idle.closed, ["idleTimeout"]);
  assert.deepEqual(e.counters.snapshot().connectionsTimedOut, {
    tlsHandshakeTimeout: 1,
    readTimeout: 1,
    idleTimeout: 1,
  });
});

Deno.test("connection table: the drain half-closes, closes quiet peers and cuts the busy one at the deadline", async () => {
  const clock = new ManualClock();
  const e = env(clock);
  const t = new ConnectionTable(e, { limits: {} });
  const quiet = new FakeConnection();
  const busy = new FakeConnection(true);
  const handshaking = new FakeConnection();
  for (const f of [quiet, busy]) t.attach(t.admit("10.0.0.1", f.handle)!, stream(e));
  t.admit("10.0.0.2", handshaking.handle, { handshake: true });
  await t.drain({ deadlineMs: 1000, quietMs: 40 });
  assert.equal(quiet.halfClosed, 1);
  assert.equal(busy.halfClosed, 1);
  assert.equal(handshaking.halfClosed, 0, "no half-close before the handshake is done");
  assert.deepEqual(quiet.closed, ["collector stopped"]);
  assert.deepEqual(handshaking.closed, ["collector stopped in the TLS handshake"]);
  assert.deepEqual(busy.closed, ["collector stopped: drain deadline"]);
  assert.equal(e.counters.snapshot().connectionsCutAtStop, 1);
  assert.equal(t.admit("10.0.0.3", new FakeConnection().handle), undefined, "closed for good");
  assert.deepEqual(e.counters.snapshot().connectionsRefused, {}, "not a refusal by a limit");
});

Deno.test("connection table: an open-file limit below maxConnections is warned about at start", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-limits-" });
  const lines: string[] = [];
  const previous = setLogWriter((l) => lines.push(l));
  setLogLevel("warn");
  try {
    const limits = (soft: string): string =>
      "Limit                     Soft Limit           Hard Limit           Units     \n" +
      `Max open files            ${soft}                 1048576              files     \n`;
    await Deno.writeTextFile(`${dir}/low`, limits("1024"));
    await Deno.writeTextFile(`${dir}/high`, limits("65536"));
    await Deno.writeTextFile(`${dir}/unlimited`, limits("unlimited"));
    const log = logger("test");
    const caps = { maxConnections: 4096, maxApiConnections: 256 };
    assert.equal(checkOpenFilesLimit(caps, log, `${dir}/high`), 65536);
    assert.equal(checkOpenFilesLimit(caps, log, `${dir}/unlimited`), undefined);
    assert.equal(lines.length, 0);
    assert.equal(checkOpenFilesLimit(caps, log, `${dir}/low`), 1024);
    assert.equal(lines.length, 1);
    assert.match(lines[0], /openFilesLimit=1024 maxConnections=4096 maxApiConnections=256/);
    assert.match(lines[0], /ulimit -n 4416/);
    assert.equal(checkOpenFilesLimit(caps, log, `${dir}/absent`), undefined, "unreadable: quiet");
    assert.equal(lines.length, 1);
    // The API port's connections count: a limit enough for the collector's alone is not.
    await Deno.writeTextFile(`${dir}/between`, limits("4200"));
    assert.equal(checkOpenFilesLimit({ maxConnections: 4096 }, log, `${dir}/between`), 4200);
    assert.equal(lines.length, 1);
    assert.equal(checkOpenFilesLimit(caps, log, `${dir}/between`), 4200);
    assert.equal(lines.length, 2);
  } finally {
    setLogLevel("error");
    setLogWriter(previous);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("address caps: the total cap first, then the per-address one; places given back", () => {
  const caps = new AddressCaps(3, 2);
  assert.equal(caps.exceeded("a"), undefined);
  caps.add("a");
  caps.add("a");
  assert.equal(caps.exceeded("a"), "perAddress");
  assert.equal(caps.exceeded("b"), undefined);
  caps.add("b");
  assert.equal(caps.size, 3);
  // Full: the total is named even for an address under its own cap.
  assert.equal(caps.exceeded("c"), "total");
  assert.equal(caps.exceeded("a"), "total");
  caps.remove("a");
  assert.equal(caps.exceeded("a"), undefined);
  assert.equal(caps.exceeded("c"), undefined);
  caps.remove("a");
  caps.remove("b");
  assert.equal(caps.size, 0);
  // An address whose connections all left starts again from 0.
  caps.add("a");
  caps.add("a");
  assert.equal(caps.exceeded("a"), "perAddress");
  const open = new AddressCaps(Infinity, Infinity);
  for (let i = 0; i < 1000; i++) open.add("x");
  assert.equal(open.exceeded("x"), undefined);
});

Deno.test("sweep period: a quarter of the shortest timeout, 10 ms to 1 s", () => {
  assert.equal(sweepPeriodMs(2000, 400), 100);
  assert.equal(sweepPeriodMs(8, 1000), 10);
  assert.equal(sweepPeriodMs(120_000, 10_000), 1000);
  assert.equal(sweepPeriodMs(Infinity, Infinity), 1000);
});
