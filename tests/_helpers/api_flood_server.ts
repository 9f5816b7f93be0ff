/**
 * A process serving the API front alone, for tests that measure it from outside
 * (tests/api/front_flood_test.ts): `deno run -A api_flood_server.ts ok|hang`. The handler answers
 * "ok" at once (as /healthz does) or never (`hang`). Prints one JSON line `{port, caPem}`, then
 * serves until killed.
 *
 * @module
 */

import { ApiFront } from "../../src/api/front.ts";
import { generateApiCertificate } from "../../src/pki/mod.ts";
import { logger, setLogLevel } from "../../src/log.ts";

setLogLevel("error");
const hang = Deno.args[0] === "hang";
const cert = await generateApiCertificate();
const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
const front = new ApiFront(
  listener,
  { cert: cert.chainPem, key: cert.keyPem },
  hang ? () => new Promise<Response>(() => {}) : () => new Response("ok"),
  {
    maxConnections: 256,
    maxConnectionsPerAddress: 64,
    requestTimeoutMs: 10_000,
    idleTimeoutMs: 120_000,
  },
  { log: logger("api-flood") },
);
front.start();
console.log(JSON.stringify({ port: listener.addr.port, caPem: cert.caPem }));
