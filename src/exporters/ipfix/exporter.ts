/**
 * IPFIX re-export of aggregated flows to an external collector (exporters.md §2), fixing the
 * upstream weak points of §9.1: `addRecord` only enqueues (never blocks the export loop, never
 * fails) the record encoded, in a queue bounded in records and bytes (`queue.ts`: a collector
 * that is down or does not read costs at most `maxQueueBytes`, not a heap of record objects),
 * one async pump owns the socket, reconnects with exponential backoff and re-sends the
 * templates on every connection, records are batched (one data set per message, so upstream
 * collectors that read only the first set still decode everything) under the UDP/TCP size
 * limits, each outgoing value is looked up by IE name (never by position), the template id is
 * resolved after the connection exists (no template-ID-0 record), sequence numbers follow
 * RFC 7011, strings are UTF-8, TLS works, and `stop()` flushes and closes the socket.
 *
 * **Delivery accounting.** Over TCP/TLS a record written to the socket is not delivered: the
 * kernel holds it in our send buffer and the collector's receive buffer, and a collector that
 * crashes (or never reads) loses all of that. Deno offers no `SIOCOUTQ` without FFI, so a
 * written record is counted `unacknowledged` until one of two proofs that the collector read
 * it, and only then `exported`:
 * - **the window moved on**: at most `deliveryWindowBytes` (our send buffer plus the peer's
 *   receive buffer, their Linux maxima by default) can be held between us and the collector's
 *   application, so once that many more bytes were accepted after a record's message, the
 *   collector has read it;
 * - **a clean end**: at `stop()` (or, with `idleSessionTimeoutMs`, when a session holding
 *   unproven records has been idle that long) the stream is ended (FIN / close_notify) and the
 *   collector closes its side after reading to the end.
 * Records still unproven when their connection fails stay `unacknowledged` for good (also
 * counted `possiblyLost`) and are not re-sent: delivery is at most once across a collector
 * crash. A write that fails part-way is split at message granularity: messages the kernel
 * accepted whole are unacknowledged, the rest (never read by anyone) are re-sent on the next
 * connection, or dropped when the stop timeout aborted the write. UDP is fire-and-forget: a
 * datagram sent is `exported`. The ledger `received = exported + dropped + queued +
 * unacknowledged` holds at any time.
 *
 * Permissions: `--allow-net` for the collector address (plus whatever reads the TLS PEM files).
 */

import type { Exporter, ExporterStats } from "../exporter.ts";
import { noteDenied } from "../denied.ts";
import type { ExportedFlow } from "../../aggregation/record.ts";
import type { DataType, FieldValue, TemplateRecord } from "../../ipfix/types.ts";
import {
  elementByName,
  encodeMessage,
  encodeTemplateSet,
  fieldsFor,
  fnv1_32,
  MESSAGE_HEADER_LENGTH,
  MessageBuilder,
  type MessageHeaderFields,
  RecordEncoder,
  SET_HEADER_LENGTH,
} from "../../ipfix/mod.ts";
import {
  AGGREGATED_IPV4_FIELDS,
  AGGREGATED_IPV6_FIELDS,
  POD_LABEL_FIELDS,
} from "../../record/schema.ts";
import { parseCollectorAddress } from "./address.ts";
import { DEFAULT_TEMPLATE_REFRESH_MS } from "./refresh.ts";
import type { FlowCollectorConfig } from "./config.ts";
import type { Clock, ClockTimer } from "../../clock.ts";
import { systemClock, within } from "../../clock.ts";
import { logger, RateLimitedLog } from "../../log.ts";
import {
  openTransport,
  SendError,
  type Transport,
  type TransportTlsOptions,
} from "../../net/transport.ts";
import { JSON_DOCUMENT_SUFFIX, jsonDocumentPrefix, jsonRecordFields } from "./json.ts";
import { type QueuedRecord, RecordQueue } from "./queue.ts";

const log = logger("exporter.ipfix");
const textEncoder = new TextEncoder();
const JSON_SUFFIX_BYTES = textEncoder.encode(JSON_DOCUMENT_SUFFIX);

/** Template id of the IPv4 export template. */
export const IPV4_TEMPLATE_ID = 256;
/** Template id of the IPv6 export template. */
export const IPV6_TEMPLATE_ID = 257;
export { DEFAULT_TEMPLATE_REFRESH_MS };
/** Default bound of the queue of records waiting to be sent. */
export const DEFAULT_MAX_QUEUE = 100_000;
/**
 * Default bound of the queue's bytes (records held encoded, `queue.ts`): 64 MiB, so the
 * 100,000-record bound is the one reached by records of the usual size (the 63-field template's
 * record is about 630 bytes) and records made large by long Pod labels are bounded by bytes.
 */
export const DEFAULT_MAX_QUEUE_BYTES = 64 * 1024 * 1024;
/**
 * Default of {@linkcode IpfixExporterOptions.deliveryWindowBytes}: Linux's default maxima of a
 * TCP send buffer (`net.ipv4.tcp_wmem`, 4 MiB) and receive buffer (`net.ipv4.tcp_rmem`, 32 MiB
 * on current kernels, 6 MiB on older ones), which bound what both kernels together can hold.
 */
export const DEFAULT_DELIVERY_WINDOW_BYTES = (4 + 32) * 1024 * 1024;

// Largest IPFIX message (u16 length) and largest UDP payload over IPv4.
const MAX_IPFIX_MESSAGE = 65535;
const MAX_UDP_PAYLOAD = 65507;
// A session that lasted at least this long resets the reconnect backoff.
const HEALTHY_SESSION_MS = 10_000;
// Work per pump iteration: bounds memory of one write and lets stop() interleave.
const BATCH_RECORDS = 2048;

/** Options of {@linkcode IpfixExporter}. */
export interface IpfixExporterOptions {
  /** `flowCollector.address`: `host[:port][:proto]`, proto `tcp` (default), `udp` or `tls`. */
  address: string;
  /** Explicit observation domain id (0 is honoured); absent: derived from `clusterUuid`. */
  observationDomainId?: number;
  /** Cluster UUID text; required unless `observationDomainId` is given. */
  clusterUuid?: string;
  /** `IPFIX` (default) or `JSON` (one JSON document per line, no templates). */
  recordFormat?: string;
  /** Adds `sourcePodLabels` / `destinationPodLabels` to both templates (65 fields). */
  podLabels?: boolean;
  /** TLS settings for a `:tls` address (CA, client certificate and key as PEM text). */
  tls?: TransportTlsOptions;
  /**
   * UDP template refresh interval; default {@linkcode DEFAULT_TEMPLATE_REFRESH_MS}. Ignored on
   * TCP/TLS (templates go once per connection) and for JSON.
   */
  templateRefreshMs?: number;
  /** Records kept while the collector is unreachable; older ones are dropped first. */
  maxQueueRecords?: number;
  /**
   * Bytes of encoded records kept while the collector is unreachable (each record's encoding
   * plus 5); older ones are dropped first. Default {@linkcode DEFAULT_MAX_QUEUE_BYTES}.
   */
  maxQueueBytes?: number;
  /**
   * Messages are kept strictly below this size; default 1400 (UDP) / 65535 (TCP, TLS). A
   * record larger on its own (long Pod labels) goes alone in a larger message, up to the
   * largest datagram on UDP (IP-fragmented: counted in `oversizeDatagrams`, logged).
   */
  maxMessageBytes?: number;
  /** First reconnect delay; doubles per failure up to `backoffMaxMs`. Default 1000 ms. */
  backoffInitialMs?: number;
  /** Reconnect delay cap; default 30000 ms. */
  backoffMaxMs?: number;
  /** Connect/handshake timeout; default 5000 ms. */
  connectTimeoutMs?: number;
  /** How long `stop()` keeps trying to deliver the queue; default 5000 ms. */
  stopTimeoutMs?: number;
  /**
   * TCP/TLS: most bytes the two kernels can hold between a write and the collector's read (our
   * send buffer plus its receive buffer); a record is `exported` once this many more bytes were
   * written after it (module doc). Raise it when either host raised `tcp_wmem`/`tcp_rmem`.
   * Default {@linkcode DEFAULT_DELIVERY_WINDOW_BYTES}.
   */
  deliveryWindowBytes?: number;
  /**
   * TCP/TLS: a session idle (nothing queued) this long while holding unproven records is ended
   * cleanly, the collector's close proving them read; the next record opens a new session. 0
   * (the default) never does. The collector's answer is awaited at most `connectTimeoutMs`.
   */
  idleSessionTimeoutMs?: number;
  /**
   * Time source and timers for export times, the template refresh, the reconnect backoff and
   * the stop timeout; default the system clock.
   */
  clock?: Clock;
}

/** Counters of the IPFIX exporter. */
export interface IpfixExporterStats extends ExporterStats {
  /** Successful connections after the first one. */
  reconnects: number;
  /** Template records sent (two per connection, plus UDP refreshes). */
  templatesSent: number;
  /**
   * Times both templates were sent again over UDP after `templateRefreshTimeout` (60 s), so a
   * collector that started late or restarted can decode (the sends at connect not counted).
   */
  templateRefreshes: number;
  /** Messages (IPFIX) or JSON documents written. */
  messages: number;
  /** Bytes written. */
  bytes: number;
  /** Records waiting in the queue or being written. */
  queued: number;
  /**
   * Bytes the queue holds (records encoded, 5 bytes of bookkeeping each; not the batch being
   * written), bounded by `maxQueueBytes` (64 MiB).
   */
  queuedBytes: number;
  /**
   * Records written to a connection and not (yet) proven read by the collector: those awaiting
   * proof on the current connection plus {@linkcode IpfixExporterStats.possiblyLost}.
   */
  unacknowledged: number;
  /** Records written to connections that ended before they were proven read (at most once). */
  possiblyLost: number;
  /**
   * UDP datagrams larger than `maxMessageBytes` (a record too large on its own): sent, but
   * fragmented by IP beyond the path MTU, and lost whole when one fragment is.
   */
  oversizeDatagrams: number;
  /** True while a connection is open. */
  connected: boolean;
}

/** Parses a UUID's text form into its 16 raw bytes; throws on anything else. */
export function uuidBytes(uuid: string): Uint8Array {
  const hex = uuid.replace(/-/g, "");
  if (!/^[0-9a-fA-F]{32}$/.test(hex)) throw new Error(`ipfix: "${uuid}" is not a UUID`);
  const out = new Uint8Array(16);
  for (let i = 0; i < 16; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** Observation domain id upstream derives from a cluster UUID: FNV-1 of its 16 raw bytes. */
export function observationDomainIdFromUuid(uuid: string): number {
  return fnv1_32(uuidBytes(uuid));
}

/**
 * Options for the `flowCollector` config section (`observationDomainID` unset = derived,
 * `recordFormat`), with the top-level `recordContents.podLabels` and the cluster UUID passed in
 * by the caller; everything else keeps its default.
 */
export function ipfixOptionsFromConfig(
  config: Pick<
    FlowCollectorConfig,
    | "address"
    | "observationDomainID"
    | "recordFormat"
    | "idleSessionTimeoutMs"
    | "templateRefreshTimeoutMs"
  >,
  extra: Partial<IpfixExporterOptions> = {},
): IpfixExporterOptions {
  return {
    address: config.address,
    observationDomainId: config.observationDomainID,
    recordFormat: config.recordFormat || "IPFIX",
    idleSessionTimeoutMs: config.idleSessionTimeoutMs,
    templateRefreshMs: config.templateRefreshTimeoutMs,
    ...extra,
  };
}

/** The element names of the export template (exporters.md §2.4), 63 or 65 with labels. */
export function exportTemplateFields(ipv6: boolean, podLabels: boolean): string[] {
  const base = ipv6 ? AGGREGATED_IPV6_FIELDS : AGGREGATED_IPV4_FIELDS;
  return podLabels ? [...base, ...POD_LABEL_FIELDS] : [...base];
}

function zeroValue(type: DataType): FieldValue {
  switch (type) {
    case "unsigned64":
    case "signed64":
    case "dateTimeMilliseconds":
    case "dateTimeMicroseconds":
    case "dateTimeNanoseconds":
      return 0n;
    case "string":
      return "";
    case "ipv4Address":
      return "0.0.0.0";
    case "ipv6Address":
      return "::";
    case "boolean":
      return false;
    case "macAddress":
      return new Uint8Array(6);
    case "octetArray":
      return new Uint8Array(0);
    default:
      return 0;
  }
}

interface OutTemplate {
  readonly id: number;
  readonly names: readonly string[];
  readonly zeros: readonly FieldValue[];
  readonly record: TemplateRecord;
  /** Looks every value up by IE name; missing values are written as zero. */
  readonly encoder: RecordEncoder;
  /** The template set (set header included), constant for the exporter's life. */
  readonly setBytes: Uint8Array;
}

function buildTemplate(id: number, ipv6: boolean, podLabels: boolean): OutTemplate {
  const names = exportTemplateFields(ipv6, podLabels);
  const zeros = names.map((n) => {
    const ie = elementByName(n);
    if (ie === undefined) throw new Error(`ipfix: export element ${n} missing from the registry`);
    return zeroValue(ie.type);
  });
  const record: TemplateRecord = { id, fields: fieldsFor(names), scopeFieldCount: 0 };
  const encoder = new RecordEncoder(id, record.fields);
  return { id, names, zeros, record, encoder, setBytes: encodeTemplateSet([record]) };
}

/** One batch ready for the transport. */
interface Built {
  /** What to hand to `Transport.send`. */
  payload: Uint8Array[];
  /** IPFIX messages (or JSON documents) in it. */
  messages: number;
  /** Bytes in it. */
  bytes: number;
  /** Records it carries. */
  sent: number;
  /**
   * The records from the `from`-th on (in message order), to queue again after a failed write;
   * call before the next batch is built (their bytes are views into this one).
   */
  rest(from: number): QueuedRecord[];
  /** Length of each message, in order. */
  lengths: number[];
  /** Data records in each message, in order. */
  records: number[];
}

/**
 * Data records per message of a batch, from the RFC 7011 sequence numbers in the messages'
 * headers (each counts the records sent before it); `firstSeq + total` ends the last one.
 */
function recordsPerMessage(messages: Uint8Array[], firstSeq: number, total: number): number[] {
  const seqs = messages.map((m) => new DataView(m.buffer, m.byteOffset, m.byteLength).getUint32(8));
  return seqs.map((seq, i) => ((i + 1 < seqs.length ? seqs[i + 1] : firstSeq + total) - seq) >>> 0);
}

/** Sends aggregated flows to an external IPFIX (or JSON-lines) collector. */
export class IpfixExporter implements Exporter {
  /** Exporter name in logs and metrics. */
  readonly name = "ipfix";
  /** The observation domain id used in every message header. */
  readonly observationDomainId: number;
  readonly #host: string;
  readonly #port: number;
  readonly #proto: "tcp" | "udp" | "tls";
  readonly #json: boolean;
  readonly #tls?: TransportTlsOptions;
  readonly #templates: readonly [OutTemplate, OutTemplate];
  readonly #refreshMs: number;
  readonly #maxQueue: number;
  readonly #maxQueueBytes: number;
  readonly #maxMessage: number;
  readonly #backoffInitial: number;
  readonly #backoffMax: number;
  readonly #connectTimeout: number;
  readonly #stopTimeout: number;
  readonly #window: number;
  readonly #idleSessionMs: number;
  readonly #clock: Clock;
  readonly #dropLog = new RateLimitedLog(10_000, () => this.#clock.nowMs());
  /** Frames each batch; reused, as one batch is built and sent at a time. */
  readonly #out = new MessageBuilder();
  readonly #header: MessageHeaderFields = {
    exportTime: 0,
    sequenceNumber: 0,
    observationDomainId: 0,
  };

  /**
   * Records waiting, encoded (`queue.ts`); the records of a write that failed part-way are put
   * back at its head and go out first after the next connect.
   */
  readonly #queue = new RecordQueue();
  /** Records of the batch being written (taken from the queue, not yet accounted). */
  #inWrite = 0;

  // Delivery proof on the current stream connection (module doc).
  /** Bytes accepted on it, templates included. */
  #written = 0;
  /** Messages with data records written on it and not proven read: end offset, records. */
  #pendingEnds: number[] = [];
  #pendingRecords: number[] = [];
  #pendingHead = 0;
  /** Sum of the pending records. */
  #awaitingProof = 0;
  #possiblyLost = 0;

  #transport?: Transport;
  #everConnected = false;
  #seq = 0;
  #lastTemplatesMs = 0;
  #refreshDue = false;
  #backoff = 0;
  #delayNextConnect = false;
  #connectedAt = 0;
  #started = false;
  #stopping = false;
  /** Aborted when stop() times out, so a connect in progress ends at once. */
  readonly #abort = new AbortController();
  #aborted = false;
  #pump?: Promise<void>;
  #wake?: () => void;
  #interruptSleep?: () => void;
  #refreshTimer?: ClockTimer;
  /**
   * The flushes waiting for the queue to empty: one promise however many ask (every flush
   * waits for the same moment), so calls made while a collector does not read, each given up
   * on by the export loop's timeout, do not pile up a waiter each.
   */
  #flushed: PromiseWithResolvers<void> | undefined;

  #received = 0;
  #exported = 0;
  #dropped = 0;
  #oversizeDatagrams = 0;
  #errors = 0;
  #reconnects = 0;
  #templatesSent = 0;
  #templateRefreshes = 0;
  #messages = 0;
  #bytes = 0;

  /** Validates the options (throws on a bad address or format); does no I/O. */
  constructor(options: IpfixExporterOptions) {
    const addr = parseCollectorAddress(options.address);
    this.#host = addr.host;
    this.#port = addr.port;
    this.#proto = addr.proto;
    const format = options.recordFormat ?? "IPFIX";
    if (format !== "IPFIX" && format !== "JSON") {
      throw new Error(`record format ${format} is not supported`);
    }
    this.#json = format === "JSON";
    this.#tls = options.tls;
    if (options.observationDomainId !== undefined) {
      const id = options.observationDomainId;
      if (!Number.isInteger(id) || id < 0 || id > 0xffffffff) {
        throw new Error(`ipfix: observationDomainID ${id} is not a u32`);
      }
      this.observationDomainId = id;
    } else if (options.clusterUuid !== undefined) {
      this.observationDomainId = observationDomainIdFromUuid(options.clusterUuid);
    } else {
      // The process has one source of the cluster UUID (the export loop's); a stand-in drawn
      // here would make the id change with every rebuild of the exporter.
      throw new Error("ipfix: neither an observation domain id nor a cluster UUID was given");
    }
    const labels = options.podLabels ?? false;
    this.#templates = [
      buildTemplate(IPV4_TEMPLATE_ID, false, labels),
      buildTemplate(IPV6_TEMPLATE_ID, true, labels),
    ];
    this.#refreshMs = options.templateRefreshMs ?? DEFAULT_TEMPLATE_REFRESH_MS;
    this.#maxQueue = Math.max(1, options.maxQueueRecords ?? DEFAULT_MAX_QUEUE);
    this.#maxQueueBytes = Math.max(1, options.maxQueueBytes ?? DEFAULT_MAX_QUEUE_BYTES);
    this.#maxMessage = Math.min(
      options.maxMessageBytes ?? (this.#proto === "udp" ? 1400 : MAX_IPFIX_MESSAGE + 1),
      MAX_IPFIX_MESSAGE + 1,
    );
    this.#backoffInitial = options.backoffInitialMs ?? 1000;
    this.#backoffMax = options.backoffMaxMs ?? 30_000;
    this.#connectTimeout = options.connectTimeoutMs ?? 5000;
    this.#stopTimeout = options.stopTimeoutMs ?? 5000;
    this.#window = options.deliveryWindowBytes ?? DEFAULT_DELIVERY_WINDOW_BYTES;
    this.#idleSessionMs = options.idleSessionTimeoutMs ?? 0;
    this.#clock = options.clock ?? systemClock;
  }

  /** The export templates (IPv4 then IPv6) as sent on the wire. */
  get templates(): readonly TemplateRecord[] {
    return this.#templates.map((t) => t.record);
  }

  /** Starts the send pump; the connection is opened when the first record arrives. */
  start(): Promise<void> {
    if (this.#started) return Promise.resolve();
    this.#started = true;
    this.#pump = this.#run().catch((e) => {
      // The pump handles its own I/O errors; reaching here is a bug, but must not kill the FA.
      this.#errors++;
      log.error("pump failed", { error: e });
    });
    return Promise.resolve();
  }

  /**
   * Queues one record, encoded at once (never blocks, never throws); the oldest are dropped
   * when the queue holds more than `maxQueueRecords` or `maxQueueBytes`. A record that cannot
   * be encoded is dropped and counted here.
   */
  addRecord(flow: ExportedFlow): void {
    this.#received++;
    if (this.#stopping) {
      this.#drop(1, "exporter stopped");
      return;
    }
    if (!this.#enqueue(flow)) return;
    const q = this.#queue;
    // Drop the oldest: later snapshots of a flow carry its newer totals. The record just
    // queued stays, even alone over the byte bound.
    while (q.length > 1 && (q.length > this.#maxQueue || q.bytes > this.#maxQueueBytes)) {
      q.dropOldest();
      this.#drop(1, "queue full");
    }
    this.#signal();
  }

  /**
   * Encodes `flow` at the queue's tail: its IPFIX data record (the data set's content, as the
   * template of its family encodes it), or its JSON document's `ipfix` object. False, counted
   * as an error and dropped, when it cannot be encoded or is larger than the largest message.
   */
  #enqueue(flow: ExportedFlow): boolean {
    const kind = flow.isIPv6 ? 1 : 0;
    const tp = this.#templates[kind];
    const q = this.#queue;
    if (this.#json) {
      try {
        const text = jsonRecordFields(tp.names, this.#values(tp, flow));
        const at = q.reserve(text.length * 3);
        const { written } = textEncoder.encodeInto(text, q.tailBuffer.subarray(at));
        q.commit(kind, written);
        return true;
      } catch (e) {
        this.#encodeFailed(e);
        return false;
      }
    }
    const rec = flow.record as unknown as Record<string, FieldValue | undefined>;
    let len: number;
    try {
      len = tp.encoder.encodedLength(rec);
    } catch (e) {
      this.#encodeFailed(e);
      return false;
    }
    const limit = this.#proto === "udp" ? MAX_UDP_PAYLOAD : MAX_IPFIX_MESSAGE;
    if (MESSAGE_HEADER_LENGTH + SET_HEADER_LENGTH + len > limit) {
      this.#errors++;
      this.#drop(1, "record larger than the largest message");
      return false;
    }
    const at = q.reserve(len);
    try {
      tp.encoder.write(q.tailView, at, rec);
    } catch (e) {
      // A value of the wrong type for its field (only writing finds those): the reservation is
      // left uncommitted, the next record overwrites it.
      this.#encodeFailed(e);
      return false;
    }
    q.commit(kind, len);
    return true;
  }

  /**
   * Resolves once every record queued so far has been handed to the transport, so the export
   * loop can pace a burst to the queue bound instead of overflowing it. Resolves at once while
   * the collector is unreachable (in backoff): waiting would only stall the export loop, and the
   * queue keeps the newest records for the reconnect. Never rejects.
   */
  flush(): Promise<void> {
    if (!this.#started || this.#aborted || this.#queueLength() === 0) return Promise.resolve();
    if (this.#interruptSleep !== undefined) return Promise.resolve(); // backing off
    return (this.#flushed ??= Promise.withResolvers<void>()).promise;
  }

  /**
   * Flushes the queue for at most `stopTimeoutMs`, counts what is left as dropped, closes the
   * socket and resolves when the pump has ended.
   */
  async stop(): Promise<void> {
    if (this.#stopping) {
      await this.#pump;
      return;
    }
    this.#stopping = true;
    this.#signal();
    if (this.#pump !== undefined) {
      if (await within(this.#pump, this.#stopTimeout, this.#clock) === "timeout") {
        this.#aborted = true;
        // Closing makes a pending write fail and aborting a pending connect gives up on it, so
        // the pump ends promptly instead of after the connect timeout.
        this.#abort.abort();
        this.#transport?.close();
        this.#signal();
        this.#interruptSleep?.();
        await this.#pump;
      }
    }
    const left = this.#queueLength();
    if (left > 0) {
      this.#drop(left, "not delivered before stop timeout");
      this.#queue.clear();
    }
    this.#closeTransport();
    this.#refreshTimer?.cancel();
  }

  /** Returns the counters. */
  stats(): IpfixExporterStats {
    return {
      received: this.#received,
      exported: this.#exported,
      dropped: this.#dropped,
      errors: this.#errors,
      reconnects: this.#reconnects,
      templatesSent: this.#templatesSent,
      templateRefreshes: this.#templateRefreshes,
      messages: this.#messages,
      bytes: this.#bytes,
      queued: this.#queueLength() + this.#inWrite,
      queuedBytes: this.#queue.bytes,
      unacknowledged: this.#awaitingProof + this.#possiblyLost,
      possiblyLost: this.#possiblyLost,
      oversizeDatagrams: this.#oversizeDatagrams,
      connected: this.#transport?.open ?? false,
    };
  }

  #queueLength(): number {
    return this.#queue.length;
  }

  #drop(n: number, reason: string): void {
    this.#dropped += n;
    const suppressed = this.#dropLog.allow(reason);
    if (suppressed >= 0) {
      log.warn("records dropped", { reason, count: n, suppressed, dropped: this.#dropped });
    }
  }

  #signal(): void {
    const w = this.#wake;
    this.#wake = undefined;
    w?.();
  }

  /** Backoff delay: new records must not cut it short, only stop() does. */
  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = this.#clock.setTimer(ms, () => {
        this.#interruptSleep = undefined;
        resolve();
      });
      this.#interruptSleep = () => {
        timer.cancel();
        this.#interruptSleep = undefined;
        resolve();
      };
    });
  }

  #waitForWork(): Promise<void> {
    // A record (or stop) that arrived while the pump was awaiting since its last queue check
    // found no waiter to wake: look again instead of sleeping until the next record.
    if (this.#queueLength() > 0 || this.#stopping) return Promise.resolve();
    return new Promise((resolve) => (this.#wake = resolve));
  }

  #releaseFlushes(): void {
    const flushed = this.#flushed;
    this.#flushed = undefined;
    flushed?.resolve();
  }

  async #run(): Promise<void> {
    try {
      await this.#loop();
    } finally {
      this.#releaseFlushes();
    }
  }

  async #loop(): Promise<void> {
    while (!this.#aborted) {
      if (this.#queueLength() === 0) {
        this.#releaseFlushes();
        if (this.#stopping) {
          await this.#endStream();
          break;
        }
        if (this.#transport !== undefined && !this.#transport.open) this.#lostConnection();
        if (this.#transport !== undefined) await this.#refreshTemplatesIfDue();
        if (await this.#idleWait()) await this.#endIdleSession();
        continue;
      }
      if (this.#transport === undefined || !this.#transport.open) {
        if (this.#transport !== undefined) this.#lostConnection();
        if (this.#delayNextConnect) {
          this.#delayNextConnect = false;
          this.#releaseFlushes();
          await this.#sleep(this.#nextBackoff());
          if (this.#aborted) break;
        }
        if (!(await this.#connect())) {
          if (this.#aborted) break;
          // Keep retrying while stopping too: stop()'s timeout bounds the attempts.
          this.#releaseFlushes();
          await this.#sleep(this.#nextBackoff());
          continue;
        }
      }
      await this.#refreshTemplatesIfDue();
      await this.#sendBatch();
    }
  }

  #nextBackoff(): number {
    this.#backoff = this.#backoff === 0
      ? this.#backoffInitial
      : Math.min(this.#backoff * 2, this.#backoffMax);
    return this.#backoff;
  }

  #lostConnection(): void {
    log.warn("collector connection lost", { target: this.#target() });
    this.#sessionEnded();
  }

  /**
   * Closes the session and decides how soon to dial again: at once after a long healthy
   * session, after the next backoff step when it lasted less than {@linkcode HEALTHY_SESSION_MS}
   * (a collector that accepts and then resets every session must not make us loop).
   */
  #sessionEnded(): void {
    this.#closeTransport();
    if (this.#clock.nowMs() - this.#connectedAt < HEALTHY_SESSION_MS) {
      this.#delayNextConnect = true;
    } else {
      this.#backoff = 0;
    }
  }

  /**
   * Closes the connection. Its records still awaiting proof become exported when `delivered`
   * (the collector read to our end of stream), else possibly lost.
   */
  #closeTransport(delivered = false): void {
    this.#transport?.close();
    this.#transport = undefined;
    if (this.#awaitingProof > 0) {
      if (delivered) {
        this.#exported += this.#awaitingProof;
      } else {
        this.#possiblyLost += this.#awaitingProof;
        log.warn("connection ended before records were proven read; counted possibly lost", {
          target: this.#target(),
          records: this.#awaitingProof,
          possiblyLost: this.#possiblyLost,
        });
      }
    }
    this.#awaitingProof = 0;
    this.#written = 0;
    this.#pendingEnds = [];
    this.#pendingRecords = [];
    this.#pendingHead = 0;
  }

  /**
   * At stop, with everything written: ends the stream and waits (within the stop timeout, which
   * closes the transport) for the collector to close its side, the proof it read everything.
   */
  async #endStream(): Promise<void> {
    const t = this.#transport;
    if (t === undefined || this.#awaitingProof === 0) return;
    const delivered = await t.shutdown();
    if (this.#transport === t) this.#closeTransport(delivered);
  }

  /**
   * Waits for work; true when instead the session stayed idle for `idleSessionTimeoutMs` while
   * holding unproven records (never when the option is off or nothing awaits proof).
   */
  async #idleWait(): Promise<boolean> {
    if (this.#idleSessionMs <= 0 || this.#awaitingProof === 0) {
      await this.#waitForWork();
      return false;
    }
    let idle = false;
    const timer = this.#clock.setTimer(this.#idleSessionMs, () => {
      idle = true;
      this.#signal();
    });
    await this.#waitForWork();
    timer.cancel();
    return idle && this.#queueLength() === 0 && !this.#stopping;
  }

  /**
   * Ends an idle session cleanly to prove its records read, waiting at most the connect
   * timeout for the collector's answer (records arriving meanwhile wait in the queue).
   */
  async #endIdleSession(): Promise<void> {
    const t = this.#transport;
    if (t === undefined) return;
    log.info("ending idle collector session to prove its records delivered", {
      target: this.#target(),
      records: this.#awaitingProof,
    });
    const deadline = this.#clock.setTimer(this.#connectTimeout, () => t.close());
    await this.#endStream();
    deadline.cancel();
  }

  /**
   * Accounts the first `written` bytes of `built` as accepted by the transport and returns how
   * many of its records lie in messages accepted whole (a message cut short is never decoded,
   * so its records were not delivered). UDP: those are exported; streams: awaiting proof.
   */
  #accountWritten(built: Built, written: number): number {
    let off = 0;
    let records = 0;
    let messages = 0;
    for (let i = 0; i < built.lengths.length && off + built.lengths[i] <= written; i++) {
      off += built.lengths[i];
      records += built.records[i];
      messages++;
      if (this.#proto !== "udp" && built.records[i] > 0) {
        this.#pendingEnds.push(this.#written + off);
        this.#pendingRecords.push(built.records[i]);
        this.#awaitingProof += built.records[i];
      }
    }
    this.#messages += messages;
    this.#bytes += written;
    if (this.#proto === "udp") this.#exported += records;
    else this.#advance(written);
    return records;
  }

  /** `n` more bytes were accepted: what lies a whole window behind the end is proven read. */
  #advance(n: number): void {
    this.#written += n;
    const proven = this.#written - this.#window;
    while (this.#pendingHead < this.#pendingEnds.length) {
      if (this.#pendingEnds[this.#pendingHead] > proven) break;
      const r = this.#pendingRecords[this.#pendingHead++];
      this.#awaitingProof -= r;
      this.#exported += r;
    }
    if (this.#pendingHead >= 1024 && this.#pendingHead * 2 > this.#pendingEnds.length) {
      this.#pendingEnds = this.#pendingEnds.slice(this.#pendingHead);
      this.#pendingRecords = this.#pendingRecords.slice(this.#pendingHead);
      this.#pendingHead = 0;
    }
  }

  #target(): string {
    const h = this.#host.includes(":") ? `[${this.#host}]` : this.#host;
    return `${h}:${this.#port}:${this.#proto}`;
  }

  async #connect(): Promise<boolean> {
    let t: Transport;
    try {
      t = await openTransport({
        host: this.#host,
        port: this.#port,
        kind: this.#proto,
        tls: this.#tls,
        connectTimeoutMs: this.#connectTimeout,
        signal: this.#abort.signal,
      });
    } catch (e) {
      this.#errors++;
      noteDenied(e);
      log.warn("cannot connect to collector", { target: this.#target(), error: e });
      return false;
    }
    if (this.#aborted) {
      t.close();
      return false;
    }
    this.#transport = t;
    this.#seq = 0;
    t.closed.then(() => this.#signal());
    if (!(await this.#sendTemplates("sending templates failed"))) return false;
    this.#connectedAt = this.#clock.nowMs();
    if (this.#everConnected) this.#reconnects++;
    this.#everConnected = true;
    log.info("connected to collector", {
      target: this.#target(),
      observationDomainId: this.observationDomainId,
    });
    return true;
  }

  /**
   * Sends the templates on the current transport. On failure counts an error, logs `failure`,
   * closes the transport and returns false (the loop then reconnects).
   */
  async #sendTemplates(failure: string): Promise<boolean> {
    const t = this.#transport;
    if (t === undefined) return true;
    try {
      if (!this.#json) {
        // One template per message, as upstream: its collector reads only the first set.
        const header = this.#messageHeader();
        const msgs = this.#templates.map((tp) => encodeMessage(header, [tp.setBytes]));
        await t.send(msgs);
        this.#templatesSent += msgs.length;
        this.#messages += msgs.length;
        let n = 0;
        for (const m of msgs) n += m.length;
        this.#bytes += n;
        if (this.#proto !== "udp") this.#advance(n);
      }
      this.#lastTemplatesMs = this.#clock.nowMs();
      this.#refreshDue = false;
      this.#armRefresh();
      return true;
    } catch (e) {
      this.#errors++;
      log.warn(failure, { target: this.#target(), error: e });
      this.#closeTransport();
      return false;
    }
  }

  #armRefresh(): void {
    this.#refreshTimer?.cancel();
    this.#refreshTimer = undefined;
    if (this.#proto !== "udp" || this.#json || this.#refreshMs <= 0) return;
    // The timer marks the refresh due and wakes an idle pump; a busy pump also finds it due by
    // reading the clock before each batch, whichever comes first.
    this.#refreshTimer = this.#clock.setTimer(this.#refreshMs, () => {
      this.#refreshDue = true;
      this.#signal();
    }, { unref: true });
  }

  async #refreshTemplatesIfDue(): Promise<void> {
    if (this.#proto !== "udp" || this.#json || this.#refreshMs <= 0) return;
    if (this.#transport === undefined || !this.#transport.open) return;
    const due = this.#refreshDue || this.#clock.nowMs() - this.#lastTemplatesMs >= this.#refreshMs;
    if (!due) return;
    if (await this.#sendTemplates("template refresh failed")) this.#templateRefreshes++;
  }

  /** Values of `flow` in template order, looked up by name; absent ones are the zero value. */
  #values(tp: OutTemplate, flow: ExportedFlow): FieldValue[] {
    const rec = flow.record as unknown as Record<string, FieldValue | undefined>;
    const out = new Array<FieldValue>(tp.names.length);
    for (let i = 0; i < tp.names.length; i++) out[i] = rec[tp.names[i]] ?? tp.zeros[i];
    return out;
  }

  async #sendBatch(): Promise<void> {
    const t = this.#transport;
    if (t === undefined) return;
    // The batch's bytes are views into the queue: built (copied) before anything is queued.
    const batch = this.#queue.take(BATCH_RECORDS);
    const built = this.#json ? this.#buildJson(batch) : this.#buildIpfix(batch);
    if (built.messages === 0) return;
    this.#inWrite = built.sent;
    try {
      await t.send(built.payload);
    } catch (e) {
      this.#inWrite = 0;
      this.#errors++;
      const written = e instanceof SendError ? e.written : 0;
      const accepted = this.#accountWritten(built, written);
      log.warn("send failed, will reconnect", {
        target: this.#target(),
        error: e,
        bytesWritten: written,
        recordsWritten: accepted,
      });
      this.#sessionEnded();
      // Records in messages the socket never took whole were read by no one: re-send them
      // after reconnecting (stop() drops them if its timeout aborted this write).
      this.#queue.pushFront(built.rest(accepted));
      return;
    }
    this.#inWrite = 0;
    this.#accountWritten(built, built.bytes);
    this.#seq = (this.#seq + built.sent) >>> 0;
  }

  /** The header of the next message: the clock's export time and the RFC 7011 sequence. */
  #messageHeader(): MessageHeaderFields {
    const h = this.#header;
    h.exportTime = Math.floor(this.#clock.wallMs() / 1000);
    h.sequenceNumber = this.#seq;
    h.observationDomainId = this.observationDomainId;
    return h;
  }

  #buildJson(batch: QueuedRecord[]): Built {
    const prefix = textEncoder.encode(jsonDocumentPrefix(this.#clock.wallMs()));
    const messages: Uint8Array[] = [];
    const kinds: number[] = [];
    let total = 0;
    for (const r of batch) {
      const n = prefix.length + r.bytes.length + JSON_SUFFIX_BYTES.length;
      if (this.#proto === "udp" && n > MAX_UDP_PAYLOAD) {
        this.#errors++;
        this.#drop(1, "record too large for a datagram");
        continue;
      }
      const doc = new Uint8Array(n);
      doc.set(prefix);
      doc.set(r.bytes, prefix.length);
      doc.set(JSON_SUFFIX_BYTES, prefix.length + r.bytes.length);
      messages.push(doc);
      kinds.push(r.kind);
      total += n;
    }
    return {
      payload: messages,
      messages: messages.length,
      bytes: total,
      sent: messages.length,
      rest: (from) =>
        messages.slice(from).map((doc, i) => ({
          kind: kinds[from + i],
          bytes: doc.subarray(prefix.length, doc.length - JSON_SUFFIX_BYTES.length),
        })),
      lengths: messages.map((m) => m.length),
      records: messages.map(() => 1),
    };
  }

  #buildIpfix(batch: QueuedRecord[]): Built {
    const out = this.#out;
    out.reset();
    const header = this.#messageHeader();
    // Where each record went in the builder, in message order (for `rest`).
    const kinds: number[] = [];
    const offsets: number[] = [];
    const recordLengths: number[] = [];
    // IPv4 records first, then IPv6: a message holds one data set (upstream collectors read only
    // the first set), so interleaved families would otherwise split batches into tiny messages.
    // Each flow has one family, so the order of any one flow's records is kept.
    const ordered = batch.some((r) => r.kind === 1) && batch.some((r) => r.kind === 0)
      ? [...batch.filter((r) => r.kind === 0), ...batch.filter((r) => r.kind === 1)]
      : batch;
    for (const r of ordered) {
      const tp = this.#templates[r.kind];
      const len = r.bytes.length;
      // RFC 7011: a message's sequence number counts the data records sent before it.
      header.sequenceNumber = (this.#seq + kinds.length) >>> 0;
      // Records were checked against the largest message when queued (#enqueue).
      const at = out.reserveRecord(tp.id, len, this.#maxMessage, header);
      out.buffer.set(r.bytes, at);
      out.commit(len);
      kinds.push(r.kind);
      offsets.push(at);
      recordLengths.push(len);
    }
    out.endMessage();
    // A stream takes the whole batch in one write; UDP sends one datagram per message.
    const messages = out.messages();
    if (this.#proto === "udp") { for (const m of messages) this.#checkDatagramSize(m.length); }
    const payload = this.#proto === "udp" ? messages : [out.bytes()];
    const sent = kinds.length;
    return {
      payload,
      messages: out.count,
      bytes: out.length,
      sent,
      rest: (from) => {
        const buf = out.buffer;
        const rest: QueuedRecord[] = [];
        for (let i = from; i < sent; i++) {
          rest.push({
            kind: kinds[i],
            bytes: buf.subarray(offsets[i], offsets[i] + recordLengths[i]),
          });
        }
        return rest;
      },
      lengths: messages.map((m) => m.length),
      records: recordsPerMessage(messages, this.#seq, sent),
    };
  }

  /** A datagram of `bytes` not below `maxMessageBytes` (one record too large): counted, logged. */
  #checkDatagramSize(bytes: number): void {
    if (bytes < this.#maxMessage) return;
    this.#oversizeDatagrams++;
    const suppressed = this.#dropLog.allow("oversize");
    if (suppressed >= 0) {
      log.warn("record larger than maxMessageBytes: sent alone in a datagram IP will fragment", {
        bytes,
        maxMessageBytes: this.#maxMessage,
        oversizeDatagrams: this.#oversizeDatagrams,
        suppressed,
      });
    }
  }

  #encodeFailed(e: unknown): void {
    this.#errors++;
    this.#drop(1, "record cannot be encoded");
    log.debug("encode failed", { error: e });
  }
}
