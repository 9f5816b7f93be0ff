/**
 * The IPFIX exporter component (exporters.md §2): re-exports aggregated records to an external
 * IPFIX (or JSON) collector over TCP, UDP or TLS.
 *
 * Permissions: `net` to the collector's `host:port` (over UDP also the local socket's bind on an
 * ephemeral port, `0.0.0.0:0` / `[::]:0`), nothing else.
 *
 * The sink itself (`exporter.ts`) is imported by `create`, so a process or worker without
 * the IPFIX sink never loads it; the registry (src/components.ts) imports this file, not `mod.ts`.
 *
 * @module
 */

import type { ExporterComponent } from "../component.ts";
import { type FlowCollectorConfig, flowCollectorSection } from "./config.ts";
import { workerModule } from "../../worker_module.ts";
import { udpBindPermissions } from "../../net/transport.ts";

/** The IPFIX exporter component. */
export const ipfixComponent: ExporterComponent<"flowCollector", FlowCollectorConfig> = {
  name: "ipfix",
  section: flowCollectorSection,
  permissions(config) {
    return {
      net: config.collector === undefined ? [] : [
        config.collector.hostPort,
        ...(config.collector.proto === "udp" ? udpBindPermissions(config.collector.host) : []),
      ],
      read: [],
      write: [],
      env: [],
    };
  },
  async create(config, ctx) {
    const { IpfixExporter, ipfixOptionsFromConfig } = await import("./exporter.ts");
    return new IpfixExporter(
      ipfixOptionsFromConfig(config, { podLabels: ctx.podLabels, clusterUuid: ctx.clusterUuid }),
    );
  },
  workerModule: workerModule("ipfix"),
};
