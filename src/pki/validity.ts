/**
 * When a running process's certificates must be issued again. They are made at start with
 * `notBefore = now − 1 h` (control-plane.md §3.2, §5.1, as upstream): a process that started
 * with its wall clock ahead by more than that (a VM booted with a wrong clock, set right by NTP
 * later) holds certificates that are "not valid yet" once the clock is corrected, and every
 * peer refuses them until real time catches up. Nothing about them changes while the process
 * runs, so the collector and the API compare the wall clock with their certificates' window on
 * a monotonic timer ({@linkcode VALIDITY_CHECK_INTERVAL_MS}) and re-issue them when it falls
 * outside, or when the end is near ({@linkcode RENEW_BEFORE_MS}, newer Antrea's rotation,
 * §3.7).
 *
 * No node-forge here: the API's side loads none (see `api_certificate.ts`).
 *
 * @module
 */

import { DAY_MS } from "./common.ts";

/**
 * Certificates with less validity left than this are issued again (newer Antrea rotates its
 * CA at 90 days left; a persisted CA with less is not reused at start either).
 */
export const RENEW_BEFORE_MS: number = 90 * DAY_MS;

/** How often a running process compares the wall clock with its certificates' validity. */
export const VALIDITY_CHECK_INTERVAL_MS = 60_000;

/** A certificate's validity, in wall-clock milliseconds since the epoch. */
export interface ValidityWindow {
  /** `notBefore`. */
  readonly notBeforeMs: number;
  /** `notAfter`. */
  readonly notAfterMs: number;
}

/**
 * Why certificates are issued again while running: the wall clock is before their `notBefore`
 * (it was ahead when they were made and has been set back), or after `notAfter` minus
 * {@linkcode RENEW_BEFORE_MS} (expired, or about to).
 */
export type ReissueReason = "notValidYet" | "expiring";

/** Counts of re-issues, by reason. */
export type ReissueCounts = Record<ReissueReason, number>;

/** Zero counts of each {@linkcode ReissueReason}. */
export function noReissues(): ReissueCounts {
  return { notValidYet: 0, expiring: 0 };
}

/** The log fields of a re-issue: the wall time `nowMs` and `window`, as ISO times. */
export function validityFields(
  window: ValidityWindow,
  nowMs: number,
): { now: string; notBefore: string; notAfter: string } {
  return {
    now: new Date(nowMs).toISOString(),
    notBefore: new Date(window.notBeforeMs).toISOString(),
    notAfter: new Date(window.notAfterMs).toISOString(),
  };
}

/**
 * Why `window` needs a new certificate at wall time `nowMs`, or undefined while it is valid
 * with more than `renewBeforeMs` (default {@linkcode RENEW_BEFORE_MS}) left.
 */
export function reissueReason(
  window: ValidityWindow,
  nowMs: number,
  renewBeforeMs: number = RENEW_BEFORE_MS,
): ReissueReason | undefined {
  if (nowMs < window.notBeforeMs) return "notValidYet";
  if (nowMs > window.notAfterMs - renewBeforeMs) return "expiring";
  return undefined;
}
