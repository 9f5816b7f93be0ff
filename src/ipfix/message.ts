/**
 * IPFIX message framing (RFC 7011 §3.1, §3.3.2): the message and set headers, and
 * {@linkcode MessageBuilder}, one reusable buffer that lays records out as messages of sets,
 * splitting them under a size bound. Every writer of IPFIX messages (the codec's
 * `encodeMessage`, the IPFIX exporter, the traffic generator) frames through here; what goes
 * inside a set (a RecordEncoder's output, pre-encoded bytes) is the caller's. Pure: no I/O.
 */

import { IpfixEncodeError } from "./errors.ts";
import { MESSAGE_HEADER_LENGTH, SET_HEADER_LENGTH } from "./decoder.ts";

/**
 * The `MessageHeader` fields an exporting process chooses (version and length are the
 * framing's). Mutable, so a sender can keep one object and update it per message.
 */
export interface MessageHeaderFields {
  /** Export time, seconds since the epoch. */
  exportTime: number;
  /** Sequence number (the exporting process's counting rule). */
  sequenceNumber: number;
  /** Observation domain id. */
  observationDomainId: number;
}

/** Largest message (and set): its length field is a u16. */
const MAX_MESSAGE = 65535;
/** A reset buffer larger than this is dropped for a new one, so one huge batch is not kept. */
const MAX_KEPT_BYTES = 4 * 1024 * 1024;

/** Writes a message header (version 10) of a `length`-byte message at `offset`. */
export function writeMessageHeader(
  view: DataView,
  offset: number,
  length: number,
  header: Readonly<MessageHeaderFields>,
): void {
  view.setUint16(offset, 10);
  view.setUint16(offset + 2, length);
  view.setUint32(offset + 4, header.exportTime >>> 0);
  view.setUint32(offset + 8, header.sequenceNumber >>> 0);
  view.setUint32(offset + 12, header.observationDomainId >>> 0);
}

/** Writes a set header (id, then the set's length including the header) at `offset`. */
export function writeSetHeader(
  view: DataView,
  offset: number,
  setId: number,
  length: number,
): void {
  view.setUint16(offset, setId);
  view.setUint16(offset + 2, length);
}

/**
 * Builds IPFIX messages back to back in one growing buffer that is reused from batch to batch
 * (`reset`), so framing allocates nothing per record or message. Two ways in: `appendMessage`
 * frames a one-record message whose length is known (the traffic generator's Agents), and
 * `reserveRecord` + `commit` pack records of one set per message below a size bound, starting a
 * new message when the set changes or the bound would be reached (the IPFIX exporter); the
 * caller writes the record bytes at the offset returned, through
 * {@linkcode MessageBuilder.buffer} / {@linkcode MessageBuilder.view}. `endMessage` fills in the
 * lengths of the open message; a message left empty (every record of it failed to encode) is
 * dropped, never sent. The views from `bytes` and `messages` stay valid until the next `reset`
 * or append.
 */
export class MessageBuilder {
  readonly #initial: number;
  #buf: Uint8Array;
  #view: DataView;
  /** Write position: everything before it is framed or committed content. */
  #len = 0;
  /** End offset of each finished message. */
  readonly #ends: number[] = [];
  /** Start of the message `reserveRecord` opened, or -1. */
  #msgStart = -1;
  /** Id of its (only) set, or -1. */
  #setId = -1;

  /** An empty builder with `initialBytes` of room (it grows as needed). */
  constructor(initialBytes = 64 * 1024) {
    this.#initial = Math.max(MESSAGE_HEADER_LENGTH + SET_HEADER_LENGTH, initialBytes);
    this.#buf = new Uint8Array(this.#initial);
    this.#view = new DataView(this.#buf.buffer);
  }

  /** Bytes of the finished messages. */
  get length(): number {
    return this.#ends.length === 0 ? 0 : this.#ends[this.#ends.length - 1];
  }

  /** Finished messages. */
  get count(): number {
    return this.#ends.length;
  }

  /** The current buffer (`appendMessage` and `reserveRecord` may replace it with a larger one). */
  get buffer(): Uint8Array {
    return this.#buf;
  }

  /** A DataView over {@linkcode MessageBuilder.buffer}. */
  get view(): DataView {
    return this.#view;
  }

  /** Empties the builder; its buffer is reused, so earlier views must be out of use. */
  reset(): void {
    this.#len = 0;
    this.#ends.length = 0;
    this.#msgStart = -1;
    this.#setId = -1;
    if (this.#buf.length > MAX_KEPT_BYTES) {
      this.#buf = new Uint8Array(this.#initial);
      this.#view = new DataView(this.#buf.buffer);
    }
  }

  /** The finished messages as one byte view (one write on a stream transport). */
  bytes(): Uint8Array {
    return this.#buf.subarray(0, this.length);
  }

  /** The finished messages, one view each (one datagram each). */
  messages(): Uint8Array[] {
    const out: Uint8Array[] = [];
    let from = 0;
    for (const end of this.#ends) {
      out.push(this.#buf.subarray(from, end));
      from = end;
    }
    return out;
  }

  /**
   * Keeps the `n`-byte record written at the offset `reserveRecord` returned. A record never
   * committed (its encoding failed half-way) leaves no trace: the next one overwrites it.
   */
  commit(n: number): void {
    this.#len += n;
  }

  /**
   * Appends a whole message holding one set of exactly `n` content bytes (one record whose
   * length is known up front: the lengths are written at once) and returns the offset where the
   * caller writes those bytes. Throws IpfixEncodeError when the message would exceed 65535 bytes.
   */
  appendMessage(header: Readonly<MessageHeaderFields>, setId: number, n: number): number {
    if (this.#msgStart >= 0) this.endMessage();
    const length = MESSAGE_HEADER_LENGTH + SET_HEADER_LENGTH + n;
    if (length > MAX_MESSAGE) throw new IpfixEncodeError(`message of ${length} bytes > 65535`);
    this.#room(length);
    const start = this.#len;
    writeMessageHeader(this.#view, start, length, header);
    writeSetHeader(
      this.#view,
      start + MESSAGE_HEADER_LENGTH,
      setId,
      length - MESSAGE_HEADER_LENGTH,
    );
    this.#len = start + length;
    this.#ends.push(this.#len);
    return start + MESSAGE_HEADER_LENGTH + SET_HEADER_LENGTH;
  }

  /**
   * Makes room for one `n`-byte record of set `setId`: in the open message when its open set is
   * `setId` and the message stays below `maxMessageBytes` with it, else in a new message with
   * `header` holding one set (a record too large for any message is the caller's to reject).
   * Returns the offset to write at; `commit(n)` keeps the record.
   */
  reserveRecord(
    setId: number,
    n: number,
    maxMessageBytes: number,
    header: Readonly<MessageHeaderFields>,
  ): number {
    if (this.#setId !== setId || this.#len - this.#msgStart + n >= maxMessageBytes) {
      if (this.#msgStart >= 0) this.endMessage();
      this.#room(MESSAGE_HEADER_LENGTH + SET_HEADER_LENGTH);
      const start = this.#len;
      // Lengths are filled in by endMessage.
      writeMessageHeader(this.#view, start, 0, header);
      writeSetHeader(this.#view, start + MESSAGE_HEADER_LENGTH, setId, 0);
      this.#msgStart = start;
      this.#setId = setId;
      this.#len = start + MESSAGE_HEADER_LENGTH + SET_HEADER_LENGTH;
    }
    this.#room(n);
    return this.#len;
  }

  /**
   * Ends the message `reserveRecord` opened: fills in its set and message lengths, or drops it
   * when it holds no record. Throws IpfixEncodeError (and drops it) when it is longer than 65535
   * bytes. Does nothing when no message is open.
   */
  endMessage(): void {
    if (this.#msgStart < 0) return;
    const start = this.#msgStart;
    const length = this.#len - start;
    this.#msgStart = -1;
    this.#setId = -1;
    if (length === MESSAGE_HEADER_LENGTH + SET_HEADER_LENGTH || length > MAX_MESSAGE) {
      this.#len = start;
      if (length > MAX_MESSAGE) throw new IpfixEncodeError(`message of ${length} bytes > 65535`);
      return;
    }
    this.#view.setUint16(start + 2, length);
    this.#view.setUint16(start + MESSAGE_HEADER_LENGTH + 2, length - MESSAGE_HEADER_LENGTH);
    this.#ends.push(this.#len);
  }

  #room(n: number): void {
    if (this.#len + n <= this.#buf.length) return;
    const grown = new Uint8Array(Math.max(this.#buf.length * 2, this.#len + n));
    grown.set(this.#buf.subarray(0, this.#len));
    this.#buf = grown;
    this.#view = new DataView(grown.buffer);
  }
}
