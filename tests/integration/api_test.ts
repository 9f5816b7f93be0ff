/**
 * End to end: the API of the real process (HTTPS, loopback token) and the CLI in the binary
 * (`flow-aggregator get flowrecords|recordmetrics`, `log-level`, `version`) against it, in each
 * output format, after an Agent sent records over TCP.
 */

import assert from "node:assert/strict";
import { parse as parseYaml } from "yaml";
import { FaProcess, flowLogConfig, MAIN_TS, runDeno } from "../_helpers/process.ts";
import { SimAgent } from "./helpers/agent.ts";
import { intraNodeRecord } from "./helpers/scenarios.ts";
import { caFileOf } from "../../src/api/mod.ts";
import { DEFAULT_WORKERS } from "../../src/cli_options.ts";
import parsePrometheus from "parse-prometheus-text-format";
import { generateApiCertificate } from "../../src/pki/mod.ts";

Deno.test("api e2e: the CLI reads flow records and metrics from the running process", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-api-e2e-" });
  const fa = await FaProcess.startWithConfig(
    dir,
    flowLogConfig(`${dir}/flows.log`, { activeTimeout: "60s", inactiveTimeout: "90s" }),
  );
  try {
    const port = await fa.collectorPort();
    const apiPort = await fa.apiPort();
    const tokenFile = fa.apiTokenFile!;
    assert.equal((await Deno.stat(tokenFile)).mode! & 0o777, 0o600, "token file is private");
    const agent = await SimAgent.connect("k8s-node-1", port, "tcp");
    await agent.sendTemplates();
    for (let i = 0; i < 3; i++) await agent.sendRecord(intraNodeRecord(47_000 + i));
    const server = `https://127.0.0.1:${apiPort}`;
    const cli = async (...args: string[]) => {
      const r = await runDeno([
        "run",
        "-A",
        MAIN_TS,
        ...args,
        "--server",
        server,
        "--token-file",
        tokenFile,
      ]);
      assert.equal(r.code, 0, r.stderr);
      return r.stdout;
    };
    // The records are held (60 s active timeout): poll until the third one is in.
    let records: Record<string, unknown>[] = [];
    for (let i = 0; i < 100 && records.length < 3; i++) {
      records = JSON.parse(await cli("get", "flowrecords", "-o", "json")) ?? [];
      if (records.length < 3) await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(records.length, 3);
    const filtered = JSON.parse(
      await cli(
        "get",
        "flowrecords",
        "--srcport",
        String(records[0].sourceTransportPort),
        "-o",
        "json",
      ),
    );
    assert.equal(filtered.length, 1);
    const table = await cli("get", "flowrecords");
    const lines = table.trim().split("\n");
    assert.match(
      lines[0],
      /^SRC_IP\s+DST_IP\s+SPORT\s+DPORT\s+PROTO\s+SRC_POD\s+DST_POD\s+SRC_NS\s+DST_NS\s+SERVICE$/,
    );
    assert.equal(lines.length, 4);
    const yaml = parseYaml(await cli("get", "flowrecords", "-o", "yaml"));
    assert.equal(yaml.length, 3);

    const metrics = JSON.parse(await cli("get", "recordmetrics", "-o", "json"));
    assert.equal(metrics.numRecordsReceived, 3);
    assert.equal(metrics.numFlows, 3);
    assert.equal(metrics.numConnToCollector, 1);
    assert.equal(metrics.withLogExporter, true);
    assert.match(await cli("get", "recordmetrics"), /^RECORDS-EXPORTED\s+RECORDS-RECEIVED\s+FLOWS/);
    assert.equal((await cli("log-level")).trim(), "0");
    assert.equal(await cli("log-level", "4"), "");
    assert.equal((await cli("log-level")).trim(), "4");
    assert.match(await cli("version"), /^flowAggregatorVersion: \d+\.\d+\.\d+/);

    // A wrong token gets 401 over the real socket; the CA next to the token verifies the server.
    const client = Deno.createHttpClient({
      caCerts: [await Deno.readTextFile(caFileOf(tokenFile))],
    });
    try {
      const r = await fetch(`${server}/recordmetrics`, {
        headers: { authorization: "Bearer nope" },
        client,
      });
      assert.equal(r.status, 401);
      await r.body?.cancel();
      const metricsText = await (await fetch(`${server}/metrics`, {
        headers: { authorization: `Bearer ${await Deno.readTextFile(tokenFile)}` },
        client,
      })).text();
      assert.match(metricsText, /^flow_aggregator_ledger_records\{stage="received"\} 3$/m);
      // Each thread's V8 memory: the main thread's, every shard worker's (one per core by
      // default), the flow log's worker's (its last counters came with its acknowledgements).
      const heap = (parsePrometheus(metricsText) as {
        name: string;
        metrics: { value: string; labels: Record<string, string> }[];
      }[]).find((f) => f.name === "flow_aggregator_thread_heap_used_bytes")?.metrics ?? [];
      const threads = heap.map((m) => m.labels.thread).sort();
      const shards = DEFAULT_WORKERS > 1
        ? Array.from({ length: DEFAULT_WORKERS }, (_, i) => `shard${i}`)
        : [];
      assert.deepEqual(threads, ["flowLogger", "main", ...shards].sort());
      // A worker's heap holds at least its modules; each thread's is its own figure.
      for (const m of heap) assert.ok(Number(m.value) > 1e6, `${m.labels.thread}: ${m.value}`);
    } finally {
      client.close();
    }
    agent.close();
    assert.equal((await fa.stop("SIGTERM")).code, 0, fa.stderr);
  } finally {
    fa.kill("SIGKILL");
    await fa.status;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("api e2e: the CLI says clearly when no process answers", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/token`, "t");
    await Deno.writeTextFile(`${dir}/api-ca.crt`, (await generateApiCertificate()).caPem);
    const r = await runDeno([
      "run",
      "-A",
      MAIN_TS,
      "get",
      "recordmetrics",
      "--server",
      "https://127.0.0.1:1",
      "--token-file",
      `${dir}/token`,
    ]);
    assert.equal(r.code, 1);
    assert.match(
      r.stderr,
      /cannot reach the flow aggregator API at https:\/\/127\.0\.0\.1:1 \(certificate checked against .*api-ca\.crt\): \S/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("api e2e: an unknown apiServer.tlsCipherSuites name is fatal at start, as upstream", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-api-e2e-" });
  const fa = await FaProcess.startWithConfig(
    dir,
    flowLogConfig(`${dir}/flows.log`) + "apiServer:\n  tlsCipherSuites: NOT_A_CIPHER\n",
  );
  try {
    const status = await fa.waitExit();
    assert.equal(status.code, 255);
    assert.match(
      fa.stderr,
      /error generating Cipher Suite list: unknown cipher name \\"NOT_A_CIPHER\\"/,
    );
  } finally {
    fa.kill("SIGKILL");
    await fa.status;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("api e2e: /metrics keeps the ledger identities after drops in every stage", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-api-ledger-" });
  // maxFlows 2: the third flow's records are rejected; the IPFIX sink's collector is down
  // (nothing listens on port 1): its records are dropped or held, and counted.
  const fa = await FaProcess.startWithConfig(
    dir,
    flowLogConfig(`${dir}/logs/flows.log`) + "limits:\n  maxFlows: 2\n" +
      "flowCollector:\n  enable: true\n  address: 127.0.0.1:1:tcp\n",
  );
  try {
    const port = await fa.collectorPort();
    const apiPort = await fa.apiPort();
    const udp = await SimAgent.connect("k8s-node-2", port, "tcp");
    // A data record before any template: a template miss, not a received record.
    await udp.sendRecord(intraNodeRecord(47_100));
    const agent = await SimAgent.connect("k8s-node-1", port, "tcp");
    await agent.sendTemplates();
    for (let i = 0; i < 5; i++) await agent.sendRecord(intraNodeRecord(47_200 + i));
    const tokenFile = fa.apiTokenFile!;
    const client = Deno.createHttpClient({
      caCerts: [await Deno.readTextFile(caFileOf(tokenFile))],
    });
    const headers = { authorization: `Bearer ${await Deno.readTextFile(tokenFile)}` };
    const scrape = async () => {
      const text = await (await fetch(`https://127.0.0.1:${apiPort}/metrics`, { headers, client }))
        .text();
      const families = parsePrometheus(text) as {
        name: string;
        metrics: { value: string; labels?: Record<string, string> }[];
      }[];
      return (name: string, labels: Record<string, string> = {}) =>
        Number(
          families.find((f) => f.name === name)?.metrics.find((m) =>
            Object.entries(labels).every(([k, v]) => m.labels?.[k] === v)
          )?.value ?? NaN,
        );
    };
    try {
      let value = await scrape();
      const settled = () =>
        value("flow_aggregator_ledger_records", { stage: "received" }) >= 5 &&
        value("flow_aggregator_sink_received", { sink: "flowCollector" }) >= 2;
      for (let i = 0; i < 100 && !settled(); i++) {
        await new Promise((r) => setTimeout(r, 100));
        value = await scrape();
      }
      const stage = (s: string) => value("flow_aggregator_ledger_records", { stage: s });
      assert.equal(stage("received"), 5);
      assert.equal(stage("rejected"), 3, "maxFlows 2: three records of new flows rejected");
      assert.equal(
        stage("received"),
        stage("aggregated") + stage("rejected") + stage("non_flow") + stage("options") +
          stage("in_flight"),
      );
      assert.ok(value("flow_aggregator_template_misses") >= 1, "the early record is counted");
      assert.ok(value("flow_aggregator_template_miss_bytes") > 0, "with the bytes of its set");
      for (const section of ["flowLogger", "flowCollector"]) {
        const sink = (k: string) => value(`flow_aggregator_sink_${k}`, { sink: section }) || 0;
        assert.ok(sink("received") >= 2, section);
        assert.equal(
          sink("received"),
          sink("exported") + sink("dropped") + sink("buffered") + sink("filtered"),
          section,
        );
      }
      const down = (k: string) => value(`flow_aggregator_sink_${k}`, { sink: "flowCollector" });
      assert.equal(down("exported"), 0, "nothing reached a collector that is down");
      // The API port's own counters: this scrape's connection is open, nothing refused.
      assert.ok(value("flow_aggregator_api_connections") >= 1);
      assert.equal(value("flow_aggregator_api_connections_refused"), 0);
      // And by the bound (the unlabelled series is their sum).
      const byLimit = (k: string, limit: string) =>
        value(`flow_aggregator_api_${k}_by_limit`, { limit });
      assert.equal(byLimit("connections_refused", "maxApiConnectionsPerAddress"), 0);
      assert.equal(byLimit("connections_timed_out", "apiRequestTimeout"), 0);
      assert.equal(byLimit("refused_busy", "pendingResponseBytes"), 0);
      assert.ok(value("process_resident_memory_bytes") > 20e6);
    } finally {
      client.close();
    }
    agent.close();
    udp.close();
    assert.equal((await fa.stop("SIGTERM")).code, 0, fa.stderr);
  } finally {
    fa.kill("SIGKILL");
    await fa.status;
    await Deno.remove(dir, { recursive: true });
  }
});
