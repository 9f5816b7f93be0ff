/**
 * The worker side of a permission-scoped sink: builds the sink from its component, feeds it
 * the flows of each batch, answers flush/update/stop, and reports counters. The worker was
 * started with exactly the permissions the component computed, so an operation outside them
 * throws `NotCapable`; that is counted (`permissionDenied`) and logged here, whether the sink
 * threw it synchronously or from its own async work, and the worker keeps running.
 *
 * @module
 */

import type { SectionConfig } from "../config/section.ts";
import { logger, RateLimitedLog, setLogFormat, setLogLevel, setLogWriter } from "../log.ts";
import { type FlowBatch, openBatch, readFlows } from "./batch.ts";
import type { ExporterComponent } from "./component.ts";
import { type Exporter, offerBatch } from "./exporter.ts";
import { deniedCount, isDenied } from "./denied.ts";
import { threadMemory } from "../thread_memory.ts";
import {
  emptyWorkerStats,
  type FromWorker,
  type ToWorker,
  type WorkerStats,
} from "./worker_protocol.ts";

/** Period of the unsolicited counter reports. */
const STATS_INTERVAL_MS = 1000;

/** The sink's counters that are ledger terms of their own, not among its further counters. */
export const LEDGER_KEYS: readonly string[] = [
  "received",
  "exported",
  "dropped",
  "errors",
  "filtered",
  "unacknowledged",
  "inSpool",
];

interface WorkerScope {
  postMessage(message: FromWorker): void;
  addEventListener(type: string, listener: (e: Event) => void): void;
  onmessage: ((e: MessageEvent<ToWorker>) => void) | null;
}

/** Runs `component`'s sink in this worker; call once from the component's `worker.ts`. */
export function runExporterWorker<C extends SectionConfig>(
  component: ExporterComponent<string, C>,
): void {
  const scope = globalThis as unknown as WorkerScope;
  const log = logger(`exporter.${component.name}`);
  const errLog = new RateLimitedLog(10_000);
  const host = emptyWorkerStats();
  let sink: Exporter | undefined;
  let timer: ReturnType<typeof setInterval> | undefined;

  const stats = (): WorkerStats => {
    const s = sink?.stats() as (Record<string, number | boolean>) | undefined;
    const extra: Record<string, number | boolean> = {};
    for (const [k, v] of Object.entries(s ?? {})) {
      if (!LEDGER_KEYS.includes(k)) extra[k] = v;
    }
    return {
      ...host,
      // Those that escaped the sink, and those it handled itself.
      permissionDenied: host.permissionDenied + deniedCount(),
      exported: Number(s?.exported ?? 0),
      // Records the host could not hand over count as dropped, next to the sink's own drops.
      dropped: host.dropped + Number(s?.dropped ?? 0),
      errors: host.errors + Number(s?.errors ?? 0),
      filtered: Number(s?.filtered ?? 0),
      unacknowledged: Number(s?.unacknowledged ?? 0),
      inSpool: Number(s?.inSpool ?? 0),
      extra,
      memory: threadMemory(),
    };
  };

  const noteError = (e: unknown, where: string): void => {
    const denied = isDenied(e);
    if (denied) host.permissionDenied++;
    else host.uncaught++;
    const suppressed = errLog.allow(`${denied}:${where}`);
    if (suppressed < 0) return;
    log.error(
      denied ? "sink attempted an operation outside its permissions" : "sink error",
      { where, err: e, suppressed },
    );
  };

  scope.addEventListener("unhandledrejection", (e: Event) => {
    e.preventDefault();
    noteError((e as PromiseRejectionEvent).reason, "async");
  });
  scope.addEventListener("error", (e: Event) => {
    e.preventDefault();
    noteError((e as ErrorEvent).error, "uncaught");
  });

  const reply = async (id: number, work: () => Promise<void> | void): Promise<void> => {
    let error: string | undefined;
    try {
      await work();
    } catch (e) {
      noteError(e, "control");
      error = e instanceof Error ? e.message : String(e);
    }
    scope.postMessage({ t: "done", id, stats: stats(), error });
  };

  /** Hands a whole batch to a sink that reads rows in place ({@linkcode offerBatch}). */
  const addBatch = (s: Exporter, batch: FlowBatch): void => {
    host.received += batch.count;
    const r = offerBatch(s, batch);
    if (r.failed) {
      host.dropped += r.lost;
      host.errors++;
      noteError(r.error, "addBatch");
    }
  };

  scope.onmessage = async (e: MessageEvent<ToWorker>) => {
    const m = e.data;
    switch (m.t) {
      case "init": {
        setLogLevel(m.log.level);
        setLogFormat(m.log.format);
        // The main thread owns the log output (klog's files are outside this worker's
        // permissions): lines are formatted here and written there.
        setLogWriter((line, level) => scope.postMessage({ t: "log", line, level }));
        try {
          if (component.create === undefined) throw new Error(`${component.name}: no sink`);
          sink = await component.create(m.config as C, m.ctx);
          await sink.start();
        } catch (err) {
          scope.postMessage({ t: "initError", message: (err as Error)?.message ?? String(err) });
          return;
        }
        timer = setInterval(
          () => scope.postMessage({ t: "stats", stats: stats() }),
          STATS_INTERVAL_MS,
        );
        scope.postMessage({ t: "ready" });
        return;
      }
      case "batch": {
        let batch: FlowBatch;
        try {
          batch = openBatch(m.buf);
        } catch (err) {
          noteError(err, "batch");
          scope.postMessage({ t: "ack", seq: m.seq, stats: stats() });
          return;
        }
        if (sink!.addBatch !== undefined) {
          addBatch(sink!, batch);
          scope.postMessage({ t: "ack", seq: m.seq, stats: stats() });
          return;
        }
        let flows;
        try {
          flows = readFlows(batch);
        } catch (err) {
          noteError(err, "batch");
          scope.postMessage({ t: "ack", seq: m.seq, stats: stats() });
          return;
        }
        for (const flow of flows) {
          host.received++;
          try {
            sink!.addRecord(flow);
          } catch (err) {
            // One record lost, counted; the next ones still go to the sink.
            host.dropped++;
            host.errors++;
            noteError(err, "addRecord");
          }
        }
        scope.postMessage({ t: "ack", seq: m.seq, stats: stats() });
        return;
      }
      case "flush":
        await reply(m.id, () => sink?.flush?.());
        return;
      case "update":
        await reply(m.id, () => sink?.update?.(m.config));
        return;
      case "stop":
        // The counters keep coming while the sink stops (it spools what it cannot deliver): a
        // stop that hangs is abandoned, and the proxy then trusts only the last of them to know
        // what is safe in the spool.
        await reply(m.id, () => sink?.stop());
        clearInterval(timer);
        return;
    }
  };
}
