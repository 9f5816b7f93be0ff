/**
 * The export loop: ties the collector, the aggregation core and the exporters together (spec
 * `aggregation.md` §6). Records are ingested synchronously from the collector's sink, so TCP
 * peers feel back-pressure instead of the process buffering without bound. A timer sweeps the
 * expiry queue; every expired flow is handed to every enabled exporter, each taking its own
 * copy before the core resets deltas. Configuration updates are applied between sweeps. On
 * stop, input is closed first, then every flow still held (ready or not) is exported, then
 * every exporter is flushed and stopped: nothing received before the stop is lost.
 */

import { AggregationCore, type ExportHooks } from "./aggregation/mod.ts";
import type { ExportedFlow, FlowInput, FlowKey } from "./aggregation/record.ts";
import { joinRecordTexts, recordTexts } from "./aggregation/records_json.ts";
import { type Clock, type ClockTimer, TaskCachedClock, within } from "./clock.ts";
import {
  Collector,
  type CollectorStats,
  type UdpReceiverFactory,
  withEarlierCollectors,
} from "./collector/mod.ts";
import type { RecordContext } from "./collector/session.ts";
import {
  COMPONENTS,
  configReloadTable,
  EXPORTER_SECTIONS,
  type ExporterSection,
  type FlowAggregatorConfig,
} from "./components.ts";
import type { ConfigDiff, ConfigWatcherStats, TransportProtocol } from "./config/mod.ts";
import type { DataRecord, TemplateRecord } from "./ipfix/types.ts";
import type { RawRecords } from "./ipfix/decoder.ts";
import type { CompiledTemplate } from "./ipfix/compile.ts";
import {
  type CompiledView,
  compileView,
  coreViewSink,
  RecordViews,
  type ViewSink,
} from "./shard/views.ts";
import { flowTemplateProblem } from "./record/flow_input.ts";
import {
  type Exporter,
  EXPORTER_STOP_TIMEOUT_MS,
  type ExporterStats,
  offerBatch,
} from "./exporters/exporter.ts";
import {
  type BatchBuffer,
  batchCount,
  BatchWriter,
  type FlowBatch,
  openBatch,
  readFlows,
} from "./exporters/batch.ts";
import { rowHooks, SLOT_BATCH_FLOWS, SlotRowWriter, viaRows } from "./shard/slot_rows.ts";
import {
  MissingPermissionsError,
  WorkerExporter,
  type WorkerExporterOptions,
  workerModuleMissing,
  WorkerStartTimeout,
} from "./exporters/worker_exporter.ts";
import { type LogFields, logger, RateLimitedLog } from "./log.ts";
import { type ProcessStats, processStats } from "./process_stats.ts";
import { type ThreadMemory, threadMemory } from "./thread_memory.ts";
import type { ApiFrontStats } from "./api/front.ts";
import type { KlogFilesStats } from "./log/mod.ts";
import type { ShardPool, ShardPoolStats } from "./shard/pool.ts";
import type { PodReplicaSource, PodStoreStats } from "./k8s/pod_store.ts";
import type { PublisherStats } from "./k8s/certificates.ts";
import type { ClusterIdentityStats } from "./k8s/cluster_uuid.ts";
import type { KubeClientStats } from "./k8s/client.ts";
import { applyCoreSettings, type SettableCore, type ShardSettings } from "./shard/protocol.ts";
import type { GeneratedCertificates } from "./pki/certificates.ts";
import {
  noReissues,
  type ReissueCounts,
  VALIDITY_CHECK_INTERVAL_MS,
  validityFields,
} from "./pki/validity.ts";

const log = logger("flow-aggregator");

/**
 * The collector certificates' module (node-forge, `node:crypto`), imported when a TLS collector
 * first needs it: a process collecting over TCP or UDP never loads it (several MB of RSS).
 */
function certificateLibrary(): Promise<typeof import("./pki/certificates.ts")> {
  return import("./pki/certificates.ts");
}

export type { ExporterSection };

/** Flows handed to the exporters between two flushes of the shutdown export (~2 MB of log). */
const SHUTDOWN_SLICE = 10_000;

/** Stands in for a held batch once handed over. */
const EMPTY_BATCH = new ArrayBuffer(0);

/** Most due flows exported by one timer tick before the exporters are given time to drain. */
const SWEEP_SLICE = 10_000;

/** A template's view decoder (one shard), compiled under the string bound `bound`. */
interface ViewDecoder {
  readonly ct: CompiledTemplate;
  readonly view: CompiledView;
  readonly bound: number | undefined;
}

/** The sinks that carry the cluster UUID: those the reload table rebuilds on `clusterID`. */
const CLUSTER_UUID_SECTIONS = configReloadTable().clusterID.rebuilds as ExporterSection[];

/** Upper bound of the expiry timer, so newly created flows are never swept late by more. */
const MAX_TIMER_MS = 1000;

/**
 * Builds the exporter for one enabled section (a promise when the sink's module is imported
 * first); tests inject fakes.
 */
export type ExporterFactory = (
  section: ExporterSection,
  config: FlowAggregatorConfig,
) => Exporter | undefined | Promise<Exporter | undefined>;

/** Options of {@linkcode FlowAggregator}. */
export interface FlowAggregatorOptions {
  /**
   * Time source of the core (expiry). Default: the system clock read once per task
   * ({@linkcode TaskCachedClock}), shared with the collector.
   */
  clock?: Clock;
  /** Collector listen address; default `[::]:4739`. */
  listenAddress?: string;
  /** UDP receive path (default: one Deno socket; see `fastUdpReceiverFactory`). */
  udpReceiver?: UdpReceiverFactory;
  /**
   * Builds exporters; default: each enabled sink's component, in its permission-scoped worker
   * (or in process, see {@linkcode exportersInProcess}).
   */
  exporterFactory?: ExporterFactory;
  /** Run the sinks in the main thread with the process's permissions (debugging). */
  exportersInProcess?: boolean;
  /** Tuning of the sink workers. */
  workerOptions?: WorkerExporterOptions;
  /** Enrichment hooks (Pod store). Absent: metadata and labels are not filled. */
  hooks?: ExportHooks;
  /**
   * The cluster UUID in force (the Kubernetes cluster identity, `clusterID`, a state file);
   * default: one drawn for the process. After it changes, call
   * {@linkcode FlowAggregator.clusterUuidChanged}.
   */
  clusterUuid?: () => string;
  /** TLS material for the collector; default: generated at start (CA, server, client). */
  certificates?: GeneratedCertificates;
  /** Kubernetes namespace, for the server certificate SAN. */
  namespace?: string;
  /**
   * Called once the TLS certificates exist (to publish or write them), and again with each set
   * issued while running (a new `flowAggregatorAddress`, certificates out of their validity).
   */
  onCertificates?: (certs: GeneratedCertificates) => void | Promise<void>;
  /**
   * How often a TLS collector compares the wall clock with its certificates' validity, on a
   * monotonic timer of the clock, issuing them again when it is outside (or near the end,
   * `src/pki/validity.ts`); default {@linkcode VALIDITY_CHECK_INTERVAL_MS}, 0 never.
   */
  certificateCheckIntervalMs?: number;
  /** Disable the expiry timer (tests drive {@linkcode FlowAggregator.sweep} by hand). */
  manualSweep?: boolean;
  /** Period of the metrics log line; default 60 s. 0 disables it. */
  metricsLogIntervalMs?: number;
  /** The config watcher's counters (a watched file), part of {@linkcode FlowAggregator.stats}. */
  configCounters?: () => ConfigWatcherStats;
  /**
   * The klog log files' counters (`--logtostderr=false`), part of
   * {@linkcode FlowAggregator.stats} as `logFiles`.
   */
  logFileCounters?: () => KlogFilesStats;
  /** The Pod store's counters (with a cluster), part of {@linkcode FlowAggregator.stats}. */
  podStoreCounters?: () => PodStoreStats;
  /**
   * The certificate publisher's counters (with a cluster), part of
   * {@linkcode FlowAggregator.stats} as `certificates`.
   */
  certificateCounters?: () => PublisherStats;
  /** The cluster identity's counters, part of {@linkcode FlowAggregator.stats} as `clusterUuid`. */
  clusterUuidCounters?: () => ClusterIdentityStats;
  /**
   * The Kubernetes client's counters (with a cluster), part of
   * {@linkcode FlowAggregator.stats} as `kubeClient`.
   */
  kubeClientCounters?: () => KubeClientStats;
  /**
   * Longest wait for one exporter's `stop()` (final flush) before giving up on it, so a stuck
   * sink (hung disk or peer) cannot hang a shutdown or a reload forever. Default 10 s.
   */
  exporterStopTimeoutMs?: number;
  /**
   * Aggregation shards, each a worker thread owning the flows whose key hashes to it
   * (`src/shard/`); default 1: the core runs in the main thread. With more, the main thread
   * walks and routes the records, and each shard decodes, aggregates, expires and hands back
   * its own flows. Not with an injected `clock` or `manualSweep`, nor with `hooks` but no
   * {@linkcode podStore}: the constructor throws.
   */
  shards?: number;
  /** With `hooks` from a Pod store and `shards` > 1: the store, replicated into the shards. */
  podStore?: PodReplicaSource;
}

/** What `GET /recordmetrics` reports, plus our own counters. */
export interface RecordMetrics {
  /** Aggregated records handed to the exporters. */
  numRecordsExported: number;
  /** Data records received by the collector. */
  numRecordsReceived: number;
  /** Flows held by the aggregation core. */
  numFlows: number;
  /** Exporter sessions currently known to the collector. */
  numConnToCollector: number;
}

/** Everything the process counts, as one snapshot. */
export interface FlowAggregatorStats extends RecordMetrics, Partial<ConfigWatcherStats> {
  /** Records from options templates, ignored by aggregation. */
  optionsRecordsIgnored: number;
  /** Records of data templates that lack the flow key or type it differently, dropped. */
  nonFlowRecords: number;
  /**
   * Records handed to the shard workers that they have not counted yet (in their rings or the
   * main thread's pending frames); always 0 with one shard (the core counts a record as it is
   * given). A stage of the loss ledger ({@linkcode ledgerStages}).
   */
  recordsInFlight: number;
  /** Exporter `addRecord` calls that threw (the other exporters still got the record). */
  exporterErrors: number;
  /** Records exported while no exporter was enabled (counted, never silent). */
  exportedWithoutSink: number;
  /**
   * Sinks a reload (or a cluster UUID change) could not rebuild for their new configuration:
   * the running sink was kept, with its previous settings.
   */
  exporterRebuildsFailed: number;
  /**
   * Sinks the start or a reload enabled but could not create, each attempt (most often: the
   * process lacks a permission the sink needs, or the sink refuses its configuration): that
   * section runs no sink until a later change or a restart. A sink whose worker did not start
   * in time (a busy machine) is tried again after 1 s, then twice as long each time up to 60 s,
   * while the section is enabled.
   */
  exporterCreatesFailed: number;
  /**
   * Times the TLS collector's certificates were issued again while running, by why:
   * `notValidYet`, the wall clock before their validity (it was ahead when they were made, at
   * start, and has been set back: the Agents refused them); `expiring`, under 90 days left
   * (or expired). A new CA (published, and written to `--cert-dir`) when the CA or the client
   * certificate needed it, else a new server certificate from the same CA.
   */
  collectorCertificatesReissued: ReissueCounts;
  /** Aggregation core counters. */
  aggregation: ReturnType<AggregationCore["stats"]>;
  /** Collector counters (undefined before start). */
  collector?: CollectorStats;
  /** Per enabled exporter. */
  exporters: Record<string, ExporterStats>;
  /** The shard workers' own counters (with more than one shard). */
  shards?: ShardPoolStats;
  /** The API port's counters (`src/api/front.ts`), once the API runs with its bounds. */
  api?: ApiFrontStats;
  /** The process's resource use (every thread's), read with the counters. */
  process?: ProcessStats;
  /**
   * Each thread's V8 memory, by thread: `main`, `shard<i>` (shard workers, as of their last
   * report), the section of a sink run in a worker (as of its last counters). The UDP receive
   * workers are left out: their buffers are allocated once, at their start.
   */
  threads?: Record<string, ThreadMemory>;
  /** The klog log files' counters, when the process writes them (`--logtostderr=false`). */
  logFiles?: KlogFilesStats;
  /** The Pod store's counters, with a cluster. */
  podStore?: PodStoreStats;
  /** The certificate publisher's counters, with a cluster. */
  certificates?: PublisherStats;
  /** The cluster identity's counters (state file, polling). */
  clusterUuid?: ClusterIdentityStats;
  /** The Kubernetes client's counters (answers refused), with a cluster. */
  kubeClient?: KubeClientStats;
}

/** Keys of the `record metrics` line that {@linkcode statsFields} derives from the snapshot. */
export interface MetricsLineDerived {
  /** Records the aggregation core accepted (`aggregation.recordsAccepted`): a ledger stage. */
  recordsAggregated: number;
  /** Records the aggregation core rejected, every reason (`aggregation.recordsRejected`). */
  rejected: number;
}

function transportOf(p: TransportProtocol): "udp" | "tcp" | "tls" {
  return p === "UDP" ? "udp" : p === "TCP" ? "tcp" : "tls";
}

let clusterUuid: string | undefined;

/**
 * The cluster UUID when the caller gives none ({@linkcode FlowAggregatorOptions.clusterUuid}:
 * main.ts passes the Kubernetes cluster identity, `clusterID` or the state file's): as upstream,
 * a random UUID stands in; unlike upstream it is drawn once per process, so the observation
 * domain id stays the same when a reload rebuilds the exporter.
 */
function processClusterUuid(): string {
  if (clusterUuid === undefined) {
    clusterUuid = crypto.randomUUID();
    log.warn("no cluster UUID given: using a random one for this process", {
      uuid: clusterUuid,
    });
  }
  return clusterUuid;
}

/** Options of {@linkcode componentExporterFactory}. */
export interface ComponentFactoryOptions {
  /** Build the sinks in the calling thread instead of their workers. */
  inProcess?: boolean;
  /** The cluster UUID in force (default: one drawn for the process). */
  clusterUuid?: () => string;
  /** Tuning of the sink workers. */
  workerOptions?: WorkerExporterOptions;
}

/**
 * The exporter factory of the product: the registered component of the section builds its
 * sink, in a worker with the component's permissions unless `inProcess`.
 */
export function componentExporterFactory(options: ComponentFactoryOptions = {}): ExporterFactory {
  return (section, config) => {
    const component = COMPONENTS.find((c) => c.section.key === section);
    if (component?.create === undefined) {
      log.error("exporter not available in this build; records are not sent to it", {
        section,
      });
      return undefined;
    }
    const sectionConfig = config[section];
    const ctx = {
      podLabels: config.recordContents.podLabels,
      clusterUuid: (options.clusterUuid ?? processClusterUuid)(),
    };
    const missing = component.workerModule !== undefined &&
      workerModuleMissing(component.workerModule);
    if (missing) {
      log.warn("sink worker module not found (single-file build): the sink runs in process", {
        section,
        module: component.workerModule?.href,
      });
    }
    if (options.inProcess || component.workerModule === undefined || missing) {
      return (component.create as (
        c: typeof sectionConfig,
        x: typeof ctx,
      ) => Exporter | Promise<Exporter>)(
        sectionConfig,
        ctx,
      );
    }
    return new WorkerExporter(
      component as unknown as ConstructorParameters<typeof WorkerExporter>[0],
      sectionConfig,
      ctx,
      options.workerOptions,
    );
  };
}

/** How a reloaded core setting is shown in its log line: the key and the value as configured. */
const LOGGED_SETTING: Record<
  keyof ShardSettings,
  (c: FlowAggregatorConfig) => [string, string | number | boolean | undefined]
> = {
  activeTimeoutMs: (c) => ["active", c.activeFlowRecordTimeout],
  inactiveTimeoutMs: (c) => ["inactive", c.inactiveFlowRecordTimeout],
  includePodLabels: (c) => ["podLabels", c.recordContents.podLabels],
  maxFlows: (c) => ["maxFlows", c.limits.maxFlows],
  maxFlowBytes: (c) => ["maxFlowBytes", c.limits.maxFlowBytes],
  maxStringBytes: (c) => ["maxStringBytes", c.limits.maxStringBytes],
};

/** What {@linkcode FlowAggregator.exportObserver} is given: every exported flow. */
export interface ExportObserver {
  /** One flow. */
  observe(flow: ExportedFlow): void;
  /** Optional: the flows of a shard's batch, read in place (each as `observe` would take it). */
  observeBatch?(batch: FlowBatch): void;
}

/** Settings applied to a core not made yet: nothing to do (see {@linkcode FlowAggregator}'s core). */
const UNMADE_CORE: SettableCore = {
  updateTimeouts: () => {},
  setIncludePodLabels: () => {},
  setMaxFlows: () => {},
  setMaxFlowBytes: () => {},
};

/**
 * Records a `/flowrecords` answer builds per turn of this thread when the core runs here (the
 * one-shard process): about 20 ms each on this machine, ingest going on between them.
 */
export const QUERY_PAGE_RECORDS = 500;

/** The running Flow Aggregator. */
export class FlowAggregator {
  #config: FlowAggregatorConfig;
  readonly #opts: FlowAggregatorOptions;
  readonly #clock: Clock;
  /** Lines about templates that are not flow records: a peer can define new ones at will. */
  readonly #nonFlowLog: RateLimitedLog;
  /** The collector's clock: the cached system clock, unless a test injected the core's clock. */
  readonly #collectorClock: Clock | undefined;
  /** The one-shard core, made on first use: with shards it is never needed (~1 MB saved). */
  #oneCore: AggregationCore | undefined = undefined;
  /** One shard: the collector's undecoded records read as views (see `shard/views.ts`). */
  readonly #views = new RecordViews();
  readonly #viewDecoders = new WeakMap<CompiledTemplate, ViewDecoder>();
  /** The view decoder used last: a session's data sets mostly share one template. */
  #lastView: ViewDecoder | undefined = undefined;
  #onViewOf: ViewSink | undefined = undefined;
  readonly #onUndecodable = (why: string): void => this.#core.countUndecodable(why);
  /** The shard workers (with `shards` > 1, from start on). */
  #pool: ShardPool | undefined;
  /** During stop: where the shards' last batches of flows are collected. */
  #held: BatchBuffer[] | undefined;
  readonly #factory: ExporterFactory;
  readonly #exporters = new Map<ExporterSection, Exporter>();
  #collector: Collector | undefined;
  #certs: GeneratedCertificates | undefined;
  /** The next check of the certificates' validity (TLS collector). */
  #certTimer: ClockTimer | undefined;
  readonly #certsReissued: ReissueCounts = noReissues();
  /** Certificates in use whose hand-out failed, tried again at each check. */
  #handOutPending: GeneratedCertificates | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #metricsTimer: ReturnType<typeof setInterval> | undefined;
  #state: "new" | "running" | "stopping" | "stopped" = "new";
  #startCalled = false;
  /** Counters of the collectors stopped so far (a reload replaced them), summed. */
  #earlierCollectors: CollectorStats | undefined;
  #exported = 0;
  #optionsIgnored = 0;
  #nonFlowRecords = 0;
  /** Final counters of the sinks stopped by stop(). */
  readonly #finalSinkStats = new Map<string, ExporterStats>();
  /** Per template definition: "" when it is flow input, else why not. */
  readonly #templateChecks = new WeakMap<TemplateRecord, string>();
  /** The template checked last and its problem: a session's data sets mostly share one. */
  #lastChecked: TemplateRecord | undefined = undefined;
  #lastProblem = "";
  #exporterErrors = 0;
  #exportedWithoutSink = 0;
  #exporterRebuildsFailed = 0;
  #exporterCreatesFailed = 0;
  /** Sections whose sink could not be created, with the retry armed and its delay. */
  readonly #createRetries = new Map<ExporterSection, CreateRetry>();
  /** Stops of exporters replaced by a reload, still draining; stop() waits for them. */
  readonly #draining = new Set<Promise<void>>();
  /** Serialises config updates with each other and with stop. */
  #updates: Promise<void> = Promise.resolve();
  readonly #emit = (flow: ExportedFlow): void => this.#export(flow);

  /** Creates the aggregator; nothing runs before {@linkcode start}. */
  constructor(config: FlowAggregatorConfig, opts: FlowAggregatorOptions = {}) {
    this.#config = config;
    this.#opts = opts;
    // Per-record time reads were ~6 % of the CPU at 100k records/s: read once per socket read.
    this.#clock = opts.clock ?? new TaskCachedClock();
    this.#nonFlowLog = new RateLimitedLog(10_000, () => this.#clock.nowMs());
    this.#collectorClock = opts.clock === undefined ? this.#clock : undefined;
    this.#factory = opts.exporterFactory ??
      componentExporterFactory({
        inProcess: opts.exportersInProcess,
        workerOptions: opts.workerOptions,
        clusterUuid: opts.clusterUuid,
      });
    const shards = opts.shards ?? 1;
    if (!Number.isInteger(shards) || shards < 1) {
      throw new RangeError(`flow aggregator: shards ${shards}: must be an integer >= 1`);
    }
    if (
      shards > 1 &&
      ((opts.hooks !== undefined && opts.podStore === undefined) || opts.clock !== undefined ||
        opts.manualSweep)
    ) {
      throw new Error(
        "flow aggregator: more than one shard needs the Pod store itself (not only its hooks), " +
          "and cannot run with an injected clock or manual sweeps",
      );
    }
  }

  /**
   * The aggregation core of this thread (one shard), made on first use with the configuration
   * then in force. A sharded process touches it only for stats before its start.
   */
  get #core(): AggregationCore {
    return this.#oneCore ??= new AggregationCore({
      activeTimeoutMs: this.#config.activeFlowRecordTimeoutMs,
      inactiveTimeoutMs: this.#config.inactiveFlowRecordTimeoutMs,
      clock: this.#clock,
      includePodLabels: this.#config.recordContents.podLabels,
      maxFlows: this.#config.limits.maxFlows,
      maxFlowBytes: this.#config.limits.maxFlowBytes,
    });
  }

  get #onView(): ViewSink {
    return this.#onViewOf ??= coreViewSink(this.#core);
  }

  /** The aggregation core of a one-shard process (tests); with shards, see {@linkcode query}. */
  get core(): AggregationCore {
    if (this.#shardCount > 1) throw new Error("flow aggregator: sharded, no core in this thread");
    return this.#core;
  }

  get #shardCount(): number {
    return this.#opts.shards ?? 1;
  }

  /**
   * The API's `/flowrecords` body (`records_json.ts`): held flows matching `filter`, at most
   * `limit`, from every shard (written by the shard workers when there are workers).
   */
  recordsJson(filter: Partial<FlowKey> | null, limit: number): Promise<string> {
    if (this.#pool !== undefined) return this.#pool.queryJson(filter, limit);
    return this.#recordsJsonInThread(filter, limit);
  }

  /**
   * {@linkcode recordsJson} from the core in this thread, {@linkcode QUERY_PAGE_RECORDS} at a
   * time with ingest in between: one piece of 10,000 records held this thread 250-340 ms (50,000
   * flows, measured), a page of 1,000 about 45 ms.
   */
  async #recordsJsonInThread(filter: Partial<FlowKey> | null, limit: number): Promise<string> {
    const texts: string[] = [];
    for (let from = 0;;) {
      const want = Math.min(QUERY_PAGE_RECORDS, limit - texts.length);
      const page = this.#core.queryPage(filter, want, from);
      for (const t of recordTexts(page.records)) texts.push(t);
      from = page.next;
      if (from < 0 || texts.length >= limit) return joinRecordTexts(texts);
      await new Promise((r) => setTimeout(r, 0));
    }
  }

  /** The core settings of a configuration. */
  #shardSettings(c: FlowAggregatorConfig): ShardSettings {
    return {
      activeTimeoutMs: c.activeFlowRecordTimeoutMs,
      inactiveTimeoutMs: c.inactiveFlowRecordTimeoutMs,
      maxFlows: c.limits.maxFlows,
      maxFlowBytes: c.limits.maxFlowBytes,
      includePodLabels: c.recordContents.podLabels,
      maxStringBytes: c.limits.maxStringBytes,
    };
  }

  /** The bound collector port (0 before start). */
  get collectorPort(): number {
    return this.#collector?.port ?? 0;
  }

  /** The configuration in force. */
  get config(): FlowAggregatorConfig {
    return this.#config;
  }

  /** Starts exporters, then the collector, then the expiry timer. */
  start(): Promise<void> {
    if (this.#startCalled || this.#state !== "new") {
      return Promise.reject(new Error("flow aggregator: start called twice"));
    }
    this.#startCalled = true;
    // Serialised with config updates (the watcher may deliver one at any time): an update
    // queued before runs first and is adopted by #apply, one arriving meanwhile waits, so an
    // exporter is never created twice and no change is lost.
    const run = this.#updates.then(() => this.#start());
    this.#updates = run.catch(() => {});
    return run;
  }

  async #start(): Promise<void> {
    if (this.#state !== "new") return; // stop() came first
    this.#state = "running";
    for (const section of EXPORTER_SECTIONS) {
      if (this.#enabled(section, this.#config)) await this.#createExporter(section);
    }
    if (this.#exporters.size === 0) {
      log.warn("no exporter is running: aggregated records are counted and discarded");
    }
    if (this.#shardCount > 1) {
      const { ShardPool } = await import("./shard/pool.ts");
      const pool = new ShardPool({
        shards: this.#shardCount,
        settings: this.#shardSettings(this.#config),
        pods: this.#opts.hooks === undefined ? undefined : this.#opts.podStore,
        onBatch: (buf) => this.#exportBatch(buf),
      });
      this.#pool = pool;
      await pool.ready();
      log.info("aggregation sharded over worker threads", { shards: pool.size });
    }
    await this.#startCollector();
    // Shards run their own expiry timers.
    if (!this.#opts.manualSweep && this.#pool === undefined) this.#arm();
    const every = this.#opts.metricsLogIntervalMs ?? 60_000;
    // stop() may have run during the awaits above; it cleared the timers before they existed.
    if (every > 0 && this.#state === "running") {
      this.#metricsTimer = setInterval(() => this.logMetrics(), every);
      Deno.unrefTimer(this.#metricsTimer);
    }
  }

  /**
   * Stops input, exports every flow still held (ready or not), then flushes and stops every
   * exporter. Resolves when everything is written, or an exporter's stop timed out
   * ({@linkcode FlowAggregatorOptions.exporterStopTimeoutMs}).
   */
  async stop(): Promise<void> {
    if (this.#state === "stopped" || this.#state === "stopping") return;
    const wasRunning = this.#state === "running";
    this.#state = "stopping";
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    if (this.#metricsTimer !== undefined) clearInterval(this.#metricsTimer);
    for (const r of this.#createRetries.values()) r.timer.cancel();
    this.#createRetries.clear();
    this.#certTimer?.cancel();
    await this.#updates;
    if (this.#collector) await this.#collector.stop();
    if (wasRunning) {
      // Expired flows first (normal export semantics), then everything still held, collected as
      // batches of rows (ROW_BYTES, 499, per flow plus its strings, where a flow as an object
      // took ~2.5 KB: 100k held flows added 246 MB of RSS to the stop), then handed over batch
      // by batch with the exporters flushed every SHUTDOWN_SLICE flows: after a flood ~100k
      // flows can be held, more than a bounded exporter buffer (the flow log's 16 MiB) takes in
      // one synchronous burst.
      const held: BatchBuffer[] = [];
      if (this.#pool !== undefined) {
        // Each shard exports its due flows, then everything it holds, as its batches.
        this.#held = held;
        await this.#pool.stop();
        this.#held = undefined;
      } else {
        // The one-shard core writes its flows into batches from their slots, as a shard does.
        const batch = new BatchWriter(SLOT_BATCH_FLOWS);
        const rows = new SlotRowWriter(batch, () => held.push(batch.finish()));
        const hooks = rowHooks(this.#opts.hooks, rows);
        this.#core.expire(viaRows, hooks);
        this.#core.flushAll(viaRows, hooks);
        if (batch.count > 0) held.push(batch.finish());
      }
      let flows = 0;
      for (const buf of held) flows += batchCount(buf);
      log.info("flushed flows held at shutdown", { flows });
      let flushing = true;
      let slice = 0;
      for (let i = 0; i < held.length; i++) {
        const buf = held[i];
        // Not kept once handed over: the exporters may hold a batch, not the list.
        held[i] = EMPTY_BATCH;
        slice += batchCount(buf);
        this.#exportBatch(buf);
        if (slice >= SHUTDOWN_SLICE || i === held.length - 1) {
          slice = 0;
          if (flushing) flushing = await this.#flushExporters();
        }
      }
    }
    for (const section of EXPORTER_SECTIONS) await this.#stopExporter(section);
    if (this.#draining.size > 0) {
      // An exporter replaced by a reload may still be delivering its queue: the process must
      // not exit under it (bounded like any exporter stop).
      const limitMs = this.#stopTimeoutMs;
      if (await within(Promise.all(this.#draining), limitMs) === "timeout") {
        log.error("replaced exporter did not stop in time; records it still buffers are lost", {
          timeoutMs: limitMs,
        });
      }
    }
    this.logMetrics();
    this.#state = "stopped";
  }

  /**
   * Feeds decoded records to the core. With a context (the collector's), the data set's
   * template is checked once ({@linkcode flowTemplateProblem}): records of a template that
   * cannot be flow input are counted (`nonFlowRecords`) and logged once per template. Without
   * a template (tests, in-process feeds), the core's per-record validation alone applies.
   */
  ingest(
    records: readonly DataRecord[],
    ctx?:
      & Pick<RecordContext, "options">
      & Partial<Pick<RecordContext, "template" | "exporterAddress">>,
    raw?: RawRecords,
  ): void {
    const count = raw === undefined ? records.length : raw.spans.length / 2;
    if (ctx?.options) {
      this.#optionsIgnored += count;
      return;
    }
    if (ctx?.template !== undefined) {
      let problem = ctx.template === this.#lastChecked
        ? this.#lastProblem
        : this.#templateChecks.get(ctx.template);
      if (problem === undefined) {
        problem = flowTemplateProblem(ctx.template.fields) ?? "";
        this.#templateChecks.set(ctx.template, problem);
        const n = problem === "" ? -1 : this.#nonFlowLog.allow(`${problem}|${ctx.exporterAddress}`);
        if (n >= 0) {
          log.warn("data records of a template that is not a flow record are dropped", {
            exporter: ctx.exporterAddress,
            templateId: ctx.template.id,
            reason: problem,
            suppressed: n,
          });
        }
      }
      this.#lastChecked = ctx.template;
      this.#lastProblem = problem;
      if (problem !== "") {
        this.#nonFlowRecords += count;
        return;
      }
    }
    if (raw !== undefined) {
      if (this.#pool !== undefined) {
        this.#pool.ingestRaw(raw);
        return;
      }
      // One shard: the core here reads the records as views, as a shard worker would.
      if (raw.spans.length === 0) return;
      this.#views.readSpans(
        this.#viewOf(raw.compiled),
        raw.compiled,
        raw.bytes,
        raw.spans,
        this.#onView,
        this.#onUndecodable,
      );
      return;
    }
    // Checked above (per template) or validated by the core per record.
    if (this.#pool !== undefined) this.#pool.ingest(records as unknown as FlowInput[]);
    else for (const r of records) this.#core.addRecord(r as FlowInput);
  }

  /**
   * The view decoder of a data set's template (one shard), compiled once per template under the
   * string bound in force (`limits.maxStringBytes`; a reload compiles it again).
   */
  #viewOf(ct: CompiledTemplate): CompiledView {
    const bound = this.#config.limits.maxStringBytes;
    const last = this.#lastView;
    if (last !== undefined && last.ct === ct && last.bound === bound) return last.view;
    let e = this.#viewDecoders.get(ct);
    if (e === undefined || e.bound !== bound) {
      e = { ct, view: compileView(ct.template, bound), bound };
      this.#viewDecoders.set(ct, e);
    }
    this.#lastView = e;
    return e.view;
  }

  /** Runs one expiry sweep now; returns the number of flows exported (one shard only). */
  sweep(): number {
    return this.#core.expire(this.#emit, { ...this.#opts.hooks, addressText: this.#addressText() });
  }

  /**
   * Whether a sweep's flows need address text: not when every sink reads the core's address
   * words (sinks in workers) and the only other reader, the live view, formats the few it shows
   * itself (`exportedAddress`). The shutdown's held flows always get text.
   */
  #addressText(): boolean {
    for (const e of this.#exporters.values()) if (e.addressWordsOnly !== true) return true;
    return false;
  }

  /**
   * Applies a new validated configuration between sweeps (spec control-plane.md §2.3):
   * exporters are enabled, disabled or updated; timeouts and Pod labels apply live (our
   * improvement); a transport or server-address change restarts the collector in-process so
   * restart-only keys still take effect; apiServer keys are logged as needing a restart.
   */
  update(next: FlowAggregatorConfig, diff: ConfigDiff): Promise<void> {
    const run = this.#updates.then(() => this.#apply(next, diff));
    this.#updates = run.catch((err) => log.error("config update failed", { err }));
    return this.#updates;
  }

  /**
   * Rebuilds the running sinks that carry the cluster UUID (those whose reload rule depends on
   * `clusterID`), after {@linkcode FlowAggregatorOptions.clusterUuid} changed: the IPFIX
   * observation domain id and the ClickHouse/S3 column switch to it. Each old sink drains in
   * the background while its successor takes the records, so none is lost.
   */
  clusterUuidChanged(): Promise<void> {
    const run = this.#updates.then(async () => {
      if (this.#state !== "running") return;
      for (const section of CLUSTER_UUID_SECTIONS) {
        const have = this.#exporters.get(section);
        if (have !== undefined) await this.#replaceExporter(section, have);
      }
      log.info("cluster UUID changed: rebuilt the sinks that carry it", {
        sections: CLUSTER_UUID_SECTIONS.filter((s) => this.#exporters.has(s)).join(","),
      });
    });
    this.#updates = run.catch((err) => log.error("cluster UUID update failed", { err }));
    return this.#updates;
  }

  /**
   * Replaces a running exporter with one built from the configuration in force: the new one
   * first, then the old one drains in the background. When the new one cannot be built or
   * started (the process lacks a permission its new configuration needs, say), the running one
   * is kept, with its previous settings, counted (`exporterRebuildsFailed`) and logged: until a
   * later reload of its section or a restart.
   */
  async #replaceExporter(section: ExporterSection, have: Exporter): Promise<void> {
    let next: Exporter | undefined;
    try {
      next = await this.#startedExporter(section);
    } catch (err) {
      this.#exporterRebuildsFailed++;
      log.error("cannot rebuild exporter for the new configuration: the running one is kept", {
        section,
        err,
        ...missingFields(err),
        exporterRebuildsFailed: this.#exporterRebuildsFailed,
      });
      return;
    }
    this.#exporters.delete(section);
    const draining: Promise<void> = this.#stopWithin(have, section, "replaced exporter")
      .finally(() => this.#draining.delete(draining));
    this.#draining.add(draining);
    this.#enable(section, next);
  }

  /** Counters of every component. */
  stats(): FlowAggregatorStats {
    const collector = withEarlierCollectors(this.#earlierCollectors, this.#collector?.stats());
    const exporters: Record<string, ExporterStats> = {};
    // Sinks stopped by stop() keep their final counters here, so the last metrics line (and
    // stats() after stop) still accounts for every sink.
    for (const [section, st] of this.#finalSinkStats) exporters[section] = st;
    for (const [section, e] of this.#exporters) exporters[section] = e.stats();
    // The shards' counters and their records in flight from one read (the ledger identity).
    const sharded = this.#pool?.snapshot();
    return {
      numRecordsExported: this.#exported,
      numRecordsReceived: collector?.dataRecords ?? 0,
      numFlows: this.#pool?.flowCount ?? this.#core.flowCount,
      numConnToCollector: collector?.sessionsActive ?? 0,
      optionsRecordsIgnored: this.#optionsIgnored,
      nonFlowRecords: this.#nonFlowRecords,
      recordsInFlight: sharded?.inFlight ?? 0,
      exporterErrors: this.#exporterErrors,
      exportedWithoutSink: this.#exportedWithoutSink,
      exporterRebuildsFailed: this.#exporterRebuildsFailed,
      exporterCreatesFailed: this.#exporterCreatesFailed,
      collectorCertificatesReissued: { ...this.#certsReissued },
      ...this.#opts.configCounters?.(),
      aggregation: sharded?.stats ?? this.#core.stats(),
      collector,
      exporters,
      ...present("shards", this.#pool?.counters()),
      ...present("api", this.apiStats?.()),
      process: processStats(),
      threads: this.#threadMemory(),
      ...present("logFiles", this.#opts.logFileCounters?.()),
      ...present("podStore", this.#opts.podStoreCounters?.()),
      ...present("certificates", this.#opts.certificateCounters?.()),
      ...present("clusterUuid", this.#opts.clusterUuidCounters?.()),
      ...present("kubeClient", this.#opts.kubeClientCounters?.()),
    };
  }

  #threadMemory(): Record<string, ThreadMemory> {
    const threads: Record<string, ThreadMemory> = {
      main: threadMemory(),
      ...this.#pool?.threadMemory(),
    };
    for (const [section, e] of this.#exporters) {
      const memory = e.threadMemory?.();
      if (memory !== undefined) threads[section] = memory;
    }
    return threads;
  }

  async #apply(next: FlowAggregatorConfig, diff: ConfigDiff): Promise<void> {
    if (this.#state === "new") {
      // Not started yet: start() builds exporters and collector from the config in force.
      this.#applyCore(this.#config, next);
      this.#config = next;
      return;
    }
    if (this.#state !== "running") return;
    const prev = this.#config;
    this.#config = next;
    log.info("updating flow aggregator", { changed: diff.changedKeys.join(",") });
    // What each change does comes from the one reload table (config/diff.ts and each
    // component's section): enable/disable, live update in place, or a rebuild.
    for (const section of EXPORTER_SECTIONS) {
      const change = diff.exporters[section];
      const want = this.#enabled(section, next);
      const have = this.#exporters.get(section);
      if (want && !have) {
        await this.#createExporter(section);
      } else if (!want && have) {
        await this.#stopExporter(section);
      } else if (want && have && change === "live" && have.update !== undefined) {
        // Bounded as a stop is: a sink stuck in a write (a hung file system, a stdout nobody
        // reads) would otherwise hold this reload, every later one and the shutdown behind it.
        const update = have.update(next[section]);
        let failed: { err: unknown } | undefined;
        const settled = update.catch((err) => {
          failed = { err };
        });
        if (await within(settled, this.#stopTimeoutMs) === "timeout") {
          settled.then(() => {
            if (failed) log.error("exporter update failed", { section, err: failed.err });
          });
          log.error("exporter update did not finish in time; going on without waiting", {
            section,
            timeoutMs: this.#stopTimeoutMs,
          });
        } else if (failed === undefined) {
          log.info("updated exporter", { section });
        } else {
          // The rest of the reload still applies; the sink is built again from the new
          // section (kept, counted, when that cannot start either).
          log.error("exporter update failed: rebuilding it with the new configuration", {
            section,
            err: failed.err,
          });
          await this.#replaceExporter(section, have);
        }
      } else if (want && have && (change === "live" || change === "rebuild")) {
        await this.#replaceExporter(section, have);
      }
    }
    this.#applyCore(prev, next);
    if (diff.collector) {
      log.info("collector settings changed: restarting the collecting process", {
        transport: next.aggregatorTransportProtocol,
      });
      await this.#stopCollector();
      const prevCerts = this.#certs;
      if (prev.aggregatorTransportProtocol !== next.aggregatorTransportProtocol) {
        this.#certs = undefined;
      } else if (
        this.#certs !== undefined && prev.flowAggregatorAddress !== next.flowAggregatorAddress
      ) {
        // A new SAN for the server certificate, from the same CA: Agents keep trusting it.
        const { reissueServerCertificate } = await certificateLibrary();
        this.#certs = reissueServerCertificate(this.#certs, {
          namespace: this.#opts.namespace,
          address: next.flowAggregatorAddress,
          now: new Date(this.#clock.wallMs()),
        });
        log.info("server certificate re-issued for the new flowAggregatorAddress", {
          flowAggregatorAddress: next.flowAggregatorAddress,
        });
      }
      try {
        await this.#startCollector(next);
      } catch (err) {
        // A process that silently stopped collecting would lose every record from then on:
        // go back to the settings that worked (the Agents still use them anyway).
        log.error(
          "cannot start the collecting process with the new settings, restarting it with the " +
            "previous ones",
          { err, transport: next.aggregatorTransportProtocol },
        );
        this.#certs = prevCerts;
        try {
          await this.#startCollector(prev);
        } catch (err2) {
          log.error("cannot restart the collecting process: no records are received", {
            err: err2,
          });
        }
      }
    }
    if (diff.restartRequired.length > 0) {
      log.error("Ignoring unsupported configuration updates, please restart FlowAggregator", {
        keys: diff.restartRequired.join(","),
      });
    }
  }

  /**
   * Arms the next comparison of the wall clock with the TLS certificates' validity, on the
   * clock's monotonic time (a step of the wall clock does not move it); none without TLS
   * certificates or while one is armed.
   */
  #armCertificateCheck(): void {
    const every = this.#opts.certificateCheckIntervalMs ?? VALIDITY_CHECK_INTERVAL_MS;
    if (every <= 0 || this.#state !== "running") return;
    if (this.#certs === undefined || this.#certTimer !== undefined) return;
    this.#certTimer = this.#clock.setTimer(every, () => {
      this.#certTimer = undefined;
      const run = this.#updates.then(() => this.#checkCertificates());
      this.#updates = run.catch((err) => log.error("certificate check failed", { err }))
        .finally(() => this.#armCertificateCheck());
    }, { unref: true });
  }

  /**
   * Issues the TLS collector's certificates again when the wall clock is outside their
   * validity, or near its end (`reissueNeeded`): a new CA and client certificate when either
   * needs it (the start's path: published, written to `--cert-dir`), else a new server
   * certificate from the same CA (the `flowAggregatorAddress` change's path). The collector
   * serves the new ones to the next handshakes; its open connections are kept.
   */
  async #checkCertificates(): Promise<void> {
    const certs = this.#certs;
    const collector = this.#collector;
    if (this.#state !== "running" || certs === undefined || collector === undefined) return;
    if (this.#handOutPending === certs) await this.#handOut(certs);
    const lib = await certificateLibrary();
    const nowMs = this.#clock.wallMs();
    const need = lib.reissueNeeded(certs, nowMs);
    if (need === undefined) return;
    const fields = {
      certificate: need.certificate,
      ...validityFields(need.window, nowMs),
      reissued: need.scope === "ca" ? "CA, client and server" : "server",
    };
    if (need.reason === "notValidYet") {
      log.warn(
        "the wall clock moved before the collector certificates' validity (it was ahead when " +
          "they were made): issuing them again",
        fields,
      );
    } else {
      log.info("a collector certificate expires soon: issuing the certificates again", fields);
    }
    const gen = {
      namespace: this.#opts.namespace,
      address: this.#config.flowAggregatorAddress,
      now: new Date(nowMs),
    };
    const next = need.scope === "ca"
      ? lib.generateCertificates(gen)
      : lib.reissueServerCertificate(certs, gen);
    if (need.reason === "expiring") {
      // The current ones are still valid: the new ones are handed out (published, written)
      // first, and used only once that worked, so Agents can have the new CA before the
      // collector serves it; a failed hand-out keeps the current ones until the next check.
      try {
        await this.#opts.onCertificates?.(next);
      } catch (err) {
        log.error(
          "the renewed collector certificates could not be handed out: the current ones are " +
            "kept, tried again at the next check",
          { err },
        );
        return;
      }
      this.#useCertificates(collector, next, certs);
      this.#certsReissued.expiring++;
      return;
    }
    // Not valid yet: every handshake fails already, so the new ones are used at once, then
    // handed out; a failed hand-out is tried again at each check until it works.
    this.#useCertificates(collector, next, certs);
    this.#certsReissued.notValidYet++;
    await this.#handOut(next);
  }

  /**
   * Serves `next` to the collector's next handshakes. With a new CA, client certificates of the
   * replaced one (`prev`) are still accepted while it is valid: Agents get the new client
   * certificate when they next read the Secret, not when the CA changes.
   */
  #useCertificates(
    collector: Collector,
    next: GeneratedCertificates,
    prev: GeneratedCertificates,
  ): void {
    this.#certs = next;
    const newCa = next.ca.certPem !== prev.ca.certPem;
    collector.setTlsMaterial({
      caPem: newCa ? `${next.ca.certPem.trimEnd()}\n${prev.ca.certPem}` : next.ca.certPem,
      certPem: next.server.certPem,
      keyPem: next.server.keyPem,
    });
  }

  /** Hands `certs` out (`onCertificates`), or keeps them pending for the next check. */
  async #handOut(certs: GeneratedCertificates): Promise<void> {
    try {
      await this.#opts.onCertificates?.(certs);
      this.#handOutPending = undefined;
    } catch (err) {
      this.#handOutPending = certs;
      log.error(
        "the re-issued collector certificates could not be handed out: tried again at the " +
          "next check",
        { err },
      );
    }
  }

  /** Applies the aggregation-core settings (timeouts, Pod labels) that changed. */
  #applyCore(prev: FlowAggregatorConfig, next: FlowAggregatorConfig): void {
    const settings = this.#shardSettings(next);
    this.#pool?.update(settings);
    // A core not made yet will be made with these settings: only the log lines are wanted.
    const changes = applyCoreSettings(
      this.#oneCore ?? UNMADE_CORE,
      settings,
      this.#shardSettings(prev),
    );
    for (const c of changes) {
      log.info(c.msg, Object.fromEntries(c.keys.map((k) => LOGGED_SETTING[k](next))));
    }
  }

  #enabled(section: ExporterSection, cfg: FlowAggregatorConfig): boolean {
    return cfg[section].enable;
  }

  /**
   * Creates the sink of `section`; `lastDelayMs` is the pause before this attempt when it is a
   * retry (the next one doubles it), undefined for a start or a reload (1 s again).
   */
  async #createExporter(section: ExporterSection, lastDelayMs?: number): Promise<void> {
    this.#createRetries.get(section)?.timer.cancel();
    this.#createRetries.delete(section);
    let exporter: Exporter | undefined;
    try {
      exporter = await this.#startedExporter(section);
    } catch (err) {
      this.#exporterCreatesFailed++;
      // Only a worker too slow to start (a busy machine) is tried again: a missing permission
      // stays missing for the process's life, and a configuration the sink refuses stays
      // refused until a reload (which tries again).
      const permanent = !(err instanceof WorkerStartTimeout);
      const delayMs = lastDelayMs === undefined
        ? CREATE_RETRY_FIRST_MS
        : Math.min(lastDelayMs * 2, CREATE_RETRY_MAX_MS);
      log.error("cannot create exporter", {
        section,
        err,
        ...missingFields(err),
        exporterCreatesFailed: this.#exporterCreatesFailed,
        ...(permanent ? {} : { retryInMs: delayMs }),
      });
      if (permanent || this.#state !== "running") return;
      const entry = {
        delayMs,
        timer: this.#clock.setTimer(delayMs, () => {
          // Serialised with reloads and stop, as every change of the exporters is.
          const run = this.#updates.then(() => this.#retryCreate(section, entry));
          this.#updates = run.catch((e) => log.error("exporter create retry failed", { err: e }));
        }, { unref: true }),
      };
      this.#createRetries.set(section, entry);
      return;
    }
    this.#enable(section, exporter);
  }

  /**
   * The retry `entry` of {@linkcode #createExporter} fired: tried when still wanted, and when no
   * reload has meanwhile tried (and armed a retry of its own, or created the sink).
   */
  async #retryCreate(
    section: ExporterSection,
    entry: CreateRetry,
  ): Promise<void> {
    if (this.#createRetries.get(section) !== entry) return; // cancelled or replaced meanwhile
    if (
      this.#state !== "running" || this.#exporters.has(section) ||
      !this.#enabled(section, this.#config)
    ) {
      this.#createRetries.delete(section);
      return;
    }
    await this.#createExporter(section, entry.delayMs);
  }

  /** The sink of `section` built from the configuration in force, started; throws if it cannot. */
  async #startedExporter(section: ExporterSection): Promise<Exporter | undefined> {
    const exporter = await this.#factory(section, this.#config);
    await exporter?.start();
    return exporter;
  }

  /** Makes `exporter` (when there is one) the sink of `section`. */
  #enable(section: ExporterSection, exporter: Exporter | undefined): void {
    if (exporter === undefined) return;
    this.#exporters.set(section, exporter);
    log.info("exporter enabled", { section, exporter: exporter.name });
  }

  /**
   * Awaits every exporter's `flush()` (those that have one). False if one did not finish within
   * the exporter stop timeout (its sink is stuck: waiting more would only delay the shutdown).
   */
  async #flushExporters(): Promise<boolean> {
    const flushes = [...this.#exporters.values()].map((e) =>
      e.flush?.().catch((err) => log.error("exporter flush failed", { exporter: e.name, err }))
    );
    if (await within(Promise.all(flushes), this.#stopTimeoutMs) === "timeout") {
      log.error("exporter flush did not finish in time", { timeoutMs: this.#stopTimeoutMs });
      return false;
    }
    return true;
  }

  /** Longest wait for one exporter's flush or stop. */
  get #stopTimeoutMs(): number {
    return this.#opts.exporterStopTimeoutMs ?? EXPORTER_STOP_TIMEOUT_MS;
  }

  /**
   * Stops `e`, waiting at most the stop timeout; past it the exporter is abandoned (a worker's
   * sink terminated, what it held counted as dropped, but for what it had in its spool). Never
   * rejects.
   */
  async #stopWithin(e: Exporter, section: ExporterSection, what: string): Promise<void> {
    try {
      if (await within(e.stop(), this.#stopTimeoutMs) === "timeout") {
        log.error(
          e.abandon === undefined
            ? `${what} did not stop in time; what it still holds stays counted as buffered`
            : `${what} did not stop in time; records it still holds are dropped (but for those in its spool)`,
          { section, timeoutMs: this.#stopTimeoutMs },
        );
        e.abandon?.(`did not stop within ${this.#stopTimeoutMs} ms`);
      }
    } catch (err) {
      log.error(`error stopping ${what}`, { section, err });
    }
  }

  async #stopExporter(section: ExporterSection): Promise<void> {
    const e = this.#exporters.get(section);
    if (e === undefined) return;
    this.#exporters.delete(section);
    await this.#stopWithin(e, section, "exporter");
    const s = e.stats();
    if (this.#state === "stopping") this.#finalSinkStats.set(section, s);
    log.info("exporter stopped", { section, ...s });
  }

  /** Stops the collector, keeping its counters so that none goes back (the next one's add on). */
  async #stopCollector(): Promise<void> {
    const c = this.#collector;
    if (c === undefined) return;
    await c.stop();
    this.#earlierCollectors = withEarlierCollectors(this.#earlierCollectors, c.stats());
    this.#collector = undefined;
  }

  async #startCollector(cfg: FlowAggregatorConfig = this.#config): Promise<void> {
    const protocol = transportOf(cfg.aggregatorTransportProtocol);
    if (protocol === "udp" && typeof Deno.listenDatagram !== "function") {
      // deno.json enables the API for `deno run main.ts`; a bundled script run elsewhere does
      // not see deno.json, and the bare "not a function" error would leave the user guessing.
      throw new Error(
        "aggregatorTransportProtocol UDP needs Deno's unstable net API: run with --unstable-net",
      );
    }
    let tls;
    if (protocol === "tls") {
      this.#certs ??= this.#opts.certificates ?? (await certificateLibrary()).generateCertificates({
        namespace: this.#opts.namespace,
        address: cfg.flowAggregatorAddress,
        now: new Date(this.#clock.wallMs()),
      });
      tls = {
        caPem: this.#certs.ca.certPem,
        certPem: this.#certs.server.certPem,
        keyPem: this.#certs.server.keyPem,
      };
      await this.#opts.onCertificates?.(this.#certs);
    }
    const collector = new Collector(
      {
        address: this.#opts.listenAddress,
        protocol,
        tls,
        clock: this.#collectorClock,
        udpReceiver: this.#opts.udpReceiver,
        limits: cfg.limits,
        // The core takes counters and IPv4 addresses as numbers: no BigInt per counter, no
        // address text formatted by the decoder and parsed back by the core.
        wireNumbers: true,
        // Records are decoded where they are aggregated, as views (shard/views.ts): in the
        // shards (the main thread only walks them to route them) or, with one shard, here.
        raw: true,
      },
      (records, ctx, raw) => this.ingest(records, ctx, raw),
    );
    const address = this.#opts.listenAddress ?? "[::]:4739";
    try {
      await collector.start();
    } catch (err) {
      // "Address already in use" alone named neither the listener nor the address.
      throw new Error(
        `IPFIX collector (${protocol.toUpperCase()}) cannot listen on ${address}: ${
          (err as Error).message
        }`,
        { cause: err },
      );
    }
    this.#collector = collector;
    log.info(`Started ${protocol.toUpperCase()} collecting process`, {
      address,
      port: collector.port,
    });
    if (protocol === "tls") this.#armCertificateCheck();
  }

  /**
   * Sees every exported flow, synchronously, before the sinks (the API's live view). It must be
   * cheap, must not throw, and keeps no reference to `addressWords` (the core's storage). It
   * reads addresses through `exportedAddress`: when all sinks run in workers, the flows carry no
   * address text.
   */
  exportObserver: ExportObserver | undefined;

  /** The API port's counters, in {@linkcode stats} (set by the API when it starts). */
  apiStats: (() => ApiFrontStats | undefined) | undefined;

  #export(flow: ExportedFlow): void {
    this.#exported++;
    this.exportObserver?.observe(flow);
    if (this.#exporters.size === 0) {
      this.#exportedWithoutSink++;
      return;
    }
    // Fixed order (EXPORTER_SECTIONS), not the Map's insertion order, which a disable/enable
    // reload would otherwise change.
    for (const section of EXPORTER_SECTIONS) {
      const e = this.#exporters.get(section);
      if (e !== undefined) this.#offer(e, flow);
    }
  }

  #offer(e: Exporter, flow: ExportedFlow): void {
    try {
      e.addRecord(flow);
    } catch (err) {
      // One exporter's failure never costs the others the record.
      this.#exporterErrors++;
      log.error("exporter rejected a record", { exporter: e.name, err });
    }
  }

  /**
   * A shard's batch of expired flows: what {@linkcode #export} does for each, except that an
   * exporter taking batches (a sink's worker proxy: the shards' row format is its own) and the
   * observer read the rows as they are; the flows are decoded only for an exporter that takes
   * them one by one, once for all such.
   */
  #exportBatch(buf: BatchBuffer): void {
    const held = this.#held;
    if (held !== undefined) {
      held.push(buf);
      return;
    }
    const batch = openBatch(buf);
    const n = batch.count;
    this.#exported += n;
    let flows: ExportedFlow[] | undefined;
    const observer = this.exportObserver;
    if (observer?.observeBatch !== undefined) observer.observeBatch(batch);
    else if (observer !== undefined) {
      for (const f of flows ??= readFlows(batch)) observer.observe(f);
    }
    if (this.#exporters.size === 0) {
      this.#exportedWithoutSink += n;
      return;
    }
    for (const section of EXPORTER_SECTIONS) {
      const e = this.#exporters.get(section);
      if (e === undefined) continue;
      if (e.addBatch === undefined) {
        for (const f of flows ??= readFlows(batch)) this.#offer(e, f);
        continue;
      }
      const r = offerBatch(e, batch);
      if (r.failed) {
        // As one error per record addRecord would have refused.
        this.#exporterErrors += r.lost;
        log.error("exporter rejected a batch of records", {
          exporter: e.name,
          lost: r.lost,
          err: r.error,
        });
      }
    }
  }

  #arm(delayMs?: number): void {
    if (this.#state !== "running") return;
    const delay = delayMs ?? Math.min(Math.max(this.#core.nextExpiryDelayMs(), 0), MAX_TIMER_MS);
    this.#timer = setTimeout(() => void this.#tick(), delay);
  }

  /** One timer tick: a sweep of at most {@linkcode SWEEP_SLICE} due flows. */
  async #tick(): Promise<void> {
    try {
      this.#core.expire(this.#emit, {
        ...this.#opts.hooks,
        limit: SWEEP_SLICE,
        addressText: this.#addressText(),
      });
    } catch (err) {
      log.error("Error when sending expired flow records", { err });
    }
    if (this.#state === "running" && this.#core.hasExpired()) {
      // More flows are due than one slice (a burst of expiries): let the exporters drain this
      // slice before the next, so a bounded exporter buffer (the flow log's 16 MiB) never
      // overflows because of one synchronous sweep.
      await this.#flushExporters();
      this.#arm(0);
      return;
    }
    this.#arm();
  }

  /** One info line with every counter ({@linkcode statsFields}): every minute, at stop, now. */
  logMetrics(): void {
    log.info("record metrics", statsFields(this.stats()));
  }
}

/**
 * The `missing` field of a sink's start failure that is a lack of permissions: the flags, on
 * their own, so the line names them whatever the error's wording.
 */
/** An armed retry of a sink's creation: its timer and the pause it waits. */
interface CreateRetry {
  readonly timer: ClockTimer;
  readonly delayMs: number;
}

/** First pause before a sink that could not be created is tried again, ms. */
const CREATE_RETRY_FIRST_MS = 1_000;
/** Longest pause between such tries, ms. */
const CREATE_RETRY_MAX_MS = 60_000;

function missingFields(err: unknown): LogFields {
  return err instanceof MissingPermissionsError ? { missing: err.flags.join(" ") } : {};
}

/**
 * `{ key: value }`, or no field at all when `value` is undefined: the counters of a part the
 * process does not run (shards, API, klog files, Pod store) are absent, not `undefined`.
 */
function present<K extends string, V>(key: K, value: V | undefined): { [P in K]?: V } {
  return (value === undefined ? {} : { [key]: value }) as { [P in K]?: V };
}

/**
 * Every counter of a stats snapshot as flat `key = value` fields (the metrics log line and the
 * API's Prometheus text): the process's own, the collector's (unprefixed), the core's
 * (`aggregation.*`), the aggregation shards' (`shards.*`), the UDP receive path's (`udp*`), the
 * klog log files' (`logFiles.*`), the Kubernetes side's (`podStore.*`, `certificates.*`,
 * `clusterUuid.*`, `kubeClient.*`) and each sink's (`<section>.*`, its worker's own counters
 * under `<section>.sink.*`).
 */
export function statsFields(stats: FlowAggregatorStats): LogFields {
  const {
    aggregation,
    collector,
    exporters,
    shards,
    api,
    process,
    logFiles,
    podStore,
    certificates,
    clusterUuid,
    kubeClient,
    threads,
    ...own
  } = stats;
  const fields: LogFields = {};
  counterFields(own, "", fields);
  if (shards !== undefined) counterFields(shards, "shards.", fields);
  if (api !== undefined) counterFields(api, "api.", fields);
  if (process !== undefined) counterFields(process, "process.", fields);
  if (logFiles !== undefined) counterFields(logFiles, "logFiles.", fields);
  if (podStore !== undefined) counterFields(podStore, "podStore.", fields);
  if (certificates !== undefined) counterFields(certificates, "certificates.", fields);
  if (clusterUuid !== undefined) counterFields(clusterUuid, "clusterUuid.", fields);
  if (kubeClient !== undefined) counterFields(kubeClient, "kubeClient.", fields);
  // Every thread's together (`/metrics` has each thread's).
  if (threads !== undefined) {
    const all = Object.values(threads);
    for (const k of Object.keys(all[0] ?? {}) as (keyof ThreadMemory)[]) {
      fields[`threads.${k}`] = all.reduce((sum, m) => sum + m[k], 0);
    }
  }
  const derived: MetricsLineDerived = {
    recordsAggregated: aggregation.recordsAccepted,
    rejected: rejectedTotal(stats),
  };
  Object.assign(fields, derived);
  counterFields(aggregation, "aggregation.", fields);
  if (collector !== undefined) {
    // Per-exporter counters (up to 10,000 peers) are for the API, not a log line.
    const { exporters: _perPeer, udpReceiver: udp, ...counters } = collector;
    counterFields(counters, "", fields);
    if (udp !== undefined) {
      const { kernelDropsKnown, ...counters } = udp;
      for (const [k, v] of Object.entries(counters)) {
        if (typeof v === "number") fields[`udp${k[0].toUpperCase()}${k.slice(1)}`] = v;
      }
      // Never a 0 that means "could not look": the socket path without /proc access.
      if (!kernelDropsKnown) fields.udpKernelDrops = "unknown";
    }
  }
  for (const [section, e] of Object.entries(exporters)) {
    const { sink, ...rest } = e as ExporterStats & { sink?: Record<string, unknown> };
    counterFields(rest, `${section}.`, fields);
    if (sink !== undefined) counterFields(sink, `${section}.sink.`, fields, false);
  }
  return fields;
}

/**
 * Copies the numeric (and boolean) counters of a stats object into `out` as `prefix + key`. A
 * nested map of numbers (counts by reason) becomes its sum when `sumMaps`: its keys can carry
 * peer-supplied values (a framing error names the version it read), which must not grow the
 * line; the breakdown is in the API. Other nested objects and strings are skipped.
 */
function counterFields(stats: object, prefix: string, out: LogFields, sumMaps = true): void {
  for (const [k, v] of Object.entries(stats)) {
    if (typeof v === "number" || typeof v === "bigint" || typeof v === "boolean") {
      out[prefix + k] = v;
    } else if (sumMaps && typeof v === "object" && v !== null) {
      const values = Object.values(v);
      if (values.every((x) => typeof x === "number")) out[prefix + k] = sumOf(v);
    }
  }
}

/** Records the aggregation core rejected, every reason. */
export function rejectedTotal(stats: FlowAggregatorStats): number {
  return sumOf(stats.aggregation.recordsRejected);
}

/**
 * The loss ledger's stages: every record received is aggregated, rejected by the core, not a
 * flow record, an options record, or in flight to a shard worker that has not counted it yet
 * (`received = aggregated + rejected + nonFlow + options + inFlight`, at every read).
 */
export function ledgerStages(stats: FlowAggregatorStats): {
  received: number;
  aggregated: number;
  rejected: number;
  nonFlow: number;
  options: number;
  inFlight: number;
} {
  return {
    received: stats.numRecordsReceived,
    aggregated: stats.aggregation.recordsAccepted,
    rejected: rejectedTotal(stats),
    nonFlow: stats.nonFlowRecords,
    options: stats.optionsRecordsIgnored,
    inFlight: stats.recordsInFlight,
  };
}

function sumOf(counts: Readonly<Record<string, number>>): number {
  let n = 0;
  for (const v of Object.values(counts)) n += v;
  return n;
}
