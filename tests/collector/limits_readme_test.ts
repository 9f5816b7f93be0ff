/**
 * The README's table of connection limits states the defaults that `LIMIT_KEYS` declares (the
 * one source of truth), and documents every limit the stream listeners enforce.
 */

import assert from "node:assert/strict";
import { LIMIT_KEYS, type LimitName } from "../../src/config/limits.ts";
import type { ConnectionLimits } from "../../src/collector/mod.ts";

const README = new URL("../../README.md", import.meta.url);

/** The limits a `ConnectionTable` enforces, by their config key (`readTimeoutMs` → `readTimeout`). */
const ENFORCED: Record<keyof ConnectionLimits, LimitName> = {
  maxConnections: "maxConnections",
  maxConnectionsPerAddress: "maxConnectionsPerAddress",
  maxTlsHandshakes: "maxTlsHandshakes",
  readTimeoutMs: "readTimeout",
  idleTimeoutMs: "idleTimeout",
  tlsHandshakeTimeoutMs: "tlsHandshakeTimeout",
  // Counted in its open-file check (the API port enforces it).
  maxApiConnections: "maxApiConnections",
};

Deno.test("README: the connection limits table has every enforced key with its declared default", async () => {
  const text = await Deno.readTextFile(README);
  const section = text.slice(text.indexOf("### Limits (TCP and TLS connections)"));
  const rows = new Map<string, string>();
  for (const m of section.matchAll(/^\| `(\w+)`\s*\| ([^|]+?)\s*\|/gm)) rows.set(m[1], m[2]);
  // The connections' read buffers are bounded by the collector's budget, not the table; the
  // API port's keys have a table of their own in the same section.
  const api = [
    "maxApiConnectionsPerAddress",
    "apiRequestTimeout",
    "apiIdleTimeout",
  ] as const;
  for (const key of [...Object.values(ENFORCED), "maxReadBufferBytes" as const, ...api]) {
    const d = LIMIT_KEYS[key].default;
    assert.equal(rows.get(key), typeof d === "string" ? `\`${d}\`` : String(d), key);
  }
});

Deno.test("README: every limit has a table row with its declared default", async () => {
  const text = await Deno.readTextFile(README);
  const rows = new Map<string, string>();
  for (const m of text.matchAll(/^\| `(?:limits\.)?(\w+)`\s*\| ([^|]+?)\s*\|/gm)) {
    if (!rows.has(m[1])) rows.set(m[1], m[2].replaceAll(",", "").replaceAll("`", ""));
  }
  const missing = Object.keys(LIMIT_KEYS).filter((k) => !rows.has(k));
  assert.deepEqual(missing, [], "limits without a README row");
  for (const [key, spec] of Object.entries(LIMIT_KEYS)) {
    assert.equal(rows.get(key), String(spec.default), key);
  }
});
