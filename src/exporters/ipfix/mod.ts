/**
 * The IPFIX exporter component (exporters.md §2): re-exports aggregated records to an external
 * IPFIX (or JSON) collector over TCP, UDP or TLS.
 *
 * Permissions: `net` to the collector's `host:port`, nothing else.
 *
 * @module
 */

import type { ExporterComponent } from "../component.ts";
import { type FlowCollectorConfig, flowCollectorSection } from "./config.ts";
import { IpfixExporter, ipfixOptionsFromConfig } from "./exporter.ts";
import { workerModule } from "../../worker_module.ts";

export * from "./config.ts";
export * from "./exporter.ts";

/** The IPFIX exporter component. */
export const ipfixComponent: ExporterComponent<"flowCollector", FlowCollectorConfig> = {
  name: "ipfix",
  section: flowCollectorSection,
  permissions(config) {
    return {
      net: config.collector ? [config.collector.hostPort] : [],
      read: [],
      write: [],
      env: [],
    };
  },
  create(config, ctx) {
    return new IpfixExporter(
      ipfixOptionsFromConfig(config, { podLabels: ctx.podLabels, clusterUuid: ctx.clusterUuid }),
    );
  },
  workerModule: workerModule("ipfix"),
};
