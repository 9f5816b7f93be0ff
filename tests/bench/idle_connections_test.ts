/**
 * The idle connection memory figures (scripts/bench/idle_connections.ts): the limits section
 * that lets N connections from one address in, and a small real run of both transports.
 */

import assert from "node:assert/strict";
import { parse } from "yaml";
import {
  benchIdleConnections,
  connectionLimits,
  perAddressCap,
} from "../../scripts/bench/idle_connections.ts";
import { LIMIT_KEYS } from "../../src/config/limits.ts";

Deno.test("idle connections: the per-address cap is raised above N, the total cap only when needed", () => {
  assert.deepEqual(parse(connectionLimits(1_000)), {
    limits: { maxConnectionsPerAddress: perAddressCap(1_000) },
  });
  assert.ok(perAddressCap(1_000) > 1_000);
  const big = 2 * LIMIT_KEYS.maxConnections.default;
  assert.deepEqual(parse(connectionLimits(big)), {
    limits: { maxConnectionsPerAddress: perAddressCap(big), maxConnections: perAddressCap(big) },
  });
});

Deno.test("idle connections: every TLS and TCP connection is established on the collector side and measured", async () => {
  const r = await benchIdleConnections({ quick: true, connections: 20 });
  assert.equal(r.detail.trials.length, 2);
  for (const t of r.detail.trials) {
    assert.deepEqual(t.failures, [], t.transport);
    assert.equal(t.connections, 20);
    assert.ok(t.fdsGained >= 20, `${t.transport}: ${t.fdsGained} descriptors gained`);
    assert.equal(t.rssBeforeSamples.length, r.detail.samples);
    assert.equal(t.rssAfterSamples.length, r.detail.idleWindowSec * 2, "every 0.5 s of the window");
  }
  // RSS moves by pages and the heap grows in steps: only that each figure was taken.
  assert.equal(typeof r.tls_idle_connection_bytes, "number");
  assert.equal(typeof r.tcp_idle_connection_bytes, "number");
});
