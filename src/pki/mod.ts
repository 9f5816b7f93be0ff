/**
 * Certificates for the mutual-TLS IPFIX collector (control-plane.md §3): one CA, one server
 * certificate for the collector and one client certificate shared by all Agents.
 *
 * @module
 */

export {
  type CertificatePair,
  DEFAULT_NAMESPACE,
  generateCertificates,
  type GenerateCertificatesOptions,
  type GeneratedCertificates,
  issueServerCertificate,
  type ReuseOptions,
  reuseProblem,
} from "./certificates.ts";
