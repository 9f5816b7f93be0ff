/**
 * The bounds of the stream listeners (TCP and TLS), shared so both enforce them identically:
 * caps on open connections (in total, per source address, TLS handshakes in progress), the
 * timeouts (a started message, silence, a TLS handshake) checked by one sweep on the injected
 * clock, and the drain at stop. Every limit hit is counted by the limit's name
 * (`connectionsRefused`, `connectionsTimedOut`) and logged rate-limited; none is fatal.
 *
 * @module
 */

import type { ClockTimer } from "../clock.ts";
import type { Logger } from "../log.ts";
import { AddressCaps, readGranted } from "./address.ts";
import type { LimitsConfig } from "../config/limits.ts";
import { type DrainOptions, drainRound } from "./drain.ts";
import { type SessionEnv, warnRateLimited } from "./session.ts";
import type { StreamSession } from "./stream.ts";

/** The `limits:` keys a {@linkcode ConnectionTable} enforces; an absent one is unbounded. */
export type ConnectionLimits = Partial<
  Pick<
    LimitsConfig,
    | "maxConnections"
    | "maxConnectionsPerAddress"
    | "maxTlsHandshakes"
    | "readTimeoutMs"
    | "idleTimeoutMs"
    | "tlsHandshakeTimeoutMs"
    // Not enforced here: the API port's descriptors, counted in the open-file check.
    | "maxApiConnections"
  >
>;

/** Why a connection was refused at accept: the name of the limit reached. */
export type RefusalReason = "maxConnections" | "maxConnectionsPerAddress" | "maxTlsHandshakes";

/** Why a connection was closed by the sweep: the name of the timeout's limit. */
export type TimeoutReason = "readTimeout" | "idleTimeout" | "tlsHandshakeTimeout";

/** What the table needs from a listener's connection. */
export interface ConnectionHandle {
  /** Closes the socket at once; the listener's handler then closes the session with `reason`. */
  close(reason: string): void;
  /** Asks the peer to stop sending (TCP FIN, TLS close_notify) while reading goes on. */
  closeWrite(): void;
  /**
   * A number that moves while the peer's bytes are being read, handshake included; default:
   * the session's reads.
   */
  progress?(): number;
}

/** One open connection, from accept to close. */
export class TrackedConnection {
  /** Source address (exporter address form). */
  readonly address: string;
  /** Monotonic time of the accept. */
  readonly openedMs: number;
  /** The session, once the connection carries IPFIX (TLS: after the handshake). */
  stream: StreamSession | undefined = undefined;
  /** True while the TLS handshake runs (counted against `maxTlsHandshakes`). */
  handshaking: boolean;
  /** {@linkcode ConnectionHandle.progress} at the last drain round (stop only). */
  drainProgress = -1;
  /** Told to close by the table (its handler removes it once the socket is gone). */
  closing = false;
  /** The listener's socket operations. */
  readonly handle: ConnectionHandle;

  /** Records an accepted connection. */
  constructor(init: {
    address: string;
    openedMs: number;
    handle: ConnectionHandle;
    handshaking: boolean;
  }) {
    this.address = init.address;
    this.openedMs = init.openedMs;
    this.handle = init.handle;
    this.handshaking = init.handshaking;
  }
}

/** A grown read buffer of a TLS connection silent this long goes back to the idle size. */
const RELEASE_AFTER_MS = 1000;
/** Bounds of the sweep period (a quarter of the shortest timeout). */
const SWEEP_MIN_MS = 10;
const SWEEP_MAX_MS = 1000;

/**
 * How often a listener's timeout sweep runs: a quarter of the shortest of `timeoutsMs` (a
 * connection is closed at most a quarter late), 10 ms to 1 s. Shared by the collector's
 * listeners and the API port's.
 */
export function sweepPeriodMs(...timeoutsMs: number[]): number {
  return Math.max(SWEEP_MIN_MS, Math.min(SWEEP_MAX_MS, Math.min(...timeoutsMs) / 4));
}

/** The open connections of one stream listener, and their bounds. */
export class ConnectionTable {
  readonly #env: SessionEnv;
  readonly #limits: ConnectionLimits;
  readonly #conns = new Set<TrackedConnection>();
  readonly #caps: AddressCaps;
  readonly #sweepMs: number;
  readonly #releaseIdle: boolean;
  #handshakes = 0;
  #timer: ClockTimer | undefined;
  #closing = false;

  /**
   * An empty table enforcing `limits`. With `releaseIdleBuffers` the sweep gives a grown read
   * buffer back once its connection is silent (only for sessions fed by push, such as TLS: a
   * pending read may still hold a buffer of a connection that reads into it directly).
   */
  constructor(
    env: SessionEnv,
    options: { limits: ConnectionLimits; releaseIdleBuffers?: boolean },
  ) {
    const limits = options.limits;
    this.#env = env;
    this.#limits = limits;
    this.#releaseIdle = options.releaseIdleBuffers === true;
    this.#caps = new AddressCaps(
      limits.maxConnections ?? Infinity,
      limits.maxConnectionsPerAddress ?? Infinity,
    );
    this.#sweepMs = sweepPeriodMs(
      limits.readTimeoutMs ?? Infinity,
      limits.idleTimeoutMs ?? Infinity,
      limits.tlsHandshakeTimeoutMs ?? Infinity,
    );
  }

  /** Connections open (admitted and not yet removed). */
  get size(): number {
    return this.#conns.size;
  }

  /** Arms the periodic sweep on the session clock; warns if the fd limit undercuts the cap. */
  start(): void {
    checkOpenFilesLimit(this.#limits, this.#env.log);
    this.#arm();
  }

  /**
   * Admits a connection just accepted from `address`, or counts and logs why it is refused
   * (the caller then closes it): undefined when refused. With `handshake`, the connection
   * counts against `maxTlsHandshakes` until {@linkcode attach}.
   */
  admit(
    address: string,
    handle: ConnectionHandle,
    options: { handshake?: boolean } = {},
  ): TrackedConnection | undefined {
    if (this.#closing) return undefined;
    const l = this.#limits;
    const cap = this.#caps.exceeded(address);
    let refused: RefusalReason | undefined;
    if (cap === "total") refused = "maxConnections";
    else if (cap === "perAddress") refused = "maxConnectionsPerAddress";
    else if (options.handshake && this.#handshakes >= (l.maxTlsHandshakes ?? Infinity)) {
      refused = "maxTlsHandshakes";
    }
    if (refused !== undefined) {
      this.#env.counters.connectionRefused(refused);
      this.#log(`refused|${refused}`, "connection refused: limit reached", {
        limit: refused,
        value: l[refused],
        peer: address,
      });
      return undefined;
    }
    const handshaking = options.handshake === true;
    const c = new TrackedConnection({
      address,
      openedMs: this.#env.clock.nowMs(),
      handle,
      handshaking,
    });
    this.#conns.add(c);
    this.#caps.add(address);
    if (handshaking) this.#handshakes++;
    return c;
  }

  /** `c` now carries `stream` (TLS: its handshake completed). */
  attach(c: TrackedConnection, stream: StreamSession): void {
    if (c.handshaking && this.#conns.has(c)) this.#handshakes--;
    c.handshaking = false;
    c.stream = stream;
  }

  /** Forgets a closed connection (its read buffer leaves the budget); idempotent. */
  remove(c: TrackedConnection): void {
    if (!this.#conns.delete(c)) return;
    c.stream?.dispose();
    if (c.handshaking) this.#handshakes--;
    this.#caps.remove(c.address);
  }

  /**
   * Closes every connection past a timeout (counted by reason); with `releaseIdleBuffers`, a
   * connection silent for a second gets its read buffer back to the idle size. Runs on the
   * clock every quarter of the shortest timeout (10 ms to 1 s). Returns how many were closed.
   */
  #sweep(): number {
    const now = this.#env.clock.nowMs();
    const l = this.#limits;
    let closed = 0;
    for (const c of this.#conns) {
      const s = c.stream;
      let reason: TimeoutReason | undefined;
      if (c.closing) {
        continue;
      } else if (c.handshaking) {
        if (now - c.openedMs >= (l.tlsHandshakeTimeoutMs ?? Infinity)) {
          reason = "tlsHandshakeTimeout";
        }
      } else if (s === undefined) {
        continue;
      } else if (s.startedMs >= 0 && now - s.startedMs >= (l.readTimeoutMs ?? Infinity)) {
        reason = "readTimeout";
      } else if (now - s.lastActivityMs >= (l.idleTimeoutMs ?? Infinity)) {
        reason = "idleTimeout";
      } else if (this.#releaseIdle && now - s.lastActivityMs >= RELEASE_AFTER_MS) {
        s.release();
      }
      if (reason === undefined) continue;
      closed++;
      this.#env.counters.connectionTimedOut(reason);
      this.#log(`timeout|${reason}`, "connection closed: timeout", {
        limit: reason,
        peer: c.address,
        ...(s !== undefined && s.buffered > 0 ? { bytesPending: s.buffered } : {}),
      });
      close(c, reason);
    }
    return closed;
  }

  /**
   * The drain at stop: refuses new connections, asks every peer to stop sending (half-close;
   * a TLS connection when its handshake completes) and keeps reading them — what the kernel
   * already acknowledged is decoded — until each is at EOF or quiet, or the deadline passes;
   * a connection still sending then is closed and counted (`connectionsCutAtStop`). Resolves
   * when every connection was told to close; the listener waits for its handlers.
   */
  async drain(options: DrainOptions): Promise<void> {
    this.#closing = true;
    this.#timer?.cancel();
    for (const c of this.#conns) if (!c.handshaking) c.handle.closeWrite();
    const deadline = performance.now() + options.deadlineMs;
    while (this.#conns.size > 0) {
      const round = await drainRound(options, deadline);
      if (round === "deadline") break;
      for (const c of this.#conns) {
        if (c.closing) continue;
        const progress = c.handle.progress?.() ?? c.stream?.reads ?? 0;
        if (round === "judge" && progress === c.drainProgress) {
          close(c, c.handshaking ? "collector stopped in the TLS handshake" : "collector stopped");
        } else c.drainProgress = progress;
      }
    }
    let cut = 0;
    for (const c of this.#conns) {
      if (c.closing) continue;
      cut++;
      close(c, "collector stopped: drain deadline");
    }
    if (cut === 0) return;
    this.#env.counters.connectionsCutAtStop += cut;
    this.#log("drain", "connections still sending at the drain deadline were closed", {
      connections: cut,
      deadlineMs: options.deadlineMs,
    });
  }

  #arm(): void {
    if (this.#closing) return;
    this.#timer = this.#env.clock.setTimer(this.#sweepMs, () => {
      this.#sweep();
      this.#arm();
    }, { unref: true });
  }

  #log(key: string, msg: string, fields: Record<string, unknown>): void {
    warnRateLimited(this.#env, key, msg, fields);
  }
}

/** Tells `c`'s listener to close it, once. */
function close(c: TrackedConnection, reason: string): void {
  c.closing = true;
  c.handle.close(reason);
}

/**
 * Counts the bytes of a started message on a connection we closed (a timeout, the stop): read,
 * never decoded; at stop as `bytesLostAtStop`, otherwise as `bytesDiscarded`.
 */
export function countUnfinished(env: SessionEnv, stream: StreamSession, stopping: boolean): void {
  if (stream.buffered === 0) return;
  if (stopping) env.counters.bytesLostAtStop += stream.buffered;
  else stream.session.discardBytes(stream.buffered);
}

/**
 * Descriptors the process needs besides its connections (listener, sink files and sockets,
 * workers, the config watcher), for {@linkcode checkOpenFilesLimit}.
 */
export const FD_HEADROOM = 64;

/** The soft `Max open files` of a `/proc/<pid>/limits` text; undefined when unlimited or absent. */
export function openFilesLimit(limits: string): number | undefined {
  const m = /^Max open files\s+(\d+|unlimited)\s/m.exec(limits);
  return m === null || m[1] === "unlimited" ? undefined : Number(m[1]);
}

/**
 * Warns at start when the open-file limit is below `maxConnections` plus `maxApiConnections`
 * (the API port's, `src/api/front.ts`) plus {@linkcode FD_HEADROOM}: accept would fail with
 * EMFILE before the caps refuse anyone, and so would opening the config or a rotated log.
 * Returns the limit read (undefined when it cannot be read: Deno grants `/proc` only with
 * `--allow-all`).
 */
export function checkOpenFilesLimit(
  caps: { readonly maxConnections?: number; readonly maxApiConnections?: number },
  log: Logger,
  path = "/proc/self/limits",
): number | undefined {
  let limit: number | undefined;
  try {
    if (!readGranted(path)) return undefined;
    limit = openFilesLimit(Deno.readTextFileSync(path));
  } catch {
    return undefined;
  }
  const { maxConnections, maxApiConnections = 0 } = caps;
  const need = maxConnections === undefined
    ? undefined
    : maxConnections + maxApiConnections + FD_HEADROOM;
  if (limit !== undefined && need !== undefined && limit < need) {
    log.warn(
      "open-file limit is below limits.maxConnections + maxApiConnections: accepts will " +
        "fail before the caps",
      {
        openFilesLimit: limit,
        maxConnections,
        maxApiConnections,
        fix: `raise it (ulimit -n ${need}, systemd LimitNOFILE) or lower ` +
          "limits.maxConnections",
      },
    );
  }
  return limit;
}
