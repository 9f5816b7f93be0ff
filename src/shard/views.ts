/**
 * Undecoded records read as record views (`AggregationCore.addRecordView`): for each record,
 * only `UPDATE_VIEW_FIELDS` are read, into one object refilled record after record, the Pod
 * names as presence only, and, for a template with its flow key at fixed offsets (the Agents'),
 * the key words straight from the bytes with the addresses as presence only, and, for a template
 * with its 8 counters as u64s at fixed offsets (the Agents' too), the counters as u32 words
 * straight from the bytes (`COUNTER_WORDS`, flow_stats.ts); the whole record is decoded only
 * when the core asks (a new flow, a correlation). One implementation for the
 * two places that aggregate undecoded records: a shard worker (`raw_rows.ts`, records from its
 * ring) and a process of one shard (`flow_aggregator.ts`, records from the collector).
 *
 * @module
 */

import type { FlowInput } from "../aggregation/record.ts";
import { UPDATE_VIEW_FIELDS, UPDATE_VIEW_PRESENCE } from "../aggregation/ingest.ts";
import { KEY_WORDS } from "../aggregation/flow_table.ts";
import { COUNTER_WORDS } from "../aggregation/flow_stats.ts";
import { STATS_FIELDS } from "../record/schema.ts";
import { clearArray } from "../arrays.ts";
import { type CompiledTemplate, compileTemplate, u32, viewFactory } from "../ipfix/compile.ts";
import { fixedOffsets, type KeyOffsets, skimOf, walkRecords } from "../ipfix/skim.ts";
import type { DataRecord, TemplateRecord } from "../ipfix/types.ts";

/**
 * Takes a record as its view and its whole decoding on demand (`AggregationCore.addRecordView`):
 * `full` decodes the record the view came from; `key`, when given, holds its flow key words
 * read from its bytes (the view's addresses then tell only whether they are there); `words`, when
 * given, its 8 counters read from its bytes (the view then has none). All are valid only during
 * the call: the view object is refilled for the next record, and its Pod names tell only whether
 * they are empty (`UPDATE_VIEW_PRESENCE`).
 */
export type ViewSink = (
  view: FlowInput,
  full: () => FlowInput,
  key?: Uint32Array,
  words?: Uint32Array,
) => void;

/** What a {@linkcode coreViewSink} feeds: an aggregation core's `addRecordView`. */
export interface ViewTarget {
  addRecordView(
    view: FlowInput,
    full: () => FlowInput,
    key?: Uint32Array,
    words?: Uint32Array,
  ): unknown;
}

/** The view sink that hands each record to `core.addRecordView`, key and counter words included. */
export function coreViewSink(core: ViewTarget): ViewSink {
  return (view, full, key, words) => {
    core.addRecordView(view, full, key, words);
  };
}

/** The address IEs of a flow key, presence only in a view whose key is read from the bytes. */
const ADDRESS_IES = [
  "sourceIPv4Address",
  "destinationIPv4Address",
  "sourceIPv6Address",
  "destinationIPv6Address",
];

/**
 * Reads the flow key of the record at `start`, whose key sits at the fixed offsets `key`, into
 * `k` (`KEY_WORDS` words, the probe layout of `flow_table.ts`): the words `readFlowKey` reads
 * from the record's decoded values.
 */
export function readRawKey(b: Uint8Array, start: number, key: KeyOffsets, k: Uint32Array): void {
  const src = start + key.source;
  const dst = start + key.destination;
  if (key.family === 4) {
    k[0] = u32(b, src);
    k[1] = k[2] = k[3] = 0;
    k[4] = u32(b, dst);
    k[5] = k[6] = k[7] = 0;
    k[11] = 4;
  } else {
    for (let j = 0; j < 4; j++) {
      k[j] = u32(b, src + 4 * j);
      k[4 + j] = u32(b, dst + 4 * j);
    }
    k[11] = 6;
  }
  k[8] = b[start + key.protocol];
  k[9] = (b[start + key.sourcePort] << 8) | b[start + key.sourcePort + 1];
  k[10] = (b[start + key.destinationPort] << 8) | b[start + key.destinationPort + 1];
}

/** A template's view decoder ({@linkcode compileView}). */
export interface CompiledView {
  /**
   * Decodes `UPDATE_VIEW_FIELDS` but the counters when {@linkcode counters} is set, the addresses
   * as presence only when {@linkcode key} is.
   */
  readonly fill: CompiledTemplate;
  /** The flow key's fixed offsets (`skimOf(template).key`): the views read the key from the bytes. */
  readonly key: KeyOffsets | undefined;
  /**
   * Byte offsets of the 8 counters (`STATS_FIELDS` order) when each is a u64 of 8 bytes at a
   * fixed offset: the views then read them as words from the bytes. Undefined otherwise (the
   * view decodes them).
   */
  readonly counters: Int32Array | undefined;
}

/**
 * The view decoder of a template (wire-number mode, the given string bound): `UPDATE_VIEW_FIELDS`
 * only, the Pod names as presence, the addresses too when the key is at fixed offsets, and
 * without the counters when they are at fixed offsets.
 */
export function compileView(t: TemplateRecord, maxStringBytes: number | undefined): CompiledView {
  const key = skimOf(t).key;
  const counters = fixedOffsets(t, STATS_FIELDS, 8);
  const fill = compileTemplate(t, {
    wireNumbers: true,
    maxStringBytes,
    only: counters === undefined ? UPDATE_VIEW_FIELDS : VIEW_FIELDS_BUT_COUNTERS,
    presence: key !== undefined ? [...UPDATE_VIEW_PRESENCE, ...ADDRESS_IES] : UPDATE_VIEW_PRESENCE,
  });
  return { fill, key, counters };
}

const VIEW_FIELDS_BUT_COUNTERS = UPDATE_VIEW_FIELDS.filter((n) => !STATS_FIELDS.includes(n));

/** Reads the 8 u64 counters at `at` (offsets from `start`) as {@linkcode COUNTER_WORDS}. */
function readCounterWords(b: Uint8Array, start: number, at: Int32Array, w: Uint32Array): void {
  for (let i = 0; i < 8; i++) {
    const o = start + at[i];
    w[2 * i] = u32(b, o);
    w[2 * i + 1] = u32(b, o + 4);
  }
}

/** Reads runs of undecoded records as views (or whole records); one per thread that does. */
export class RecordViews {
  readonly #out: DataRecord[] = [];
  /** The one view object, refilled for each record (its consumer keeps nothing of it). */
  readonly #view: DataRecord = viewFactory(UPDATE_VIEW_FIELDS)();
  /** The key words of the record viewed, when read from its bytes. */
  readonly #key = new Uint32Array(KEY_WORDS);
  /** The counters of the record viewed, when read from its bytes. */
  readonly #words = new Uint32Array(COUNTER_WORDS);
  /** The record `#full` decodes: its decoder, bytes and span. */
  #fullCt: CompiledTemplate | undefined;
  #fullBytes: Uint8Array = new Uint8Array(0);
  #fullStart = 0;
  #fullEnd = 0;
  readonly #fullOut: DataRecord[] = [];
  /** Decodes the current record whole (one function for every record: no closure per record). */
  readonly #full = (): FlowInput => {
    const out = this.#fullOut;
    clearArray(out);
    this.#fullCt!.decodeRecords(this.#fullBytes, this.#fullStart, this.#fullEnd, out, 1);
    return out[0] as unknown as FlowInput;
  };

  /**
   * The records of `bytes[start..end)` (back to back, of the template of `view` and `ct`: its
   * view decoder from {@linkcode compileView}, which says where its key and counters sit, and its
   * whole decoder) to `onView`, one at a time.
   * A record the view cannot be read from goes, with the rest of the run, through
   * {@linkcode decodeWhole} (each then its own view).
   */
  readRun(
    view: CompiledView,
    ct: CompiledTemplate,
    bytes: Uint8Array,
    start: number,
    end: number,
    onView: ViewSink,
    onInvalid: (why: string) => void,
  ): void {
    const fill = view.fill.fillRecord!;
    const target = this.#view;
    const keyAt = view.key;
    const key = keyAt === undefined ? undefined : this.#key;
    const countersAt = view.counters;
    const words = countersAt === undefined ? undefined : this.#words;
    const min = view.fill.minRecordLength;
    this.#fullCt = ct;
    this.#fullBytes = bytes;
    for (let off = start; end - off >= min;) {
      let next: number;
      try {
        next = fill(bytes, off, end, target);
      } catch {
        // A record the view cannot be read from: it and the rest of the run whole (rare).
        this.decodeWhole(ct, bytes, off, end, (r) => onView(r, () => r), onInvalid);
        return;
      }
      this.#fullStart = off;
      this.#fullEnd = next;
      if (key !== undefined) readRawKey(bytes, off, keyAt!, key);
      if (words !== undefined) readCounterWords(bytes, off, countersAt!, words);
      onView(target as unknown as FlowInput, this.#full, key, words);
      off = next;
    }
  }

  /**
   * {@linkcode readRun} of records given by their spans (start and end offsets in pairs, as the
   * collector's raw mode gives them): one run per stretch of back-to-back records.
   */
  readSpans(
    view: CompiledView,
    ct: CompiledTemplate,
    bytes: Uint8Array,
    spans: readonly number[],
    onView: ViewSink,
    onInvalid: (why: string) => void,
  ): void {
    let from = 0;
    for (let i = 2; i <= spans.length; i += 2) {
      if (i === spans.length || spans[i] !== spans[i - 1]) {
        this.readRun(view, ct, bytes, spans[from], spans[i - 1], onView, onInvalid);
        from = i;
      }
    }
  }

  /**
   * Decodes the records of `bytes[start..end)` whole: `onRecord` for each, `onInvalid` for one
   * that cannot be decoded (the others are kept).
   */
  decodeWhole(
    ct: CompiledTemplate,
    bytes: Uint8Array,
    start: number,
    end: number,
    onRecord: (r: FlowInput) => void,
    onInvalid: (why: string) => void,
  ): void {
    const out = this.#out;
    clearArray(out);
    try {
      ct.decodeRecords(bytes, start, end, out);
    } catch {
      // A value the walk could not judge: decode record by record, dropping only the bad ones.
      clearArray(out);
      // The bytes were walked by whoever sent them (the collector's raw mode): a walk that
      // fails here is a bug, and throws.
      const spans: number[] = [];
      walkRecords(skimOf(ct.template), bytes, start, end, spans);
      for (let i = 0; i < spans.length; i += 2) {
        try {
          ct.decodeRecords(bytes, spans[i], spans[i + 1], out, 1);
        } catch (e) {
          onInvalid(e instanceof Error ? e.message : String(e));
        }
      }
    }
    for (let i = 0; i < out.length; i++) onRecord(out[i] as unknown as FlowInput);
    clearArray(out);
  }
}
