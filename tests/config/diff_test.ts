import assert from "node:assert/strict";
import { diffConfig, parseConfig } from "../../src/config/mod.ts";

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

Deno.test("identical configs produce no change", () => {
  const d = diffConfig(cfg(), cfg());
  assert.equal(d.changed, false);
  assert.deepEqual(d.changedKeys, []);
  assert.deepEqual(d.restartRequired, []);
  assert.deepEqual(d.exporters, {
    flowCollector: "unchanged",
    clickHouse: "unchanged",
    s3Uploader: "unchanged",
    flowLogger: "unchanged",
  });
});

Deno.test("enable, disable and update are reported per exporter", () => {
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
  assert.equal(d.exporters.flowCollector, "updated");
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

Deno.test("a filter change updates the flow logger", () => {
  const d = diffConfig(
    cfg(),
    cfg("  filters:\n    - ingressNetworkPolicyRuleActions: [Drop]\n"),
  );
  assert.deepEqual(d.changedKeys, ["flowLogger.filters"]);
  assert.equal(d.exporters.flowLogger, "updated");
});

Deno.test("top-level, recordContents and apiServer changes need a restart", () => {
  const d = diffConfig(
    cfg(),
    cfg(
      "activeFlowRecordTimeout: 30s\naggregatorTransportProtocol: udp\n" +
        "recordContents:\n  podLabels: true\napiServer:\n  apiPort: 10350\n",
    ),
  );
  assert.deepEqual(d.restartRequired, [
    "activeFlowRecordTimeout",
    "aggregatorTransportProtocol",
    "apiServer.apiPort",
    "recordContents.podLabels",
  ]);
  assert.equal(d.exporters.flowLogger, "unchanged");
});

Deno.test("changes inside a section that stays disabled affect no exporter", () => {
  const d = diffConfig(cfg(), cfg("s3Uploader:\n  bucketName: other\n"));
  assert.deepEqual(d.changedKeys, ["s3Uploader.bucketName"]);
  assert.equal(d.exporters.s3Uploader, "unchanged");
});
