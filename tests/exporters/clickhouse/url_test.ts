import assert from "node:assert/strict";
import { parseDatabaseUrl } from "../../../src/exporters/clickhouse/mod.ts";

Deno.test("C8: database URLs that upstream rejects fail with its texts", () => {
  assert.throws(
    () => parseDatabaseUrl("abc://127.0.0.1:9000"),
    /^Error: connection over abc transport protocol is not supported$/,
  );
  assert.throws(
    () => parseDatabaseUrl("127.0.0.1:9000"),
    /failed to parse ClickHouse database URL/,
  );
  for (
    const url of [
      "tcp://user:password@127.0.0.1:9000",
      "tcp://127.0.0.1:9000/path",
      "tcp://127.0.0.1:9000?key=value",
    ]
  ) {
    assert.throws(
      () => parseDatabaseUrl(url),
      new RegExp(
        `invalid ClickHouse database URL '${url.replaceAll("?", "\\?")}': path, query string or ` +
          "user info should not be set",
      ),
    );
  }
});

Deno.test("C8: native URLs map to the HTTP interface on the same host, http(s) as given", () => {
  const cases: [string, string, boolean, boolean][] = [
    ["tcp://127.0.0.1:9000", "http://127.0.0.1:8123", true, false],
    ["tls://127.0.0.1:9000", "https://127.0.0.1:8443", true, true],
    ["tls://ch.example:9440", "https://ch.example:8443", true, true],
    ["tcp://ch.example:19000", "http://ch.example:8123", true, false],
    ["http://127.0.0.1:9000", "http://127.0.0.1:9000", false, false],
    ["https://127.0.0.1:9000", "https://127.0.0.1:9000", false, true],
    ["http://ch.example", "http://ch.example:8123", false, false],
    ["tcp://[::1]:9000", "http://[::1]:8123", true, false],
  ];
  for (const [url, http, native, secure] of cases) {
    const u = parseDatabaseUrl(url);
    assert.equal(u.httpUrl, http, url);
    assert.equal(u.native, native, url);
    assert.equal(u.secure, secure, url);
  }
});
