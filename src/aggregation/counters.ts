/**
 * Counters of the aggregation core ("everything that moves gets a counter"): records in,
 * accepted, rejected by reason, flows created/deleted, correlations, exports and their
 * failures. One mutable {@linkcode CoreCounters} is shared by the ingest, expiry and snapshot
 * code; {@linkcode CoreCounters.snapshot} gives the API's copy.
 */

/** Why {@linkcode AggregationCore.addRecord} rejected a record. */
export type RejectReason =
  | "missingKeyField"
  | "badAddress"
  | "mixedAddressFamily"
  | "missingField"
  | "badFieldType"
  | "maxFlows"
  | "maxFlowBytes"
  | "invalidRecord"
  /** Routed to a shard worker that had died (`src/shard/pool.ts`). */
  | "shardFailed";

const REJECT_REASONS: readonly RejectReason[] = [
  "invalidRecord",
  "missingKeyField",
  "badAddress",
  "mixedAddressFamily",
  "missingField",
  "badFieldType",
  "maxFlows",
  "maxFlowBytes",
  "shardFailed",
];

/** Counters of the core (all monotonic except `flows`). */
export interface AggregationStats {
  /** Records offered to addRecord. */
  recordsIn: number;
  /** Records aggregated (created or updated a flow). */
  recordsAccepted: number;
  /** Records rejected, by reason (includes `maxFlows` and `maxFlowBytes`). */
  recordsRejected: Record<RejectReason, number>;
  /** Accepted records ignored by §3.3 step 3 (flowEnd not after the side's previous end). */
  recordsStale: number;
  /** Records whose flowType IE was missing (treated as 0). */
  missingFlowType: number;
  /** Flows created. */
  flowsCreated: number;
  /** Flows deleted (inactive expiry, un-correlated give-up, flush). */
  flowsDeleted: number;
  /** InterNode halves merged. */
  correlated: number;
  /** Not-ready entries made ready by a record needing no correlation (E2 fix, L4). */
  readyWithoutCorrelation: number;
  /** Snapshots handed to `emit` without it throwing. */
  exported: number;
  /** Of those, snapshots flagged `uncorrelated`. */
  uncorrelatedExported: number;
  /** Un-correlated halves deleted without export (`dropUncorrelated` only). */
  uncorrelatedDropped: number;
  /** Exports of a flow that received no record since its previous export (L9). */
  exportedWithoutNewData: number;
  /** Calls of `emit` that threw. */
  emitErrors: number;
  /** Expiries that found a flow not ready and re-queued it. */
  notReadyRetries: number;
  /** Records dropped because `maxFlows` was reached (same as recordsRejected.maxFlows). */
  droppedMaxFlows: number;
  /** Total-counter diffs that were negative and clamped to 0 (L8). */
  negativeDiffsClamped: number;
  /** Pod look-ups that found nothing. */
  podLookupMisses: number;
  /**
   * Times the flow table met a probe past its bound (keys crafted to share a hash) and rehashed
   * under a new random key (`flow_table.ts`).
   */
  flowTableRekeys: number;
  /** Live flows now. */
  flows: number;
  /** Bytes of the live flows now, strings included (bounded by `maxFlowBytes`). */
  flowBytes: number;
}

/** The core's monotonic counters, incremented in place (see {@linkcode AggregationStats}). */
export class CoreCounters {
  /** See {@linkcode AggregationStats.recordsIn}. */
  recordsIn = 0;
  /** See {@linkcode AggregationStats.recordsAccepted}. */
  recordsAccepted = 0;
  /** See {@linkcode AggregationStats.recordsRejected}. */
  readonly rejected: Record<RejectReason, number> = Object.fromEntries(
    REJECT_REASONS.map((r) => [r, 0]),
  ) as Record<RejectReason, number>;
  /** See {@linkcode AggregationStats.recordsStale}. */
  recordsStale = 0;
  /** See {@linkcode AggregationStats.missingFlowType}. */
  missingFlowType = 0;
  /** See {@linkcode AggregationStats.flowsCreated}. */
  flowsCreated = 0;
  /** See {@linkcode AggregationStats.flowsDeleted}. */
  flowsDeleted = 0;
  /** See {@linkcode AggregationStats.correlated}. */
  correlated = 0;
  /** See {@linkcode AggregationStats.readyWithoutCorrelation}. */
  readyWithoutCorrelation = 0;
  /** See {@linkcode AggregationStats.exported}. */
  exported = 0;
  /** See {@linkcode AggregationStats.uncorrelatedExported}. */
  uncorrelatedExported = 0;
  /** See {@linkcode AggregationStats.uncorrelatedDropped}. */
  uncorrelatedDropped = 0;
  /** See {@linkcode AggregationStats.exportedWithoutNewData}. */
  exportedWithoutNewData = 0;
  /** See {@linkcode AggregationStats.emitErrors}. */
  emitErrors = 0;
  /** See {@linkcode AggregationStats.notReadyRetries}. */
  notReadyRetries = 0;
  /** See {@linkcode AggregationStats.negativeDiffsClamped}. */
  negativeDiffsClamped = 0;
  /** See {@linkcode AggregationStats.podLookupMisses}. */
  podLookupMisses = 0;
  /** See {@linkcode AggregationStats.flowTableRekeys}. */
  flowTableRekeys = 0;

  /** A copy of the counters, with `flows` live flows holding `flowBytes` bytes. */
  snapshot(flows: number, flowBytes: number): AggregationStats {
    return {
      recordsIn: this.recordsIn,
      recordsAccepted: this.recordsAccepted,
      recordsRejected: { ...this.rejected },
      recordsStale: this.recordsStale,
      missingFlowType: this.missingFlowType,
      flowsCreated: this.flowsCreated,
      flowsDeleted: this.flowsDeleted,
      correlated: this.correlated,
      readyWithoutCorrelation: this.readyWithoutCorrelation,
      exported: this.exported,
      uncorrelatedExported: this.uncorrelatedExported,
      uncorrelatedDropped: this.uncorrelatedDropped,
      exportedWithoutNewData: this.exportedWithoutNewData,
      emitErrors: this.emitErrors,
      notReadyRetries: this.notReadyRetries,
      droppedMaxFlows: this.rejected.maxFlows,
      negativeDiffsClamped: this.negativeDiffsClamped,
      podLookupMisses: this.podLookupMisses,
      flowTableRekeys: this.flowTableRekeys,
      flows,
      flowBytes,
    };
  }
}
