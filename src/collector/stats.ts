/**
 * Collector counters ("everything that moves gets a counter"): one mutable {@linkcode Counters}
 * object per collector, read through immutable {@linkcode CollectorStats} snapshots.
 */

import type { TemplateBudget } from "../ipfix/mod.ts";
import type { UdpReceiverCounters } from "./udp.ts";
import { ReadBudget } from "./read_budget.ts";

/** Transport a message arrived on. */
export type Transport = "udp" | "tcp" | "tls";

/** Per exporter (peer IP) counters. */
export interface ExporterStats {
  /** Messages decoded (template-only messages included). */
  readonly messages: number;
  /** Data records handed to the sink. */
  readonly dataRecords: number;
  /** Template and options template records received. */
  readonly templateRecords: number;
  /** Bytes received (whole datagrams / stream bytes). */
  readonly bytes: number;
  /** Messages rejected (all reasons). */
  readonly decodeErrors: number;
  /** Data sets dropped because their template was unknown. */
  readonly templateMisses: number;
  /** Records lost inside decoded messages (all reasons, see `recordsDropped`). */
  readonly recordsDropped: number;
  /** Transport sessions opened (UDP source ports, TCP/TLS connections). */
  readonly sessionsOpened: number;
}
/** Snapshot of every collector counter. */
export interface CollectorStats {
  /** Transport of this collector. */
  readonly transport: Transport;
  /** Messages decoded without a message-level error (template-only messages included). */
  readonly messages: number;
  /** Data records handed to the sink (upstream ≥ 0.13 `GetNumRecordsReceived`). */
  readonly dataRecords: number;
  /** Data sets handed to the sink. */
  readonly dataSets: number;
  /** Template and options template records received. */
  readonly templateRecords: number;
  /** Template withdrawals received. */
  readonly templateWithdrawals: number;
  /**
   * Template records stored (refreshes included) in which an element repeats: a record is keyed
   * by element name, so each record of theirs keeps only the first occurrence's value (as
   * upstream's first match); the values of the repeats are not delivered.
   */
  readonly templatesWithDuplicateFields: number;
  /** Bytes received, including those of rejected messages. */
  readonly bytes: number;
  /**
   * Messages rejected as a whole, by reason (`framing: …`, `length mismatch`, codec reasons).
   * Every received message ends up in exactly one of `messages` or here.
   */
  readonly decodeErrors: Readonly<Record<string, number>>;
  /** Sum of `decodeErrors`. */
  readonly decodeErrorsTotal: number;
  /** Sets skipped inside otherwise decoded messages, by reason. */
  readonly setErrors: Readonly<Record<string, number>>;
  /** Data sets dropped because their template was unknown in the session. */
  readonly templateMisses: number;
  /** Bytes of records in those sets (how many records they held is unknown). */
  readonly templateMissBytes: number;
  /**
   * Records lost inside messages that were decoded, by reason: a record that does not decode
   * (`badVarLength`, `badRecord`, …: only that record when the template is fixed-length, else
   * it and the rest of its set, counted as one) and `templateRefused` (the data sets of a
   * template refused by a limit; estimated as the set's length over the template's smallest
   * record, at least one per set).
   */
  readonly recordsDropped: Readonly<Record<string, number>>;
  /**
   * Template records not stored, by reason: `tooWide` (over `limits.maxFieldsPerTemplate`),
   * `sessionFull` (`limits.maxTemplatesPerSession`), `totalFull` (`limits.maxTemplates`),
   * `layoutsFull` (`limits.maxTemplateLayoutFields`), `badTemplate` (invalid: a field length
   * illegal for its type, an id below 256, a bad scope count, a withdrawal of an id below 256
   * other than 2 and 3; the other templates of its set are kept).
   */
  readonly templatesRefused: Readonly<Record<string, number>>;
  /** Templates held now over all sessions (bounded by `limits.maxTemplates`). */
  readonly templatesHeld: number;
  /** String values cut to `limits.maxStringBytes` (on a UTF-8 character boundary). */
  readonly stringsTruncated: number;
  /** Sink calls that threw (the records of that set are lost; the session is kept). */
  readonly sinkErrors: number;
  /**
   * Bytes a TCP/TLS peer had already sent behind a message that closed its session on error
   * (read, never decoded). Upstream lost these without a trace.
   */
  readonly bytesDiscarded: number;
  /** Sessions opened: UDP source ip:port first seen, TCP/TLS connections established. */
  readonly sessionsOpened: number;
  /** Sessions closed (peer EOF, error, idle expiry, stop). */
  readonly sessionsClosed: number;
  /** Sessions currently open. */
  readonly sessionsActive: number;
  /**
   * TCP/TLS sessions closed because of a framing or decode error, or a TLS record that the TLS
   * layer rejected (one that does not decrypt, a malformed one).
   */
  readonly sessionsClosedOnError: number;
  /** UDP sessions removed after the idle timeout (= template TTL). */
  readonly sessionsExpired: number;
  /** UDP sessions dropped (with their templates) because the session cap was reached. */
  readonly sessionsEvicted: number;
  /** TLS handshakes that failed (no client certificate, unknown CA, protocol errors). */
  readonly tlsHandshakeFailures: number;
  /** Failed accept() calls (retried with backoff). */
  readonly acceptErrors: number;
  /**
   * TCP/TLS connections closed at accept because a `limits:` bound was reached, by the limit's
   * name (`maxConnections`, `maxConnectionsPerAddress`, `maxTlsHandshakes`).
   */
  readonly connectionsRefused: Readonly<Record<string, number>>;
  /**
   * TCP/TLS connections closed by a timeout, by the limit's name (`readTimeout`, `idleTimeout`,
   * `tlsHandshakeTimeout`).
   */
  readonly connectionsTimedOut: Readonly<Record<string, number>>;
  /** Connections still sending when the drain at stop reached its deadline, then closed. */
  readonly connectionsCutAtStop: number;
  /** Bytes of messages not yet complete when their connection was closed at stop (never decoded). */
  readonly bytesLostAtStop: number;
  /** Bytes of grown read buffers the TCP/TLS connections hold now (`limits.maxReadBufferBytes`). */
  readonly readBufferBytes: number;
  /** Reads made into a smaller buffer because growing it would pass `maxReadBufferBytes`. */
  readonly readBuffersLimited: number;
  /** Per exporter address (peer IP, IPv4-mapped addresses normalised). */
  readonly exporters: Readonly<Record<string, ExporterStats>>;
  /** UDP receive-path counters (kernel and queue drops), when the receive path reports them. */
  readonly udpReceiver?: UdpReceiverCounters;
}

type MutableExporterStats = { -readonly [K in keyof ExporterStats]: ExporterStats[K] };

/**
 * Exporters beyond this many are counted under {@linkcode OTHER_EXPORTERS}: a UDP source-address
 * flood must not grow memory without bound.
 */
export const MAX_TRACKED_EXPORTERS = 10_000;

/** Key under which exporters beyond {@linkcode MAX_TRACKED_EXPORTERS} are counted. */
export const OTHER_EXPORTERS = "other";

/** Mutable counters owned by one collector. */
export class Counters {
  /** Transport of the collector. */
  readonly transport: Transport;
  messages = 0;
  dataRecords = 0;
  dataSets = 0;
  templateRecords = 0;
  templateWithdrawals = 0;
  templatesWithDuplicateFields = 0;
  bytes = 0;
  decodeErrorsTotal = 0;
  templateMisses = 0;
  sinkErrors = 0;
  bytesDiscarded = 0;
  sessionsOpened = 0;
  sessionsClosed = 0;
  sessionsClosedOnError = 0;
  sessionsExpired = 0;
  sessionsEvicted = 0;
  tlsHandshakeFailures = 0;
  acceptErrors = 0;
  stringsTruncated = 0;
  templateMissBytes = 0;
  /** Templates held by every session of the collector. */
  readonly templates: TemplateBudget | undefined;
  readonly #recordsDropped = new Map<string, number>();
  readonly #templatesRefused = new Map<string, number>();
  connectionsCutAtStop = 0;
  bytesLostAtStop = 0;
  readonly #connectionsRefused = new Map<string, number>();
  readonly #connectionsTimedOut = new Map<string, number>();
  readonly #decodeErrors = new Map<string, number>();
  readonly #setErrors = new Map<string, number>();
  readonly #exporters = new Map<string, MutableExporterStats>();

  /** The connections' read buffers, reported as `readBufferBytes` and `readBuffersLimited`. */
  readonly readBuffers: ReadBudget;

  /**
   * Creates zeroed counters; `templates` is the budget whose use `templatesHeld` reports,
   * `readBuffers` the one of the connections' read buffers (default: unbounded).
   */
  constructor(transport: Transport, templates?: TemplateBudget, readBuffers = new ReadBudget()) {
    this.transport = transport;
    this.templates = templates;
    this.readBuffers = readBuffers;
  }

  /** Returns the (mutable) counters of one exporter, creating them on first use. */
  exporter(address: string): MutableExporterStats {
    let e = this.#exporters.get(address);
    if (e === undefined) {
      const key = this.#exporters.size >= MAX_TRACKED_EXPORTERS ? OTHER_EXPORTERS : address;
      e = this.#exporters.get(key);
      if (e === undefined) {
        e = {
          messages: 0,
          dataRecords: 0,
          templateRecords: 0,
          bytes: 0,
          decodeErrors: 0,
          templateMisses: 0,
          recordsDropped: 0,
          sessionsOpened: 0,
        };
        this.#exporters.set(key, e);
      }
    }
    return e;
  }

  /** Counts one rejected message. */
  decodeError(reason: string, exporter: MutableExporterStats): void {
    this.decodeErrorsTotal++;
    this.#decodeErrors.set(reason, (this.#decodeErrors.get(reason) ?? 0) + 1);
    exporter.decodeErrors++;
  }

  /** Counts `n` records lost for `reason`. */
  recordsDropped(reason: string, n: number, exporter: MutableExporterStats): void {
    this.#recordsDropped.set(reason, (this.#recordsDropped.get(reason) ?? 0) + n);
    exporter.recordsDropped += n;
  }

  /** Counts `n` refused templates. */
  templatesRefused(reason: string, n: number): void {
    this.#templatesRefused.set(reason, (this.#templatesRefused.get(reason) ?? 0) + n);
  }

  /** Counts one skipped set. */
  setError(reason: string): void {
    this.#setErrors.set(reason, (this.#setErrors.get(reason) ?? 0) + 1);
  }

  /** Counts one connection refused at accept, by the limit that was reached. */
  connectionRefused(limit: string): void {
    countBy(this.#connectionsRefused, limit);
  }

  /** Counts one connection closed by a timeout, by the timeout's limit name. */
  connectionTimedOut(limit: string): void {
    countBy(this.#connectionsTimedOut, limit);
  }

  /** Returns an immutable snapshot. */
  snapshot(): CollectorStats {
    const exporters: Record<string, ExporterStats> = {};
    for (const [k, v] of this.#exporters) exporters[k] = { ...v };
    return {
      transport: this.transport,
      messages: this.messages,
      dataRecords: this.dataRecords,
      dataSets: this.dataSets,
      templateRecords: this.templateRecords,
      templateWithdrawals: this.templateWithdrawals,
      templatesWithDuplicateFields: this.templatesWithDuplicateFields,
      bytes: this.bytes,
      decodeErrors: Object.fromEntries(this.#decodeErrors),
      decodeErrorsTotal: this.decodeErrorsTotal,
      setErrors: Object.fromEntries(this.#setErrors),
      templateMisses: this.templateMisses,
      templateMissBytes: this.templateMissBytes,
      recordsDropped: Object.fromEntries(this.#recordsDropped),
      templatesRefused: Object.fromEntries(this.#templatesRefused),
      templatesHeld: this.templates?.used ?? 0,
      stringsTruncated: this.stringsTruncated,
      sinkErrors: this.sinkErrors,
      bytesDiscarded: this.bytesDiscarded,
      sessionsOpened: this.sessionsOpened,
      sessionsClosed: this.sessionsClosed,
      sessionsActive: this.sessionsOpened - this.sessionsClosed,
      sessionsClosedOnError: this.sessionsClosedOnError,
      sessionsExpired: this.sessionsExpired,
      sessionsEvicted: this.sessionsEvicted,
      tlsHandshakeFailures: this.tlsHandshakeFailures,
      acceptErrors: this.acceptErrors,
      connectionsRefused: Object.fromEntries(this.#connectionsRefused),
      connectionsTimedOut: Object.fromEntries(this.#connectionsTimedOut),
      connectionsCutAtStop: this.connectionsCutAtStop,
      bytesLostAtStop: this.bytesLostAtStop,
      readBufferBytes: this.readBuffers.held,
      readBuffersLimited: this.readBuffers.limited,
      exporters,
    };
  }
}

function countBy(counts: Map<string, number>, key: string): void {
  counts.set(key, (counts.get(key) ?? 0) + 1);
}

/** Fields of {@linkcode CollectorStats} that tell the present, not a count since start. */
const GAUGES = new Set<keyof CollectorStats>([
  "transport",
  "sessionsActive",
  "templatesHeld",
  "readBufferBytes",
]);

/**
 * The UDP receive paths' counters: `current`'s state (mode, sockets, buffer, per-socket
 * datagrams) with the drops of `earlier` added; `earlier`'s drops alone, with no socket, when
 * the current collector has no UDP receive path.
 */
function udpWithEarlier(
  earlier: UdpReceiverCounters | undefined,
  current: UdpReceiverCounters | undefined,
): UdpReceiverCounters | undefined {
  if (earlier === undefined) return current;
  if (current === undefined) {
    return { ...earlier, sockets: 0, recvBufferBytes: 0, socketDatagrams: [] };
  }
  return {
    ...current,
    kernelDrops: earlier.kernelDrops + current.kernelDrops,
    kernelDropsKnown: earlier.kernelDropsKnown || current.kernelDropsKnown,
    queueDrops: earlier.queueDrops + current.queueDrops,
    oversized: earlier.oversized + current.oversized,
    handlerErrors: earlier.handlerErrors + current.handlerErrors,
  };
}

/** `a` + `b`, key by key (counts by reason). */
function sumBy(
  a: Readonly<Record<string, number>>,
  b: Readonly<Record<string, number>>,
): Record<string, number> {
  const out: Record<string, number> = { ...a };
  for (const [k, v] of Object.entries(b)) out[k] = (out[k] ?? 0) + v;
  return out;
}

/**
 * The counters of the collectors a process has run (a reload of a `limits` key, of the
 * transport or of `flowAggregatorAddress` starts a new one): `earlier`, the sum of those
 * stopped, with `current`'s added, so no counter goes back when the collector is replaced.
 * Gauges (sessions open, templates held, read buffers, the UDP receive path's state) are the
 * current collector's alone, 0 without one. Per-exporter counters are summed per address,
 * still bounded: addresses past {@linkcode MAX_TRACKED_EXPORTERS} are summed under
 * {@linkcode OTHER_EXPORTERS}.
 */
export function withEarlierCollectors(
  earlier: CollectorStats | undefined,
  current: CollectorStats | undefined,
): CollectorStats | undefined {
  if (earlier === undefined) return current;
  if (current === undefined) {
    const udpReceiver = udpWithEarlier(earlier.udpReceiver, undefined);
    return {
      ...earlier,
      sessionsActive: 0,
      templatesHeld: 0,
      readBufferBytes: 0,
      ...(udpReceiver === undefined ? {} : { udpReceiver }),
    };
  }
  const out: Record<string, unknown> = {};
  for (const key of Object.keys(current) as (keyof CollectorStats)[]) {
    const a = earlier[key];
    const b = current[key];
    if (GAUGES.has(key) || key === "exporters" || key === "udpReceiver") out[key] = b;
    else if (typeof b === "number") out[key] = (typeof a === "number" ? a : 0) + b;
    else out[key] = sumBy((a ?? {}) as Record<string, number>, b as Record<string, number>);
  }
  const exporters: Record<string, ExporterStats> = { ...earlier.exporters };
  let tracked = Object.keys(exporters).length;
  for (const [address, e] of Object.entries(current.exporters)) {
    let key = address;
    if (exporters[key] === undefined && tracked >= MAX_TRACKED_EXPORTERS) key = OTHER_EXPORTERS;
    const past = exporters[key];
    if (past === undefined) tracked++;
    // Every field of an exporter's counters is a count.
    exporters[key] = past === undefined ? { ...e } : sumBy(
      past as unknown as Record<string, number>,
      e as unknown as Record<string, number>,
    ) as unknown as ExporterStats;
  }
  out.exporters = exporters;
  const udpReceiver = udpWithEarlier(earlier.udpReceiver, current.udpReceiver);
  if (udpReceiver !== undefined) out.udpReceiver = udpReceiver;
  return out as unknown as CollectorStats;
}
