/** A snapshot of the process's counters for tests of what reads one (the API, the metrics line). */

import type { FlowAggregatorStats } from "../../src/flow_aggregator.ts";
import { newCore } from "../aggregation/fixtures.ts";

/** Every counter zero (a fresh core's), then `over`. */
export function zeroStats(over: Partial<FlowAggregatorStats> = {}): FlowAggregatorStats {
  const { core } = newCore();
  return {
    numRecordsExported: 0,
    numRecordsReceived: 0,
    numFlows: 0,
    numConnToCollector: 0,
    optionsRecordsIgnored: 0,
    nonFlowRecords: 0,
    recordsInFlight: 0,
    exporterErrors: 0,
    exportedWithoutSink: 0,
    exporterRebuildsFailed: 0,
    exporterCreatesFailed: 0,
    collectorCertificatesReissued: { notValidYet: 0, expiring: 0 },
    aggregation: core.stats(),
    exporters: {},
    ...over,
  };
}
