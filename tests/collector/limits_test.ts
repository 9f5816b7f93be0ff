import assert from "node:assert/strict";
import { setLogLevel, setLogWriter } from "../../src/log.ts";
import {
  encodeDataSet,
  encodeMessage,
  encodeTemplateSet,
  fieldsFor,
  type FieldSpecifier,
} from "../../src/ipfix/mod.ts";
import type { Collector, CollectorOptions } from "../../src/collector/mod.ts";
import { LIMIT_KEYS } from "../../src/config/limits.ts";
import {
  concat,
  dataMessage,
  readUntilClosed,
  type Received,
  SMALL_FIELDS,
  smallRecord,
  startCollector,
  templateMessage,
  udpClient,
  udpSend,
  writeAll,
} from "./helpers.ts";
import { waitFor } from "../_helpers/wait.ts";

setLogLevel("error");

const NAMED = fieldsFor(["sourceTransportPort", "sourcePodName", "protocolIdentifier"]);
const LIMITS: CollectorOptions["limits"] = {
  maxFieldsPerTemplate: 8,
  maxTemplatesPerSession: 4,
  maxTemplates: 6,
  maxStringBytes: 16,
};

/** What a test body gets: the collector, what its sink received, and a TCP connector. */
interface Harness {
  c: Collector;
  received: Received[];
  /** Opens a TCP connection to the collector, closed when the test ends. */
  connect(): Promise<Deno.TcpConn>;
}

/** Runs `body` against a collector on 127.0.0.1 with `options`, then closes everything. */
async function withCollector(
  options: Pick<CollectorOptions, "protocol" | "limits">,
  body: (h: Harness) => Promise<void>,
): Promise<void> {
  const { c, received } = await startCollector({ address: "127.0.0.1:0", ...options });
  const conns: Deno.TcpConn[] = [];
  const connect = async (): Promise<Deno.TcpConn> => {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: c.port });
    conns.push(conn);
    return conn;
  };
  try {
    await body({ c, received, connect });
  } finally {
    for (const conn of conns) {
      try {
        conn.close();
      } catch {
        // closed by the test
      }
    }
    await c.stop();
  }
}

function range(from: number, n: number): number[] {
  return Array.from({ length: n }, (_, i) => from + i);
}

Deno.test("tcp: 10 good records + 1 overrunning string: 10 delivered, 1 counted dropped", () =>
  withCollector({ protocol: "tcp" }, async ({ c, received, connect }) => {
    const conn = await connect();
    const records = range(0, 10).map((i) => ({
      sourceTransportPort: i,
      sourcePodName: `pod-${i}`,
      protocolIdentifier: 6,
    }));
    const set = encodeDataSet(300, NAMED, records);
    const body = concat(set.subarray(4), new Uint8Array([0, 11, 200, 97, 98, 99]));
    const badSet = concat(
      new Uint8Array([1, 44, (body.length + 4) >> 8, (body.length + 4) & 255]),
      body,
    );
    const data = encodeMessage(
      { exportTime: 1_700_000_010, sequenceNumber: 1, observationDomainId: 1 },
      [badSet],
    );
    await writeAll(conn, concat(templateMessage(1, 300, NAMED), data));
    // The set cannot be resynchronised (variable-length records): the session ends as before.
    assert.ok(await readUntilClosed(conn), "session closed on the malformed set");
    await waitFor(() => c.stats().sessionsClosed === 1, { what: "session closed" });
    const s = c.stats();
    assert.deepEqual(
      received.flatMap((r) => r.records.map((x) => x.sourceTransportPort)),
      range(0, 10),
    );
    assert.equal(s.dataRecords, 10);
    assert.deepEqual(s.recordsDropped, { badVarLength: 1 });
    assert.deepEqual(s.setErrors, { badVarLength: 1 });
    assert.equal(s.exporters["127.0.0.1"].recordsDropped, 1);
  }));

Deno.test("tcp: busy connections past maxReadBufferBytes read in smaller pieces, every record delivered", async () => {
  const lines: string[] = [];
  setLogLevel("warn");
  const previous = setLogWriter((l) => lines.push(l));
  try {
    await withCollector(
      { protocol: "tcp", limits: { maxReadBufferBytes: 16 * 1024 } },
      async ({ c, received, connect }) => {
        // Four Agents each write ~420 KB at once: a busy connection would read into up to
        // 256 KiB; the 16 KiB budget lets two of them grow to 8 KiB and no further.
        const perMessage = 100;
        const messages = 200;
        const burst = concat(
          templateMessage(1, 256, SMALL_FIELDS),
          ...range(0, messages).map((m) =>
            dataMessage(1, 256, SMALL_FIELDS, range(m * perMessage, perMessage).map(smallRecord))
          ),
        );
        const conns = await Promise.all(range(0, 4).map(() => connect()));
        await Promise.all(conns.map(async (conn) => {
          await writeAll(conn, burst);
          await conn.closeWrite();
        }));
        await waitFor(() => c.stats().sessionsClosed === 4, { what: "all four sessions ended" });
        const s = c.stats();
        assert.equal(s.sessionsClosedOnError, 0);
        assert.equal(s.dataRecords, 4 * messages * perMessage);
        assert.equal(received.reduce((n, r) => n + r.records.length, 0), 4 * messages * perMessage);
        assert.ok(s.readBuffersLimited > 0, "reads were held to smaller buffers");
        assert.equal(s.readBufferBytes, 0, "every closed connection gave its buffer back");
        // Every held-back read is counted, one warning per 10 s names the limit.
        const warned = lines.filter((l) => l.includes("read buffers at their limit"));
        assert.equal(warned.length, 1, warned.join("\n"));
        assert.match(warned[0], /limit=maxReadBufferBytes/);
      },
    );
  } finally {
    setLogWriter(previous);
    setLogLevel("error");
  }
});

Deno.test("tcp: template bounds per session and in total, freed when a session closes", () =>
  withCollector({ protocol: "tcp", limits: LIMITS }, async ({ c, received, connect }) => {
    const a = await connect();
    const b = await connect();
    await writeAll(a, templateMessage(1, range(256, 10), SMALL_FIELDS));
    await waitFor(() => c.stats().templatesHeld === 4, { what: "4 templates of a" });
    assert.deepEqual(c.stats().templatesRefused, { sessionFull: 6 });
    await writeAll(b, templateMessage(1, range(256, 3), SMALL_FIELDS));
    await waitFor(() => c.stats().templatesHeld === 6, { what: "2 templates of b" });
    assert.deepEqual(c.stats().templatesRefused, { sessionFull: 6, totalFull: 1 });
    // Data for a refused template is counted, not delivered; a's held templates still work.
    await writeAll(a, dataMessage(1, 265, SMALL_FIELDS, [smallRecord(1), smallRecord(2)]));
    await writeAll(a, dataMessage(1, 256, SMALL_FIELDS, [smallRecord(3)]));
    await waitFor(() => received.length === 1, { what: "a's data" });
    assert.deepEqual(c.stats().recordsDropped, { templateRefused: 2 });
    // Closing a gives its 4 back: b's third template now fits.
    a.close();
    await waitFor(() => c.stats().templatesHeld === 2, { what: "a's templates released" });
    await writeAll(b, templateMessage(1, [258], SMALL_FIELDS));
    await waitFor(() => c.stats().templatesHeld === 3, { what: "b's third template" });
    await writeAll(b, dataMessage(1, 258, SMALL_FIELDS, [smallRecord(4)]));
    await waitFor(() => received.length === 2, { what: "b's data" });
    assert.equal(c.stats().sessionsClosedOnError, 0, "a limit never closes a session");
  }));

Deno.test("tcp: a too-wide template is refused and a long string truncated, both counted", () =>
  withCollector({ protocol: "tcp", limits: LIMITS }, async ({ c, received, connect }) => {
    const conn = await connect();
    const wide: FieldSpecifier[] = range(1, 9).map((id) => ({ id, enterprise: 4242, length: 2 }));
    await writeAll(conn, templateMessage(1, [400], wide));
    await writeAll(conn, templateMessage(1, 300, NAMED));
    const long = { sourceTransportPort: 1, sourcePodName: "p".repeat(100), protocolIdentifier: 6 };
    await writeAll(conn, dataMessage(1, 300, NAMED, [long]));
    await writeAll(conn, dataMessage(1, 400, wide, [{}, {}, {}]));
    await waitFor(() => received.length === 1, { what: "the long string's record" });
    await waitFor(() => c.stats().recordsDropped.templateRefused === 3, { what: "wide data" });
    const s = c.stats();
    assert.equal(received[0].records[0].sourcePodName, "p".repeat(16));
    assert.equal(s.stringsTruncated, 1);
    assert.deepEqual(s.templatesRefused, { tooWide: 1 });
    assert.equal(s.templatesHeld, 1);
  }));

Deno.test("tcp: an invalid template is refused alone: its set's other template is used, the session kept", () =>
  withCollector({ protocol: "tcp" }, async ({ c, received, connect }) => {
    const conn = await connect();
    // One template set: 401 [sourceIPv4Address in 8 bytes: illegal], then 300 (valid). The set
    // was dropped whole, a set error that also closed the connection.
    const bad: FieldSpecifier[] = [{ id: 8, enterprise: 0, length: 8 }];
    const set = encodeTemplateSet([
      { id: 401, fields: bad, scopeFieldCount: 0 },
      { id: 300, fields: NAMED, scopeFieldCount: 0 },
    ]);
    const header = { exportTime: 1_700_000_000, sequenceNumber: 0, observationDomainId: 1 };
    await writeAll(conn, encodeMessage(header, [set]));
    const rec = { sourceTransportPort: 1, sourcePodName: "a", protocolIdentifier: 6 };
    await writeAll(conn, dataMessage(1, 300, NAMED, [rec]));
    // 401's data is counted as dropped (estimated from the refused template's 8-byte record).
    await writeAll(conn, dataMessage(1, 401, [{ ...bad[0], length: 4 }], [{}, {}]));
    await waitFor(() => received.length === 1, { what: "300's record" });
    await waitFor(() => c.stats().recordsDropped.templateRefused === 1, { what: "401's data" });
    const s = c.stats();
    assert.deepEqual(received[0].records, [rec]);
    assert.deepEqual(s.templatesRefused, { badTemplate: 1 });
    assert.deepEqual(s.setErrors, {});
    assert.equal(s.templateRecords, 1);
    assert.equal(s.sessionsClosedOnError, 0);
  }));

Deno.test("tcp: a template repeating an element is counted once when announced, not per record", () =>
  withCollector({ protocol: "tcp" }, async ({ c, received, connect }) => {
    const conn = await connect();
    const twice = fieldsFor(["sourceTransportPort", "sourceTransportPort"]);
    await writeAll(conn, templateMessage(1, [300, 301], twice));
    await writeAll(conn, dataMessage(1, 300, twice, [{ sourceTransportPort: 1 }, {}, {}]));
    await waitFor(() => received.length === 1, { what: "300's records" });
    const s = c.stats();
    assert.equal(s.templatesWithDuplicateFields, 2);
    assert.equal(received[0].records.length, 3);
  }));

Deno.test("udp: sessions share the total template budget; an evicted session frees it", () =>
  withCollector({ protocol: "udp", limits: { ...LIMITS, maxUdpSessions: 2 } }, async ({ c }) => {
    const clients = [udpClient("127.0.0.1"), udpClient("127.0.0.1"), udpClient("127.0.0.1")];
    try {
      await udpSend(
        clients[0],
        "127.0.0.1",
        c.port,
        templateMessage(1, range(256, 4), SMALL_FIELDS),
      );
      await udpSend(
        clients[1],
        "127.0.0.1",
        c.port,
        templateMessage(1, range(256, 4), SMALL_FIELDS),
      );
      await waitFor(() => c.stats().messages === 2, { what: "two template messages" });
      assert.equal(c.stats().templatesHeld, 6);
      assert.deepEqual(c.stats().templatesRefused, { totalFull: 2 });
      // A third source evicts the first session (maxUdpSessions 2), giving its 4 back.
      await udpSend(
        clients[2],
        "127.0.0.1",
        c.port,
        templateMessage(1, range(256, 4), SMALL_FIELDS),
      );
      await waitFor(() => c.stats().messages === 3, { what: "third message" });
      const s = c.stats();
      assert.equal(s.sessionsEvicted, 1);
      assert.equal(s.templatesHeld, 6);
      assert.deepEqual(s.templatesRefused, { totalFull: 2 }, "all 4 of the third fit");
    } finally {
      for (const u of clients) u.close();
    }
  }));

Deno.test("the README's limits table shows the defaults declared in LIMIT_KEYS", async () => {
  const readme = await Deno.readTextFile(new URL("../../README.md", import.meta.url));
  const rows = [...readme.matchAll(/^\| `limits\.(\w+)` +\| ([\d,]+) +\|/gm)];
  assert.ok(rows.length >= 5, "the table is there");
  for (const [, key, shown] of rows) {
    const decl = LIMIT_KEYS[key as keyof typeof LIMIT_KEYS];
    assert.ok(decl !== undefined, `README names an unknown limit ${key}`);
    assert.equal(Number(shown.replaceAll(",", "")), decl.default, key);
  }
});
