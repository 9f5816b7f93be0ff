import assert from "node:assert/strict";
import { LogExporter } from "../../../src/exporters/flow_log/exporter.ts";
import {
  formatLogLine,
  LOG_LINE_FIELD_COUNT,
  LogFilter,
  policyTypeName,
  protocolName,
  ruleActionName,
} from "../../../src/exporters/flow_log/format.ts";
import { toFlatRecord } from "../../../src/exporters/flat_record.ts";
import { clean } from "../../../src/exporters/text.ts";
import { setLogWriter } from "../../../src/log.ts";
import { fixtureFlow } from "../fixtures.ts";
import { enabledFlowLogger } from "../../_helpers/flow_logger_config.ts";
import { DENO_JSON, runDeno } from "../../_helpers/process.ts";

const L1 = "1637706961,1637706973,10.10.0.79,10.10.0.80,44752,5201,6,perftest-a,antrea-test," +
  "k8s-node-control-plane,perftest-b,antrea-test-b,k8s-node-control-plane-b,10.10.1.10,5202," +
  "perftest,test-flow-aggregator-networkpolicy-ingress-allow,antrea-test-ns," +
  "test-flow-aggregator-networkpolicy-rule,2,1,test-flow-aggregator-networkpolicy-egress-allow," +
  "antrea-test-ns-e,test-flow-aggregator-networkpolicy-rule-e,5,4,test-egress,172.18.0.1";

async function readLines(path: string): Promise<string[]> {
  const text = await Deno.readTextFile(path);
  return text === "" ? [] : text.replace(/\n$/, "").split("\n");
}

Deno.test("L1: raw line of fixture F matches upstream field by field", () => {
  const line = formatLogLine(toFlatRecord(fixtureFlow()), false);
  assert.ok(line.endsWith("\n"));
  assert.equal(line, L1 + "\n");
  const fields = line.slice(0, -1).split(",");
  assert.equal(fields.length, LOG_LINE_FIELD_COUNT);
  assert.deepEqual(fields.slice(0, 7), [
    "1637706961",
    "1637706973",
    "10.10.0.79",
    "10.10.0.80",
    "44752",
    "5201",
    "6",
  ]);
  assert.equal(fields[13], "10.10.1.10");
  assert.equal(fields[26], "test-egress");
  assert.equal(fields[27], "172.18.0.1");
});

Deno.test("L2: pretty line changes only protocol, actions and policy types", () => {
  const raw = L1.split(",");
  const pretty = formatLogLine(toFlatRecord(fixtureFlow()), true).slice(0, -1).split(",");
  assert.equal(pretty.length, 28);
  const expected = [...raw];
  expected[6] = "TCP";
  expected[19] = "Drop";
  expected[20] = "K8sNetworkPolicy";
  expected[24] = "Invalid";
  expected[25] = "Invalid";
  assert.deepEqual(pretty, expected);
});

Deno.test("pretty names: protocols, action 0 and type 0 are empty, unknowns", () => {
  assert.deepEqual([1, 2, 6, 17, 58, 132, 99].map(protocolName), [
    "ICMP",
    "IGMP",
    "TCP",
    "UDP",
    "IPv6-ICMP",
    "SCTP",
    "Unknown Protocol",
  ]);
  assert.deepEqual([0, 1, 2, 3, 4].map(ruleActionName), ["", "Allow", "Drop", "Reject", "Invalid"]);
  assert.deepEqual([0, 1, 2, 3, 9].map(policyTypeName), [
    "",
    "K8sNetworkPolicy",
    "AntreaNetworkPolicy",
    "AntreaClusterNetworkPolicy",
    "Invalid",
  ]);
  const flat = toFlatRecord(fixtureFlow(false, {
    protocolIdentifier: 99,
    ingressNetworkPolicyRuleAction: 0,
    ingressNetworkPolicyType: 0,
  }));
  const f = formatLogLine(flat, true).slice(0, -1).split(",");
  assert.equal(f[6], "Unknown Protocol");
  assert.equal(f[19], "");
  assert.equal(f[20], "");
});

Deno.test("IPv6 fixture and hostile strings keep one 28-field line", () => {
  const line = formatLogLine(
    toFlatRecord(fixtureFlow(true, { sourcePodName: "a,b\nc", tcpState: "X" })),
    false,
  );
  assert.equal(line.split("\n").length, 2);
  const f = line.slice(0, -1).split(",");
  assert.equal(f.length, 28);
  assert.equal(f[2], "2001:0:3238:dfe1:63::fefb");
  assert.equal(f[3], "2001:0:3238:dfe1:63::fefc");
  assert.equal(f[13], "2001:0:3238:dfe1:64::a");
  assert.equal(f[7], "a b\\x0ac");
});

Deno.test("a Pod name with ESC[2J, NUL, newline and a C1 char is one 28-field line, escaped", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-log-" });
  const path = `${dir}/e.log`;
  const exp = new LogExporter(enabledFlowLogger(path, { prettyPrint: false }), {
    flushIntervalMs: 3_600_000,
  });
  try {
    await exp.start();
    exp.addRecord(fixtureFlow(false, { sourcePodName: "a\x1b[2Jb\x00c\nd\u009be" }));
    await exp.stop();
    const bytes = await Deno.readFile(path);
    // Nothing a terminal interprets: the only control byte is the line's own newline, and no
    // C1 control (UTF-8 C2 80..C2 9F) is written raw.
    const controls = [...bytes].filter((b) => b < 0x20 || b === 0x7f);
    assert.deepEqual(controls, [0x0a]);
    assert.equal(bytes.at(-1), 0x0a);
    const text = new TextDecoder().decode(bytes);
    assert.doesNotMatch(text, /[\u0080-\u009f]/);
    const f = text.slice(0, -1).split(",");
    assert.equal(f.length, LOG_LINE_FIELD_COUNT);
    assert.equal(f[7], "a\\x1b[2Jb\\x00c\\x0ad\\x9be");
    assert.deepEqual(f.slice(0, 7), L1.split(",").slice(0, 7));
    assert.deepEqual(f.slice(8), L1.split(",").slice(8));
    assert.equal(exp.stats().exported, 1);
  } finally {
    await exp.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("clean: control ranges, U+FFFD and backslash are escaped; everything else is kept", () => {
  // Normal names come back as the very same string.
  for (const s of ["perftest-a", "10.10.0.79", "2001:db8::1", "ns/svc:http", "", "é-名前"]) {
    assert.equal(clean(s), s);
  }
  // The edges of each range: U+001F/U+0020, U+007E/U+007F, U+009F/U+00A0.
  assert.equal(clean("\x1f \x7e\x7f\x80\x9f\xa0"), "\\x1f ~\\x7f\\x80\\x9f\xa0");
  assert.equal(clean("\t\r\n\x00"), "\\x09\\x0d\\x0a\\x00");
  // U+FFFD is what the decoder puts for invalid UTF-8 on the wire.
  assert.equal(clean("bad\ufffdutf8"), "bad\\ufffdutf8");
  // The escape character itself, so a literal "\x1b" in a name reads back as such.
  assert.equal(clean("a\\x1b"), "a\\\\x1b");
  assert.equal(clean("a,b"), "a b");
  // Line separators to JavaScript and Python readers, and the bidirectional controls.
  assert.equal(
    clean("a\u2028b\u2029c\u202ed\u200ee\u2066f\u2069g\u2027\u206a"),
    "a\\u2028b\\u2029c\\u202ed\\u200ee\\u2066f\\u2069g\u2027\u206a",
  );
});

Deno.test("L5: filters are OR of AND conditions; None matches no rule", () => {
  const rec = (inA: number, egA: number) =>
    toFlatRecord(fixtureFlow(false, {
      ingressNetworkPolicyRuleAction: inA,
      egressNetworkPolicyRuleAction: egA,
    }));
  const U = rec(0, 0), E = rec(0, 2), I = rec(3, 0), B = rec(1, 1);
  const f = (ing: string[], eg: string[]) => ({
    ingressNetworkPolicyRuleActions: ing,
    egressNetworkPolicyRuleActions: eg,
  });
  const table: [LogFilter, boolean[]][] = [
    [new LogFilter([]), [true, true, true, true]],
    [new LogFilter([f(["None"], ["None"])]), [true, false, false, false]],
    [new LogFilter([f(["Drop", "Reject"], []), f([], ["Drop", "Reject"])]), [
      false,
      true,
      true,
      false,
    ]],
    [new LogFilter([f(["None"], []), f([], ["None"])]), [true, true, true, false]],
    [new LogFilter([f(["Bogus"], [])]), [false, false, false, false]],
  ];
  for (const [filter, want] of table) {
    assert.deepEqual([U, E, I, B].map((r) => filter.matches(r)), want);
  }
});

Deno.test("exporter: filtered records are counted, not written", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-log-" });
  const exp = new LogExporter(
    enabledFlowLogger(`${dir}/f.log`, {
      filters: [{ ingressNetworkPolicyRuleActions: ["Allow"], egressNetworkPolicyRuleActions: [] }],
    }),
  );
  try {
    await exp.start();
    exp.addRecord(fixtureFlow()); // ingress Drop: filtered
    exp.addRecord(fixtureFlow(false, { ingressNetworkPolicyRuleAction: 1 }));
    await exp.stop();
    const lines = await readLines(`${dir}/f.log`);
    assert.equal(lines.length, 1);
    assert.equal(lines[0].split(",")[19], "Allow");
    assert.deepEqual(exp.stats(), {
      received: 2,
      exported: 1,
      dropped: 0,
      errors: 0,
      filtered: 1,
      rotations: 0,
      backupNameConflicts: 0,
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("L3: the flush timer writes buffered lines; stop returns promptly", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-log-" });
  const path = `${dir}/t.log`;
  const exp = new LogExporter(enabledFlowLogger(path, { prettyPrint: false }), {
    flushIntervalMs: 50,
  });
  try {
    await exp.start();
    exp.addRecord(fixtureFlow());
    // Below the 4 KiB buffer: nothing is on disk right after the write.
    assert.equal(await Deno.stat(path).then(() => true, () => false), false);
    const deadline = Date.now() + 1000;
    let lines: string[] = [];
    while (Date.now() < deadline) {
      lines = await readLines(path).catch(() => []);
      if (lines.length > 0) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.deepEqual(lines, [L1]);
    const t0 = performance.now();
    await exp.stop();
    // Nothing to wait for (no timer, one small flush): a bound far above that, below a hang.
    assert.ok(
      performance.now() - t0 < 10_000,
      `stop took ${Math.round(performance.now() - t0)} ms`,
    );
  } finally {
    await exp.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a full 4 KiB buffer is written without waiting for the timer", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-log-" });
  const path = `${dir}/b.log`;
  const exp = new LogExporter(enabledFlowLogger(path), { flushIntervalMs: 3_600_000 });
  try {
    await exp.start();
    for (let i = 0; i < 12; i++) exp.addRecord(fixtureFlow()); // ~5 KiB
    await exp.flush(); // waits for the size-triggered flush already queued
    assert.equal((await readLines(path)).length, 12);
    assert.equal(exp.stats().exported, 12);
  } finally {
    await exp.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("stop flushes and closes; records added before start are kept", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-log-" });
  const path = `${dir}/s.log`;
  const exp = new LogExporter(enabledFlowLogger(path), { flushIntervalMs: 3_600_000 });
  try {
    exp.addRecord(fixtureFlow());
    await exp.start();
    exp.addRecord(fixtureFlow());
    await exp.stop();
    assert.equal((await readLines(path)).length, 2);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("L4: update flushes to the old file and switches to the new one", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-log-" });
  const exp = new LogExporter(enabledFlowLogger(`${dir}/1.log`), { flushIntervalMs: 3_600_000 });
  try {
    await exp.start();
    exp.addRecord(fixtureFlow());
    await exp.update(enabledFlowLogger(`${dir}/2.log`, { prettyPrint: false }));
    assert.equal((await readLines(`${dir}/1.log`)).length, 1);
    exp.addRecord(fixtureFlow());
    await exp.stop();
    assert.equal((await readLines(`${dir}/1.log`)).length, 1);
    assert.deepEqual(await readLines(`${dir}/2.log`), [L1]);
    assert.equal(exp.config.path, `${dir}/2.log`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a bounded queue drops and counts records when the disk cannot keep up", () => {
  const restore = setLogWriter(() => {});
  try {
    const exp = new LogExporter(enabledFlowLogger("/nonexistent/never-written.log"), {
      maxPendingBytes: 1000,
      bufferBytes: 1 << 30,
    });
    for (let i = 0; i < 5; i++) exp.addRecord(fixtureFlow());
    const s = exp.stats();
    assert.equal(s.received, 5);
    assert.equal(s.dropped, 3);
  } finally {
    setLogWriter(restore);
  }
});

Deno.test("path '-' writes lines to standard output", async () => {
  const script = `
import { LogExporter } from "${
    new URL("../../../src/exporters/flow_log/exporter.ts", import.meta.url).href
  }";
import { fixtureFlow } from "${new URL("../fixtures.ts", import.meta.url).href}";
const exp = new LogExporter({ enable: true, path: "-", maxSize: 1, maxBackups: 1, maxAge: 0,
  compress: false, recordFormat: "CSV", filters: [], prettyPrint: false });
await exp.start();
exp.addRecord(fixtureFlow());
await exp.stop();
`;
  const dir = await Deno.makeTempDir({ prefix: "fa-log-" });
  try {
    await Deno.writeTextFile(`${dir}/run.ts`, script);
    const out = await runDeno(
      ["run", "--allow-all", "--no-check", `--config=${DENO_JSON}`, `${dir}/run.ts`],
    );
    assert.equal(out.code, 0, out.stderr);
    assert.equal(out.stdout, L1 + "\n");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("log exporter: a reload while records arrive closes the old file and loses nothing", async () => {
  // Deno's resource sanitizer fails this test if a file handle is left open.
  const dir = await Deno.makeTempDir();
  const a = `${dir}/a.log`;
  const b = `${dir}/b.log`;
  const e = new LogExporter(enabledFlowLogger(a), { bufferBytes: 1 }); // every record flushes
  await e.start();
  let added = 0;
  // Records keep arriving on every turn of the event loop while the reload closes the file.
  let stop = false;
  const pump = (async () => {
    while (!stop) {
      for (let i = 0; i < 20; i++) {
        e.addRecord(fixtureFlow());
        added++;
      }
      await new Promise((r) => setTimeout(r, 0));
    }
  })();
  await new Promise((r) => setTimeout(r, 20));
  await e.update(enabledFlowLogger(b));
  await new Promise((r) => setTimeout(r, 20));
  stop = true;
  await pump;
  await e.stop();
  const inA = (await readLines(a)).length;
  const inB = (await readLines(b)).length;
  assert.ok(inA > 0 && inB > 0, `lines in a ${inA}, in b ${inB}`);
  assert.equal(inA + inB, added);
  assert.equal(e.stats().exported, added);
  assert.equal(e.stats().dropped, 0);
  await Deno.remove(dir, { recursive: true });
});
