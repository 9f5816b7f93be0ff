import assert from "node:assert/strict";
import type { FlowInput } from "../../src/aggregation/record.ts";
import {
  INPUT_FIELDS,
  inputFields,
  InputRowReader,
  InputRowWriter,
  type InputRowWriterOptions,
} from "../../src/shard/input_rows.ts";
import { createRing, RingReader, RingWriter } from "../../src/shard/ring.ts";
import {
  AGENT_IPV4_FIELDS,
  AGENT_IPV6_ADDRESS_FIELDS,
  RECORD_SCHEMA,
  type SchemaRow,
} from "../../src/record/schema.ts";
import { decodeStream, realisticStream } from "../../scripts/bench/shard_rows.ts";
import { prng } from "../_helpers/prng.ts";
import type { PeerStart } from "./ring_peer_worker.ts";

/** Encodes `records` (each frame copied out) and decodes them with one reader. */
function roundTrip(
  records: readonly FlowInput[],
  options: InputRowWriterOptions = {},
): { out: FlowInput[]; frames: Uint8Array[]; writer: InputRowWriter; reader: InputRowReader } {
  const frames: Uint8Array[] = [];
  const writer = new InputRowWriter((f) => {
    frames.push(f.slice());
    return true;
  }, options);
  for (const r of records) assert.ok(writer.add(r));
  assert.ok(writer.flush());
  const reader = new InputRowReader();
  const out: FlowInput[] = [];
  for (const f of frames) reader.read(f, (r) => out.push(r));
  return { out, frames, writer, reader };
}

function one(r: FlowInput): FlowInput {
  const { out } = roundTrip([r]);
  assert.equal(out.length, 1);
  return out[0];
}

/** A record with every IPv4 Agent field, in wire-number form. */
function fullV4(): FlowInput {
  return {
    flowStartSeconds: 1_700_000_000,
    flowEndSeconds: 4_294_967_295,
    flowEndReason: 255,
    sourceIPv4Address: 0x0a000001,
    destinationIPv4Address: 0xc0a80102,
    sourceTransportPort: 65535,
    destinationTransportPort: 0,
    protocolIdentifier: 6,
    packetTotalCount: 0,
    octetTotalCount: 2 ** 53 - 1,
    packetDeltaCount: 2n ** 53n,
    octetDeltaCount: 2n ** 64n - 1n,
    reversePacketTotalCount: 2 ** 32,
    reverseOctetTotalCount: 2 ** 32 - 1,
    reversePacketDeltaCount: 123_456_789_012,
    reverseOctetDeltaCount: 1,
    sourcePodName: "perftest-a",
    sourcePodNamespace: "antrea-test",
    sourceNodeName: "k8s-node-1",
    destinationPodName: "perftest-b",
    destinationPodNamespace: "antrea-test",
    destinationNodeName: "k8s-node-2",
    destinationClusterIPv4: 0,
    destinationServicePort: 80,
    destinationServicePortName: "antrea-test/perftest-b:http",
    ingressNetworkPolicyName: "allow-web",
    ingressNetworkPolicyNamespace: "antrea-test",
    ingressNetworkPolicyRuleName: "rule-1",
    ingressNetworkPolicyRuleAction: 1,
    ingressNetworkPolicyType: 1,
    egressNetworkPolicyName: "",
    egressNetworkPolicyNamespace: "",
    egressNetworkPolicyRuleName: "",
    egressNetworkPolicyRuleAction: 0,
    egressNetworkPolicyType: 0,
    tcpState: "TIME_WAIT",
    flowType: 2,
    egressName: "egress-1",
    egressIP: "172.18.0.3",
  };
}

Deno.test("input_rows: the fields are the schema's Agent IEs, addresses as their v4 and v6 IEs", () => {
  const names = INPUT_FIELDS.map((f) => f.name);
  assert.deepEqual(
    new Set(names),
    new Set([...AGENT_IPV4_FIELDS, ...AGENT_IPV6_ADDRESS_FIELDS]),
  );
  assert.equal(names.length, AGENT_IPV4_FIELDS.length + AGENT_IPV6_ADDRESS_FIELDS.length);
  const kind = (n: string) => INPUT_FIELDS.find((f) => f.name === n)?.kind;
  assert.equal(kind("flowStartSeconds"), "u32");
  assert.equal(kind("protocolIdentifier"), "u8");
  assert.equal(kind("sourceTransportPort"), "u16");
  assert.equal(kind("octetDeltaCount"), "u64");
  assert.equal(kind("sourceIPv4Address"), "ipv4");
  assert.equal(kind("destinationClusterIPv6"), "ipv6");
  assert.equal(kind("tcpState"), "string");
});

Deno.test("input_rows: an Agent row of a type the rows do not carry fails with its name", () => {
  const rows: SchemaRow[] = [...RECORD_SCHEMA, ["someRatio", "float64", "agent", 66, []]];
  assert.throws(
    () => inputFields(rows),
    /input_rows: someRatio: IE type float64 is not handled/,
  );
  // Non-Agent rows are not carried, whatever their type.
  inputFields([...RECORD_SCHEMA, ["other", "float64", "fa", 66, []]]);
});

Deno.test("input_rows: every field type round-trips, u64 exact at 0, 2^53-1, 2^53 and 2^64-1", () => {
  const r = fullV4();
  const out = one(r);
  assert.deepEqual(out, r);
  assert.equal(typeof out.octetTotalCount, "number");
  assert.equal(out.packetDeltaCount, 2n ** 53n);
  assert.equal(out.octetDeltaCount, 18446744073709551615n);
});

Deno.test("input_rows: u64 bigints below 2^53 come back as numbers (wire-number form)", () => {
  const out = one({ packetTotalCount: 0n, octetTotalCount: 2n ** 53n - 1n, packetDeltaCount: 7n });
  assert.deepEqual(out, { packetTotalCount: 0, octetTotalCount: 2 ** 53 - 1, packetDeltaCount: 7 });
});

Deno.test("input_rows: absent fields stay absent (no key), undefined ones too", () => {
  const out = one({
    protocolIdentifier: 17,
    sourcePodName: undefined,
    destinationPodName: "b",
    octetDeltaCount: undefined,
  });
  assert.deepEqual(out, { protocolIdentifier: 17, destinationPodName: "b" });
  assert.deepEqual(Object.keys(out), ["protocolIdentifier", "destinationPodName"]);
  assert.deepEqual(one({}), {});
});

Deno.test("input_rows: unicode, empty and long strings round-trip", () => {
  const long = "x".repeat(70_000) + "é";
  const names = ["", "é", "日本語", "pod-🚀-ünïcødé", long];
  const records = names.map((s, i): FlowInput => ({
    sourcePodName: s,
    sourcePodNamespace: `${i}`,
  }));
  const { out } = roundTrip(records);
  assert.deepEqual(out, records);
});

Deno.test("input_rows: IPv4 as text or as u32 number gives the same u32 output", () => {
  const a = one({ sourceIPv4Address: "10.0.0.1", destinationIPv4Address: "255.255.255.255" });
  const b = one({ sourceIPv4Address: 0x0a000001, destinationIPv4Address: 0xffffffff });
  assert.deepEqual(a, b);
  assert.deepEqual(a, { sourceIPv4Address: 167772161, destinationIPv4Address: 4294967295 });
  assert.deepEqual(one({ destinationClusterIPv4: "0.0.0.0" }), { destinationClusterIPv4: 0 });
});

Deno.test("input_rows: IPv6 addresses come back as the codec's canonical text", () => {
  const out = one({
    sourceIPv6Address: "2001:0DB8:0:0:0:0:0:1",
    destinationIPv6Address: "fe80::1:0:0:abcd",
    destinationClusterIPv6: "::",
  });
  assert.deepEqual(out, {
    sourceIPv6Address: "2001:db8::1",
    destinationIPv6Address: "fe80::1:0:0:abcd",
    destinationClusterIPv6: "::",
  });
  // IPv4-mapped addresses print as dotted quads (as the codec does), either way they are given.
  assert.deepEqual(one({ sourceIPv6Address: "::ffff:10.0.0.1" }), {
    sourceIPv6Address: "10.0.0.1",
  });
  assert.deepEqual(one({ sourceIPv6Address: "10.0.0.1" }), { sourceIPv6Address: "10.0.0.1" });
});

Deno.test("input_rows: a value that does not fit its type throws and takes nothing", () => {
  const frames: Uint8Array[] = [];
  const w = new InputRowWriter((f) => {
    frames.push(f.slice());
    return true;
  });
  const bad: [FlowInput, RegExp][] = [
    [{ protocolIdentifier: 256 }, /protocolIdentifier 256 is not an unsigned8/],
    [{ sourceTransportPort: -1 }, /sourceTransportPort -1 is not an unsigned16/],
    [{ flowStartSeconds: 1.5 }, /flowStartSeconds 1.5 is not an unsigned32/],
    [{ octetDeltaCount: -1 }, /octetDeltaCount -1 is not an unsigned64/],
    [{ octetDeltaCount: 2 ** 53 }, /2\^53 and above as bigint/],
    [{ octetDeltaCount: 2n ** 64n }, /octetDeltaCount 18446744073709551616n is not/],
    [{ sourceIPv4Address: "10.0.0" }, /sourceIPv4Address "10.0.0" is not an IPv4 address/],
    [{ sourceIPv4Address: 2 ** 32 }, /is not an IPv4 address/],
    [{ sourceIPv6Address: "2001:db8::g" }, /sourceIPv6Address "2001:db8::g" is not an IPv6/],
    [{ sourcePodName: 5 } as unknown as FlowInput, /sourcePodName 5 is not a string/],
  ];
  for (const [r, re] of bad) {
    // A new string before the bad value: it must not count as sent.
    assert.throws(() => w.add({ ...r, tcpState: "NEW_STATE" }), re);
    assert.equal(w.pendingRecords, 0);
  }
  assert.equal(w.stats.strings, 0);
  assert.ok(w.add({ tcpState: "NEW_STATE", protocolIdentifier: 6 }));
  w.flush();
  const reader = new InputRowReader();
  const out: FlowInput[] = [];
  for (const f of frames) reader.read(f, (r) => out.push(r));
  assert.deepEqual(out, [{ tcpState: "NEW_STATE", protocolIdentifier: 6 }]);
});

Deno.test("input_rows: a string crosses once per ring, then as its id; the reader reuses it", () => {
  const a: FlowInput = { sourcePodName: "pod-a", sourcePodNamespace: "ns" };
  const b: FlowInput = { sourcePodName: "pod-a", sourcePodNamespace: "ns", tcpState: "ns" };
  const { out, frames, writer, reader } = roundTrip([a, b, { ...a }], { maxRecords: 1 });
  assert.deepEqual(out, [a, b, a]);
  assert.equal(writer.stats.strings, 2);
  assert.equal(reader.dictionarySize, 3, "the two strings and the predefined empty one");
  assert.equal(frames.length, 3);
  assert.ok(frames[2].length < frames[0].length, "the second use of a string carries no bytes");
  assert.equal(frames[1].length, frames[2].length + 4, "b is a and one more id");
});

Deno.test("input_rows: the empty string is predefined: it never crosses as a definition", () => {
  const r: FlowInput = { sourcePodName: "", tcpState: "", egressIP: "" };
  const { out, writer } = roundTrip([r, r]);
  assert.deepEqual(out, [r, r]);
  assert.equal(writer.stats.strings, 0);
});

Deno.test("input_rows: a full dictionary is reset and the stream still round-trips", () => {
  const strings = INPUT_FIELDS.filter((f) => f.kind === "string").map((f) => f.name);
  const records: FlowInput[] = [];
  for (let i = 0; i < 200; i++) {
    const r: Record<string, unknown> = { protocolIdentifier: i & 255 };
    // Most fields take one of a few values, one field a new value per record.
    strings.forEach((n, k) => r[n] = k === 0 ? `unique-${i}` : k === 1 ? "" : `v${(i + k) % 3}`);
    records.push(r as FlowInput);
  }
  const small = roundTrip(records, { maxStrings: strings.length + 4, maxRecords: 7 });
  assert.deepEqual(small.out, records);
  assert.ok(small.writer.stats.resets > 10, `resets ${small.writer.stats.resets}`);
  assert.ok(small.reader.dictionarySize <= strings.length + 4);
  const bytes = roundTrip(records, { maxStringBytes: 100 });
  assert.deepEqual(bytes.out, records);
  assert.ok(bytes.writer.stats.resets > 5, `resets ${bytes.writer.stats.resets}`);
  const big = roundTrip(records);
  assert.equal(big.writer.stats.resets, 0);
  assert.equal(big.reader.dictionarySize, 1 + 200 + 3);
  assert.throws(() => new InputRowWriter(() => true, { maxStrings: 3 }), /maxStrings 3/);
});

Deno.test("input_rows: frames are sent by record count and by size", () => {
  const r = fullV4();
  const byCount = roundTrip(new Array(25).fill(r), { maxRecords: 10 });
  assert.deepEqual(byCount.frames.map((f) => new DataView(f.buffer).getUint32(4, true)), [
    10,
    10,
    5,
  ]);
  const bySize = roundTrip(new Array(100).fill(r), { maxBytes: 1000 });
  assert.ok(bySize.frames.length > 10);
  for (const f of bySize.frames.slice(1)) assert.ok(f.length < 1200, `${f.length} bytes`);
  assert.equal(bySize.out.length, 100);
});

Deno.test("input_rows: a full sink keeps the frame; add refuses records until it is sent", () => {
  let open = false;
  const frames: Uint8Array[] = [];
  const w = new InputRowWriter((f) => {
    if (!open) return false;
    frames.push(f.slice());
    return true;
  }, { maxRecords: 2 });
  assert.ok(w.add({ sourcePodName: "a" }));
  assert.ok(w.add({ sourcePodName: "b" }), "the second record fills the frame; kept");
  assert.equal(w.pendingRecords, 2);
  assert.equal(w.add({ sourcePodName: "c" }), false);
  assert.equal(w.flush(), false);
  open = true;
  assert.ok(w.add({ sourcePodName: "c" }), "sends the full frame first");
  assert.ok(w.flush());
  const out: FlowInput[] = [];
  const reader = new InputRowReader();
  for (const f of frames) reader.read(f, (r) => out.push(r));
  assert.deepEqual(out.map((r) => r.sourcePodName), ["a", "b", "c"]);
});

Deno.test("input_rows: a discarded frame resets the dictionary for the next one", () => {
  const frames: Uint8Array[] = [];
  const w = new InputRowWriter((f) => {
    frames.push(f.slice());
    return true;
  });
  w.add({ sourcePodName: "a" });
  w.flush();
  w.add({ sourcePodName: "b", destinationPodName: "a" });
  assert.equal(w.discard(), 1);
  w.add({ sourcePodName: "b", destinationPodName: "a" });
  w.flush();
  assert.deepEqual(w.stats.discarded, 1);
  assert.deepEqual(w.stats.resets, 1);
  const reader = new InputRowReader();
  const out: FlowInput[] = [];
  for (const f of frames) reader.read(f, (r) => out.push(r));
  assert.deepEqual(out, [{ sourcePodName: "a" }, { sourcePodName: "b", destinationPodName: "a" }]);
});

Deno.test("input_rows: a lost frame is detected, not decoded into wrong strings", () => {
  const { frames } = roundTrip([{ sourcePodName: "a" }, { sourcePodName: "b" }, {
    sourcePodName: "b",
  }], { maxRecords: 1 });
  const reader = new InputRowReader();
  reader.read(frames[0], () => {});
  assert.throws(() => reader.read(frames[2], () => {}), /string id 2 was never defined/);
  const other = new InputRowReader();
  assert.throws(() => other.read(frames[1], () => {}), /string id 2 out of order \(expected 1\)/);
  assert.throws(() => other.read(new Uint8Array(16), () => {}), /not an input rows frame/);
});

Deno.test("input_rows: the realistic stream round-trips equal to its wire-number decode", () => {
  const records = decodeStream(realisticStream(2_000, 3));
  assert.ok(records.length > 5_000, `${records.length} records`);
  // The stream has what the rows must carry: IPv6, ClusterIPs, counters, policies.
  assert.ok(records.some((r) => r.sourceIPv6Address !== undefined));
  assert.ok(
    records.some((r) =>
      typeof r.destinationClusterIPv4 === "number" && r.destinationClusterIPv4 > 0
    ),
  );
  const { out, writer } = roundTrip(records);
  assert.deepEqual(out, records);
  assert.ok(writer.stats.frames > 10);
  // Smaller dictionary and frames: many resets, same records.
  const small = roundTrip(records, { maxStrings: 64, maxRecords: 50 });
  assert.ok(small.writer.stats.resets > 0);
  assert.deepEqual(small.out, records);
});

Deno.test("input_rows: through a ring, the writer is refused when the ring is full", () => {
  const records = decodeStream(realisticStream(500, 2));
  const sab = createRing(16_384);
  const ring = new RingWriter(sab);
  const ringReader = new RingReader(sab);
  const w = new InputRowWriter(ring, { maxRecords: 32 });
  const reader = new InputRowReader();
  const out: FlowInput[] = [];
  let refused = 0;
  const drain = (): void => {
    for (let f = ringReader.next(); f !== undefined; f = ringReader.next()) {
      reader.read(f, (r) => out.push(r));
      ringReader.release();
    }
  };
  for (const r of records) {
    while (!w.add(r)) {
      refused++;
      drain();
    }
  }
  while (!w.flush()) drain();
  drain();
  assert.ok(refused > 0, "the ring never filled");
  assert.deepEqual(out, records);
});

Deno.test("input_rows: a ring sink bounds the frame size", () => {
  const ring = new RingWriter(createRing(4096));
  assert.throws(
    () => new InputRowWriter(ring, { maxBytes: 4000 }),
    /maxBytes 4000 and a record do not fit in a frame of the ring \(at most 4088 bytes\)/,
  );
  const w = new InputRowWriter(ring);
  for (let i = 0; i < 100; i++) w.add({ sourcePodName: `pod-${i}`, octetDeltaCount: i });
  w.flush();
  assert.ok(w.stats.frames > 1, "frames of at most a quarter of the ring");
});

Deno.test("input_rows: a Worker decodes the realistic stream from a ring equal to the input", async () => {
  const records = decodeStream(realisticStream(2_000, 2));
  const sab = createRing(1 << 16);
  const worker = new Worker(new URL("./ring_peer_worker.ts", import.meta.url).href, {
    type: "module",
  });
  const got = new Promise<FlowInput[]>((resolve, reject) => {
    worker.onmessage = (e: MessageEvent<{ records?: FlowInput[]; error?: string }>) => {
      if (e.data.records !== undefined) resolve(e.data.records);
      else reject(new Error(`worker: ${e.data.error}`));
    };
    worker.onerror = (e) => {
      e.preventDefault();
      reject(new Error(`worker: ${e.message}`));
    };
  });
  try {
    const start: PeerStart = { role: "records", sab };
    worker.postMessage(start);
    const ring = new RingWriter(sab);
    const rows = new InputRowWriter(ring, { maxRecords: 64 });
    let waits = 0;
    for (const r of records) {
      while (!rows.add(r)) {
        waits++;
        assert.equal(await ring.waitForSpaceAsync(rows.pendingBytes, 10_000), "ready");
      }
    }
    while (!rows.flush()) await ring.waitForSpaceAsync(rows.pendingBytes, 10_000);
    ring.close();
    assert.deepEqual(await got, records);
    assert.ok(waits > 0, "the ring never filled");
  } finally {
    worker.terminate();
  }
});

Deno.test("input_rows: records of hundreds of shapes (any subset of fields) round-trip", () => {
  const rand = prng(9);
  const value = (kind: string, i: number): unknown => {
    switch (kind) {
      case "u8":
        return i & 255;
      case "u16":
        return i & 65535;
      case "u32":
        return 1_700_000_000 + i;
      case "u64":
        return i % 3 === 0 ? 2n ** 60n + BigInt(i) : i * 1000;
      case "ipv4":
        return (0x0a000000 + i) >>> 0;
      case "ipv6":
        return `fd00::${(i + 1).toString(16)}`;
      default:
        return i % 4 === 0 ? "" : `s${i % 50}`;
    }
  };
  const records: FlowInput[] = [];
  for (let i = 0; i < 600; i++) {
    const r: Record<string, unknown> = {};
    for (const f of INPUT_FIELDS) if (rand() < 0.5) r[f.name] = value(f.kind, i);
    records.push(r as FlowInput);
  }
  const { out } = roundTrip(records);
  assert.deepEqual(out, records);
});
