import assert from "node:assert/strict";
import { parseCollectorAddress } from "../../../src/exporters/ipfix/address.ts";

Deno.test("parseCollectorAddress follows the §1.6 table", () => {
  const ok: [string, string, number, string, string][] = [
    ["1.2.3.4:80:udp", "1.2.3.4", 80, "udp", "1.2.3.4:80"],
    ["1.2.3.4:80", "1.2.3.4", 80, "tcp", "1.2.3.4:80"],
    ["collector.example", "collector.example", 4739, "tcp", "collector.example:4739"],
    ["[fe80::1]:80:tcp", "fe80::1", 80, "tcp", "[fe80::1]:80"],
    ["[::1]:4739:tls", "::1", 4739, "tls", "[::1]:4739"],
    ["[::1]:4739", "::1", 4739, "tcp", "[::1]:4739"],
    ["ns/svc::tcp", "ns/svc", 4739, "tcp", "ns/svc:4739"],
    ["127.0.0.1:4739:tls", "127.0.0.1", 4739, "tls", "127.0.0.1:4739"],
  ];
  for (const [input, host, port, proto, hostPort] of ok) {
    assert.deepEqual(parseCollectorAddress(input), { host, port, proto, hostPort }, input);
  }
});

Deno.test("parseCollectorAddress rejects bad protos, formats and ports", () => {
  assert.throws(() => parseCollectorAddress("1.2.3.4:80:sctp"), {
    message: "connection over sctp transport proto is not supported",
  });
  assert.throws(() => parseCollectorAddress("1.2.3.4:80:TCP"), /TCP transport proto/);
  assert.throws(() => parseCollectorAddress(":abbbsctp::"), {
    message: "flow collector address is given in invalid format",
  });
  assert.throws(
    () => parseCollectorAddress("fe80::1"),
    /^Error: flow collector address is given in invalid format/,
  );
  assert.throws(() => parseCollectorAddress("a:b:c:d"), /invalid format/);
  assert.throws(() => parseCollectorAddress("1.2.3.4:99999"), /port "99999"/);
  assert.throws(() => parseCollectorAddress("1.2.3.4:http:tcp"), /port "http"/);
  assert.throws(() => parseCollectorAddress("1.2.3.4:0"), /port "0"/);
});
