/** Round trip through the real aggregation core (kept apart: the core evolves separately). */
import assert from "node:assert/strict";
import { exportTemplateFields, IpfixExporter } from "../../src/exporters/ipfix/exporter.ts";
import { AggregationCore, type ExportedFlow, type FlowInput } from "../../src/aggregation/mod.ts";
import { ManualClock } from "../../src/clock.ts";
import { setLogWriter } from "../../src/log.ts";
import { elementByName } from "../../src/ipfix/mod.ts";
import { waitFor } from "../_helpers/wait.ts";
import { decodingCollector, flowgenToAgentSide, type Received } from "./helpers/ipfix_export.ts";

setLogWriter(() => {});

Deno.test("round trip through the real aggregation core: exported snapshots decode identically", async () => {
  const clock = new ManualClock();
  const core = new AggregationCore({
    activeTimeoutMs: 60_000,
    inactiveTimeoutMs: 90_000,
    clock,
    includePodLabels: true,
  });
  const got: Received[] = [];
  const external = await decodingCollector("tcp", got);
  const exporter = new IpfixExporter({
    address: `127.0.0.1:${external.port}`,
    observationDomainId: 7,
    podLabels: true,
  });
  await exporter.start();
  let received = 0;
  const { agentSide, report } = await flowgenToAgentSide((r) => {
    core.addRecord(r as unknown as FlowInput);
    received++;
  }, {
    agents: 3,
    flows: 200,
    records: 2000,
    seed: 4,
  });
  await waitFor(() => received >= report.records, {
    timeoutMs: 10_000,
    what: "records at the core",
  });
  const emitted: ExportedFlow[] = [];
  core.flushAll((f) => {
    emitted.push(f);
    exporter.addRecord(f);
  });
  assert.ok(emitted.length > 100, `${emitted.length} aggregated flows`);
  await waitFor(() => got.length >= emitted.length, { timeoutMs: 10_000, what: "exported flows" });
  await exporter.stop();
  await agentSide.stop();
  await external.stop();
  assert.equal(got.length, emitted.length);
  // Order is kept within each family (the exporter may put IPv4 before IPv6 in a batch).
  const byFamily = (v6: boolean) => emitted.filter((f) => f.isIPv6 === v6);
  const inOrder = [...byFamily(false), ...byFamily(true)];
  got.sort((a, b) => a.templateId - b.templateId); // stable: keeps order within a family
  for (let i = 0; i < inOrder.length; i++) {
    const f = inOrder[i];
    const names = exportTemplateFields(f.isIPv6, true);
    assert.equal(got[i].templateId, f.isIPv6 ? 257 : 256);
    assert.deepEqual(Object.keys(got[i].record), names);
    const exp = f.record as unknown as Record<string, unknown>;
    for (const n of names) {
      // Absent IEs go out as the zero value of their type.
      const type = elementByName(n)?.type;
      const zero = type === "string"
        ? ""
        : type === "unsigned64"
        ? 0n
        : type === "ipv4Address"
        ? "0.0.0.0"
        : type === "ipv6Address"
        ? "::"
        : 0;
      assert.deepEqual(got[i].record[n], exp[n] ?? zero, `flow ${i} field ${n}`);
    }
  }
  assert.equal(exporter.stats().exported, emitted.length);
});
