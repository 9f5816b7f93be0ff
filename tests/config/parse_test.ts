import assert from "node:assert/strict";
import { MAX_TABLE_SLOTS } from "../../src/aggregation/flow_table.ts";
import {
  ConfigError,
  type ConfigWarning,
  DECODE_ERROR_PREFIX,
  EMBEDDED_DEFAULT_CONFIG,
} from "../../src/config/mod.ts";
import { type FlowAggregatorConfig, parseConfig } from "../../src/components.ts";
import { flowLogComponent } from "../../src/exporters/flow_log/component.ts";
import { enabledFlowLogger } from "../_helpers/flow_logger_config.ts";
import { prng } from "../_helpers/prng.ts";
import { inWorker } from "../_helpers/config_worker.ts";

const MIN = "flowLogger:\n  enable: true\n";

function parse(text: string, warnings: ConfigWarning[] = []): FlowAggregatorConfig {
  return parseConfig(text, { tmpDir: "/tmp/x", onWarning: (w) => warnings.push(w) });
}

/** Parses `text` and returns its warnings' messages. */
function warningsOf(text: string): string[] {
  const warnings: ConfigWarning[] = [];
  parse(text, warnings);
  return warnings.map((w) => w.message);
}

function assertError(text: string, message: string | RegExp, path?: string): void {
  assert.throws(() => parse(text), (e: unknown) => {
    assert.ok(e instanceof ConfigError, String(e));
    if (typeof message === "string") assert.equal(e.message, message);
    else assert.match(e.message, message);
    if (path !== undefined) assert.equal(e.path, path);
    return true;
  });
}

Deno.test("every key gets its v1.13 default", () => {
  const expected: FlowAggregatorConfig = {
    activeFlowRecordTimeout: "60s",
    activeFlowRecordTimeoutMs: 60_000,
    inactiveFlowRecordTimeout: "90s",
    inactiveFlowRecordTimeoutMs: 90_000,
    aggregatorTransportProtocol: "TLS",
    flowAggregatorAddress: "",
    clusterID: "",
    recordContents: { podLabels: false },
    apiServer: { apiPort: 10348, tlsCipherSuites: "", tlsMinVersion: "" },
    limits: {
      maxFieldsPerTemplate: 1024,
      maxTemplatesPerSession: 1024,
      maxTemplates: 65_536,
      maxTemplateLayoutFields: 65_536,
      maxStringBytes: 4096,
      maxFlows: 1_000_000,
      maxFlowBytes: 1_073_741_824,
      maxConnections: 4096,
      maxConnectionsPerAddress: 16,
      maxReadBufferBytes: 67_108_864,
      readTimeout: "30s",
      readTimeoutMs: 30_000,
      idleTimeout: "5m",
      idleTimeoutMs: 300_000,
      maxTlsHandshakes: 128,
      tlsHandshakeTimeout: "10s",
      tlsHandshakeTimeoutMs: 10_000,
      maxUdpSessions: 65_536,
      maxPods: 200_000,
      maxPodLabelBytes: 16_384,
      maxApiConnections: 256,
      maxApiConnectionsPerAddress: 32,
      apiRequestTimeout: "10s",
      apiRequestTimeoutMs: 10_000,
      apiIdleTimeout: "2m",
      apiIdleTimeoutMs: 120_000,
    },
    flowCollector: {
      enable: false,
      address: "",
      recordFormat: "IPFIX",
      idleSessionTimeout: "0s",
      idleSessionTimeoutMs: 0,
      templateRefreshTimeout: "60s",
      templateRefreshTimeoutMs: 60_000,
    },
    clickHouse: {
      enable: false,
      database: "default",
      databaseURL: "tcp://clickhouse-clickhouse.flow-visibility.svc:9000",
      debug: false,
      compress: true,
      commitInterval: "8s",
      commitIntervalMs: 8000,
      tls: { insecureSkipVerify: false, caCert: false },
      spool: { dir: "/tmp/x/flow-aggregator-spool/clickhouse", maxBytes: 1_073_741_824 },
    },
    s3Uploader: {
      enable: false,
      bucketName: "",
      bucketPrefix: "",
      region: "",
      endpoint: "",
      recordFormat: "CSV",
      compress: true,
      gzipLevel: 3,
      maxRecordsPerFile: 1_000_000,
      uploadInterval: "60s",
      uploadIntervalMs: 60_000,
      spool: { dir: "/tmp/x/flow-aggregator-spool/s3", maxBytes: 1_073_741_824 },
    },
    // MIN enables the logger; every other key at its §5.1 default, the path in tmpDir.
    flowLogger: enabledFlowLogger("/tmp/x/antrea-flows.log"),
  };
  assert.deepEqual(parse(MIN), expected);
});

Deno.test('unset values ("", 0, null) take defaults, maxBackups 0 included (upstream: 3)', () => {
  const cfg = parse(`
activeFlowRecordTimeout: ""
aggregatorTransportProtocol:
apiServer:
  apiPort: 0
s3Uploader:
  maxRecordsPerFile: 0
flowLogger:
  enable: true
  path: ""
  maxSize: 0
  maxBackups: 0
  compress: ~
  prettyPrint: null
`);
  assert.equal(cfg.activeFlowRecordTimeout, "60s");
  assert.equal(cfg.aggregatorTransportProtocol, "TLS");
  assert.equal(cfg.apiServer.apiPort, 10348);
  assert.equal(cfg.s3Uploader.maxRecordsPerFile, 1_000_000);
  assert.equal(cfg.flowLogger.path, "/tmp/x/antrea-flows.log");
  assert.equal(cfg.flowLogger.maxSize, 100);
  assert.equal(cfg.flowLogger.maxBackups, 3);
  assert.equal(cfg.flowLogger.compress, true);
  assert.equal(cfg.flowLogger.prettyPrint, true);
});

Deno.test("the annotated example of §1.7 parses with every key", () => {
  const cfg = parse(`
activeFlowRecordTimeout: 3.5s
inactiveFlowRecordTimeout: 1h30m
aggregatorTransportProtocol: tcp
flowAggregatorAddress: 10.0.0.1
recordContents:
  podLabels: yes
apiServer:
  apiPort: 10_349
  tlsCipherSuites: "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
  tlsMinVersion: VersionTLS12
flowCollector:
  enable: true
  address: "[::1]:4739:tcp"
  observationDomainID: 0
  recordFormat: JSON
  idleSessionTimeout: 1m30s
  templateRefreshTimeout: 2m
clickHouse:
  enable: On
  database: flows
  databaseURL: "tls://ch:9440"
  debug: false
  compress: false
  commitInterval: 1s
  tls:
    insecureSkipVerify: true
    caCert: true
s3Uploader:
  enable: true
  bucketName: my-flows
  bucketPrefix: cluster-a
  region: us-west-2
  recordFormat: CSV
  compress: false
  maxRecordsPerFile: 10
  uploadInterval: 2m
flowLogger:
  enable: true
  path: /var/log/flows.csv
  maxSize: 5
  maxBackups: 7
  maxAge: 2
  compress: false
  recordFormat: CSV
  filters:
    - ingressNetworkPolicyRuleActions: [Drop, Reject]
    - egressNetworkPolicyRuleActions: [Drop, Bogus]
  prettyPrint: false
`);
  assert.equal(cfg.activeFlowRecordTimeoutMs, 3500);
  assert.equal(cfg.inactiveFlowRecordTimeoutMs, 5_400_000);
  assert.equal(cfg.aggregatorTransportProtocol, "TCP");
  assert.equal(cfg.flowAggregatorAddress, "10.0.0.1");
  assert.equal(cfg.recordContents.podLabels, true);
  assert.equal(cfg.apiServer.apiPort, 10349);
  assert.deepEqual(cfg.flowCollector.collector, {
    host: "::1",
    port: 4739,
    proto: "tcp",
    hostPort: "[::1]:4739",
  });
  assert.equal(cfg.flowCollector.observationDomainID, 0);
  assert.equal(cfg.flowCollector.recordFormat, "JSON");
  assert.equal(cfg.flowCollector.idleSessionTimeoutMs, 90_000);
  assert.equal(cfg.flowCollector.templateRefreshTimeoutMs, 120_000);
  assert.equal(cfg.clickHouse.enable, true);
  assert.equal(cfg.clickHouse.compress, false);
  assert.equal(cfg.clickHouse.commitIntervalMs, 1000);
  assert.deepEqual(cfg.clickHouse.tls, { insecureSkipVerify: true, caCert: true });
  assert.equal(cfg.s3Uploader.uploadIntervalMs, 120_000);
  assert.equal(cfg.s3Uploader.maxRecordsPerFile, 10);
  assert.deepEqual(cfg.flowLogger.filters, [
    { ingressNetworkPolicyRuleActions: ["Drop", "Reject"], egressNetworkPolicyRuleActions: [] },
    { ingressNetworkPolicyRuleActions: [], egressNetworkPolicyRuleActions: ["Drop", "Bogus"] },
  ]);
  assert.equal(cfg.flowLogger.prettyPrint, false);
  assert.equal(cfg.flowLogger.maxAge, 2);
});

Deno.test("unknown keys are ignored with a warning naming their path and line", () => {
  const warnings: ConfigWarning[] = [];
  const cfg = parse(
    "flowLogger:\n  enable: true\n  maxsize: 5\n" +
      "  filters:\n    - ingressNetworkPolicyRuleActions: [Drop]\n      direction: in\n" +
      "mode: Proxy\nclickHouse:\n  tls:\n    ca: [x, {y: 1}]\n",
    warnings,
  );
  assert.deepEqual(warnings, [
    {
      path: "flowLogger.maxsize",
      message: "config: line 3: flowLogger.maxsize: unknown key, ignored",
    },
    {
      path: "flowLogger.filters[0].direction",
      message: "config: line 6: flowLogger.filters[0].direction: unknown key, ignored",
    },
    { path: "mode", message: "config: line 7: mode: unknown key, ignored" },
    {
      path: "clickHouse.tls.ca",
      message: "config: line 10: clickHouse.tls.ca: unknown key, ignored",
    },
  ]);
  assert.equal(cfg.flowLogger.maxSize, 100);
  assert.deepEqual(cfg.flowLogger.filters, [
    { ingressNetworkPolicyRuleActions: ["Drop"], egressNetworkPolicyRuleActions: [] },
  ]);
  // Still strict about the keys we know.
  assertError(
    `${MIN}mode: Proxy\nflowCollector:\n  enable: 1\n`,
    /flowCollector\.enable: expected a bool/,
  );
});

Deno.test("a float for an integer key is taken (Helm renders 1000000 as 1e+06)", () => {
  const cfg = parse(
    `${MIN}  maxSize: 2.0e+2\ns3Uploader:\n  maxRecordsPerFile: 1e+06\n` +
      "flowCollector:\n  observationDomainID: 1.2e+06\napiServer:\n  apiPort: 1.0348e+04\n",
  );
  assert.equal(cfg.s3Uploader.maxRecordsPerFile, 1_000_000);
  assert.equal(cfg.flowCollector.observationDomainID, 1_200_000);
  assert.equal(cfg.flowLogger.maxSize, 200);
  assert.equal(cfg.apiServer.apiPort, 10348);
  assert.deepEqual(warningsOf(`${MIN}  maxSize: 1e+06\n`), [], "whole numbers: no warning");
});

Deno.test("a non-whole float for an integer key is truncated toward zero, with a warning", () => {
  const warnings: ConfigWarning[] = [];
  const cfg = parse(
    `${MIN}  maxSize: 1.9\n  maxAge: -0.5\napiServer:\n  apiPort: 4739.99\n`,
    warnings,
  );
  // yaml.v2 converts a float to an int field with Go's int64(f): toward zero.
  assert.equal(cfg.flowLogger.maxSize, 1);
  assert.equal(cfg.flowLogger.maxAge, 0);
  assert.ok(!Object.is(cfg.flowLogger.maxAge, -0));
  assert.equal(cfg.apiServer.apiPort, 4739);
  assert.deepEqual(warnings.map((w) => w.message), [
    "config: line 3: flowLogger.maxSize: 1.9 is not a whole number, truncated to 1",
    "config: line 4: flowLogger.maxAge: -0.5 is not a whole number, truncated to 0",
    "config: line 6: apiServer.apiPort: 4739.99 is not a whole number, truncated to 4739",
  ]);
  // Overflow is checked on the truncated value; infinities and quoted numbers stay errors.
  assertError(
    `${MIN}  maxSize: 2.2e+09\n`,
    /flowLogger\.maxSize: integer 2\.2e\+09 overflows int32/,
  );
  assertError(
    `${MIN}flowCollector:\n  observationDomainID: -1.5\n`,
    /observationDomainID: integer -1\.5 overflows uint32/,
  );
  assertError(
    `${MIN}  maxSize: .inf\n`,
    /flowLogger\.maxSize: expected an integer, got number Infinity/,
  );
  assertError(`${MIN}  maxSize: "1e+06"\n`, /flowLogger\.maxSize: expected an integer, got string/);
});

Deno.test("only the first document of a multi-document file is used", () => {
  const warnings: ConfigWarning[] = [];
  const cfg = parse(
    "---\nflowLogger:\n  enable: true\n  maxSize: 7\n---\nflowLogger: [broken\n---\nx: 1\n",
    warnings,
  );
  assert.equal(cfg.flowLogger.maxSize, 7);
  assert.deepEqual(warnings, [{
    path: "",
    message: "config: the file holds 3 YAML documents, only the first is used",
  }]);
  // A document that is itself broken still fails.
  assertError(
    "flowLogger: [x\n---\nflowLogger: {}\n",
    new RegExp(`^${DECODE_ERROR_PREFIX}line \\d+: Flow sequence`),
  );
});

Deno.test("wrongly typed scalars, duplicates and bad YAML are decode errors", () => {
  assertError(
    'flowLogger:\n  enable: "true"\n',
    `${DECODE_ERROR_PREFIX}line 2: flowLogger.enable: expected a bool, got string "true"`,
    "flowLogger.enable",
  );
  assertError(`${MIN}apiServer:\n  apiPort: "10348"\n`, /apiServer\.apiPort: expected an integer/);
  assertError(
    `${MIN}flowCollector:\n  observationDomainID: ""\n`,
    /flowCollector\.observationDomainID: expected an integer/,
  );
  assertError(
    `${MIN}flowCollector:\n  observationDomainID: 4294967296\n`,
    /observationDomainID: integer 4294967296 overflows uint32/,
  );
  assertError(`${MIN}  maxSize: 2147483648\n`, /flowLogger\.maxSize: integer .* overflows int32/);
  assertError(`${MIN}flowLogger:\n  enable: false\n`, /^failed to unmarshal .*line 3: .*unique/);
  assertError(`${MIN}clickHouse: [1, 2]\n`, /clickHouse: expected a mapping, got a list/);
  assertError(`${MIN}  filters: Drop\n`, /flowLogger\.filters: expected a list/);
  assertError("- a\n- b\n", /\(top level\): expected a mapping/);
  assertError("a: [\n", new RegExp(`^${DECODE_ERROR_PREFIX}`));
});

Deno.test("YAML 1.1 scalars: yes/off bools, plain numbers stay strings in string fields", () => {
  const cfg = parse("flowLogger:\n  enable: yes\n  compress: off\n  path: 0777\n");
  assert.equal(cfg.flowLogger.enable, true);
  assert.equal(cfg.flowLogger.compress, false);
  assert.equal(cfg.flowLogger.path, "0777");
  assertError(
    `${MIN}activeFlowRecordTimeout: 60\n`,
    'config: activeFlowRecordTimeout "60": not a duration (time: missing unit in duration "60")',
    "activeFlowRecordTimeout",
  );
});

Deno.test("an empty file and a file with no sink load, with a warning (upstream V3 refused them)", () => {
  for (const text of ["", "# nothing\n", "flowCollector:\n  enable: false\n"]) {
    const warnings: ConfigWarning[] = [];
    const cfg = parse(text, warnings);
    assert.equal(cfg.aggregatorTransportProtocol, "TLS");
    assert.deepEqual(warnings.map((w) => w.message), [
      "config: No collector / sink has been configured, so no flow data will be exported " +
      "(enable one of flowCollector, clickHouse, s3Uploader, flowLogger)",
    ]);
  }
  // Reported only for a file that is otherwise valid, after every other check.
  const warnings: ConfigWarning[] = [];
  assert.throws(() => parse("activeFlowRecordTimeout: 1x\n", warnings), /not a duration/);
  assert.deepEqual(warnings, []);
});

Deno.test("validation runs in the upstream order, first failure wins", () => {
  // V1 beats V3 and V4.
  assertError(
    "flowCollector:\n  enable: true\nactiveFlowRecordTimeout: 1x\n",
    "config: flowCollector.address: external flow collector enabled without providing address",
    "flowCollector.address",
  );
  // V2.
  assertError(
    "s3Uploader:\n  enable: true\n",
    "config: s3Uploader.bucketName: s3Uploader enabled without specifying bucket name",
  );
  // V4 before V5 and V6.
  assertError(
    `${MIN}activeFlowRecordTimeout: 1x\ninactiveFlowRecordTimeout: 2x\naggregatorTransportProtocol: sctp\n`,
    'config: activeFlowRecordTimeout "1x": not a duration (time: unknown unit "x" in duration "1x")',
  );
  assertError(
    `${MIN}inactiveFlowRecordTimeout: 2x\naggregatorTransportProtocol: sctp\n`,
    /^config: inactiveFlowRecordTimeout "2x": not a duration/,
  );
  assertError(
    `${MIN}aggregatorTransportProtocol: None\n`,
    "config: aggregatorTransportProtocol: collecting process over None proto is not supported",
  );
  // V7 before V8.
  assertError(
    `${MIN}flowCollector:\n  enable: true\n  address: 1.2.3.4:80:sctp\n  recordFormat: XML\n`,
    'config: flowCollector.address: "1.2.3.4:80:sctp": connection over sctp transport proto is not supported',
  );
  assertError(
    `${MIN}flowCollector:\n  enable: true\n  address: 1.2.3.4\n  recordFormat: json\n`,
    "config: flowCollector.recordFormat: record format json is not supported",
  );
  assertError(
    `${MIN}flowCollector:\n  enable: true\n  address: 1.2.3.4\n  idleSessionTimeout: soon\n`,
    /^config: flowCollector\.idleSessionTimeout "soon": not a duration/,
  );
  assertError(
    `${MIN}flowCollector:\n  enable: true\n  address: 1.2.3.4\n  idleSessionTimeout: -5s\n`,
    'config: flowCollector.idleSessionTimeout: "-5s": must not be negative (0s: never)',
    "flowCollector.idleSessionTimeout",
  );
  assertError(
    `${MIN}flowCollector:\n  enable: true\n  address: 1.2.3.4\n  templateRefreshTimeout: soon\n`,
    /^config: flowCollector\.templateRefreshTimeout "soon": not a duration/,
    "flowCollector.templateRefreshTimeout",
  );
  for (const text of ["0s", "500ms", "-1m"]) {
    assertError(
      `${MIN}flowCollector:\n  enable: true\n  address: 1.2.3.4\n  templateRefreshTimeout: ${text}\n`,
      `config: flowCollector.templateRefreshTimeout "${text}": templateRefreshTimeout ${text} ` +
        "is too small: shortest supported interval is 1s",
      "flowCollector.templateRefreshTimeout",
    );
  }
  assertError(
    `${MIN}clickHouse:\n  enable: true\n  commitInterval: 1x\n`,
    'config: clickHouse.commitInterval "1x": not a duration (time: unknown unit "x" in duration "1x")',
    "clickHouse.commitInterval",
  );
  assertError(
    `${MIN}clickHouse:\n  enable: true\n  commitInterval: 500ms\n`,
    'config: clickHouse.commitInterval "500ms": commitInterval 500ms is too small: shortest supported interval is 1s',
  );
  assertError(
    `${MIN}s3Uploader:\n  enable: true\n  bucketName: b\n  recordFormat: JSON\n  uploadInterval: 1x\n`,
    "config: s3Uploader.recordFormat: record format JSON is not supported",
  );
  assertError(
    `${MIN}s3Uploader:\n  enable: true\n  bucketName: b\n  uploadInterval: -1s\n`,
    /uploadInterval -1s is too small: shortest supported interval is 1s$/,
  );
  assertError(
    "flowLogger:\n  enable: true\n  recordFormat: JSON\n",
    "config: flowLogger.recordFormat: record format JSON is not supported",
  );
});

Deno.test("flow timeouts under 1 s (zero and negative included), which v1.13 ran with, load as 1 s with a warning", () => {
  const warnings: ConfigWarning[] = [];
  const cfg = parse(
    `${MIN}activeFlowRecordTimeout: -1s\ninactiveFlowRecordTimeout: 0s\n`,
    warnings,
  );
  assert.equal(cfg.activeFlowRecordTimeoutMs, 1000);
  assert.equal(cfg.inactiveFlowRecordTimeoutMs, 1000);
  assert.deepEqual(warnings.map((w) => [w.path, w.message]), [
    [
      "activeFlowRecordTimeout",
      'config: activeFlowRecordTimeout: "-1s" is under 1s (v1.13 took it and exported every ' +
      "flow at each expiry check): taken as 1s",
    ],
    [
      "inactiveFlowRecordTimeout",
      'config: inactiveFlowRecordTimeout: "0s" is under 1s (v1.13 took it and exported every ' +
      "flow at each expiry check): taken as 1s",
    ],
  ]);
  // A positive one below a second is no different: 1ns exported every flow at every expiry
  // check (each flow 99 times in 10 s, in the review), with no warning.
  for (const text of ["1ns", "300ms", "999ms"]) {
    const w: ConfigWarning[] = [];
    assert.equal(
      parse(`${MIN}activeFlowRecordTimeout: ${text}\n`, w).activeFlowRecordTimeoutMs,
      1000,
    );
    assert.equal(w.length, 1, text);
  }
  assert.equal(parse(`${MIN}activeFlowRecordTimeout: 1s\n`).activeFlowRecordTimeoutMs, 1000);
  assert.equal(parse(`${MIN}activeFlowRecordTimeout: 1500ms\n`).activeFlowRecordTimeoutMs, 1500);
});

Deno.test("durations longer than a timer can wait are capped at 2^31-1 ms (past it a timer fires at once)", () => {
  const cfg = parse(
    `${MIN}flowCollector:\n  enable: true\n  address: 127.0.0.1:4739:tcp\n` +
      `  idleSessionTimeout: 1000000h\n  templateRefreshTimeout: 1000000h\nclickHouse:\n  commitInterval: 1000000h\n` +
      `s3Uploader:\n  uploadInterval: 1000000h\nactiveFlowRecordTimeout: 1000000h\n` +
      `limits:\n  readTimeout: 1000000h\n`,
  );
  const max = 2 ** 31 - 1;
  assert.equal(cfg.flowCollector.idleSessionTimeoutMs, max);
  assert.equal(cfg.flowCollector.templateRefreshTimeoutMs, max);
  assert.equal(cfg.clickHouse.commitIntervalMs, max);
  assert.equal(cfg.s3Uploader.uploadIntervalMs, max);
  assert.equal(cfg.activeFlowRecordTimeoutMs, max);
  assert.equal(cfg.limits.readTimeoutMs, max);
  assert.equal(parse(`${MIN}activeFlowRecordTimeout: 24h\n`).activeFlowRecordTimeoutMs, 86_400_000);
});

Deno.test("other negative or out-of-range values are still rejected", () => {
  assertError(`${MIN}  maxAge: -1\n`, "config: flowLogger.maxAge: must not be negative, got -1");
  assertError(`${MIN}apiServer:\n  apiPort: 70000\n`, /apiServer\.apiPort: port 70000/);
});

Deno.test("sections that are disabled are not validated", () => {
  const cfg = parse(
    `${MIN}flowCollector:\n  address: 1.2.3.4:80:sctp\n  recordFormat: XML\nclickHouse:\n  commitInterval: 1x\n`,
  );
  assert.equal(cfg.flowCollector.collector, undefined);
  assert.equal(cfg.clickHouse.commitIntervalMs, 8000);
});

Deno.test("the embedded default config is valid: TCP, flow log to ./flows.log", () => {
  const cfg = parse(EMBEDDED_DEFAULT_CONFIG);
  assert.equal(cfg.aggregatorTransportProtocol, "TCP");
  assert.equal(cfg.flowLogger.enable, true);
  assert.equal(cfg.flowLogger.path, "./flows.log");
  assert.equal(cfg.flowCollector.enable || cfg.clickHouse.enable || cfg.s3Uploader.enable, false);
  assert.equal(cfg.activeFlowRecordTimeoutMs, 60_000);
});

Deno.test("re-marshalled shape (zero keys omitted, empty bucketName) is accepted", () => {
  const cfg = parse(
    "activeFlowRecordTimeout: 3.5s\ninactiveFlowRecordTimeout: 6s\n" +
      "flowCollector:\n  enable: true\n  address: 10.0.0.5:4739:tcp\n" +
      's3Uploader:\n  bucketName: ""\n',
  );
  assert.equal(cfg.flowCollector.collector?.hostPort, "10.0.0.5:4739");
  assert.equal(cfg.inactiveFlowRecordTimeoutMs, 6000);
});

Deno.test("garbage input only ever throws ConfigError", () => {
  const inputs = [
    "\u0000\u0001",
    "---\n...\n---\n",
    "&a [*a]",
    "? [x]\n: y\n",
    "1: 2\n",
    "flowLogger: &x\n  enable: true\n  filters: *x\n",
    "flowLogger:\n  enable: !!binary aGVsbG8=\n",
    "flowLogger:\n  enable: true\n  filters:\n    - [Drop]\n",
    "flowLogger:\n  enable: true\n  filters:\n    - ingressNetworkPolicyRuleActions: [[Drop]]\n",
    "x".repeat(10_000),
    "a:\n" + "  ".repeat(50) + "b: 1\n",
  ];
  const rand = prng(42);
  const alphabet = "ab:- \n[]{}&*!|>'\"#%@`,?0123456789.\t";
  for (let i = 0; i < 300; i++) {
    let s = "";
    const n = Math.floor(rand() * 60);
    for (let j = 0; j < n; j++) s += alphabet[Math.floor(rand() * alphabet.length)];
    inputs.push(s, MIN + s);
  }
  let rejected = 0;
  for (const text of inputs) {
    try {
      parse(text);
    } catch (e) {
      assert.ok(e instanceof ConfigError, `${JSON.stringify(text)}: ${e}`);
      rejected++;
    }
  }
  // Both outcomes occur: the generator is not trivially all-valid or all-broken.
  assert.ok(rejected > 0 && rejected < inputs.length, `${rejected} of ${inputs.length}`);
});

Deno.test("YAML anchors and aliases resolve like plain values", () => {
  const cfg = parse(
    "flowLogger:\n  enable: &on true\n  compress: *on\n  filters:\n" +
      "    - ingressNetworkPolicyRuleActions: &deny [Drop, Reject]\n" +
      "      egressNetworkPolicyRuleActions: *deny\n",
  );
  assert.equal(cfg.flowLogger.compress, true);
  assert.deepEqual(cfg.flowLogger.filters[0].egressNetworkPolicyRuleActions, ["Drop", "Reject"]);
});

Deno.test("YAML merge keys apply as yaml.v2 applies them: this mapping's keys first, then the first merged", () => {
  const warnings: ConfigWarning[] = [];
  const cfg = parse(
    "defaults: &log {enable: true, path: /tmp/a.log, maxSize: 7}\n" +
      "rotation: &rot {maxSize: 9, maxBackups: 4, compress: false}\n" +
      "flowLogger:\n  <<: [*log, *rot]\n  path: /tmp/b.log\n" +
      "limits:\n  <<: {maxFlows: 10}\n",
    warnings,
  );
  assert.equal(cfg.flowLogger.enable, true, "the sink merged in runs");
  assert.equal(cfg.flowLogger.path, "/tmp/b.log");
  assert.equal(cfg.flowLogger.maxSize, 7);
  assert.equal(cfg.flowLogger.maxBackups, 4);
  assert.equal(cfg.flowLogger.compress, false);
  assert.equal(cfg.limits.maxFlows, 10);
  // The anchors' own top-level keys are unknown keys, as before; nothing under flowLogger is.
  assert.deepEqual(warnings.map((w) => w.path), ["defaults", "rotation"]);
  assertError(`${MIN}limits:\n  <<: 5\n`, /limits\.<<: expected a mapping to merge, got number 5/);
});

Deno.test("limits: keys override their defaults; 0 means the default; bad values name the key", () => {
  const cfg = parse(MIN + "limits:\n  maxFlows: 10\n  readTimeout: 2s\n  maxTemplates: 0\n");
  assert.equal(cfg.limits.maxFlows, 10);
  assert.equal(cfg.limits.readTimeoutMs, 2000);
  assert.equal(cfg.limits.maxTemplates, 65_536);
  assertError(
    MIN + "limits:\n  maxFlows: -1\n",
    /limits\.maxFlows: must be positive/,
    "limits.maxFlows",
  );
  // A shard's flow table numbers its slots in 24 bits.
  assert.equal(
    parse(MIN + `limits:\n  maxFlows: ${MAX_TABLE_SLOTS}\n`).limits.maxFlows,
    MAX_TABLE_SLOTS,
  );
  assertError(
    MIN + `limits:\n  maxFlows: ${MAX_TABLE_SLOTS + 1}\n`,
    new RegExp(`limits\\.maxFlows: at most ${MAX_TABLE_SLOTS}, got ${MAX_TABLE_SLOTS + 1}`),
    "limits.maxFlows",
  );
  assertError(
    MIN + "limits:\n  idleTimeout: 5\n",
    /limits\.idleTimeout "5": not a duration/,
    "limits.idleTimeout",
  );
  assertError(
    MIN + "limits:\n  idleTimeout: -1s\n",
    /limits\.idleTimeout: "-1s": must be positive/,
  );
  assert.deepEqual(warningsOf(MIN + "limits:\n  maxFlow: 1\n"), [
    "config: line 4: limits.maxFlow: unknown key, ignored",
  ]);
});

Deno.test("s3Uploader.gzipLevel: 1 to 9, 0 or absent the default, anything else named", () => {
  assert.equal(parse(MIN).s3Uploader.gzipLevel, 3);
  assert.equal(parse(`${MIN}s3Uploader:\n  gzipLevel: 0\n`).s3Uploader.gzipLevel, 3);
  assert.equal(parse(`${MIN}s3Uploader:\n  gzipLevel: 1\n`).s3Uploader.gzipLevel, 1);
  for (const bad of ["10", "-1"]) {
    assertError(
      `${MIN}s3Uploader:\n  gzipLevel: ${bad}\n`,
      /must be 1 to 9/,
      "s3Uploader.gzipLevel",
    );
  }
});

Deno.test("a host or path that would widen or break a Deno permission grant is refused, naming its key", () => {
  const COMMA = /contains a comma, which Deno's permission lists cannot carry/;
  const WILDCARD = /a wildcard \(\*\) is not a host to connect to/;
  const cases: [string, RegExp, string][] = [
    // Before: --allow-write=…,/tmp/x,/etc,… (/etc writable) and the directory needed not granted.
    ['flowLogger:\n  enable: true\n  path: "/tmp/x,/etc/flows.log"\n', COMMA, "flowLogger.path"],
    // Before: --allow-net=127.0.0.1,localhost:8123 (every port of 127.0.0.1), then a crash.
    [
      'clickHouse:\n  enable: true\n  databaseURL: "tcp://127.0.0.1,localhost:9000"\n',
      COMMA,
      "clickHouse.databaseURL",
    ],
    [
      'clickHouse:\n  enable: true\n  databaseURL: "http://*:8123"\n',
      WILDCARD,
      "clickHouse.databaseURL",
    ],
    ['flowCollector:\n  enable: true\n  address: "a,b:4739:tcp"\n', COMMA, "flowCollector.address"],
    [
      'flowCollector:\n  enable: true\n  address: "*:4739:tcp"\n',
      WILDCARD,
      "flowCollector.address",
    ],
    // Before: --allow-read=/tmp/a, (an empty entry, which Deno refuses after the exec).
    ['clickHouse:\n  enable: true\n  spool:\n    dir: "/tmp/a,/"\n', COMMA, "clickHouse.spool.dir"],
    [
      's3Uploader:\n  enable: true\n  bucketName: b\n  spool:\n    dir: "/tmp/a,b"\n',
      COMMA,
      "s3Uploader.spool.dir",
    ],
    [
      's3Uploader:\n  enable: true\n  bucketName: b\n  endpoint: "http://a,b:9000"\n',
      COMMA,
      "s3Uploader.endpoint",
    ],
    [
      's3Uploader:\n  enable: true\n  bucketName: b\n  endpoint: "http://*.x:9000"\n',
      WILDCARD,
      "s3Uploader.endpoint",
    ],
  ];
  for (const [text, message, key] of cases) assertError(text, message, key);
  // A comma in the file's own name is no grant's business (its directory is granted).
  assert.equal(
    parse('flowLogger:\n  enable: true\n  path: "/tmp/a,b.log"\n').flowLogger.path,
    "/tmp/a,b.log",
  );
});

Deno.test("flowLogger.path naming a directory is refused; its directory is normalised", () => {
  // Before: "/tmp/" was taken, and its directory, `/`, granted read and write.
  for (const path of ["/tmp/", "/tmp/x/..", "/tmp/.", "logs/", "."]) {
    assertError(
      `flowLogger:\n  enable: true\n  path: "${path}"\n`,
      `config: flowLogger.path: ${JSON.stringify(path)} names a directory, not a file`,
      "flowLogger.path",
    );
  }
  const c = parse('flowLogger:\n  enable: true\n  path: "/tmp/x/../flows.log"\n').flowLogger;
  assert.deepEqual(flowLogComponent.permissions(c).write, ["/tmp"]);
  // Disabled, it is not checked (as upstream).
  parse(
    'flowLogger:\n  enable: false\n  path: "/tmp/"\nflowCollector:\n  enable: true\n  address: c:4739\n',
  );
});

// npm:yaml's duplicate-key check is quadratic in a mapping's keys: a config of 60,000 `kN: N`
// lines under `limits:` held the running aggregator's main thread 34 s at a reload.
Deno.test("a file of 60,000 keys parses in linear time, its unknown keys named 20 times at most", async () => {
  const keys = Array.from({ length: 60_000 }, (_, i) => `  k${i}: ${i}\n`).join("");
  // The bound is far above what the parse takes (well under a second) and below the old 34 s.
  // It applies to the parse as the worker timed it: the worker's start (its module checked
  // and loaded) took over 15 s of a busy machine once. The guard only stops a parse that hangs.
  const r = await inWorker({ op: "parse", text: `${MIN}limits:\n${keys}` }, 120_000);
  assert.notEqual(r, "timeout", "the parse took over 120 s");
  assert.ok(r !== "timeout" && r.ok, JSON.stringify(r));
  assert.ok(r.ms < 15_000, `the parse took ${r.ms} ms`);
  assert.equal(r.result, "21", "20 unknown keys named, then one line with the count");
  const w = warningsOf(`${MIN}limits:\n${keys.split("\n").slice(0, 30).join("\n")}\n`);
  assert.equal(w.length, 21, w.join("\n"));
  assert.match(w[0], /^config: line 4: limits\.k0: unknown key, ignored$/);
  assert.equal(
    w[20],
    "config: 10 more unknown keys, ignored (30 in all; only the first 20 are named)",
  );
});

Deno.test("duplicate keys are found at any depth, with npm:yaml's message; merge keys may repeat", () => {
  // The message of npm:yaml's own check, which found them before.
  assertError(
    `${MIN}flowLogger:\n  enable: false\n`,
    `${DECODE_ERROR_PREFIX}line 3: Map keys must be unique (at "flowLogger")`,
  );
  assertError(`${MIN}  enable: false\n`, /line 3: Map keys must be unique \(at "enable"\)/);
  // In a section the decoder ignores (a newer chart's), in a list, in a flow mapping.
  assertError(`${MIN}newer:\n  a: 1\n  a: 2\n`, /line 5: Map keys must be unique \(at "a"\)/);
  assertError(`${MIN}newer:\n  - {x: 1, x: 2}\n`, /line 4: Map keys must be unique/);
  // The first in the text is named.
  assertError(
    `${MIN}newer:\n  b: 1\n  b: 2\nclickHouse:\n  enable: false\n  enable: true\n`,
    /line 5: .*\(at "b"\)/,
  );
  // YAML 1.1 bools: `yes` and `true` are the same key.
  assertError(`${MIN}newer:\n  yes: 1\n  true: 2\n`, /line 5: Map keys must be unique/);
  const ok = parse("a: &a {enable: true}\nb: &b {path: /tmp/x}\nflowLogger:\n  <<: *a\n  <<: *b\n");
  assert.equal(ok.flowLogger.path, "/tmp/x");
});

// `? [a, b]` was warned about as ": unknown key" (an empty name).
Deno.test("a key that is a collection is ignored with a warning saying so", () => {
  assert.deepEqual(warningsOf(`? [a, b]\n: 1\n${MIN}`), [
    "config: line 1: (top level): a key that is a list, not a name: ignored",
  ]);
});
