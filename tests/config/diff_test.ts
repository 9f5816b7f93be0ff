import assert from "node:assert/strict";
import { configReloadTable, diffConfig, parseConfig } from "../../src/components.ts";
import { reloadTable } from "../../src/config/mod.ts";

const BASE = `
flowCollector:
  enable: true
  address: 10.0.0.1:4739:tcp
clickHouse:
  enable: false
flowLogger:
  enable: true
  path: /tmp/a.log
`;

function cfg(extra = "", base = BASE) {
  return parseConfig(base + extra, { tmpDir: "/tmp" });
}

Deno.test("every configuration key has the reload rule of the one table", () => {
  const rules = Object.fromEntries(
    Object.entries(configReloadTable()).map((
      [k, e],
    ) => [k, e.rebuilds.length ? `${e.rule}+rebuild:${e.rebuilds.join(",")}` : e.rule]),
  );
  assert.deepEqual(rules, {
    activeFlowRecordTimeout: "live",
    inactiveFlowRecordTimeout: "live",
    aggregatorTransportProtocol: "collector",
    flowAggregatorAddress: "collector",
    clusterID: "live+rebuild:flowCollector,clickHouse,s3Uploader",
    "recordContents.podLabels": "live+rebuild:flowCollector",
    "apiServer.apiPort": "restart",
    "apiServer.tlsCipherSuites": "restart",
    "apiServer.tlsMinVersion": "restart",
    "limits.maxFieldsPerTemplate": "collector",
    "limits.maxTemplatesPerSession": "collector",
    "limits.maxTemplates": "collector",
    "limits.maxTemplateLayoutFields": "collector",
    "limits.maxStringBytes": "collector",
    "limits.maxFlows": "live",
    "limits.maxFlowBytes": "live",
    "limits.maxConnections": "collector",
    "limits.maxConnectionsPerAddress": "collector",
    "limits.maxReadBufferBytes": "collector",
    "limits.readTimeout": "collector",
    "limits.idleTimeout": "collector",
    "limits.maxTlsHandshakes": "collector",
    "limits.tlsHandshakeTimeout": "collector",
    "limits.maxUdpSessions": "collector",
    "limits.maxPods": "restart",
    "limits.maxPodLabelBytes": "restart",
    "limits.maxApiConnections": "restart",
    "limits.maxApiConnectionsPerAddress": "restart",
    "limits.apiRequestTimeout": "restart",
    "limits.apiIdleTimeout": "restart",
    "flowCollector.enable": "toggle",
    "flowCollector.address": "rebuild",
    "flowCollector.observationDomainID": "rebuild",
    "flowCollector.recordFormat": "rebuild",
    "flowCollector.idleSessionTimeout": "rebuild",
    "flowCollector.templateRefreshTimeout": "rebuild",
    "clickHouse.enable": "toggle",
    "clickHouse.database": "live",
    "clickHouse.databaseURL": "rebuild",
    "clickHouse.debug": "live",
    "clickHouse.compress": "live",
    "clickHouse.commitInterval": "live",
    "clickHouse.tls.insecureSkipVerify": "live",
    "clickHouse.tls.caCert": "rebuild",
    "clickHouse.spool.dir": "rebuild",
    "clickHouse.spool.maxBytes": "rebuild",
    "s3Uploader.enable": "toggle",
    "s3Uploader.bucketName": "live",
    "s3Uploader.bucketPrefix": "live",
    "s3Uploader.region": "live",
    "s3Uploader.endpoint": "rebuild",
    "s3Uploader.recordFormat": "rebuild",
    "s3Uploader.compress": "live",
    "s3Uploader.gzipLevel": "live",
    "s3Uploader.maxRecordsPerFile": "live",
    "s3Uploader.uploadInterval": "live",
    "s3Uploader.spool.dir": "rebuild",
    "s3Uploader.spool.maxBytes": "rebuild",
    "flowLogger.enable": "toggle",
    "flowLogger.path": "rebuild",
    "flowLogger.maxSize": "live",
    "flowLogger.maxBackups": "live",
    "flowLogger.maxAge": "live",
    "flowLogger.compress": "live",
    "flowLogger.recordFormat": "live",
    "flowLogger.filters": "live",
    "flowLogger.prettyPrint": "live",
  });
});

Deno.test("the reload table refuses a live key or a dependency that does not exist", () => {
  const section = {
    key: "x",
    schema: { enable: "bool" as const, a: "str" as const },
    build: () => ({ enable: false }),
    reload: { live: ["b"] },
  };
  assert.throws(() => reloadTable([section]), /x: live key b is not in its schema/);
  assert.throws(
    () => reloadTable([{ ...section, reload: { live: [], dependsOn: ["nope.key"] } }]),
    /x depends on unknown key nope.key/,
  );
});

Deno.test("identical configs produce no change", () => {
  const d = diffConfig(cfg(), cfg());
  assert.equal(d.changed, false);
  assert.deepEqual(d.changedKeys, []);
  assert.deepEqual(d.restartRequired, []);
  assert.deepEqual(d.core, []);
  assert.equal(d.collector, false);
  assert.deepEqual(d.exporters, {
    flowCollector: "unchanged",
    clickHouse: "unchanged",
    s3Uploader: "unchanged",
    flowLogger: "unchanged",
  });
});

Deno.test("enable, disable and rebuild are reported per exporter", () => {
  const next = parseConfig(
    `
flowCollector:
  enable: true
  address: 10.0.0.2:4739:udp
clickHouse:
  enable: true
flowLogger:
  enable: false
  path: /tmp/a.log
`,
  );
  const d = diffConfig(cfg(), next);
  assert.equal(d.exporters.flowCollector, "rebuild");
  assert.equal(d.exporters.clickHouse, "enabled");
  assert.equal(d.exporters.flowLogger, "disabled");
  assert.equal(d.exporters.s3Uploader, "unchanged");
  assert.deepEqual(d.changedKeys, [
    "clickHouse.enable",
    "flowCollector.address",
    "flowLogger.enable",
  ]);
  assert.deepEqual(d.restartRequired, []);
});

Deno.test("a filter change is applied to the flow logger live; a new path rebuilds it", () => {
  const d = diffConfig(
    cfg(),
    cfg("  filters:\n    - ingressNetworkPolicyRuleActions: [Drop]\n"),
  );
  assert.deepEqual(d.changedKeys, ["flowLogger.filters"]);
  assert.equal(d.exporters.flowLogger, "live");
  const moved = diffConfig(cfg(), cfg("", BASE.replace("/tmp/a.log", "/var/log/b.log")));
  assert.equal(moved.exporters.flowLogger, "rebuild");
  const both = diffConfig(
    cfg(),
    cfg("  prettyPrint: false\n", BASE.replace("/tmp/a.log", "/var/log/b.log")),
  );
  assert.equal(both.exporters.flowLogger, "rebuild", "a rebuild key wins over live keys");
});

Deno.test("timeouts and Pod labels apply to the core live, the transport restarts the collector, apiServer needs a restart", () => {
  const d = diffConfig(
    cfg(),
    cfg(
      "activeFlowRecordTimeout: 30s\naggregatorTransportProtocol: udp\n" +
        "recordContents:\n  podLabels: true\napiServer:\n  apiPort: 10350\n",
    ),
  );
  assert.deepEqual(d.core, ["activeFlowRecordTimeout", "recordContents.podLabels"]);
  assert.equal(d.collector, true);
  assert.deepEqual(d.restartRequired, ["apiServer.apiPort"]);
  assert.equal(d.exporters.flowLogger, "unchanged");
  // The IPFIX templates carry the label fields or not: the labels switch rebuilds that sink.
  assert.equal(d.exporters.flowCollector, "rebuild");
});

Deno.test("changes inside a section that stays disabled affect no exporter", () => {
  const d = diffConfig(cfg(), cfg("s3Uploader:\n  bucketName: other\n"));
  assert.deepEqual(d.changedKeys, ["s3Uploader.bucketName"]);
  assert.equal(d.exporters.s3Uploader, "unchanged");
});

Deno.test("derived values (parsed durations, the parsed address) are not keys of their own", () => {
  const d = diffConfig(
    cfg(),
    cfg(
      "clickHouse:\n  commitInterval: 10s\n",
      BASE.replace(
        "clickHouse:\n  enable: false\n",
        "",
      ),
    ),
  );
  assert.deepEqual(d.changedKeys, ["clickHouse.commitInterval"]);
});
