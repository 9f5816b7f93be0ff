/**
 * Shared wire-level types of the IPFIX codec. This file is the contract between the codec
 * (`src/ipfix/`), the collector, the IPFIX exporter and the traffic generator: extend it, but do
 * not change the meaning of what is here without updating every user.
 */

/** IANA abstract data types (RFC 7012 §3.1). */
export type DataType =
  | "octetArray"
  | "unsigned8"
  | "unsigned16"
  | "unsigned32"
  | "unsigned64"
  | "signed8"
  | "signed16"
  | "signed32"
  | "signed64"
  | "float32"
  | "float64"
  | "boolean"
  | "macAddress"
  | "string"
  | "dateTimeSeconds"
  | "dateTimeMilliseconds"
  | "dateTimeMicroseconds"
  | "dateTimeNanoseconds"
  | "ipv4Address"
  | "ipv6Address"
  | "basicList"
  | "subTemplateList"
  | "subTemplateMultiList";

/** Field length meaning "variable length" in a field specifier. */
export const VARIABLE_LENGTH = 65535;

/** Private enterprise numbers used by Antrea. */
export const PEN = { IANA: 0, IANA_REVERSE: 29305, ANTREA: 56506 } as const;

/** An Information Element definition from the registry. */
export interface InfoElement {
  /** Registry name, e.g. `sourcePodName`. Decoded records are keyed by this name. */
  readonly name: string;
  /** Element id (15 bits). */
  readonly id: number;
  /** Private enterprise number; 0 for IANA elements. */
  readonly enterprise: number;
  /** Abstract data type. */
  readonly type: DataType;
  /** Default length in bytes; {@linkcode VARIABLE_LENGTH} for variable-length types. */
  readonly length: number;
}

/** One field specifier of a template record, as on the wire. */
export interface FieldSpecifier {
  /** Element id (15 bits, enterprise bit removed). */
  readonly id: number;
  /** Private enterprise number; 0 when the enterprise bit is clear. */
  readonly enterprise: number;
  /** Field length from the template; {@linkcode VARIABLE_LENGTH} = variable. */
  readonly length: number;
}

/** A template or options template record. */
export interface TemplateRecord {
  /** Template id, 256..65535. */
  readonly id: number;
  /** Fields in wire order. Empty = withdrawal (only when decoding). */
  readonly fields: readonly FieldSpecifier[];
  /** Number of scope fields (options templates only); 0 for a data template. */
  readonly scopeFieldCount: number;
}

/**
 * A decoded field value. unsigned8/16/32, signed8/16/32, float32/64 and dateTimeSeconds are
 * `number`; unsigned64, signed64 and dateTimeMilliseconds are `bigint` (exact above 2^53);
 * dateTimeMicro/Nanoseconds are `bigint` (the 64-bit NTP value); string is `string`;
 * ipv4Address/ipv6Address are canonical text (`10.0.0.1`, RFC 5952 for IPv6); boolean is
 * `boolean`; macAddress, octetArray and unknown elements are `Uint8Array` (copied, never a view
 * of a receive buffer).
 */
export type FieldValue = number | bigint | string | boolean | Uint8Array;

/**
 * A decoded data record: IE name → value, in template order. Elements not in the registry are
 * kept under the key `"<enterprise>/<id>"` (e.g. `"0/999"`) with their raw bytes.
 */
export type DataRecord = Record<string, FieldValue>;

/** The 16-byte message header. */
export interface MessageHeader {
  /** Always 10. */
  readonly version: number;
  /** Total length including the header. */
  readonly length: number;
  /** Export time, seconds since the epoch. */
  readonly exportTime: number;
  /** Sequence number (never validated). */
  readonly sequenceNumber: number;
  /** Observation domain id. */
  readonly observationDomainId: number;
}
