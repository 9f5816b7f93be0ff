/**
 * Expiry (spec aggregation.md §4 with the §10 fixes): each flow has an active and an inactive
 * expiry time in its f64 slot words and sits in the expiry heap at the earlier of the two. A
 * sweep pops the due flows, exports the ready ones (then resets their deltas and re-queues or
 * deletes them), retries not-ready ones and gives up on a partner after `maxRetries`.
 */

import type { ExportedFlow } from "./record.ts";
import { FIELD_CODE } from "./field_code.ts";
import { FL_READY, MAX_RETRIES, RETRY_SHIFT, T_ACTIVE, T_INACTIVE } from "./layout.ts";
import { f64Base, U32, u32Base, u64Base } from "./slot_store.ts";
import type { CoreState } from "./state.ts";
import { resetDeltas } from "./flow_stats.ts";
import { emitOne, type ExportHooks } from "./snapshot.ts";

/** Options of one {@linkcode AggregationCore.expire} sweep. */
export interface ExpireOptions extends ExportHooks {
  /** Most due flows handled by this call (default: all); the rest wait for the next call. */
  limit?: number;
}

/** Sets both expiry times of a new flow from now and queues it. */
export function scheduleNew(s: CoreState, slot: number): void {
  const t = s.clock.nowMs();
  const f64 = s.store.f64(slot);
  const fb = f64Base(slot);
  f64[fb + T_ACTIVE] = t + s.active;
  f64[fb + T_INACTIVE] = t + s.inactive;
  s.heap.push(slot, Math.min(f64[fb + T_ACTIVE], f64[fb + T_INACTIVE]));
}

/**
 * A record arrived: the inactive expiry moves to now + I. The flow's place in the heap is
 * min(A, I); while the active expiry is the earlier before and after the move (a flow's usual
 * state once I exceeds A's remaining time), it is unchanged and the heap is not touched.
 */
export function touch(s: CoreState, slot: number): void {
  const t = s.clock.nowMs();
  const f64 = s.store.f64(slot);
  const fb = f64Base(slot);
  const active = f64[fb + T_ACTIVE];
  const before = f64[fb + T_INACTIVE];
  const after = t + s.inactive;
  f64[fb + T_INACTIVE] = after;
  if (active <= before && active <= after) return;
  s.heap.update(slot, Math.min(active, after));
}

/** See {@linkcode AggregationCore.expire}. */
export function expire(
  s: CoreState,
  emit: (f: ExportedFlow) => void,
  hooks?: ExpireOptions,
): number {
  const heap = s.heap;
  if (heap.size === 0) return 0;
  const T = s.clock.nowMs();
  const limit = hooks?.limit ?? Infinity;
  let n = 0;
  let popped = 0;
  while (heap.size > 0 && popped++ < limit && heap.peekPriority() <= T) {
    const slot = heap.pop();
    const f64 = s.store.f64(slot);
    const fb = f64Base(slot);
    const u32 = s.store.u32(slot);
    const ub = u32Base(slot);
    const flags = u32[ub + U32.FLAGS];
    if ((flags & FL_READY) === 0) {
      const retries = (flags >>> RETRY_SHIFT) + 1;
      // Saturates (far beyond any useful maxRetries) rather than overflowing into the flags.
      if (retries <= MAX_RETRIES) u32[ub + U32.FLAGS] = flags + (1 << RETRY_SHIFT);
      if (retries > s.maxRetries) {
        if (s.dropUncorrelated) {
          s.counters.uncorrelatedDropped++;
        } else if (emitOne(s, slot, emit, { hooks, uncorrelated: true })) {
          n++;
        }
        deleteFlow(s, slot);
        continue;
      }
      s.counters.notReadyRetries++;
      f64[fb + T_ACTIVE] = T + s.active;
      f64[fb + T_INACTIVE] = T + s.inactive;
      heap.push(slot, Math.min(f64[fb + T_ACTIVE], f64[fb + T_INACTIVE]));
      continue;
    }
    if (emitOne(s, slot, emit, { hooks, uncorrelated: false })) n++;
    resetDeltas(s.store.u64(slot), u64Base(slot));
    // `<=` (L2): an item expired by exact equality is deleted or re-queued, never orphaned.
    if (f64[fb + T_INACTIVE] <= T) {
      deleteFlow(s, slot);
    } else {
      f64[fb + T_ACTIVE] = T + s.active;
      heap.push(slot, Math.min(f64[fb + T_ACTIVE], f64[fb + T_INACTIVE]));
    }
  }
  return n;
}

/** True when at least one flow is due now. */
export function hasExpired(s: CoreState): boolean {
  return s.heap.size > 0 && s.heap.peekPriority() <= s.clock.nowMs();
}

/** See {@linkcode AggregationCore.flushAll}. */
export function flushAll(
  s: CoreState,
  emit: (f: ExportedFlow) => void,
  hooks?: ExportHooks,
): number {
  let n = 0;
  const store = s.store;
  for (let slot = 0; slot < store.end; slot++) {
    if (!s.live(slot)) continue;
    const uncorrelated = (store.u32(slot)[u32Base(slot) + U32.FLAGS] & FL_READY) === 0;
    if (emitOne(s, slot, emit, { hooks, uncorrelated })) n++;
    s.counters.flowsDeleted++;
  }
  s.flowsGone(s.table.size);
  s.table.clear();
  s.heap.clear();
  s.store.clear();
  for (const g of s.groups) g.clear();
  s.intern.clear();
  return n;
}

/**
 * Milliseconds until the next sweep should run (spec §4.6): `minExpiry + (top − now)`, or
 * `minExpiry` when that is negative; `min(A, I)` when no flow is held.
 */
export function nextExpiryDelayMs(s: CoreState): number {
  if (s.heap.size === 0) return Math.min(s.active, s.inactive);
  const d = s.minExpiryMs + (s.heap.peekPriority() - s.clock.nowMs());
  return d < 0 ? s.minExpiryMs : d;
}

/** Removes a flow from the table, the heap and the store, and counts it. */
function deleteFlow(s: CoreState, slot: number): void {
  // The table finds the slot through its key words: remove before the slot is zeroed.
  s.table.remove(slot);
  s.heap.remove(slot);
  // Give back the flow's string references (the last one releases a string's bytes), before
  // the slot's words, their ids, are zeroed.
  const I = s.intern;
  const u32 = s.store.u32(slot);
  const ub = u32Base(slot);
  FIELD_CODE.release(I, s.groups, u32, ub);
  I.unref(u32[ub + U32.CLUSTER_V4]);
  I.unref(u32[ub + U32.CLUSTER_V6]);
  I.unref(u32[ub + U32.SRC_LABELS]);
  I.unref(u32[ub + U32.DST_LABELS]);
  s.store.free(slot);
  s.counters.flowsDeleted++;
  s.flowsGone(1);
}
