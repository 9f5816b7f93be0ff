/**
 * Certificates for the mutual-TLS IPFIX collector (control-plane.md §3): one CA, one server
 * certificate for the collector and one client certificate shared by all Agents; and the API
 * server's self-signed localhost certificate (§5.1).
 *
 * @module
 */

export {
  type ApiCertificate,
  type CertificatePair,
  DEFAULT_NAMESPACE,
  generateApiCertificate,
  generateCertificates,
  type GenerateCertificatesOptions,
  type GeneratedCertificates,
  issueServerCertificate,
  reissueServerCertificate,
  type ReuseOptions,
  reuseProblem,
} from "./certificates.ts";
