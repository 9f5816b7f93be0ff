/**
 * A test sink that tries, per record, the operation named by the record's `sourcePodName`:
 * reading a file, writing inside or outside its directory, connecting to a host it was not
 * given, reading the environment, hanging its thread, counting the record `unacknowledged`
 * (a network sink's written but unproven record) instead of exported, counting it `inSpool` (a
 * spooling sink's record durably in its spool), or delivering one record from that spool
 * (`deliver-spooled`: it leaves `inSpool` for `exported` in one step, as the spooling sinks count
 * it). Its component grants it only `write` on its directory and `net` to one address, so the
 * worker tests can show what is denied.
 */

import type { ExportedFlow } from "../../../src/aggregation/record.ts";
import type { SectionConfig } from "../../../src/config/section.ts";
import type { ExporterComponent } from "../../../src/exporters/component.ts";
import type { Exporter, ExporterStats } from "../../../src/exporters/exporter.ts";
import { noteDenied } from "../../../src/exporters/denied.ts";

/** The probe's configuration section. */
export interface ProbeConfig extends SectionConfig {
  /** The only directory it may write. */
  dir: string;
  /** The only `host:port` it may connect to. */
  allowedNet: string;
  /** A `host:port` it was not given. */
  otherNet: string;
  /** A file it may not read. */
  secretFile: string;
}

class ProbeExporter implements Exporter {
  readonly name = "probe";
  readonly #config: ProbeConfig;
  readonly #stats: Required<ExporterStats> = {
    received: 0,
    exported: 0,
    dropped: 0,
    errors: 0,
    unacknowledged: 0,
    inSpool: 0,
  };

  constructor(config: ProbeConfig) {
    this.#config = config;
  }

  start(): Promise<void> {
    return Promise.resolve();
  }

  stop(): Promise<void> {
    return Promise.resolve();
  }

  flush(): Promise<void> {
    return Promise.resolve();
  }

  addRecord(flow: ExportedFlow): void {
    this.#stats.received++;
    const c = this.#config;
    const [host, port] = c.otherNet.split(":");
    switch (flow.record.sourcePodName) {
      case "read":
        Deno.readTextFileSync(c.secretFile);
        break;
      case "write-outside":
        Deno.writeTextFileSync(`${c.secretFile}.probe`, "x");
        break;
      case "write-inside":
        Deno.writeTextFileSync(`${c.dir}/inside-${flow.key.sourcePort}`, "x");
        break;
      case "env":
        Deno.env.get("HOME");
        break;
      case "net":
        // Not awaited: the denial surfaces as an unhandled rejection of the sink's async work.
        void Deno.connect({ hostname: host, port: Number(port) });
        break;
      case "net-handled":
        // Handled by the sink as any failed connect, and noted as the real sinks do.
        Deno.connect({ hostname: host, port: Number(port) }).then((c) => c.close(), noteDenied);
        break;
      case "unacked":
        this.#stats.unacknowledged++;
        return;
      case "spool":
        this.#stats.inSpool++;
        return;
      case "deliver-spooled":
        // This record is taken as usual (exported below); one spooled earlier is delivered.
        this.#stats.inSpool--;
        this.#stats.exported++;
        break;
      case "hang":
        for (;;) {
          // A sink stuck in a loop: only terminating its thread ends this.
        }
    }
    this.#stats.exported++;
  }

  stats(): ExporterStats {
    return { ...this.#stats };
  }
}

/** The probe component (section `probe`). */
export const probeComponent: ExporterComponent<"probe", ProbeConfig> = {
  name: "probe",
  section: {
    key: "probe",
    schema: { enable: "bool" },
    build: () => ({ enable: true, dir: "", allowedNet: "", otherNet: "", secretFile: "" }),
    reload: { live: [] },
  },
  permissions: (c) => ({ net: [c.allowedNet], read: [], write: [c.dir], env: [] }),
  create: (c) => new ProbeExporter(c),
  workerModule: new URL("./worker.ts", import.meta.url),
};
