/**
 * The two sides of mutual TLS in the tests, built from one set of generated certificates: the
 * Collector's listener material (its server certificate, and the CA that must have signed a
 * client's) and an Agent's or exporter's client options (the same CA, its client certificate).
 */

import type { TlsMaterial } from "../../src/collector/mod.ts";
import type { TransportTlsOptions } from "../../src/net/transport.ts";
import type { GeneratedCertificates } from "../../src/pki/mod.ts";

/** TLS material of a Collector listening with the server certificate of `g`. */
export function collectorTls(g: GeneratedCertificates): TlsMaterial {
  return { caPem: g.ca.certPem, certPem: g.server.certPem, keyPem: g.server.keyPem };
}

/** TLS options of a client presenting the client certificate of `g`. */
export function clientTls(g: GeneratedCertificates): TransportTlsOptions {
  return { ca: g.ca.certPem, cert: g.client.certPem, key: g.client.keyPem };
}
