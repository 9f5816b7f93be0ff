/**
 * Certificates for the mutual-TLS IPFIX collector (control-plane.md §3): one CA, one server
 * certificate for the collector and one client certificate shared by all Agents; and the API
 * server's self-signed localhost certificate (§5.1).
 *
 * This module loads node-forge. The process itself imports the parts it needs: the API
 * certificate (`api_certificate.ts`, WebCrypto only) and `DEFAULT_NAMESPACE` (`common.ts`) at
 * start, `certificates.ts` with `import()` only when a TLS collector needs its certificates.
 *
 * @module
 */

export { type ApiCertificate, generateApiCertificate } from "./api_certificate.ts";
export { DEFAULT_NAMESPACE } from "./common.ts";
export {
  noReissues,
  type ReissueCounts,
  type ReissueReason,
  reissueReason,
  RENEW_BEFORE_MS,
  VALIDITY_CHECK_INTERVAL_MS,
  type ValidityWindow,
} from "./validity.ts";
export {
  type CertificatePair,
  generateCertificates,
  type GenerateCertificatesOptions,
  type GeneratedCertificates,
  issueServerCertificate,
  type ReissueNeed,
  reissueNeeded,
  reissueServerCertificate,
  type ReuseOptions,
  reuseProblem,
} from "./certificates.ts";
