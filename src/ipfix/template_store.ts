/**
 * The templates of one exporter session (RFC 7011 scopes templates to the transport session: the
 * collector keeps one store per TCP/TLS connection or UDP source address and drops it when the
 * session ends), keyed by (observation domain, template id). UDP templates expire `ttlMs` after
 * their last announcement; a refresh pushes the expiry forward, so a refresh arriving exactly at
 * the TTL keeps the template (upstream's one-timer-per-receipt race, ipfix.md §2.6, cannot happen).
 * Expiry is evaluated lazily against the injected clock: no timers.
 *
 * Bounded (`limits.maxTemplatesPerSession` per store; `limits.maxTemplates` and
 * `limits.maxTemplateLayoutFields` over every store sharing one {@linkcode TemplateBudget}, whose
 * {@linkcode TemplateLayouts} lets templates with the same field list share one decoder and one
 * field list): a template over a bound is refused, not stored, and
 * the caller counts it; a refused (domain, id) is remembered (a few per session) so the data
 * sets that follow are counted as records dropped rather than as misses. Refusing rather than
 * evicting: an Agent on TCP announces its templates once per connection, so evicting them to
 * make room for a flood would silently turn its data into misses for the life of the
 * connection; refusal confines the harm to the flooding session (and to new templates while the
 * shared budget is exhausted, which closing or withdrawing frees).
 */

import type { TemplateRecord } from "./types.ts";
import type { Clock } from "../clock.ts";
import { systemClock } from "../clock.ts";
import {
  type CompiledTemplate,
  type CompileOptions,
  minRecordLength,
  type PendingTemplates,
  sameTemplate,
  TemplateLayouts,
} from "./compile.ts";
import { IpfixDecodeError } from "./errors.ts";

export type { CompiledTemplate, RecordsDecoder } from "./compile.ts";

/**
 * Why a template was not stored: over `maxFieldsPerTemplate` (`tooWide`), the store's
 * `maxTemplates` (`sessionFull`), the shared budget's templates (`totalFull`) or its layout
 * fields (`layoutsFull`); or invalid (`badTemplate`: a field length illegal for its type, an
 * id below 256, a bad scope count; the decoder refuses it alone, the set's other templates are
 * kept).
 */
export type TemplateRefusal =
  | "tooWide"
  | "sessionFull"
  | "totalFull"
  | "layoutsFull"
  | "badTemplate";

/** Options of a {@linkcode TemplateBudget}. */
export interface TemplateBudgetOptions extends CompileOptions {
  /** Templates held at once over every store sharing the budget (default: unbounded). */
  maxTemplates?: number;
  /** Fields of the distinct field lists held at once (default: unbounded). */
  maxLayoutFields?: number;
}

/**
 * What several stores hold together (the collector owns one for all its sessions): a count of
 * templates (a store takes one unit per template and gives it back when the template goes) and
 * the distinct layouts they use.
 */
export class TemplateBudget {
  /** Templates that may be held at once. */
  readonly max: number;
  /** The distinct field lists held, shared by the stores. */
  readonly layouts: TemplateLayouts;
  #used = 0;

  /** A budget (every bound absent: unbounded). */
  constructor(options: TemplateBudgetOptions = {}) {
    this.max = options.maxTemplates ?? Infinity;
    this.layouts = new TemplateLayouts({
      maxFields: options.maxLayoutFields,
      maxStringBytes: options.maxStringBytes,
      wireNumbers: options.wireNumbers,
    });
  }

  /** Templates held now. */
  get used(): number {
    return this.#used;
  }

  /** Takes one unit (the caller checked that one is left). */
  take(): void {
    this.#used++;
  }

  /** Gives `n` units back. */
  release(n: number): void {
    this.#used -= n;
  }
}

/**
 * Options of a {@linkcode TemplateStore}. `maxStringBytes` applies to a store with its own
 * budget; a shared {@linkcode TemplateBudget} carries its own.
 */
export interface TemplateStoreOptions extends CompileOptions {
  /** Template lifetime after its last announcement; 0 or absent: never expire (TCP). */
  ttlMs?: number;
  /** Time source for expiry (default: the system clock). */
  clock?: Clock;
  /** Fields of one template; a wider one is refused (`tooWide`). Default: unbounded. */
  maxFieldsPerTemplate?: number;
  /** Templates this store holds; one more is refused (`sessionFull`). Default: unbounded. */
  maxTemplates?: number;
  /**
   * Budget shared with other stores (templates in total, distinct layouts); default: a budget
   * of this store alone, unbounded, with this store's `maxStringBytes`.
   */
  budget?: TemplateBudget;
}

/** Refused (domain, id) pairs remembered per store, oldest forgotten first. */
export const REFUSALS_REMEMBERED = 16;

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
  readonly #maxFields: number;
  readonly #maxTemplates: number;
  readonly #budget: TemplateBudget;
  readonly #entries = new Map<number, Entry>();
  /** No template expires before this time (see {@linkcode purgeExpired}). */
  #purgeAfter = 0;
  /** Refused (domain, id) → smallest record length of the refused template. */
  readonly #refused = new Map<number, number>();
  // Agents send one template's data set after another: remembering the last hit skips the Map
  // lookup (keys above 2^31 are heap numbers, slow to hash) on the hot path.
  #lastKey = -1;
  #lastEntry: Entry | undefined;

  /** Creates an empty store. */
  constructor(opts: TemplateStoreOptions = {}) {
    this.#ttlMs = opts.ttlMs !== undefined && opts.ttlMs > 0 ? opts.ttlMs : 0;
    this.#clock = opts.clock ?? systemClock;
    this.#maxFields = opts.maxFieldsPerTemplate ?? Infinity;
    this.#maxTemplates = opts.maxTemplates ?? Infinity;
    this.#budget = opts.budget ??
      new TemplateBudget({ maxStringBytes: opts.maxStringBytes, wireNumbers: opts.wireNumbers });
  }

  /** The layouts this store's templates use (shared with the stores of its budget). */
  get layouts(): TemplateLayouts {
    return this.#budget.layouts;
  }

  /**
   * Why a template (domain, id) of `fields` fields would be refused now, or undefined when it
   * may be stored (a redefinition of a held template needs no new place). With `pending` (the
   * decoder parsing a template set, see {@linkcode PendingTemplates}), the room promised to the
   * set's earlier templates counts as used and an admitted new template is added to it, so a
   * refused template is skipped unparsed. `layoutsFull` is only known once it is compiled.
   */
  wouldRefuse(
    domain: number,
    template: { id: number; fields: number },
    pending?: PendingTemplates,
  ): TemplateRefusal | undefined {
    if (template.fields > this.#maxFields) return "tooWide";
    if (this.#entries.has(key(domain, template.id))) return undefined;
    const promised = pending?.templates ?? 0;
    if (
      this.#entries.size + promised >= this.#maxTemplates ||
      this.#budget.used + promised >= this.#budget.max
    ) this.purgeExpired(); // expired templates still hold budget until purged
    if (this.#entries.size + promised >= this.#maxTemplates) return "sessionFull";
    if (this.#budget.used + promised >= this.#budget.max) return "totalFull";
    if (pending !== undefined) pending.templates++;
    return undefined;
  }

  /**
   * Compiles a template with this store's options, without storing it; undefined when its
   * layout is new and the shared layouts are full (`layoutsFull`), counting `pending`. Throws
   * IpfixDecodeError("badTemplate") for a template that cannot be compiled.
   */
  compile(t: TemplateRecord, pending?: PendingTemplates): CompiledTemplate | undefined {
    return this.#budget.layouts.compile(t, pending);
  }

  /**
   * Stores (or replaces, or refreshes) a compiled template; returns why it was refused, or
   * undefined when it is stored. A refused template is remembered and any previous definition
   * of (domain, id) removed, as by {@linkcode refuse}.
   */
  add(domain: number, compiled: CompiledTemplate): TemplateRefusal | undefined {
    const t = compiled.template;
    const k = key(domain, t.id);
    const expiresAt = this.#ttlMs > 0 ? this.#clock.nowMs() + this.#ttlMs : Infinity;
    const prev = this.#entries.get(k);
    if (prev !== undefined && sameTemplate(prev.compiled.template, t)) {
      prev.expiresAt = expiresAt;
      return undefined;
    }
    const refusal = this.wouldRefuse(domain, { id: t.id, fields: t.fields.length });
    // hold() may switch to an identical layout held meanwhile: store what it returns.
    const held = refusal === undefined ? this.#budget.layouts.hold(compiled) : undefined;
    if (held === undefined) {
      this.refuse(domain, t.id, compiled.minRecordLength);
      return refusal ?? "layoutsFull";
    }
    this.#refused.delete(k);
    if (prev === undefined) {
      this.#budget.take();
      this.#entries.set(k, { compiled: held, expiresAt });
      if (expiresAt < this.#purgeAfter) this.#purgeAfter = expiresAt;
    } else {
      this.#budget.layouts.release(prev.compiled);
      prev.compiled = held;
      prev.expiresAt = expiresAt;
    }
    return undefined;
  }

  /**
   * Records that a template for (domain, id) was refused: a previous definition is removed (the
   * exporter replaced it), and the refusal is remembered with the smallest record length of the
   * refused template, to estimate how many records its data sets carry. Only the latest
   * {@linkcode REFUSALS_REMEMBERED} are kept; a template stored or withdrawn later clears it.
   */
  refuse(domain: number, id: number, minRecordLength: number): void {
    const k = key(domain, id);
    this.#delete(k);
    this.#refused.delete(k);
    if (this.#refused.size >= REFUSALS_REMEMBERED) {
      this.#refused.delete(this.#refused.keys().next().value!);
    }
    this.#refused.set(k, Math.max(1, minRecordLength));
  }

  /**
   * The smallest record length of a remembered refused template (domain, id), or 0 when
   * (domain, id) was not refused (or is forgotten).
   */
  refusedMinRecordLength(domain: number, id: number): number {
    return this.#refused.get(key(domain, id)) ?? 0;
  }

  /**
   * Registers (or replaces, or refreshes) a template and returns its compiled form. Re-announcing
   * an identical template only pushes its expiry forward. Throws IpfixDecodeError("badTemplate")
   * for a template that cannot be compiled (the previous definition is then left untouched) or
   * is refused (see {@linkcode add}).
   */
  set(domain: number, t: TemplateRecord): CompiledTemplate {
    const prev = this.#entries.get(key(domain, t.id));
    if (prev !== undefined && sameTemplate(prev.compiled.template, t)) {
      prev.expiresAt = this.#ttlMs > 0 ? this.#clock.nowMs() + this.#ttlMs : Infinity;
      return prev.compiled;
    }
    const ct = this.compile(t);
    if (ct === undefined) this.refuse(domain, t.id, minRecordLength(t.fields));
    const refusal = ct === undefined ? "layoutsFull" : this.add(domain, ct);
    if (refusal !== undefined) {
      throw new IpfixDecodeError("badTemplate", `template ${t.id} refused: ${refusal}`);
    }
    return this.#entries.get(key(domain, t.id))!.compiled;
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
    const e = this.#entries.get(k);
    if (e === undefined) return;
    this.#entries.delete(k);
    this.#budget.release(1);
    this.#budget.layouts.release(e.compiled);
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
      this.#refused.delete(key(domain, id));
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
    for (const k of this.#refused.keys()) if (k >= lo && k <= hi) this.#refused.delete(k);
  }

  /** Number of live (unexpired) templates; expired ones are purged as a side effect. */
  get size(): number {
    this.purgeExpired();
    return this.#entries.size;
  }

  /**
   * Removes expired templates now; returns how many were removed. Cheap when nothing can have
   * expired yet (a store kept full by a flood asks on every refused template): entries are
   * walked only once the earliest expiry seen by the last walk has passed (a refresh only pushes
   * an expiry later, and a new entry expires after every existing one, so it stays a lower bound).
   */
  purgeExpired(): number {
    if (this.#ttlMs === 0) return 0;
    const now = this.#clock.nowMs();
    if (now < this.#purgeAfter) return 0;
    let n = 0;
    let earliest = Infinity;
    for (const [k, e] of this.#entries) {
      if (now >= e.expiresAt) {
        this.#delete(k);
        n++;
      } else if (e.expiresAt < earliest) {
        earliest = e.expiresAt;
      }
    }
    this.#purgeAfter = earliest;
    return n;
  }

  /** Removes every template (session ended), giving their budget back. */
  clear(): void {
    this.#budget.release(this.#entries.size);
    for (const e of this.#entries.values()) this.#budget.layouts.release(e.compiled);
    this.#entries.clear();
    this.#refused.clear();
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
