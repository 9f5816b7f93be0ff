/**
 * The configuration files operators already have: Antrea v1.13's stock `flow-aggregator.conf`
 * exactly as its Helm chart renders it (every key, `maxRecordsPerFile` as `1e+06`, every sink
 * off) and a newer chart's, with keys v1.13 never had. Both load; what differs from upstream
 * is reported as warnings (control-plane.md §1, §8 L2/L21).
 */

import assert from "node:assert/strict";
import type { ConfigWarning } from "../../src/config/mod.ts";
import { type FlowAggregatorConfig, parseConfig } from "../../src/components.ts";
import { NEWER_CHART_CONF, NO_SINK_WARNING, STOCK_V113_CONF } from "../_helpers/stock_config.ts";

function load(path: string): { config: FlowAggregatorConfig; warnings: ConfigWarning[] } {
  const warnings: ConfigWarning[] = [];
  const config = parseConfig(Deno.readTextFileSync(path), {
    tmpDir: "/tmp",
    onWarning: (w) => warnings.push(w),
  });
  return { config, warnings };
}

Deno.test("stock v1.13 config: loads with every key as Helm renders it", () => {
  const { config, warnings } = load(STOCK_V113_CONF);
  assert.equal(config.s3Uploader.maxRecordsPerFile, 1_000_000, "1e+06");
  assert.equal(config.aggregatorTransportProtocol, "TLS");
  assert.equal(config.activeFlowRecordTimeoutMs, 60_000);
  assert.equal(config.inactiveFlowRecordTimeoutMs, 90_000);
  assert.equal(config.apiServer.apiPort, 10348);
  assert.equal(config.flowCollector.observationDomainID, undefined, "commented out");
  assert.equal(config.clickHouse.commitIntervalMs, 8000);
  assert.equal(config.s3Uploader.region, "us-west-2");
  assert.equal(config.flowLogger.path, "/tmp/antrea-flows.log");
  assert.equal(config.flowLogger.maxBackups, 3);
  assert.deepEqual(config.flowLogger.filters, []);
  // Every sink is off in the stock file: upstream v1.13 refused to start on it.
  assert.deepEqual(
    [config.flowCollector, config.clickHouse, config.s3Uploader, config.flowLogger].map((s) =>
      s.enable
    ),
    [false, false, false, false],
  );
  assert.equal(warnings.length, 1, JSON.stringify(warnings));
  assert.match(warnings[0].message, NO_SINK_WARNING);
});

Deno.test("newer chart config: unknown keys are warned with their path, the rest loads", () => {
  const { config, warnings } = load(NEWER_CHART_CONF);
  assert.equal(config.flowCollector.observationDomainID, 1_200_000, "1.2e+06");
  assert.equal(config.s3Uploader.maxRecordsPerFile, 1_000_000);
  // Newer Antrea's UDP template refresh key is ours too (its default there is 600 s, ours 60 s).
  assert.equal(config.flowCollector.templateRefreshTimeoutMs, 600_000);
  const paths = warnings.map((w) => w.path);
  assert.ok(!paths.includes("flowCollector.templateRefreshTimeout"));
  for (
    const key of [
      "mode",
      "recordBufferSize",
      "flowStreamService",
      "flowCollector.maxIPFIXMsgSize",
      "flowCollector.tls",
      "flowCollector.includeK8sNames",
      "flowCollector.includeK8sUIDs",
    ]
  ) {
    assert.ok(paths.includes(key), `${key} warned: ${paths.join(", ")}`);
  }
  const mode = warnings.find((w) => w.path === "mode");
  assert.equal(mode?.message, "config: line 4: mode: unknown key, ignored");
  assert.match(warnings.at(-1)?.message ?? "", NO_SINK_WARNING);
});
