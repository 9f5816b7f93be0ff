/**
 * One exporter transport session (a UDP source ip:port or a TCP/TLS connection) and the decoding
 * of its messages into sink calls. Templates are scoped to the session (RFC 7011, go-ipfix ≥ 0.12)
 * and dropped with it. Shared by every transport so they count and log identically.
 */

import {
  type DecodedMessage,
  decodeMessage,
  IpfixDecodeError,
  RawMessageScratch,
  type RawRecords,
  recordCount,
  walkRawMessage,
} from "../ipfix/mod.ts";
import { TemplateStore, type TemplateStoreOptions } from "../ipfix/mod.ts";
import type { DataRecord, TemplateRecord } from "../ipfix/mod.ts";
import type { Clock } from "../clock.ts";
import type { Logger, RateLimitedLog } from "../log.ts";
import type { Counters, ExporterStats, Transport } from "./stats.ts";

/** Where a data set came from; passed to the sink with its records. */
export interface RecordContext {
  /** Peer IP without port (IPv4-mapped IPv6 normalised to IPv4). */
  readonly exporterAddress: string;
  /** Observation domain id from the message header. */
  readonly observationDomainId: number;
  /** Template id (= set id) of the data set. */
  readonly templateId: number;
  /** Transport the message arrived on. */
  readonly transport: Transport;
  /** True when the records were described by an options template. */
  readonly options: boolean;
  /** Export time from the message header (seconds since the epoch). */
  readonly exportTime: number;
  /**
   * The template of the data set: the same object for every data set of one template
   * definition, so a consumer can check it once and cache the result by identity.
   */
  readonly template: TemplateRecord;
}

/**
 * Receives every decoded data set, in arrival order per session. It runs synchronously inside
 * the receive path, so a slow sink slows reading: TCP peers get back-pressure through the TCP
 * window instead of the collector buffering without bound. With {@linkcode SessionEnv.raw}, the
 * records come undecoded (`records` empty, `raw` their spans) for a sink that decodes elsewhere;
 * `raw` (and the message bytes it points into) is valid only during the call: the session
 * reuses it for its next message.
 */
export type RecordSink = (records: DataRecord[], ctx: RecordContext, raw?: RawRecords) => void;

/** Outcome of {@linkcode Session.handleMessage}. */
export type MessageOutcome =
  | { readonly ok: true; readonly setErrors: number }
  | { readonly ok: false; readonly reason: string };

// The outcome of almost every message: shared rather than allocated per message.
const OK: MessageOutcome = Object.freeze({ ok: true, setErrors: 0 });

/** The (empty) decoded records of a raw data set. */
const NO_RECORDS: DataRecord[] = Object.freeze([]) as unknown as DataRecord[];

/** Whether `c` is the context of a data set with these fields. */
function sameContext(
  c: RecordContext,
  domain: number,
  template: TemplateRecord,
  options: boolean,
  exportTime: number,
): boolean {
  return c.observationDomainId === domain && c.template === template && c.options === options &&
    c.exportTime === exportTime;
}

/** Everything a session needs from its collector. */
export interface SessionEnv {
  readonly counters: Counters;
  readonly sink: RecordSink;
  readonly log: Logger;
  readonly rateLog: RateLimitedLog;
  readonly clock: Clock;
  /**
   * Bounds of every session's template store (`limits.*` and the collector's shared budget);
   * absent: unbounded.
   */
  readonly templates?: Omit<TemplateStoreOptions, "ttlMs" | "clock">;
  /** Hand data records to the sink undecoded (see {@linkcode RecordSink}). */
  readonly raw?: boolean;
}

/** The `limits:` key behind each template refusal, named in the log. */
const REFUSAL_LIMIT: Readonly<Record<string, string>> = {
  tooWide: "limits.maxFieldsPerTemplate",
  sessionFull: "limits.maxTemplatesPerSession",
  totalFull: "limits.maxTemplates",
  layoutsFull: "limits.maxTemplateLayoutFields",
};

type MutableExporterStats = { -readonly [K in keyof ExporterStats]: ExporterStats[K] };

/** One transport session with its own template store. */
export class Session {
  /** Transport of the session. */
  readonly transport: Transport;
  /** Peer IP, used as exporter address. */
  readonly exporterAddress: string;
  /** Peer `ip:port`, for logs and the UDP session map. */
  readonly peer: string;
  /** Templates announced in this session. */
  readonly store: TemplateStore;
  /**
   * Monotonic time of the last datagram/message (UDP idle expiry). Initialised here with a
   * number: a field declared without one starts as `undefined`, and V8 then keeps it as a tagged
   * field, so each message's store of a fractional time allocated a heap number (16 bytes per
   * message, measured).
   */
  lastSeenMs = 0;
  readonly #env: SessionEnv;
  readonly #exporter: MutableExporterStats;
  #closed = false;
  #lastContext: RecordContext | undefined = undefined;
  /** The context before {@linkcode #lastContext} (see `#context`). */
  #previousContext: RecordContext | undefined = undefined;
  /** Raw mode's walk of the usual message, reused from message to message. */
  readonly #rawScratch = new RawMessageScratch();

  /** Opens a session and counts it. `templateTtlMs` 0 = templates never expire. */
  constructor(
    env: SessionEnv,
    init: { transport: Transport; exporterAddress: string; peer: string; templateTtlMs: number },
  ) {
    this.#env = env;
    this.transport = init.transport;
    this.exporterAddress = init.exporterAddress;
    this.peer = init.peer;
    this.store = new TemplateStore({
      ...env.templates,
      ttlMs: init.templateTtlMs,
      clock: env.clock,
    });
    this.lastSeenMs = env.clock.nowMs();
    this.#exporter = env.counters.exporter(init.exporterAddress);
    this.#exporter.sessionsOpened++;
    env.counters.sessionsOpened++;
    env.log.debug("session opened", { transport: this.transport, peer: this.peer });
  }

  /** Counts bytes read from the peer (stream bytes or whole datagrams). */
  addBytes(n: number): void {
    this.#env.counters.bytes += n;
    this.#exporter.bytes += n;
  }

  /** Counts bytes read from the peer but discarded because the session is closing on error. */
  discardBytes(n: number): void {
    this.#env.counters.bytesDiscarded += n;
  }

  /**
   * Counts and logs (rate-limited) a message rejected before decoding (framing, size) or by the
   * decoder; every received message ends in exactly one of `messages` or `decodeErrors`.
   */
  reject(reason: string, detail: string): MessageOutcome {
    this.#env.counters.decodeError(reason, this.#exporter);
    this.#logLimited(`reject|${this.exporterAddress}|${reason}`, "message rejected", {
      reason,
      detail,
    });
    return { ok: false, reason };
  }

  /**
   * Decodes one whole message, `buf[start..end)` (default: all of `buf`; a stream hands its read
   * buffer with the message's bounds), and hands its data sets to the sink. Never throws.
   */
  handleMessage(buf: Uint8Array, start = 0, end: number = buf.length): MessageOutcome {
    const env = this.#env;
    if (env.raw === true && this.#handleRaw(buf, start, end)) return OK;
    const message = start === 0 && end === buf.length ? buf : buf.subarray(start, end);
    let msg: DecodedMessage;
    try {
      msg = decodeMessage(message, this.store, env.raw);
    } catch (e) {
      if (e instanceof IpfixDecodeError) return this.reject(e.reason, e.message);
      // A codec bug must not take the collector down; count it so it gets noticed.
      return this.reject("internal", e instanceof Error ? e.message : String(e));
    }
    this.lastSeenMs = env.clock.nowMs();
    const c = env.counters;
    const ex = this.#exporter;
    c.messages++;
    ex.messages++;
    c.templateRecords += msg.templateRecords;
    ex.templateRecords += msg.templateRecords;
    c.templateWithdrawals += msg.withdrawals;
    const domain = msg.header.observationDomainId;
    if (msg.templateMisses.length > 0) {
      c.templateMisses += msg.templateMisses.length;
      c.templateMissBytes += msg.templateMissBytes;
      ex.templateMisses += msg.templateMisses.length;
      this.#logLimited(`miss|${this.exporterAddress}`, "data set for unknown template dropped", {
        templateIds: msg.templateMisses.join(","),
        bytes: msg.templateMissBytes,
        observationDomainId: domain,
      });
    }
    if (msg.duplicateFieldTemplates.length > 0) {
      c.templatesWithDuplicateFields += msg.duplicateFieldTemplates.length;
      this.#logLimited(`duplicates|${this.exporterAddress}`, "template repeats an element", {
        templateIds: msg.duplicateFieldTemplates.join(","),
        observationDomainId: domain,
        kept: "the first occurrence's value",
      });
    }
    if (msg.stringsTruncated > 0) {
      c.stringsTruncated += msg.stringsTruncated;
      this.#logLimited(`truncated|${this.exporterAddress}`, "strings truncated", {
        strings: msg.stringsTruncated,
        observationDomainId: domain,
        limit: "limits.maxStringBytes",
      });
    }
    // Index loops: these arrays are usually the decoder's frozen empty ones, which a for-of
    // walks through the generic iterator (a builtin call per message).
    for (let i = 0; i < msg.templatesRefused.length; i++) {
      const r = msg.templatesRefused[i];
      c.templatesRefused(r.reason, r.templates);
      // A bound names its `limits:` key; an invalid template says what is wrong with it.
      const why = r.detail === undefined
        ? { limit: REFUSAL_LIMIT[r.reason] }
        : { detail: r.detail };
      this.#logLimited(`refused|${this.exporterAddress}|${r.reason}`, "templates refused", {
        templates: r.templates,
        firstTemplateId: r.firstTemplateId,
        observationDomainId: domain,
        reason: r.reason,
        ...why,
      });
    }
    for (let i = 0; i < msg.recordsDropped.length; i++) {
      const d = msg.recordsDropped[i];
      c.recordsDropped(d.reason, d.records, ex);
      this.#logLimited(`drop|${this.exporterAddress}|${d.reason}`, "records dropped", {
        setId: d.setId,
        records: d.records,
        reason: d.reason,
        observationDomainId: domain,
      });
    }
    for (let i = 0; i < msg.setErrors.length; i++) {
      const se = msg.setErrors[i];
      c.setError(se.reason);
      this.#logLimited(`set|${this.exporterAddress}|${se.reason}`, "set dropped", {
        setId: se.setId,
        reason: se.reason,
      });
    }
    for (let i = 0; i < msg.dataSets.length; i++) {
      const ds = msg.dataSets[i];
      this.#deliver(
        recordCount(ds),
        ds.records,
        this.#context(domain, ds.template, ds.options, msg.header.exportTime),
        ds.raw,
      );
    }
    return msg.setErrors.length === 0 ? OK : { ok: true, setErrors: msg.setErrors.length };
  }

  /**
   * Raw mode's usual message (data sets of known templates, nothing malformed: see
   * `walkRawMessage`) without the decoded message's objects: counted and handed to the sink
   * exactly as {@linkcode handleMessage} would. False, with nothing counted, for any other
   * message (the full path takes it).
   */
  #handleRaw(buf: Uint8Array, start: number, end: number): boolean {
    const scratch = this.#rawScratch;
    try {
      try {
        if (!walkRawMessage(buf, this.store, scratch, start, end)) return false;
      } catch {
        // A codec bug must not take the collector down: the full path counts it (`internal`).
        return false;
      }
      this.lastSeenMs = this.#env.clock.nowMs();
      this.#env.counters.messages++;
      this.#exporter.messages++;
      for (let i = 0; i < scratch.count; i++) {
        const set = scratch.sets[i];
        const ct = set.compiled;
        this.#deliver(
          set.spans.length / 2,
          NO_RECORDS,
          this.#context(scratch.domain, ct.template, ct.options, scratch.exportTime),
          set,
        );
      }
      return true;
    } finally {
      // The sink has taken what it keeps: `buf` is not held past the message.
      scratch.release();
    }
  }

  /** Counts a data set of `n` records and hands it to the sink (a sink error is counted). */
  #deliver(n: number, records: DataRecord[], ctx: RecordContext, raw?: RawRecords): void {
    const c = this.#env.counters;
    c.dataSets++;
    c.dataRecords += n;
    this.#exporter.dataRecords += n;
    try {
      this.#env.sink(records, ctx, raw);
    } catch (e) {
      c.sinkErrors++;
      this.#logLimited("sink", "record sink failed", { error: e });
    }
  }

  /**
   * The sink context of a data set. Consecutive data sets of a session mostly share it (same
   * domain and template, export time in whole seconds), so a previous frozen object is reused
   * when every field matches instead of allocating one per message. The last two are kept: an
   * Agent sends its IPv4 and IPv6 templates' messages interleaved, and with one kept, every
   * switch between them made a new context (14 bytes per message on average, measured).
   */
  #context(
    domain: number,
    template: TemplateRecord,
    options: boolean,
    exportTime: number,
  ): RecordContext {
    const p = this.#lastContext;
    if (p !== undefined && sameContext(p, domain, template, options, exportTime)) return p;
    const q = this.#previousContext;
    this.#previousContext = p;
    if (q !== undefined && sameContext(q, domain, template, options, exportTime)) {
      this.#lastContext = q;
      return q;
    }
    const ctx: RecordContext = Object.freeze({
      exporterAddress: this.exporterAddress,
      observationDomainId: domain,
      templateId: template.id,
      transport: this.transport,
      options,
      exportTime,
      template,
    });
    this.#lastContext = ctx;
    return ctx;
  }

  /**
   * Counts the session as closed (idempotent) and drops its templates. A close caused by bad
   * input is logged at warn level (rate-limited per exporter), a normal one at debug level.
   */
  close(reason: string, onError = false): void {
    if (this.#closed) return;
    this.#closed = true;
    this.store.clear();
    this.#env.counters.sessionsClosed++;
    if (onError) {
      this.#env.counters.sessionsClosedOnError++;
      this.#logLimited(`close|${this.exporterAddress}`, "session closed on bad input", { reason });
    } else {
      this.#env.log.debug("session closed", { transport: this.transport, peer: this.peer, reason });
    }
  }

  /** True once {@linkcode close} was called. */
  get closed(): boolean {
    return this.#closed;
  }

  #logLimited(key: string, msg: string, fields: Record<string, unknown>): void {
    warnRateLimited(this.#env, key, msg, {
      transport: this.transport,
      exporter: this.exporterAddress,
      peer: this.peer,
      ...fields,
    });
  }
}

/**
 * Logs a warning at most once per the rate log's period for `key`; the first one after a quiet
 * period says how many were `suppressed` meanwhile.
 */
export function warnRateLimited(
  env: Pick<SessionEnv, "log" | "rateLog">,
  key: string,
  msg: string,
  fields: Record<string, unknown>,
): void {
  const suppressed = env.rateLog.allow(key);
  if (suppressed < 0) return;
  env.log.warn(msg, { ...fields, ...(suppressed > 0 ? { suppressed } : {}) });
}
