/**
 * The templates of one exporter session (RFC 7011 scopes templates to the transport session: the
 * collector keeps one store per TCP/TLS connection or UDP source address and drops it when the
 * session ends), keyed by (observation domain, template id). UDP templates expire `ttlMs` after
 * their last announcement; a refresh pushes the expiry forward, so a refresh arriving exactly at
 * the TTL keeps the template (upstream's one-timer-per-receipt race, ipfix.md §2.6, cannot happen).
 * Expiry is evaluated lazily against the injected clock: no timers.
 */

import type { TemplateRecord } from "./types.ts";
import type { Clock } from "../clock.ts";
import { systemClock } from "../clock.ts";
import { type CompiledTemplate, compileTemplate, sameTemplate } from "./compile.ts";
import { IpfixDecodeError } from "./errors.ts";

export type { CompiledTemplate, RecordsDecoder } from "./compile.ts";

/** Options of a {@linkcode TemplateStore}. */
export interface TemplateStoreOptions {
  /** Template lifetime after its last announcement; 0 or absent: never expire (TCP). */
  ttlMs?: number;
  /** Time source for expiry (default: the system clock). */
  clock?: Clock;
}

interface Entry {
  compiled: CompiledTemplate;
  expiresAt: number;
}

function key(domain: number, id: number): number {
  // domain < 2^32, id < 2^16: the product stays exact in a double.
  return domain * 65536 + id;
}

/** Templates of one exporter session. */
export class TemplateStore {
  readonly #ttlMs: number;
  readonly #clock: Clock;
  readonly #entries = new Map<number, Entry>();
  // Agents send one template's data set after another: remembering the last hit skips the Map
  // lookup (keys above 2^31 are heap numbers, slow to hash) on the hot path.
  #lastKey = -1;
  #lastEntry: Entry | undefined;

  /** Creates an empty store. */
  constructor(opts: TemplateStoreOptions = {}) {
    this.#ttlMs = opts.ttlMs !== undefined && opts.ttlMs > 0 ? opts.ttlMs : 0;
    this.#clock = opts.clock ?? systemClock;
  }

  /**
   * Registers (or replaces, or refreshes) a template and returns its compiled form. Re-announcing
   * an identical template only pushes its expiry forward. Throws IpfixDecodeError("badTemplate")
   * for a template that cannot be compiled; the previous definition is then left untouched.
   */
  set(domain: number, t: TemplateRecord): CompiledTemplate {
    const k = key(domain, t.id);
    const expiresAt = this.#ttlMs > 0 ? this.#clock.nowMs() + this.#ttlMs : Infinity;
    const prev = this.#entries.get(k);
    if (prev !== undefined && sameTemplate(prev.compiled.template, t)) {
      prev.expiresAt = expiresAt;
      return prev.compiled;
    }
    const compiled = compileTemplate(t);
    this.#delete(k);
    this.#entries.set(k, { compiled, expiresAt });
    return compiled;
  }

  /** Returns the live template (domain, id); an expired one is removed and undefined returned. */
  get(domain: number, id: number): CompiledTemplate | undefined {
    const k = key(domain, id);
    const e = k === this.#lastKey ? this.#lastEntry : this.#entries.get(k);
    if (e === undefined) return undefined;
    // Without a TTL the clock is never read (it costs more than the lookup).
    if (this.#ttlMs > 0 && this.#clock.nowMs() >= e.expiresAt) {
      this.#delete(k);
      return undefined;
    }
    this.#lastKey = k;
    this.#lastEntry = e;
    return e.compiled;
  }

  #delete(k: number): void {
    this.#entries.delete(k);
    if (k === this.#lastKey) {
      this.#lastKey = -1;
      this.#lastEntry = undefined;
    }
  }

  /**
   * Withdraws a template (RFC 7011 §8): id >= 256 removes that template, id 2 every data
   * template of the domain, id 3 every options template of the domain. Other ids throw
   * IpfixDecodeError("badTemplate"). Withdrawing an unknown template is not an error.
   */
  withdraw(domain: number, id: number): void {
    if (id >= 256 && id <= 65535) {
      this.#delete(key(domain, id));
      return;
    }
    if (id !== 2 && id !== 3) {
      throw new IpfixDecodeError("badTemplate", `withdrawal of template id ${id}`);
    }
    const options = id === 3;
    const lo = key(domain, 0);
    const hi = key(domain, 65535);
    for (const [k, e] of this.#entries) {
      if (k >= lo && k <= hi && e.compiled.options === options) this.#delete(k);
    }
  }

  /** Number of live (unexpired) templates; expired ones are purged as a side effect. */
  get size(): number {
    this.purgeExpired();
    return this.#entries.size;
  }

  /** Removes expired templates now; returns how many were removed. */
  purgeExpired(): number {
    if (this.#ttlMs === 0) return 0;
    const now = this.#clock.nowMs();
    let n = 0;
    for (const [k, e] of this.#entries) {
      if (now >= e.expiresAt) {
        this.#delete(k);
        n++;
      }
    }
    return n;
  }

  /** Removes every template (session ended). */
  clear(): void {
    this.#entries.clear();
    this.#lastKey = -1;
    this.#lastEntry = undefined;
  }

  /** Live templates as (domain, compiled) pairs, e.g. for a debug endpoint. */
  list(): { domain: number; template: CompiledTemplate }[] {
    this.purgeExpired();
    return [...this.#entries].map(([k, e]) => ({
      domain: Math.floor(k / 65536),
      template: e.compiled,
    }));
  }
}
