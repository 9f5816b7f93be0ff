/**
 * What the certificate modules share, kept apart from them so that importing a constant does
 * not load node-forge (src/pki/certificates.ts) into a process that never builds a collector
 * certificate.
 *
 * @module
 */

import { toBase64 } from "../bytes.ts";

/** Namespace used when none is configured (control-plane.md §4.2). */
export const DEFAULT_NAMESPACE = "flow-aggregator";

/** One hour, in milliseconds. */
export const HOUR_MS = 3_600_000;
/** One day, in milliseconds. */
export const DAY_MS: number = 24 * HOUR_MS;

/** `der` as a PEM block labelled `label`, 64 base64 characters a line. */
export function pem(label: string, der: Uint8Array): string {
  const b64 = toBase64(der).replace(/(.{64})/g, "$1\n").replace(/\n$/, "");
  return `-----BEGIN ${label}-----\n${b64}\n-----END ${label}-----\n`;
}
