/**
 * The durable spool shared by network sinks: batches on disk in checksummed, append-only
 * segments, bounded, replayed in order after an outage or a restart. See {@linkcode Spool}.
 *
 * @module
 */

export { crc32 } from "./crc32.ts";
export {
  decodeFrame,
  encodeFrame,
  FLAG_OUTCOME_UNKNOWN,
  newBatchId,
  type SegmentWriter,
  Spool,
  type SpoolEntry,
  type SpoolLease,
  type SpoolOptions,
  type SpoolStats,
} from "./spool.ts";
