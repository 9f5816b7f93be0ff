/**
 * Generates the CA, server and client certificates used by the mutual-TLS IPFIX collector,
 * reproducing `antrea v1.13: pkg/flowaggregator/certificate.go` (control-plane.md §3.2) in a form
 * Go's strict `crypto/x509` accepts (§3.6): UTF8String CNs, issuer bytes identical to the CA
 * subject, critical basicConstraints/keyUsage, explicit SANs and PKCS#1 key PEMs.
 *
 * RSA keys come from `node:crypto` because pure-JS key generation in node-forge takes seconds;
 * node-forge only builds and signs the certificates.
 */

import { generateKeyPairSync } from "node:crypto";
import { isIP } from "node:net";
import forge from "node-forge";

/** A certificate and its private key, both PEM. */
export interface CertificatePair {
  /** PEM `CERTIFICATE`. */
  readonly certPem: string;
  /** PEM `RSA PRIVATE KEY` (PKCS#1). */
  readonly keyPem: string;
}

/** The three certificates generated at collector start. */
export interface GeneratedCertificates {
  /** Self-signed CA; its key never leaves the process. */
  readonly ca: CertificatePair;
  /** Collector (server) certificate, signed by the CA. */
  readonly server: CertificatePair;
  /** Shared Agent (client) certificate, signed by the CA; published in a Secret. */
  readonly client: CertificatePair;
}

/** Options for {@linkcode generateCertificates}. */
export interface GenerateCertificatesOptions {
  /** Flow Aggregator namespace; the server gets DNS SAN `flow-aggregator.<ns>.svc`. */
  readonly namespace?: string;
  /**
   * `flowAggregatorAddress`: an IP literal becomes the only IP SAN, anything else is appended
   * verbatim as a second DNS SAN. Empty or absent adds nothing.
   */
  readonly address?: string;
  /** Generation time (defaults to now); validity starts one hour earlier. */
  readonly now?: Date;
  /** RSA modulus length; 2048 as upstream. Exposed so tests can stay fast if needed. */
  readonly modulusLength?: number;
}

/** Namespace used when none is configured (control-plane.md §4.2). */
export const DEFAULT_NAMESPACE = "flow-aggregator";

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

interface KeyMaterial {
  readonly privateKey: forge.pki.rsa.PrivateKey;
  readonly publicKey: forge.pki.rsa.PublicKey;
  readonly keyPem: string;
}

function newKey(modulusLength: number): KeyMaterial {
  const { privateKey } = generateKeyPairSync("rsa", {
    modulusLength,
    publicKeyEncoding: { type: "pkcs1", format: "pem" },
    privateKeyEncoding: { type: "pkcs1", format: "pem" },
  });
  const forgeKey = forge.pki.privateKeyFromPem(privateKey);
  return {
    privateKey: forgeKey,
    publicKey: forge.pki.setRsaPublicKey(forgeKey.n, forgeKey.e),
    keyPem: privateKey,
  };
}

// Go parses PrintableString strictly and `@` is not allowed in it, so CNs must be UTF8String.
function cnAttributes(cn: string): forge.pki.CertificateField[] {
  // The typings declare valueTagClass as a tag class, but node-forge uses it as the value's tag.
  const valueTagClass = forge.asn1.Type.UTF8 as unknown as forge.asn1.Class;
  return [{ name: "commonName", value: cn, valueTagClass }];
}

interface CertSpec {
  readonly serial: string;
  readonly subject: forge.pki.CertificateField[];
  readonly issuer: forge.pki.CertificateField[];
  readonly publicKey: forge.pki.rsa.PublicKey;
  readonly signingKey: forge.pki.rsa.PrivateKey;
  readonly notBefore: Date;
  readonly notAfter: Date;
  readonly extensions: unknown[];
}

function buildCert(spec: CertSpec): string {
  const cert = forge.pki.createCertificate();
  cert.serialNumber = spec.serial;
  cert.publicKey = spec.publicKey;
  cert.validity.notBefore = spec.notBefore;
  cert.validity.notAfter = spec.notAfter;
  cert.setSubject(spec.subject);
  cert.setIssuer(spec.issuer);
  cert.setExtensions(spec.extensions as never[]);
  cert.sign(spec.signingKey, forge.md.sha256.create());
  return forge.pki.certificateToPem(cert);
}

/** The server certificate's own extensions: serverAuth and its SANs (§3.2). */
function serverExtensions(
  namespace: string,
  options: { readonly address?: string },
): Record<string, unknown>[] {
  const altNames: { type: number; value?: string; ip?: string }[] = [
    { type: 2, value: `flow-aggregator.${namespace}.svc` },
  ];
  const address = options.address ?? "";
  if (address !== "") {
    if (isIP(address) !== 0) altNames.push({ type: 7, ip: address });
    else altNames.push({ type: 2, value: address });
  }
  return [{ name: "extKeyUsage", serverAuth: true }, { name: "subjectAltName", altNames }];
}

/**
 * Generates a fresh CA plus server and client certificates (RSA, SHA-256, serials 1/2/3,
 * valid from `now − 1h` for 365 days), as the Flow Aggregator does at every start in TLS mode.
 */
export function generateCertificates(
  options: GenerateCertificatesOptions = {},
): GeneratedCertificates {
  const now = options.now ?? new Date();
  const namespace = options.namespace || DEFAULT_NAMESPACE;
  const modulusLength = options.modulusLength ?? 2048;
  const unix = Math.floor(now.getTime() / 1000);
  const notBefore = new Date(now.getTime() - HOUR_MS);
  const notAfter = new Date(notBefore.getTime() + 365 * DAY_MS);

  const caKey = newKey(modulusLength);
  const serverKey = newKey(modulusLength);
  const clientKey = newKey(modulusLength);

  // Built once and reused as issuer so the issuer DER is byte-identical to the CA subject DER.
  const caSubject = cnAttributes(`flow-aggregator-ca@${unix}`);

  const caPem = buildCert({
    serial: "01",
    subject: caSubject,
    issuer: caSubject,
    publicKey: caKey.publicKey,
    signingKey: caKey.privateKey,
    notBefore,
    notAfter,
    extensions: [
      { name: "basicConstraints", cA: true, critical: true },
      { name: "keyUsage", digitalSignature: true, keyCertSign: true, critical: true },
      { name: "extKeyUsage", serverAuth: true, clientAuth: true },
      // Go's CreateCertificate adds an SKI to CA certificates and the matching AKI to the
      // certificates they sign; RFC 5280 strict validators (openssl -x509_strict) require both.
      { name: "subjectKeyIdentifier" },
    ],
  });
  const caKeyId = forge.pki.getPublicKeyFingerprint(caKey.publicKey, { type: "RSAPublicKey" })
    .getBytes();
  const aki = { name: "authorityKeyIdentifier", keyIdentifier: caKeyId };

  // A leaf certificate signed by the CA: server (serverAuth + SANs) or client (clientAuth).
  const leaf = (
    serial: string,
    role: "server" | "client",
    publicKey: typeof serverKey.publicKey,
    extra: Record<string, unknown>[],
  ) =>
    buildCert({
      serial,
      subject: cnAttributes(`flow-aggregator-${role}-certificate@${unix}`),
      issuer: caSubject,
      publicKey,
      signingKey: caKey.privateKey,
      notBefore,
      notAfter,
      extensions: [
        { name: "keyUsage", digitalSignature: true, critical: true },
        ...extra,
        aki,
      ],
    });
  const serverPem = leaf("02", "server", serverKey.publicKey, serverExtensions(namespace, options));
  const clientPem = leaf("03", "client", clientKey.publicKey, [
    { name: "extKeyUsage", clientAuth: true },
  ]);

  return {
    ca: { certPem: caPem, keyPem: caKey.keyPem },
    server: { certPem: serverPem, keyPem: serverKey.keyPem },
    client: { certPem: clientPem, keyPem: clientKey.keyPem },
  };
}

/**
 * Issues a new server certificate for `options.address` (`flowAggregatorAddress`) signed by the
 * CA of `certs`, keeping that CA and the client certificate: Agents trust the new server
 * certificate without any new material. Its serial is random (the CA's earlier server
 * certificate holds 2) and its validity is the CA's.
 */
export function reissueServerCertificate(
  certs: GeneratedCertificates,
  options: GenerateCertificatesOptions = {},
): GeneratedCertificates {
  const ca = forge.pki.certificateFromPem(certs.ca.certPem);
  const caKey = forge.pki.privateKeyFromPem(certs.ca.keyPem) as forge.pki.rsa.PrivateKey;
  const caPublic = ca.publicKey as forge.pki.rsa.PublicKey;
  const serverKey = newKey(options.modulusLength ?? caPublic.n.bitLength());
  const unix = Math.floor((options.now ?? new Date()).getTime() / 1000);
  const serial = crypto.getRandomValues(new Uint8Array(16));
  serial[0] &= 0x7f; // positive
  serial[0] |= 0x01; // DER-minimal (no leading zero byte)
  const caKeyId = forge.pki.getPublicKeyFingerprint(caPublic, { type: "RSAPublicKey" }).getBytes();
  const serverPem = buildCert({
    serial: [...serial].map((b) => b.toString(16).padStart(2, "0")).join(""),
    subject: cnAttributes(`flow-aggregator-server-certificate@${unix}`),
    // The parsed CA subject keeps its UTF8String tags: the issuer bytes match the CA's.
    issuer: ca.subject.attributes,
    publicKey: serverKey.publicKey,
    signingKey: caKey,
    notBefore: ca.validity.notBefore,
    notAfter: ca.validity.notAfter,
    extensions: [
      { name: "keyUsage", digitalSignature: true, critical: true },
      ...serverExtensions(options.namespace || DEFAULT_NAMESPACE, options),
      { name: "authorityKeyIdentifier", keyIdentifier: caKeyId },
    ],
  });
  return { ...certs, server: { certPem: serverPem, keyPem: serverKey.keyPem } };
}
