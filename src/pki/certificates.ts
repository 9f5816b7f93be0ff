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
import { DAY_MS, DEFAULT_NAMESPACE, HOUR_MS } from "./common.ts";
import {
  type ReissueReason,
  reissueReason,
  RENEW_BEFORE_MS,
  type ValidityWindow,
} from "./validity.ts";

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

export { DEFAULT_NAMESPACE };

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

/** What signs leaf certificates: the CA's subject (reused byte for byte as issuer) and key. */
interface Signer {
  readonly subject: forge.pki.CertificateField[];
  readonly key: forge.pki.rsa.PrivateKey;
  readonly keyId: string;
}

function signerOf(subject: forge.pki.CertificateField[], key: forge.pki.rsa.PrivateKey): Signer {
  const publicKey = forge.pki.setRsaPublicKey(key.n, key.e);
  const keyId = forge.pki.getPublicKeyFingerprint(publicKey, { type: "RSAPublicKey" }).getBytes();
  return { subject, key, keyId };
}

interface LeafSpec {
  readonly serial: string;
  readonly role: "server" | "client";
  readonly unix: number;
  readonly publicKey: forge.pki.rsa.PublicKey;
  readonly notBefore: Date;
  readonly notAfter: Date;
  readonly extra: Record<string, unknown>[];
}

// A leaf certificate signed by the CA: server (serverAuth + SANs) or client (clientAuth).
function leaf(signer: Signer, spec: LeafSpec): string {
  return buildCert({
    serial: spec.serial,
    subject: cnAttributes(`flow-aggregator-${spec.role}-certificate@${spec.unix}`),
    issuer: signer.subject,
    publicKey: spec.publicKey,
    signingKey: signer.key,
    notBefore: spec.notBefore,
    notAfter: spec.notAfter,
    extensions: [
      { name: "keyUsage", digitalSignature: true, critical: true },
      ...spec.extra,
      { name: "authorityKeyIdentifier", keyIdentifier: signer.keyId },
    ],
  });
}

function serverExtensions(options: GenerateCertificatesOptions): Record<string, unknown>[] {
  const namespace = options.namespace || DEFAULT_NAMESPACE;
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
  const signer = signerOf(caSubject, caKey.privateKey);
  const times = { unix, notBefore, notAfter };
  const serverPem = leaf(signer, {
    serial: "02",
    role: "server",
    publicKey: serverKey.publicKey,
    ...times,
    extra: serverExtensions(options),
  });
  const clientPem = leaf(signer, {
    serial: "03",
    role: "client",
    publicKey: clientKey.publicKey,
    ...times,
    extra: [{ name: "extKeyUsage", clientAuth: true }],
  });

  return {
    ca: { certPem: caPem, keyPem: caKey.keyPem },
    server: { certPem: serverPem, keyPem: serverKey.keyPem },
    client: { certPem: clientPem, keyPem: clientKey.keyPem },
  };
}

/**
 * Issues a new server certificate for `options.address` (`flowAggregatorAddress`) signed by the
 * CA of `certs` ({@linkcode issueServerCertificate}), keeping that CA and the client
 * certificate: Agents trust the new server certificate without any new material.
 */
export function reissueServerCertificate(
  certs: GeneratedCertificates,
  options: GenerateCertificatesOptions = {},
): GeneratedCertificates {
  return { ...certs, server: issueServerCertificate(certs.ca, options) };
}

/**
 * Issues a new server certificate (new key) from an existing CA, for a process that reuses a
 * persisted CA: same subject form and extensions as {@linkcode generateCertificates}, a random
 * serial (the CA already signed one with serial 2), never valid beyond the CA.
 */
export function issueServerCertificate(
  ca: CertificatePair,
  options: GenerateCertificatesOptions = {},
): CertificatePair {
  const now = options.now ?? new Date();
  const caCert = forge.pki.certificateFromPem(ca.certPem);
  const signer = signerOf(
    caCert.subject.attributes as forge.pki.CertificateField[],
    forge.pki.privateKeyFromPem(ca.keyPem) as forge.pki.rsa.PrivateKey,
  );
  const key = newKey(options.modulusLength ?? 2048);
  const notBefore = new Date(now.getTime() - HOUR_MS);
  const yearLater = new Date(notBefore.getTime() + 365 * DAY_MS);
  const serial = "4" + forge.util.bytesToHex(forge.random.getBytesSync(15));
  const certPem = leaf(signer, {
    serial,
    role: "server",
    unix: Math.floor(now.getTime() / 1000),
    publicKey: key.publicKey,
    notBefore,
    notAfter: yearLater < caCert.validity.notAfter ? yearLater : caCert.validity.notAfter,
    extra: serverExtensions(options),
  });
  return { certPem, keyPem: key.keyPem };
}

/** Options of {@linkcode reuseProblem}. */
export interface ReuseOptions {
  /** Time of the check; default now. */
  now?: Date;
  /** Certificates with less validity left than this are not reused; default 90 days. */
  minRemainingMs?: number;
}

/**
 * Why a persisted CA and client pair cannot be reused, or undefined when it can: both parse,
 * each key matches its certificate, the CA signed the client certificate (a CA with clientAuth,
 * a client certificate with clientAuth), and both are valid now and for `minRemainingMs` more.
 */
export function reuseProblem(
  ca: CertificatePair,
  client: CertificatePair,
  options: ReuseOptions = {},
): string | undefined {
  const now = options.now ?? new Date();
  const until = new Date(now.getTime() + (options.minRemainingMs ?? RENEW_BEFORE_MS));
  try {
    const caCert = forge.pki.certificateFromPem(ca.certPem);
    const clientCert = forge.pki.certificateFromPem(client.certPem);
    const bc = caCert.getExtension("basicConstraints") as { cA?: boolean } | null;
    if (bc?.cA !== true) return "the CA certificate is not a CA";
    const pairs: [string, forge.pki.Certificate, string][] = [
      ["CA", caCert, ca.keyPem],
      ["client", clientCert, client.keyPem],
    ];
    for (const [name, cert, keyPem] of pairs) {
      const key = forge.pki.privateKeyFromPem(keyPem) as forge.pki.rsa.PrivateKey;
      const pub = cert.publicKey as forge.pki.rsa.PublicKey;
      if (key.n.compareTo(pub.n) !== 0 || key.e.compareTo(pub.e) !== 0) {
        return `the ${name} key does not match its certificate`;
      }
      if (cert.validity.notBefore > now) return `the ${name} certificate is not valid yet`;
      if (cert.validity.notAfter < until) return `the ${name} certificate expires too soon`;
    }
    const eku = clientCert.getExtension("extKeyUsage") as { clientAuth?: boolean } | null;
    if (eku?.clientAuth !== true) return "the client certificate lacks clientAuth";
    if (!caCert.verify(clientCert)) return "the client certificate is not signed by the CA";
  } catch (err) {
    return `unreadable: ${(err as Error).message}`;
  }
  return undefined;
}

/** What {@linkcode reissueNeeded} found out of its window. */
export interface ReissueNeed {
  /**
   * What to issue again: `ca`, a new CA and everything it signs (the CA or the client
   * certificate is out of its window: the Agents need the new CA and client pair); `server`,
   * only a new server certificate from the same CA (the Agents need nothing new).
   */
  readonly scope: "ca" | "server";
  /** Why. */
  readonly reason: ReissueReason;
  /** The certificate out of its window (the first of CA, client, server). */
  readonly certificate: "CA" | "client" | "server";
  /** Its validity. */
  readonly window: ValidityWindow;
}

/** Parsed validity of each certificate of a set, parsed once per set (node-forge is slow). */
const windowsOf = new WeakMap<
  GeneratedCertificates,
  Record<"CA" | "client" | "server", ValidityWindow>
>();

function windowOf(certPem: string): ValidityWindow {
  const { validity } = forge.pki.certificateFromPem(certPem);
  return { notBeforeMs: validity.notBefore.getTime(), notAfterMs: validity.notAfter.getTime() };
}

/**
 * Whether `certs` must be issued again at wall time `nowMs` (see `validity.ts`): the first of
 * the CA, the client and the server certificate that is not valid yet, or has less than
 * `renewBeforeMs` left; undefined when all three are good.
 */
export function reissueNeeded(
  certs: GeneratedCertificates,
  nowMs: number,
  renewBeforeMs?: number,
): ReissueNeed | undefined {
  let windows = windowsOf.get(certs);
  if (windows === undefined) {
    windows = {
      CA: windowOf(certs.ca.certPem),
      client: windowOf(certs.client.certPem),
      server: windowOf(certs.server.certPem),
    };
    windowsOf.set(certs, windows);
  }
  for (const certificate of ["CA", "client", "server"] as const) {
    const window = windows[certificate];
    const reason = reissueReason(window, nowMs, renewBeforeMs);
    if (reason !== undefined) {
      return { scope: certificate === "server" ? "server" : "ca", reason, certificate, window };
    }
  }
  return undefined;
}
