/**
 * The typed records that flow through the aggregation core. An Antrea Agent data record decoded
 * by the codec is a `DataRecord` keyed by IE name, so after the collector has checked the
 * template it can be handed over as a {@linkcode FlowInput}. The core hands exporters an
 * {@linkcode AggregatedRecord}: a snapshot (own copy) of one aggregated flow, keyed by IE name,
 * which the IPFIX exporter encodes by looking up each template field's name and which the flat
 * record of ClickHouse/S3/log is built from. Both record types are derived from the record
 * schema (`src/record/schema.ts`) and re-exported here under their established names.
 */

import type { AggregatedRecord } from "../record/schema.ts";

export type { AggregatedRecord, FlowInput } from "../record/schema.ts";

/**
 * The 5-tuple that identifies a flow (directional). Addresses are canonical text, except in an
 * exported flow whose export loop asked for none (`ExportHooks.addressText`): `""` there, and
 * `exportedAddress` (flow_key.ts) gives the text.
 */
export interface FlowKey {
  readonly sourceAddress: string;
  readonly destinationAddress: string;
  readonly protocol: number;
  readonly sourcePort: number;
  readonly destinationPort: number;
}

/** What the export loop hands to every exporter's `addRecord`. */
export interface ExportedFlow {
  /** The flow key. */
  readonly key: FlowKey;
  /** Own copy of the aggregated record; exporters may keep it. */
  readonly record: AggregatedRecord;
  /** Address family of the key (selects IPFIX template 257 vs 256). */
  readonly isIPv6: boolean;
  /** True when this is an InterNode half exported without its partner after the wait. */
  readonly uncorrelated: boolean;
  /**
   * The key's addresses as the core stores them, for binary consumers (the worker batch), so
   * they need not parse the text back: `addressWords[addressAt..+3]` the source and
   * `[addressAt + 4..+7]` the destination, u32 words in network order (IPv4 in the first).
   * The core's own storage: valid only during the synchronous `addRecord` call. Always set by
   * the core, which may then leave the address text empty (`ExportHooks.addressText`).
   */
  readonly addressWords?: Uint32Array;
  /** See {@linkcode addressWords}. */
  readonly addressAt?: number;
}
