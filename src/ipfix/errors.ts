/**
 * Error types of the codec: the decode error shared by the template compiler, the template store
 * and the message decoder, and the encode error shared by the encoder and the message framing
 * (kept apart from `decoder.ts` and `encoder.ts` so their users throw them without an import
 * cycle).
 */

/** Why a message, set, template or record was rejected. */
export type DecodeErrorReason =
  | "truncated"
  | "badVersion"
  | "badLength"
  | "badSetLength"
  | "reservedSetId"
  | "badTemplate"
  | "badRecord"
  | "badVarLength"
  | "badFieldLength";

/** A decode failure; `reason` is stable and meant for counters, `message` for logs. */
export class IpfixDecodeError extends Error {
  /** Machine-readable cause. */
  readonly reason: DecodeErrorReason;
  /** The human-readable detail alone (the message without its `ipfix: <reason>: ` prefix). */
  readonly detail: string;

  /** Creates an error with a reason and a human-readable detail. */
  constructor(reason: DecodeErrorReason, message: string) {
    super(`ipfix: ${reason}: ${message}`);
    this.name = "IpfixDecodeError";
    this.reason = reason;
    this.detail = message;
  }
}

/** A value that cannot be encoded for its field (wrong type, too long, not an address...). */
export class IpfixEncodeError extends Error {
  /** Creates an error naming the field and the problem. */
  constructor(message: string) {
    super(`ipfix encode: ${message}`);
    this.name = "IpfixEncodeError";
  }
}
