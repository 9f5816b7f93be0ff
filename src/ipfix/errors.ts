/**
 * Decode error type shared by the template compiler, the template store and the message decoder
 * (kept apart from `decoder.ts` so the store can throw it without an import cycle).
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

  /** Creates an error with a reason and a human-readable detail. */
  constructor(reason: DecodeErrorReason, message: string) {
    super(`ipfix: ${reason}: ${message}`);
    this.name = "IpfixDecodeError";
    this.reason = reason;
  }
}
