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

/** The API server's certificate: a chain (leaf then CA) and the leaf's key. */
export interface ApiCertificate {
  /** Leaf + CA, PEM, as served. */
  readonly chainPem: string;
  /** The leaf's private key, PEM. */
  readonly keyPem: string;
  /** The CA alone (what a client trusts). */
  readonly caPem: string;
}

/**
 * The API server's self-signed material (control-plane.md §5.1), generated at every start: a
 * CA `localhost-ca@<unix>` signing a serving certificate `localhost@<unix>` (serverAuth) for DNS
 * `localhost` and IPs `127.0.0.1`, `::1`, valid from `now − 1h` for a year.
 */
export async function generateApiCertificate(now: Date = new Date()): Promise<ApiCertificate> {
  const unix = Math.floor(now.getTime() / 1000);
  const notBefore = new Date(now.getTime() - HOUR_MS);
  const notAfter = new Date(notBefore.getTime() + 365 * DAY_MS);
  // ECDSA P-256 (WebCrypto): generated at once, where two RSA-2048 keys took 1-3 s of CPU at
  // every start. The API's clients (antctl, the CLI) do not care about the key type.
  const params = { name: "ECDSA", namedCurve: "P-256" };
  const [ca, leaf] = await Promise.all([
    crypto.subtle.generateKey(params, true, ["sign", "verify"]) as Promise<CryptoKeyPair>,
    crypto.subtle.generateKey(params, true, ["sign", "verify"]) as Promise<CryptoKeyPair>,
  ]);
  const caName = `localhost-ca@${unix}`;
  const caPem = await ecdsaCertificate({
    serial: "01",
    subject: caName,
    issuer: caName,
    publicKey: ca.publicKey,
    signingKey: ca.privateKey,
    notBefore,
    notAfter,
    extensions: [
      { name: "basicConstraints", cA: true, critical: true },
      { name: "keyUsage", digitalSignature: true, keyCertSign: true, critical: true },
    ],
  });
  const leafPem = await ecdsaCertificate({
    serial: "02",
    subject: `localhost@${unix}`,
    issuer: caName,
    publicKey: leaf.publicKey,
    signingKey: ca.privateKey,
    notBefore,
    notAfter,
    extensions: [
      { name: "keyUsage", digitalSignature: true, critical: true },
      { name: "extKeyUsage", serverAuth: true },
      {
        name: "subjectAltName",
        altNames: [{ type: 2, value: "localhost" }, { type: 7, ip: "127.0.0.1" }, {
          type: 7,
          ip: "::1",
        }],
      },
    ],
  });
  const keyDer = new Uint8Array(await crypto.subtle.exportKey("pkcs8", leaf.privateKey));
  return { chainPem: leafPem + caPem, keyPem: pem("PRIVATE KEY", keyDer), caPem };
}

function pem(label: string, der: Uint8Array): string {
  let bin = "";
  for (const b of der) bin += String.fromCharCode(b);
  const b64 = btoa(bin).replace(/(.{64})/g, "$1\n").replace(/\n$/, "");
  return `-----BEGIN ${label}-----\n${b64}\n-----END ${label}-----\n`;
}

/** What {@linkcode ecdsaCertificate} signs. */
interface EcdsaCertSpec {
  serial: string;
  subject: string;
  issuer: string;
  publicKey: CryptoKey;
  signingKey: CryptoKey;
  notBefore: Date;
  notAfter: Date;
  extensions: Record<string, unknown>[];
}

/**
 * An X.509 v3 certificate with an ECDSA P-256 key, signed ecdsa-with-SHA256 by WebCrypto:
 * node-forge builds the names and extensions (it signs RSA only), the rest is plain DER.
 */
async function ecdsaCertificate(spec: EcdsaCertSpec): Promise<string> {
  const asn1 = forge.asn1;
  const seq = (value: forge.asn1.Asn1[]) =>
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.SEQUENCE, true, value);
  const int = (bytes: string) => asn1.create(asn1.Class.UNIVERSAL, asn1.Type.INTEGER, false, bytes);
  const fromBytes = (b: Uint8Array) => {
    let s = "";
    for (const x of b) s += String.fromCharCode(x);
    return s;
  };
  // forge fills the names' and extensions' encodings on a certificate object.
  const tmp = forge.pki.createCertificate();
  tmp.setSubject(cnAttributes(spec.subject));
  tmp.setIssuer(cnAttributes(spec.issuer));
  tmp.setExtensions(spec.extensions as never[]);
  const sigAlg = seq([asn1.create(
    asn1.Class.UNIVERSAL,
    asn1.Type.OID,
    false,
    asn1.oidToDer("1.2.840.10045.4.3.2").getBytes(),
  )]);
  const pki = forge.pki as unknown as {
    distinguishedNameToAsn1(dn: unknown): forge.asn1.Asn1;
    certificateExtensionsToAsn1(exts: unknown): forge.asn1.Asn1;
  };
  const spki = new Uint8Array(await crypto.subtle.exportKey("spki", spec.publicKey));
  const tbs = seq([
    asn1.create(asn1.Class.CONTEXT_SPECIFIC, 0, true, [int(String.fromCharCode(2))]),
    int(forge.util.hexToBytes(spec.serial)),
    sigAlg,
    pki.distinguishedNameToAsn1(tmp.issuer),
    seq([
      asn1.create(
        asn1.Class.UNIVERSAL,
        asn1.Type.UTCTIME,
        false,
        asn1.dateToUtcTime(spec.notBefore),
      ),
      asn1.create(
        asn1.Class.UNIVERSAL,
        asn1.Type.UTCTIME,
        false,
        asn1.dateToUtcTime(spec.notAfter),
      ),
    ]),
    pki.distinguishedNameToAsn1(tmp.subject),
    asn1.fromDer(fromBytes(spki)),
    pki.certificateExtensionsToAsn1(tmp.extensions),
  ]);
  const tbsDer = asn1.toDer(tbs).getBytes();
  const tbsBytes = Uint8Array.from(tbsDer, (c) => c.charCodeAt(0));
  const raw = new Uint8Array(
    await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, spec.signingKey, tbsBytes),
  );
  // WebCrypto gives r || s; X.509 wants ECDSA-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER }.
  const derInt = (b: Uint8Array) => {
    let i = 0;
    while (i < b.length - 1 && b[i] === 0) i++;
    const v = b.subarray(i);
    return int((v[0] & 0x80 ? "\x00" : "") + fromBytes(v));
  };
  const sig = asn1.toDer(seq([derInt(raw.subarray(0, 32)), derInt(raw.subarray(32))])).getBytes();
  const cert = seq([
    tbs,
    sigAlg,
    asn1.create(asn1.Class.UNIVERSAL, asn1.Type.BITSTRING, false, "\x00" + sig),
  ]);
  return pem("CERTIFICATE", Uint8Array.from(asn1.toDer(cert).getBytes(), (c) => c.charCodeAt(0)));
}
