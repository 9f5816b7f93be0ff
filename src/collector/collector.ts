/**
 * The collecting process: one listener (UDP, TCP or mutual TLS), one {@linkcode Session} per
 * exporter transport session with its own templates, every data set handed synchronously to the
 * sink, and counters for everything that is dropped. Bad input never stops collection: it is
 * counted, logged (rate-limited) and, on a stream, ends only that session.
 */

import { type Clock, systemClock, TaskCachedClock } from "../clock.ts";
import type { LimitsConfig } from "../config/limits.ts";
import { headerProblem, TemplateBudget } from "../ipfix/mod.ts";
import { logger, RateLimitedLog } from "../log.ts";
import { DEFAULT_LISTEN_ADDRESS, exporterAddress, parseListenAddress } from "./address.ts";
import { type RecordSink, Session, type SessionEnv, warnRateLimited } from "./session.ts";
import { ReadBudget } from "./read_budget.ts";
import { LruMap } from "./lru.ts";
import { DEFAULT_DRAIN, type DrainOptions } from "./drain.ts";
import { type CollectorStats, Counters, type Transport } from "./stats.ts";
import { type StreamListenerOptions, TcpListener } from "./tcp.ts";
import type { TlsListener, TlsMaterial } from "./tls.ts";
import {
  openDenoUdpReceiver,
  type UdpPeer,
  type UdpReceiver,
  type UdpReceiverFactory,
} from "./udp.ts";

/**
 * Default UDP template lifetime (and UDP session idle timeout): 5400 s, go-ipfix v0.6.2's
 * default (3 × 1800 s) that Antrea v1.13 agents are tuned for; they re-announce templates every
 * 1800 s, so a template survives two lost refreshes. Newer go-ipfix defaults to 1800 s.
 */
export const DEFAULT_TEMPLATE_TTL_MS = 5_400_000;

/** Options of a {@linkcode Collector}. */
export interface CollectorOptions {
  /** `host:port`; default `[::]:4739` = all interfaces, IPv4 and IPv6 on the same port. */
  readonly address?: string;
  /** Transport to listen on. */
  readonly protocol: Transport;
  /** Required for `tls`: CA for client certificates, server certificate and key (PEM). */
  readonly tls?: TlsMaterial;
  /**
   * UDP only: templates expire this long after their last announcement, and a UDP session is
   * dropped after this long without a decoded message. Default {@linkcode DEFAULT_TEMPLATE_TTL_MS}.
   * TCP/TLS templates live as long as their connection.
   */
  readonly templateTtlMs?: number;
  /**
   * Hand the sink records in wire-number mode (`CompileOptions.wireNumbers`: u64 counters below
   * 2^53 and IPv4 addresses as numbers), as the aggregation core takes them. Default false.
   */
  readonly wireNumbers?: boolean;
  /**
   * Hand the sink data records undecoded, as their spans in the message (`RecordSink`'s `raw`),
   * for a sink that decodes them in another thread (the aggregation shards). Default false.
   */
  readonly raw?: boolean;
  /**
   * Time source for template and session expiry (tests inject a ManualClock); default the system
   * clock read once per task.
   */
  readonly clock?: Clock;
  /** UDP receive path (default: one `Deno.listenDatagram` socket). */
  readonly udpReceiver?: UdpReceiverFactory;
  /**
   * Resource bounds (the `limits:` config section, whose defaults the product always passes);
   * an unset key is unbounded.
   */
  readonly limits?: Partial<LimitsConfig>;
  /** Interval of the idle UDP session sweep; default min(TTL / 4, 60 s). 0 disables it. */
  readonly sweepIntervalMs?: number;
  /**
   * The drain at {@linkcode Collector.stop}: how long queued input may still be read (real
   * time); default {@linkcode DEFAULT_DRAIN}.
   */
  readonly drain?: DrainOptions;
}

/** An IPFIX collecting process. */
export class Collector {
  #options: CollectorOptions;
  readonly #env: SessionEnv;
  readonly #counters: Counters;
  readonly #ttlMs: number;
  readonly #limits: Partial<LimitsConfig>;
  /** UDP sessions by peer, least recently active first (the one evicted at the limit). */
  readonly #udpSessions = new LruMap<Session>();
  #udp: UdpReceiver | undefined;
  #udpLoop: Promise<void> | undefined;
  #tcp: TcpListener | undefined;
  #tls: TlsListener | undefined;
  #sweepTimer: ReturnType<typeof setInterval> | undefined;
  #state: "new" | "running" | "stopped" = "new";

  /** Creates a collector; nothing is bound before {@linkcode start}. */
  constructor(options: CollectorOptions, sink: RecordSink) {
    if (options.protocol === "tls" && options.tls === undefined) {
      throw new Error("collector: protocol tls needs tls.caPem, tls.certPem and tls.keyPem");
    }
    if (!["udp", "tcp", "tls"].includes(options.protocol)) {
      throw new Error(`collector: unknown protocol "${options.protocol}" (udp, tcp or tls)`);
    }
    this.#options = options;
    this.#ttlMs = options.templateTtlMs ?? DEFAULT_TEMPLATE_TTL_MS;
    this.#limits = options.limits ?? {};
    const limits = this.#limits;
    const budget = new TemplateBudget({
      maxTemplates: limits.maxTemplates,
      maxLayoutFields: limits.maxTemplateLayoutFields,
      maxStringBytes: limits.maxStringBytes,
      wireNumbers: options.wireNumbers,
    });
    // The system clock read once per task: sessions stamp every message (lastSeenMs), and a
    // read's few hundred messages need no clock call each.
    const clock = options.clock ?? new TaskCachedClock(systemClock);
    const readBuffers = new ReadBudget(limits.maxReadBufferBytes, () =>
      warnRateLimited(
        this.#env,
        "limit|maxReadBufferBytes",
        "read buffers at their limit: busy connections read in smaller pieces",
        { limit: "maxReadBufferBytes", readBufferBytes: readBuffers.held, max: readBuffers.limit },
      ));
    this.#counters = new Counters(options.protocol, budget, readBuffers);
    this.#env = {
      counters: this.#counters,
      sink,
      log: logger("collector"),
      rateLog: new RateLimitedLog(10_000, () => clock.nowMs()),
      clock,
      raw: options.raw,
      templates: {
        maxFieldsPerTemplate: limits.maxFieldsPerTemplate,
        maxTemplates: limits.maxTemplatesPerSession,
        budget,
      },
    };
  }

  /** Binds the listener and starts receiving. */
  async start(): Promise<void> {
    if (this.#state !== "new") throw new Error("collector: start called twice");
    const address = parseListenAddress(this.#options.address ?? DEFAULT_LISTEN_ADDRESS);
    switch (this.#options.protocol) {
      case "udp": {
        const udp = await (this.#options.udpReceiver ?? openDenoUdpReceiver)(address);
        this.#udp = udp;
        this.#udpLoop = udp.run((d, start, end, peer) => this.#onDatagram(d, start, end, peer));
        const sweep = this.#options.sweepIntervalMs ??
          Math.max(1000, Math.min(this.#ttlMs / 4, 60_000));
        if (sweep > 0) this.#sweepTimer = setInterval(() => this.expireIdleSessions(), sweep);
        break;
      }
      case "tcp":
        this.#tcp = new TcpListener(address, this.#env, this.#streamOptions());
        this.#tcp.start();
        break;
      case "tls": {
        // `node:tls` only for a TLS collector: a TCP or UDP process never loads it.
        const { TlsListener } = await import("./tls.ts");
        this.#tls = new TlsListener(
          address,
          this.#options.tls!,
          this.#env,
          this.#streamOptions(),
        );
        await this.#tls.start();
        break;
      }
    }
    this.#state = "running";
    this.#env.log.info("collector listening", {
      protocol: this.#options.protocol,
      address: address.hostname,
      port: this.port,
    });
  }

  /**
   * Stops accepting, reads and decodes what the kernel already acknowledged (queued datagrams;
   * each connection until EOF or silence, after a half-close that asks its peer to stop),
   * bounded by the drain deadline, then closes every socket and waits until all handlers have
   * finished. What could not be read is counted (`connectionsCutAtStop`, `bytesLostAtStop`).
   * Idempotent.
   */
  async stop(): Promise<void> {
    if (this.#state === "stopped") return;
    this.#state = "stopped";
    if (this.#sweepTimer !== undefined) clearInterval(this.#sweepTimer);
    await this.#udp?.close(this.#options.drain ?? DEFAULT_DRAIN);
    await this.#udpLoop;
    for (const [, s] of this.#udpSessions.entries()) s.close("collector stopped");
    this.#udpSessions.clear();
    await this.#tcp?.stop();
    await this.#tls?.stop();
    // The collector's last word: a transport switch replaces it, and with it these counters.
    const c = this.#counters;
    this.#env.log.info("collector stopped", {
      protocol: this.#options.protocol,
      dataRecords: c.dataRecords,
      connectionsCutAtStop: c.connectionsCutAtStop,
      bytesLostAtStop: c.bytesLostAtStop,
    });
  }

  /**
   * A TLS collector serves `material` to the handshakes from now on (its certificates were
   * re-issued); established connections are kept. Throws for a UDP or TCP collector.
   */
  setTlsMaterial(material: TlsMaterial): void {
    if (this.#options.protocol !== "tls") {
      throw new Error(`collector: ${this.#options.protocol} has no TLS material`);
    }
    this.#options = { ...this.#options, tls: material };
    this.#tls?.setMaterial(material);
  }

  #streamOptions(): StreamListenerOptions {
    return { limits: this.#limits, drain: this.#options.drain ?? DEFAULT_DRAIN };
  }

  /** The bound port (0 before {@linkcode start}). */
  get port(): number {
    return this.#udp?.port ?? this.#tcp?.port ?? this.#tls?.port ?? 0;
  }

  /** A snapshot of every counter. */
  stats(): CollectorStats {
    const s = this.#counters.snapshot();
    const udp = this.#udp?.counters?.();
    return udp === undefined ? s : { ...s, udpReceiver: udp };
  }

  /**
   * Drops UDP sessions idle for at least the template TTL, and the expired templates of the
   * others, giving their room under `limits.maxTemplates` back (also run periodically while
   * started; a store otherwise purges only when it needs room itself, so a live session that
   * stopped refreshing a template would hold its place); returns how many sessions were dropped.
   */
  expireIdleSessions(): number {
    const now = this.#env.clock.nowMs();
    let n = 0;
    for (const [key, s] of this.#udpSessions.entries()) {
      if (now - s.lastSeenMs >= this.#ttlMs) {
        this.#udpSessions.delete(key);
        s.close("idle timeout");
        this.#counters.sessionsExpired++;
        n++;
      } else s.store.purgeExpired();
    }
    return n;
  }

  #onDatagram(data: Uint8Array, start: number, end: number, peer: UdpPeer): void {
    const key = peer.key;
    let s = this.#udpSessions.use(key);
    if (s !== undefined && this.#env.clock.nowMs() - s.lastSeenMs >= this.#ttlMs) {
      this.#udpSessions.delete(key);
      s.close("idle timeout");
      this.#counters.sessionsExpired++;
      s = undefined;
    }
    if (s === undefined) {
      // A datagram that is no IPFIX message opens no session: it would evict a live one (and
      // its templates) at maxUdpSessions for nothing; counted as its decode error.
      const problem = headerProblem(data, start, end);
      if (problem !== undefined) {
        const exporter = this.#counters.exporter(exporterAddress(peer.hostname));
        this.#counters.bytes += end - start;
        exporter.bytes += end - start;
        this.#counters.decodeError(problem, exporter);
        return;
      }
      if (this.#udpSessions.size >= (this.#limits.maxUdpSessions ?? Infinity)) {
        const [oldestKey, oldest] = this.#udpSessions.oldest()!;
        this.#udpSessions.delete(oldestKey);
        oldest.close("evicted: too many UDP sessions");
        this.#counters.sessionsEvicted++;
        warnRateLimited(
          this.#env,
          "limit|maxUdpSessions",
          "UDP sessions at their limit: the least recently heard one evicted, its templates lost",
          {
            limit: "maxUdpSessions",
            evicted: oldestKey,
            sessionsEvicted: this.#counters.sessionsEvicted,
          },
        );
      }
      s = new Session(this.#env, {
        transport: "udp",
        exporterAddress: exporterAddress(peer.hostname),
        peer: key,
        templateTtlMs: this.#ttlMs,
      });
      this.#udpSessions.add(key, s);
    }
    s.addBytes(end - start);
    s.handleMessage(data, start, end);
  }
}
