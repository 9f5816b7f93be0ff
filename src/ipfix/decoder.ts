/**
 * IPFIX message decoder (RFC 7011). Fixes upstream's collector bugs (ipfix.md §8): walks every
 * set by its Set Length, every record of a set, honours padding, options templates and
 * withdrawals, decodes by the template's field lengths, and bounds every read by the set. A bad
 * set is dropped and reported in `setErrors` while the rest of the message is kept; an invalid
 * template record is refused alone (`templatesRefused`, badTemplate), the set's other templates
 * kept, unless it overruns its set (then the set is dropped); a bad data record
 * drops only itself when the next record boundary is known (fixed-length template), else the
 * rest of its set, the records before it being kept; either way it is reported in
 * `recordsDropped`. Only message-level problems (header, length) throw. Pure: templates live in the caller's
 * {@linkcode TemplateStore}.
 */

import type { DataRecord, FieldSpecifier, MessageHeader, TemplateRecord } from "./types.ts";
import { type DecodeErrorReason, IpfixDecodeError } from "./errors.ts";
import {
  type CompiledTemplate,
  fieldKey,
  minFieldLength,
  minRecordLength,
  type PendingTemplates,
  stringsTruncatedTotal,
  u32,
} from "./compile.ts";
import { REFUSALS_REMEMBERED, type TemplateRefusal, type TemplateStore } from "./template_store.ts";
import { type Skim, skimOf, walkRecords } from "./skim.ts";
import { clearArray } from "../arrays.ts";

export { type DecodeErrorReason, IpfixDecodeError } from "./errors.ts";

/** Size of the message header. */
export const MESSAGE_HEADER_LENGTH = 16;
/** Size of a set header. */
export const SET_HEADER_LENGTH = 4;

/** The records of one data set. */
export interface DecodedDataSet {
  /** Set id = template id. */
  templateId: number;
  /** Records in wire order. */
  records: DataRecord[];
  /** True when the template is an options template. */
  options: boolean;
  /** The template the records were decoded with (one object per template definition). */
  template: TemplateRecord;
  /**
   * Raw mode (see {@linkcode decodeMessage}): the records not decoded (`records` is empty), as
   * their spans in the message.
   */
  raw?: RawRecords;
}

/** The records of a data set left undecoded: byte spans in the message (see `skim.ts`). */
export interface RawRecords {
  /** Bytes holding the records (the message, or a read buffer around it: see `spans`). */
  readonly bytes: Uint8Array;
  /** Start and end offset of each record in `bytes`, in pairs. */
  readonly spans: number[];
  /** The template's decoder, for a consumer that needs a value now (a key not at fixed offsets). */
  readonly compiled: CompiledTemplate;
  /** The template's skim (`skimOf(compiled.template)`: its key offsets), already looked up. */
  readonly skim: Skim;
}

/** Records of a data set in either mode. */
export function recordCount(ds: DecodedDataSet): number {
  return ds.raw === undefined ? ds.records.length : ds.raw.spans.length / 2;
}

/**
 * Why records were dropped: a decode error of the record, or `templateRefused` (a data set for
 * a template the store refused; its record count estimated from the set length).
 */
export type RecordDropReason = DecodeErrorReason | "templateRefused";

/** Everything decoded from one message. */
export interface DecodedMessage {
  /** The message header. */
  header: MessageHeader;
  /** Data sets with at least one record, in message order. */
  dataSets: DecodedDataSet[];
  /** Template and options template records registered. */
  templateRecords: number;
  /** Withdrawal records applied. */
  withdrawals: number;
  /**
   * Ids of the template records stored whose element repeats (the values after the first are
   * not kept in the decoded records: see `CompiledTemplate.duplicateFields`), one per record.
   */
  duplicateFieldTemplates: number[];
  /** Template ids of data sets skipped for lack of a template. */
  templateMisses: number[];
  /**
   * Bytes of records in those sets (their headers excluded): how many records they held cannot
   * be known without the template.
   */
  templateMissBytes: number;
  /** Sets dropped (the rest of the message was kept); setId -1 = set header cut. */
  setErrors: { setId: number; reason: DecodeErrorReason }[];
  /** Records of data sets dropped (the other records of the set were kept), by set. */
  recordsDropped: { setId: number; reason: RecordDropReason; records: number }[];
  /**
   * Template records not stored, by reason (one entry per reason: a flood refuses thousands per
   * message), with the first refused id (and, for `badTemplate`, why it is invalid); their data
   * sets are counted in `recordsDropped`.
   */
  templatesRefused: {
    reason: TemplateRefusal;
    templates: number;
    firstTemplateId: number;
    detail?: string;
  }[];
  /** String values cut to the store's `maxStringBytes`. */
  stringsTruncated: number;
}

/**
 * Returns the Length field of the message starting at `offset` (TCP framing). Throws
 * IpfixDecodeError("truncated") when fewer than 4 bytes are available.
 */
export function readMessageLength(buf: Uint8Array, offset = 0): number {
  if (buf.length - offset < 4) {
    throw new IpfixDecodeError(
      "truncated",
      `need 4 bytes for the length, have ${buf.length - offset}`,
    );
  }
  return (buf[offset + 2] << 8) | buf[offset + 3];
}

// Plain byte reads: creating a DataView per message costs more than decoding a small record.
function u16(b: Uint8Array, o: number): number {
  return (b[o] << 8) | b[o + 1];
}

/**
 * Why `buf[start, end)` cannot be one IPFIX message, judged from its header alone (16 bytes,
 * version 10, a Length equal to its size), or undefined: the check {@linkcode walkRawMessage}
 * starts with, and the collector's before it opens a UDP session for a new source.
 */
export function headerProblem(
  buf: Uint8Array,
  start: number,
  end: number,
): "truncated" | "badVersion" | "badLength" | undefined {
  if (end - start < MESSAGE_HEADER_LENGTH) return "truncated";
  if (u16(buf, start) !== 10) return "badVersion";
  if (u16(buf, start + 2) !== end - start) return "badLength";
  return undefined;
}

/** Parses the 16-byte header (validates version only). */
export function decodeHeader(buf: Uint8Array): MessageHeader {
  if (buf.length < MESSAGE_HEADER_LENGTH) {
    throw new IpfixDecodeError("truncated", `message of ${buf.length} bytes < 16-byte header`);
  }
  const version = u16(buf, 0);
  if (version !== 10) throw new IpfixDecodeError("badVersion", `version ${version}, want 10`);
  return {
    version,
    length: u16(buf, 2),
    exportTime: u32(buf, 4),
    sequenceNumber: u32(buf, 8),
    observationDomainId: u32(buf, 12),
  };
}

/**
 * A parsed template set entry, applied only once the whole set parsed: a compiled template, a
 * withdrawal, or a template refused (by the store's bounds, skipped unparsed, or invalid:
 * `badTemplate`, with why in `detail`), with the smallest length of its records.
 */
type TemplateOp =
  | { t: CompiledTemplate }
  | { withdraw: number }
  | { refused: number; reason: TemplateRefusal; minRecordLength: number; detail?: string };

/**
 * The templates of one set refused for lack of room (`sessionFull`, `totalFull`, `layoutsFull`
 * for a new template), applied with
 * the set: counted by reason, and only the latest {@linkcode REFUSALS_REMEMBERED} kept (the store
 * remembers no more), so a flood of thousands per message allocates nothing per template.
 */
class RoomRefusals {
  /** Refused templates by reason, with the first refused id. */
  readonly counts: { reason: TemplateRefusal; templates: number; firstTemplateId: number }[] = [];
  /** The latest refused: template id and smallest record length, in pairs (a ring). */
  readonly recent: number[] = [];
  #next = 0;

  /** Counts one refused template. */
  add(id: number, reason: TemplateRefusal, minRecordLength: number): void {
    const c = this.counts.find((x) => x.reason === reason);
    if (c !== undefined) c.templates++;
    else this.counts.push({ reason, templates: 1, firstTemplateId: id });
    this.recent[this.#next] = id;
    this.recent[this.#next + 1] = minRecordLength;
    this.#next = (this.#next + 2) % (2 * REFUSALS_REMEMBERED);
  }
}

/**
 * Reads over the `count` field specifiers of a template without building them (a refused or
 * shared template costs no allocation per field): returns the offset after them, the
 * template's smallest record length and, with `keyed`, the key of its field list
 * ({@linkcode fieldKey} parts). Throws badTemplate when a specifier overruns the set.
 */
function scanFields(
  b: Uint8Array,
  at: { p: number; end: number; id: number; count: number; keyed: boolean },
): { p: number; minRecordLength: number; key: string } {
  const { count } = at;
  let { p } = at;
  let min = 0;
  let key = "";
  const spec = { id: 0, enterprise: 0, length: 0 }; // one scratch specifier for the key
  for (let i = 0; i < count; i++) {
    if (at.end - p < 4) {
      throw new IpfixDecodeError("badTemplate", `template ${at.id}: field ${i} overruns set`);
    }
    const raw = u16(b, p);
    const length = u16(b, p + 2);
    p += raw & 0x8000 ? 8 : 4;
    if (p > at.end) {
      throw new IpfixDecodeError("badTemplate", `template ${at.id}: field ${i} PEN overruns set`);
    }
    min += minFieldLength(length);
    if (at.keyed) {
      spec.id = raw & 0x7fff;
      spec.enterprise = raw & 0x8000 ? u32(b, p - 4) : 0;
      spec.length = length;
      key += fieldKey(spec);
    }
  }
  return { p, minRecordLength: min, key };
}

/** Whether `b[from..end)` is all zero bytes. */
function zeroes(b: Uint8Array, from: number, end: number): boolean {
  for (let i = from; i < end; i++) if (b[i] !== 0) return false;
  return true;
}

function parseTemplateSet(
  b: Uint8Array,
  set: { id: number; start: number; end: number; domain: number },
  store: TemplateStore,
): { ops: TemplateOp[]; room: RoomRefusals | undefined } {
  const { id: setId, start, end, domain } = set;
  const options = setId === 3;
  const ops: TemplateOp[] = [];
  let room: RoomRefusals | undefined;
  const pending: PendingTemplates = { templates: 0, layoutFields: 0 };
  let p = start;
  // Fewer than 4 bytes left = padding (no template record is that short).
  while (end - p >= 4) {
    const id = u16(b, p);
    const count = u16(b, p + 2);
    // Zero bytes to the end of the set: padding, however long. RFC 7011 §3.3.1 wants it shorter
    // than a record, but 4 or more (an exporter aligning to 8 bytes) read as a "withdrawal of
    // id 0", which is never valid: reading them as padding loses nothing.
    if (id === 0 && count === 0 && zeroes(b, p + 4, end)) break;
    p += 4;
    if (count === 0) {
      if (id < 256 && id !== 2 && id !== 3) {
        // Its extent is known (4 bytes): refused alone, the set's other records are kept.
        const detail = `withdrawal of template id ${id}`;
        ops.push({ refused: id, reason: "badTemplate", minRecordLength: 0, detail });
        continue;
      }
      ops.push({ withdraw: id });
      continue;
    }
    let scope = 0;
    if (options) {
      if (end - p < 2) throw new IpfixDecodeError("badTemplate", `template ${id}: cut header`);
      scope = u16(b, p);
      p += 2;
    }
    const invalid = id < 256
      ? `template id ${id} < 256`
      : options && (scope === 0 || scope > count)
      ? `template ${id}: scope count ${scope}/${count}`
      : undefined;
    if (invalid !== undefined) {
      // Skipped by its field count (a specifier overrunning the set still drops the set).
      const scan = scanFields(b, { p, end, id, count, keyed: false });
      p = scan.p;
      const min = scan.minRecordLength;
      ops.push({ refused: id, reason: "badTemplate", minRecordLength: min, detail: invalid });
      continue;
    }
    const promised = pending.templates;
    let reason = store.wouldRefuse(domain, { id, fields: count }, pending);
    const scan = scanFields(b, { p, end, id, count, keyed: reason === undefined });
    if (reason === undefined) {
      // A field list already held (every Agent's): shared, nothing built per field.
      const shared = store.layouts.shared({ id, scopeFieldCount: scope }, scan.key);
      if (shared !== undefined) {
        ops.push({ t: shared });
        p = scan.p;
        continue;
      }
      if (!store.layouts.fits(count, pending)) {
        reason = "layoutsFull";
        // A new template is refused for lack of room: the room it was promised is given back.
        if (pending.templates !== promised) pending.templates = promised;
        else {
          // A redefinition of a held template (removed when applied): kept in order.
          ops.push({ refused: id, reason, minRecordLength: scan.minRecordLength });
          p = scan.p;
          continue;
        }
      }
    }
    if (reason !== undefined) {
      p = scan.p;
      if (reason === "tooWide") {
        // It may replace a held template (removed when applied): kept in order.
        ops.push({ refused: id, reason, minRecordLength: scan.minRecordLength });
      } else {
        room ??= new RoomRefusals();
        room.add(id, reason, scan.minRecordLength);
      }
      continue;
    }
    const fields: FieldSpecifier[] = new Array(count);
    for (let i = 0; i < count; i++) {
      if (end - p < 4) {
        throw new IpfixDecodeError("badTemplate", `template ${id}: field ${i} overruns set`);
      }
      const raw = u16(b, p);
      const length = u16(b, p + 2);
      p += 4;
      let enterprise = 0;
      if (raw & 0x8000) {
        if (end - p < 4) {
          throw new IpfixDecodeError("badTemplate", `template ${id}: field ${i} PEN overruns set`);
        }
        enterprise = u32(b, p);
        p += 4;
      }
      fields[i] = { id: raw & 0x7fff, enterprise, length };
    }
    const t: TemplateRecord = { id, fields, scopeFieldCount: scope };
    // Compiled now: a template the decoders cannot read (a field length illegal for its type)
    // is refused alone, its extent being known; the set's other templates are kept.
    let ct: CompiledTemplate | undefined;
    try {
      ct = store.compile(t, pending);
    } catch (e) {
      if (!(e instanceof IpfixDecodeError)) throw e;
      pending.templates = promised; // admitted by wouldRefuse, but it will not be stored
      const min = minRecordLength(fields);
      ops.push({ refused: id, reason: "badTemplate", minRecordLength: min, detail: e.detail });
      continue;
    }
    if (ct !== undefined) ops.push({ t: ct });
    else {
      pending.templates = promised; // admitted by wouldRefuse, but it will not be stored
      ops.push({ refused: id, reason: "layoutsFull", minRecordLength: minRecordLength(fields) });
    }
  }
  return { ops, room };
}

const NO_MISSES: number[] = Object.freeze([]) as unknown as number[];
const NO_DUPLICATES: number[] = Object.freeze([]) as unknown as number[];
const NO_SET_ERRORS: DecodedMessage["setErrors"] = Object.freeze([]) as unknown as [];
const NO_DROPS: DecodedMessage["recordsDropped"] = Object.freeze([]) as unknown as [];
const NO_REFUSALS: DecodedMessage["templatesRefused"] = Object.freeze([]) as unknown as [];

function setError(msg: DecodedMessage, setId: number, reason: DecodeErrorReason): void {
  if (msg.setErrors === NO_SET_ERRORS) msg.setErrors = [];
  msg.setErrors.push({ setId, reason });
}

function dropRecords(
  msg: DecodedMessage,
  set: { setId: number; reason: RecordDropReason },
  records: number,
): void {
  if (msg.recordsDropped === NO_DROPS) msg.recordsDropped = [];
  msg.recordsDropped.push({ setId: set.setId, reason: set.reason, records });
}

function refused(
  msg: DecodedMessage,
  templateId: number,
  refusal: { reason: TemplateRefusal; templates: number; detail?: string },
): void {
  if (msg.templatesRefused === NO_REFUSALS) msg.templatesRefused = [];
  const { reason, templates, detail } = refusal;
  const r = msg.templatesRefused.find((x) => x.reason === reason);
  if (r !== undefined) r.templates += templates;
  else if (detail === undefined) {
    msg.templatesRefused.push({ reason, templates, firstTemplateId: templateId });
  } else msg.templatesRefused.push({ reason, templates, firstTemplateId: templateId, detail });
}

/**
 * Accounts for a record of data set `setId` that failed to decode (`e`; anything but an
 * IpfixDecodeError is rethrown): it drops only itself when the template is fixed-length, and the
 * offset of the next record is returned (the bad one started where the `decoded` records from
 * `from` ended); otherwise the rest of the set goes (also reported as a set error, which ends a
 * TCP/TLS session) and -1 is returned. Called only on the error path: the data set loop itself
 * allocates nothing beyond its records.
 */
function recordFailed(
  msg: DecodedMessage,
  e: unknown,
  at: { ct: CompiledTemplate; setId: number; from: number; decoded: number },
): number {
  if (!(e instanceof IpfixDecodeError)) throw e;
  dropRecords(msg, { setId: at.setId, reason: e.reason }, 1);
  const step = at.ct.fixedRecordLength;
  if (step === 0) {
    setError(msg, at.setId, e.reason);
    return -1;
  }
  return at.from + (at.decoded + 1) * step;
}

/** Raw mode: the spans of a data set's records, failures dropped and counted as when decoding. */
function rawDataSet(
  msg: DecodedMessage,
  buf: Uint8Array,
  set: { ct: CompiledTemplate; setId: number; start: number; end: number },
): void {
  const { ct, setId, end } = set;
  const skim = skimOf(ct.template);
  const spans: number[] = [];
  for (let p = set.start; p >= 0;) {
    const before = spans.length;
    try {
      walkRecords(skim, buf, p, end, spans);
      break;
    } catch (e) {
      p = recordFailed(msg, e, { ct, setId, from: p, decoded: (spans.length - before) / 2 });
    }
  }
  if (spans.length > 0) {
    msg.dataSets.push({
      templateId: setId,
      records: NO_RECORDS,
      options: ct.options,
      template: ct.template,
      raw: { bytes: buf, spans, compiled: ct, skim },
    });
  }
}

/** The empty records of a raw data set (never written). */
const NO_RECORDS: DataRecord[] = Object.freeze([]) as unknown as DataRecord[];

/**
 * Decodes one whole message (`buf.length` must equal the header length, else badLength).
 * Registers templates in `store` as they appear, so a data set later in the same message can use
 * them. Message-level problems throw IpfixDecodeError; set-level ones go to `setErrors`. With
 * `raw`, data records are not decoded: each data set carries their spans (`raw`), walked and
 * checked like the decoders do, for a consumer that decodes them elsewhere.
 */
export function decodeMessage(
  buf: Uint8Array,
  store: TemplateStore,
  raw = false,
): DecodedMessage {
  const header = decodeHeader(buf);
  if (header.length < MESSAGE_HEADER_LENGTH || header.length !== buf.length) {
    throw new IpfixDecodeError(
      "badLength",
      `header length ${header.length}, message is ${buf.length} bytes`,
    );
  }
  const domain = header.observationDomainId;
  // Misses and set errors are rare: the message shares frozen empty arrays until one occurs
  // (two allocations fewer per message; Agents send one record per message).
  const msg: DecodedMessage = {
    header,
    dataSets: [],
    templateRecords: 0,
    withdrawals: 0,
    duplicateFieldTemplates: NO_DUPLICATES,
    templateMisses: NO_MISSES,
    templateMissBytes: 0,
    setErrors: NO_SET_ERRORS,
    recordsDropped: NO_DROPS,
    templatesRefused: NO_REFUSALS,
    stringsTruncated: 0,
  };
  const truncatedBefore = stringsTruncatedTotal();

  const len = buf.length;
  let off = MESSAGE_HEADER_LENGTH;
  while (off < len) {
    if (len - off < SET_HEADER_LENGTH) {
      setError(msg, -1, "truncated");
      break;
    }
    const setId = u16(buf, off);
    const setLen = u16(buf, off + 2);
    if (setLen < SET_HEADER_LENGTH || setLen > len - off) {
      // The following set boundaries are unknowable: stop, keeping what was decoded.
      setError(msg, setId, "badSetLength");
      break;
    }
    const start = off + SET_HEADER_LENGTH;
    const end = off + setLen;
    off = end;
    if (setId >= 256) {
      const ct = store.get(domain, setId);
      if (ct === undefined) {
        const minLength = store.refusedMinRecordLength(domain, setId);
        if (minLength > 0) {
          // Data of a refused template: its records are lost, estimated (at least one).
          const estimate = Math.max(1, Math.floor((end - start) / minLength));
          dropRecords(msg, { setId, reason: "templateRefused" }, estimate);
          continue;
        }
        if (msg.templateMisses === NO_MISSES) msg.templateMisses = [];
        msg.templateMisses.push(setId);
        msg.templateMissBytes += end - start;
        continue;
      }
      if (raw) {
        rawDataSet(msg, buf, { ct, setId, start, end });
        continue;
      }
      const records: DataRecord[] = [];
      // A bad record drops only itself when the next record boundary is known, else the rest of
      // the set; the records decoded before it are kept either way.
      for (let p = start; p >= 0;) {
        const before = records.length;
        try {
          ct.decodeRecords(buf, p, end, records);
          break;
        } catch (e) {
          p = recordFailed(msg, e, { ct, setId, from: p, decoded: records.length - before });
        }
      }
      if (records.length > 0) {
        msg.dataSets.push({
          templateId: setId,
          records,
          options: ct.options,
          template: ct.template,
        });
      }
    } else if (setId === 2 || setId === 3) {
      let parsed: { ops: TemplateOp[]; room: RoomRefusals | undefined };
      try {
        parsed = parseTemplateSet(buf, { id: setId, start, end, domain }, store);
      } catch (e) {
        if (!(e instanceof IpfixDecodeError)) throw e;
        setError(msg, setId, e.reason);
        continue;
      }
      for (const op of parsed.ops) {
        if ("t" in op) {
          const reason = store.add(domain, op.t);
          if (reason !== undefined) refused(msg, op.t.template.id, { reason, templates: 1 });
          else {
            msg.templateRecords++;
            if (op.t.duplicateFields > 0) {
              if (msg.duplicateFieldTemplates === NO_DUPLICATES) msg.duplicateFieldTemplates = [];
              msg.duplicateFieldTemplates.push(op.t.template.id);
            }
          }
        } else if ("refused" in op) {
          // An id below 256 names no template: nothing to remove, no data set to expect.
          if (op.refused >= 256) store.refuse(domain, op.refused, op.minRecordLength);
          refused(msg, op.refused, { reason: op.reason, templates: 1, detail: op.detail });
        } else {
          store.withdraw(domain, op.withdraw);
          msg.withdrawals++;
        }
      }
      const room = parsed.room;
      if (room !== undefined) {
        for (const c of room.counts) refused(msg, c.firstTemplateId, c);
        for (let i = 0; i < room.recent.length; i += 2) {
          store.refuse(domain, room.recent[i], room.recent[i + 1]);
        }
      }
    } else {
      setError(msg, setId, "reservedSetId");
    }
  }
  msg.stringsTruncated = stringsTruncatedTotal() - truncatedBefore;
  return msg;
}

/** One data set of a message walked by {@linkcode walkRawMessage} (reused: see there). */
export interface RawScratchSet extends RawRecords {
  /** Set id = template id. */
  setId: number;
  /** The bytes walked (`RawRecords.bytes`). */
  bytes: Uint8Array;
  /** The spans, reused from message to message. */
  readonly spans: number[];
  compiled: CompiledTemplate;
  skim: Skim;
}

/** What a released scratch set refers to. */
const NO_BYTES = new Uint8Array(0);

/**
 * What {@linkcode walkRawMessage} found in the last message it took: reused from message to
 * message (one per session), so the usual message costs no allocation. Valid until the next walk.
 */
export class RawMessageScratch {
  /** Export time from the header. */
  exportTime = 0;
  /** Observation domain id from the header. */
  domain = 0;
  /** Data sets with at least one record (`sets[0..count)`), in message order. */
  count = 0;
  readonly sets: RawScratchSet[] = [];
  /** The last template walked and its skim (a session's messages mostly share one). */
  lastCompiled: CompiledTemplate | undefined = undefined;
  lastSkim: Skim | undefined = undefined;

  /**
   * Drops the references to the bytes walked last: a UDP receive batch (up to 1 MiB on the
   * fast path) or a stream's read buffer, which every idle session would otherwise keep alive
   * until its next message (found by review: 300 sessions held 300 MB).
   */
  release(): void {
    for (const s of this.sets) s.bytes = NO_BYTES;
  }

  /** The next set to fill, spans emptied. */
  next(bytes: Uint8Array, setId: number, ct: CompiledTemplate, skim: Skim): RawScratchSet {
    let s = this.sets[this.count];
    if (s === undefined) {
      s = { setId, bytes, spans: [], compiled: ct, skim };
      this.sets.push(s);
    } else {
      s.setId = setId;
      s.bytes = bytes;
      s.compiled = ct;
      s.skim = skim;
      clearArray(s.spans);
    }
    return s;
  }
}

/**
 * The raw-mode walk of the usual message, without {@linkcode decodeMessage}'s per-message
 * objects: a well-formed message whose sets are all data sets of templates the store holds, every
 * record walked without error. Fills `scratch` and returns true for such a message; returns false,
 * with nothing changed (the store is only read), for any other message (a template set, an
 * unknown or refused template, a malformed header, set or record), which the caller hands to
 * `decodeMessage(buf, store, true)` for the full treatment: the outcome (sets, spans, counts) is
 * the same either way. The message is `buf[start..end)` (default: all of `buf`), so a stream's
 * read buffer is walked in place; the spans are offsets in `buf`.
 */
export function walkRawMessage(
  buf: Uint8Array,
  store: TemplateStore,
  scratch: RawMessageScratch,
  start = 0,
  end: number = buf.length,
): boolean {
  if (headerProblem(buf, start, end) !== undefined) return false;
  const domain = u32(buf, start + 12);
  scratch.count = 0;
  let off = start + MESSAGE_HEADER_LENGTH;
  while (off < end) {
    if (end - off < SET_HEADER_LENGTH) return false;
    const setId = u16(buf, off);
    const setLen = u16(buf, off + 2);
    if (setId < 256 || setLen < SET_HEADER_LENGTH || setLen > end - off) return false;
    const ct = store.get(domain, setId);
    if (ct === undefined) return false;
    let skim = scratch.lastSkim;
    if (ct !== scratch.lastCompiled || skim === undefined) {
      skim = skimOf(ct.template);
      scratch.lastCompiled = ct;
      scratch.lastSkim = skim;
    }
    const set = scratch.next(buf, setId, ct, skim);
    try {
      walkRecords(skim, buf, off + SET_HEADER_LENGTH, off + setLen, set.spans);
    } catch {
      return false;
    }
    if (set.spans.length > 0) scratch.count++;
    off += setLen;
  }
  scratch.exportTime = u32(buf, start + 4);
  scratch.domain = domain;
  return true;
}
