/**
 * The udp_e2e benchmark's accounting (scripts/bench/udp_e2e.ts): both loss counts of a trial,
 * the /proc/net/snmp parser, their agreement over trials, the receivers compared, and the rate
 * search driven by such trials. Pure: no sockets, no process.
 */

import assert from "node:assert/strict";
import {
  accountLoss,
  byBuffer,
  E2E_REFINE_STEPS,
  interleaveMessages,
  lossAgreement,
  oneAtATime,
  parseSnmpUdp,
  prometheusSamples,
  UDP_E2E_RECEIVERS,
  type UdpE2eTrial,
} from "../../scripts/bench/udp_e2e.ts";
import { LOSSLESS, searchLosslessRate } from "../../scripts/bench/udp.ts";

const SNMP = `Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 123
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors
Udp: 29559878 0 484737 30045413 484737 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors
UdpLite: 0 0 0 0 7 0 0
`;

Deno.test("udp e2e: parseSnmpUdp reads the Udp line, not UdpLite's", () => {
  const u = parseSnmpUdp(SNMP);
  assert.equal(u.RcvbufErrors, 484737);
  assert.equal(u.InDatagrams, 29559878);
  assert.equal(u.NoPorts, 0);
});

Deno.test("udp e2e: parseSnmpUdp names a text without Udp lines", () => {
  assert.throws(() => parseSnmpUdp("Ip: a\nIp: 1\n"), /no Udp lines/);
});

Deno.test("udp e2e: prometheusSamples reads unlabelled samples and skips the rest", () => {
  const m = prometheusSamples(
    "# TYPE flow_aggregator_num_records_received untyped\n" +
      "flow_aggregator_num_records_received 12345\n" +
      "flow_aggregator_udp_kernel_drops 7\n" +
      'flow_aggregator_sink_dropped{sink="flowLogger"} 3\n',
  );
  assert.deepEqual(m, {
    flow_aggregator_num_records_received: 12345,
    flow_aggregator_udp_kernel_drops: 7,
  });
});

Deno.test("udp e2e: accountLoss counts what the receiver missed and compares the kernel's", () => {
  const t = accountLoss({ requested: 10_000, achieved: 9_990, sent: 40_000, received: 39_960 }, 40);
  assert.equal(t.processLoss, 40);
  assert.equal(t.kernelDrops, 40);
  assert.equal(t.lossDifference, 0);
  assert.equal(t.loss, 0.001);
  // 0.1 % is not lossless: the bound is strict.
  assert.equal(t.loss < LOSSLESS, false);
});

Deno.test("udp e2e: accountLoss reports a kernel count the process does not see", () => {
  // Another socket's drops in the same seconds land in the system-wide RcvbufErrors.
  const t = accountLoss({ requested: 5_000, achieved: 5_000, sent: 5_000, received: 5_000 }, 12);
  assert.equal(t.processLoss, 0);
  assert.equal(t.loss, 0);
  assert.equal(t.lossDifference, -12);
});

Deno.test("udp e2e: accountLoss never counts a negative loss or an achieved rate above the ask", () => {
  const t = accountLoss({ requested: 5_000, achieved: 5_200, sent: 100, received: 103 }, 0);
  assert.equal(t.processLoss, 0);
  assert.equal(t.loss, 0);
  assert.equal(t.achieved, 5_000);
  assert.equal(accountLoss({ requested: 1, achieved: 0, sent: 0, received: 0 }, 0).loss, 0);
});

Deno.test("udp e2e: lossAgreement sums both counts and the trials that differ", () => {
  const trials = [
    accountLoss({ requested: 1, achieved: 1, sent: 1_000, received: 1_000 }, 0),
    accountLoss({ requested: 2, achieved: 2, sent: 1_000, received: 900 }, 100),
    accountLoss({ requested: 3, achieved: 3, sent: 1_000, received: 800 }, 190),
    accountLoss({ requested: 4, achieved: 4, sent: 1_000, received: 1_000 }, 5),
  ];
  assert.deepEqual(lossAgreement(trials), {
    trials: 4,
    processLoss: 300,
    kernelDrops: 295,
    absDifference: 15,
    disagreeing: 2,
  });
  assert.deepEqual(lossAgreement([]), {
    trials: 0,
    processLoss: 0,
    kernelDrops: 0,
    absDifference: 0,
    disagreeing: 0,
  });
});

Deno.test("udp e2e: every process receiver has a C loop at its buffer size measured before it", () => {
  UDP_E2E_RECEIVERS.forEach((r, i) => {
    if (r.kind === "c") return;
    const c = UDP_E2E_RECEIVERS.findIndex((x) => x.kind === "c" && x.recvBuffer === r.recvBuffer);
    assert.ok(c >= 0 && c < i, `${r.name} has no C loop before it`);
  });
  const names = UDP_E2E_RECEIVERS.map((r) => r.name);
  assert.equal(new Set(names).size, names.length);
});

Deno.test("udp e2e: the receivers at one buffer size form one group, C loop first", () => {
  const groups = byBuffer(UDP_E2E_RECEIVERS);
  assert.equal(groups.length, 2);
  for (const g of groups) {
    assert.equal(g[0].kind, "c");
    assert.ok(g.some((r) => r.kind === "fast"));
    assert.ok(g.every((r) => r.recvBuffer === g[0].recvBuffer));
  }
});

Deno.test("udp e2e: two searches sharing oneAtATime alternate their trials, never overlapping", async () => {
  const turn = oneAtATime();
  const log: string[] = [];
  let running = 0, overlap = false;
  // C holds 40k/s, the process 20k/s: their searches take different paths and lengths.
  const receiver = (name: string, limit: number) => (rate: number): Promise<UdpE2eTrial> =>
    turn(async () => {
      if (running++ > 0) overlap = true;
      log.push(name);
      await new Promise((r) => setTimeout(r, 1));
      running--;
      const sent = rate * 4;
      const lost = rate > limit ? sent / 50 : 0;
      return accountLoss({ requested: rate, achieved: rate, sent, received: sent - lost }, lost);
    });
  const opts = { start: 10_000, max: 320_000, min: 2_500, refine: 2 };
  const [c, p] = await Promise.all([
    searchLosslessRate(receiver("c", 40_000), opts),
    searchLosslessRate(receiver("p", 20_000), opts),
  ]);
  assert.equal(overlap, false);
  assert.ok(c.lossless >= 35_000 && c.lossless <= 40_000, `c ${c.lossless}`);
  assert.ok(p.lossless >= 15_000 && p.lossless <= 20_000, `p ${p.lossless}`);
  // Alternating while both run: the shorter search's trials are all within the first 2n.
  const shorter = Math.min(c.trials.length, p.trials.length);
  for (let i = 0; i < 2 * shorter; i++) assert.equal(log[i], i % 2 === 0 ? "c" : "p");
  assert.equal(log.length, c.trials.length + p.trials.length);
});

Deno.test("udp e2e: the rate search keeps both loss counts of every trial it ran", async () => {
  // A receiver whose socket overflows above 30k/s; the kernel sees every drop.
  const run = (rate: number): Promise<UdpE2eTrial> => {
    const sent = rate * 4;
    const lost = rate > 30_000 ? Math.ceil(sent * 0.02) : 0;
    return Promise.resolve(
      accountLoss({ requested: rate, achieved: rate, sent, received: sent - lost }, lost),
    );
  };
  const r = await searchLosslessRate(run, { start: 10_000, max: 320_000, min: 2_500, refine: 2 });
  assert.equal(r.senderLimited, false);
  assert.ok(r.lossless >= 25_000 && r.lossless <= 30_000, `lossless ${r.lossless}`);
  assert.ok(r.trials.every((t) => t.lossDifference === 0));
  assert.ok(r.trials.some((t) => t.kernelDrops > 0));
});

Deno.test("udp e2e: the full search's bisection tells 75k from 70k (two steps could not)", async () => {
  // Two receivers that hold 71k/s and 76k/s: with 2 steps both were found at 70k (a tie), with
  // the full search's steps each is found within 5 % below its limit.
  const search = (limit: number, refine: number) =>
    searchLosslessRate((rate: number): Promise<UdpE2eTrial> => {
      const sent = rate * 4;
      const lost = rate > limit ? Math.ceil(sent * 0.01) : 0;
      return Promise.resolve(
        accountLoss({ requested: rate, achieved: rate, sent, received: sent - lost }, lost),
      );
    }, { start: 10_000, max: 320_000, min: 2_500, refine });
  assert.equal((await search(71_000, 2)).lossless, 70_000);
  assert.equal((await search(76_000, 2)).lossless, 70_000);
  const a = await search(71_000, E2E_REFINE_STEPS);
  const b = await search(76_000, E2E_REFINE_STEPS);
  assert.equal(a.lossless, 70_000);
  assert.equal(b.lossless, 75_000);
  // The bisection stopped once the bracket was within 5 %: 60k, 70k, 75k, 77.5k after 80k.
  assert.deepEqual(b.trials.filter((t) => t.loss < LOSSLESS).map((t) => t.requested), [
    10_000,
    20_000,
    40_000,
    60_000,
    70_000,
    75_000,
  ]);
});

Deno.test("udp e2e: the search stops as sender-limited when the replay sender falls short", async () => {
  // The sender tops out at 80k/s and the receiver never loses.
  const run = (rate: number): Promise<UdpE2eTrial> => {
    const achieved = Math.min(rate, 80_000);
    const sent = achieved * 4;
    return Promise.resolve(accountLoss({ requested: rate, achieved, sent, received: sent }, 0));
  };
  const r = await searchLosslessRate(run, { start: 10_000, max: 320_000, min: 2_500, refine: 2 });
  assert.equal(r.senderLimited, true);
  assert.equal(r.lossless, 80_000);
  assert.deepEqual(r.trials.map((t) => t.requested), [10_000, 20_000, 40_000, 80_000, 160_000]);
});

Deno.test("udp e2e: interleaveMessages alternates the Agents, length-prefixed, cut to the shortest", () => {
  const a = [Uint8Array.of(1), Uint8Array.of(2, 2), Uint8Array.of(3)];
  const b = [Uint8Array.of(9, 9, 9), Uint8Array.of(8)];
  assert.deepEqual(
    [...interleaveMessages([a, b])],
    [0, 1, 1, 0, 3, 9, 9, 9, 0, 2, 2, 2, 0, 1, 8],
  );
  assert.deepEqual([...interleaveMessages([[Uint8Array.of(7)]])], [0, 1, 7]);
  assert.throws(() => interleaveMessages([[new Uint8Array(0x10000)]]), /too long/);
});
