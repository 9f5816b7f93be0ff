/**
 * Fair reading across stream connections (issue 15 "Fairness").
 *
 * A Deno read that finds bytes already in the kernel resolves without the runtime polling its
 * other sockets, so a connection whose peer always has data ready is read, decoded and
 * aggregated over and over while the other connections' pending reads are only looked at now
 * and then: measured before this, four Agents sending flat out got 1,012,000 / 20,000 /
 * 20,000 / 20,000 records. Yielding to a message or a microtask does not help (the runtime
 * does not poll its sockets in between); only a pause that leaves it idle does.
 *
 * So each connection reads at most {@linkcode TURN_BYTES} per turn and then, when other
 * connections are open, pauses with a zero timer ({@linkcode FairTurn.pause}), during which
 * every connection with bytes waiting is read. The pause costs about a millisecond when no
 * other connection has anything to read (one busy Agent among idle ones): a pause that let
 * nobody else read doubles the number of turns before the next one (up to
 * {@linkcode MAX_TURNS_BETWEEN_PAUSES}), one during which another connection read resets it
 * to every turn. A lone connection never pauses.
 *
 * @module
 */

/**
 * Bytes a connection may read and process before it lets the others read: one full read of the
 * busy buffer (~1,000 Agent records, about a millisecond of work).
 */
export const TURN_BYTES = 256 * 1024;

/** Most turns between two pauses of a connection whose pauses let nobody else read. */
export const MAX_TURNS_BETWEEN_PAUSES = 64;

/**
 * The tick a connection that caught up with its peer waits for before it reads again
 * ({@linkcode ReadGate}). Each read costs the main thread a wake-up, which at a steady pace (an
 * Agent writes a few records every few milliseconds) costs more than the records read. Flow
 * records wait seconds for their export anyway.
 */
export const TRICKLE_WAIT_MS = 20;

/**
 * Makes trickling connections read together: a connection that caught up with its peer (its read
 * did not fill the space it was given) waits for the next tick, one tick (one timer, one wake-up)
 * shared by every connection waiting meanwhile, so the bytes of many small writes are read at
 * once. A read that filled its space never waits: more is probably queued.
 *
 * Also while other connections are busy, and for a fast peer that the collector momentarily
 * caught up with: its bytes gather in the socket buffers during the tick and the reads after
 * it fill their space again. The gate used to stay open for a second after any read that filled
 * the 256 KiB busy buffer, so that such a peer would not wait; where that worked it cost more
 * than it saved (one Agent sending flat out to the real process, 4 alternated 6 s trials each:
 * 136-235k records/s at 3.3-4.2 µs of CPU per record with the exemption working, against
 * 331-617k at 2.3-2.8 µs as it was, rarely in effect; without it, 6 trials: median ~558k at
 * ~3.0 µs against ~388k at ~3.25 µs as it was), because the reads it allowed were small and
 * many. It rarely worked on TCP: a busy stream's read space is the buffer less the start of a
 * message cut by the last read, so such reads reached 256 KiB only when one happened to end on a
 * message boundary. Fairness does not depend on it: {@linkcode FairTurn} bounds each turn, and the
 * fairness tests (four Agents flat out, one paused and resumed) pass without it.
 *
 * What the gate saves is the read, not the wake-up: the runtime wakes the main thread for every
 * segment that arrives on a connection, read pending or not (its socket stays registered for
 * readiness). Measured on a busy 2-core VM (2026-12-05, `scripts/bench/tcp_readiness.ts`: one
 * peer writing 300 small messages a second): reading every message, 300 wake-ups and 35-41 ms of
 * main-thread CPU a second; gated at 20 ms, 336-363 wake-ups and 20-29 ms. The real process at
 * 2,000 records/s over 4 TCP connections: ~1,100 wake-ups a second of its main thread, 28-35 µs
 * of its CPU per record.
 */
export class ReadGate {
  readonly #ms: number;
  readonly #busyFrom: number;
  #tick: Promise<void> | undefined = undefined;

  /**
   * A gate ticking `ms` after its first waiter. With `busyFrom`, a read of at least that many
   * bytes never waits either, even one that did not fill its space: it is a busy peer's (the TLS
   * listener's; see {@linkcode TLS_BUSY_READ_BYTES}).
   */
  constructor(ms: number = TRICKLE_WAIT_MS, options: { busyFrom?: number } = {}) {
    this.#ms = ms;
    this.#busyFrom = options.busyFrom ?? Infinity;
  }

  /**
   * Counts a read of `n` bytes into `space` bytes: the tick to wait for before the next read, or
   * undefined to read again at once.
   */
  after(n: number, space: number): Promise<void> | undefined {
    if (n === space || n >= this.#busyFrom) return undefined;
    // A real timer, as FairTurn's pause: the tick paces socket reads, not the flows' time.
    return this.#tick ??= new Promise<void>((resolve) => {
      setTimeout(() => {
        this.#tick = undefined;
        resolve();
      }, this.#ms);
    });
  }
}

/**
 * The TLS listener's {@linkcode ReadGate} lets reads of this many bytes or more go on, short or
 * not: a trickling Agent's reads bring a few KiB (2,000 records/s over 4 connections, ~2.5 KiB
 * each per tick). With every short read gated, four TLS Agents sending flat out were served
 * unfairly on a slow machine (2026-12-05, `tests/collector/fairness_test.ts`, tls only: 2 of 5
 * runs failed, the slowest Agent getting 8-24 % of the fastest's records; with this, 12 of 12
 * passed). Over TCP every short read still waits (measured there: exempting busy periods cost
 * throughput, see {@linkcode ReadGate}).
 */
export const TLS_BUSY_READ_BYTES = 16 * 1024;

/** Reads completed by all the connections of one listener (shared by their {@linkcode FairTurn}s). */
export class ReadClock {
  /** Reads so far. */
  reads = 0;
}

/** One connection's turns: {@linkcode spend} after every read, {@linkcode pause} when it says. */
export class FairTurn {
  readonly #clock: ReadClock;
  #bytes = 0;
  #turns = 0;
  #every = 1;

  /** Turns of a connection of the listener whose reads `clock` counts. */
  constructor(clock: ReadClock) {
    this.#clock = clock;
  }

  /** Turns between two pauses now (1 while others are active, up to the maximum). */
  get turnsBetweenPauses(): number {
    return this.#every;
  }

  /** Counts a read of `n` bytes; true when the connection should now {@linkcode pause}. */
  spend(n: number): boolean {
    this.#clock.reads++;
    this.#bytes += n;
    if (this.#bytes < TURN_BYTES) return false;
    this.#bytes = 0;
    if (++this.#turns < this.#every) return false;
    this.#turns = 0;
    return true;
  }

  /** Lets the runtime poll every socket, then adapts how often to pause (see the module doc). */
  async pause(): Promise<void> {
    const before = this.#clock.reads;
    await new Promise<void>((resolve) => setTimeout(resolve, 0));
    this.#every = this.#clock.reads !== before
      ? 1
      : Math.min(this.#every * 2, MAX_TURNS_BETWEEN_PAUSES);
  }
}
