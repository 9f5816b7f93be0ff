/**
 * The API server's self-signed certificate (control-plane.md §5.1), generated at every start
 * with WebCrypto and encoded by the few lines of DER below. The process builds it even when
 * nothing else needs certificates, so it does not use node-forge (src/pki/certificates.ts,
 * loaded only for the TLS collector): that library and `node:crypto` cost several MB of idle
 * RSS. The bytes are those node-forge wrote for the same certificate.
 *
 * @module
 */

import { DAY_MS, HOUR_MS, pem } from "./common.ts";
import type { ValidityWindow } from "./validity.ts";
import { concatBytes } from "../bytes.ts";

/** The API server's certificate: a chain (leaf then CA) and the leaf's key. */
export interface ApiCertificate {
  /** Leaf + CA, PEM, as served. */
  readonly chainPem: string;
  /** The leaf's private key, PEM. */
  readonly keyPem: string;
  /** The CA alone (what a client trusts). */
  readonly caPem: string;
  /** Validity of both certificates (as encoded: whole seconds). */
  readonly validity: ValidityWindow;
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
    serial: 1,
    subject: caName,
    issuer: caName,
    publicKey: ca.publicKey,
    signingKey: ca.privateKey,
    notBefore,
    notAfter,
    extensions: [
      extension(OID_BASIC_CONSTRAINTS, true, seq(BOOLEAN_TRUE)),
      // digitalSignature (bit 0) and keyCertSign (bit 5): 0x84, the last 2 bits unused.
      extension(OID_KEY_USAGE, true, tlv(0x03, bytes(2, 0x84))),
    ],
  });
  const leafPem = await ecdsaCertificate({
    serial: 2,
    subject: `localhost@${unix}`,
    issuer: caName,
    publicKey: leaf.publicKey,
    signingKey: ca.privateKey,
    notBefore,
    notAfter,
    extensions: [
      // digitalSignature (bit 0) alone: 0x80, the last 7 bits unused.
      extension(OID_KEY_USAGE, true, tlv(0x03, bytes(7, 0x80))),
      extension(OID_EXT_KEY_USAGE, false, seq(oid(OID_SERVER_AUTH))),
      extension(
        OID_SUBJECT_ALT_NAME,
        false,
        seq(
          tlv(0x82, new TextEncoder().encode("localhost")), // dNSName [2]
          tlv(0x87, bytes(127, 0, 0, 1)), // iPAddress [7]
          tlv(0x87, bytes(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1)),
        ),
      ),
    ],
  });
  const keyDer = new Uint8Array(await crypto.subtle.exportKey("pkcs8", leaf.privateKey));
  const seconds = (d: Date): number => Math.floor(d.getTime() / 1000) * 1000;
  return {
    chainPem: leafPem + caPem,
    keyPem: pem("PRIVATE KEY", keyDer),
    caPem,
    validity: { notBeforeMs: seconds(notBefore), notAfterMs: seconds(notAfter) },
  };
}

const OID_COMMON_NAME = "2.5.4.3";
const OID_ECDSA_SHA256 = "1.2.840.10045.4.3.2";
const OID_BASIC_CONSTRAINTS = "2.5.29.19";
const OID_KEY_USAGE = "2.5.29.15";
const OID_EXT_KEY_USAGE = "2.5.29.37";
const OID_SUBJECT_ALT_NAME = "2.5.29.17";
const OID_SERVER_AUTH = "1.3.6.1.5.5.7.3.1";

/** What {@linkcode ecdsaCertificate} signs. */
interface EcdsaCertSpec {
  serial: number;
  subject: string;
  issuer: string;
  publicKey: CryptoKey;
  signingKey: CryptoKey;
  notBefore: Date;
  notAfter: Date;
  /** Each an encoded `Extension` ({@linkcode extension}). */
  extensions: Uint8Array[];
}

/** An X.509 v3 certificate with an ECDSA P-256 key, signed ecdsa-with-SHA256 by WebCrypto. */
async function ecdsaCertificate(spec: EcdsaCertSpec): Promise<string> {
  const sigAlg = seq(oid(OID_ECDSA_SHA256));
  const spki = new Uint8Array(await crypto.subtle.exportKey("spki", spec.publicKey));
  const tbs = seq(
    tlv(0xa0, int(bytes(2))), // [0] EXPLICIT version v3
    int(bytes(spec.serial)),
    sigAlg,
    commonName(spec.issuer),
    seq(utcTime(spec.notBefore), utcTime(spec.notAfter)),
    commonName(spec.subject),
    spki,
    tlv(0xa3, seq(...spec.extensions)), // [3] EXPLICIT extensions
  );
  const raw = new Uint8Array(
    await crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, spec.signingKey, tbs),
  );
  // WebCrypto gives r || s; X.509 wants ECDSA-Sig-Value ::= SEQUENCE { r INTEGER, s INTEGER }.
  const sig = seq(unsignedInt(raw.subarray(0, 32)), unsignedInt(raw.subarray(32)));
  return pem("CERTIFICATE", seq(tbs, sigAlg, tlv(0x03, concatBytes([bytes(0), sig]))));
}

// ---------------------------------------------------------------------------------------------
// DER, just what the certificate above uses.

const BOOLEAN_TRUE = bytes(0x01, 0x01, 0xff);

function bytes(...values: number[]): Uint8Array {
  return Uint8Array.from(values);
}

/** Tag, definite length (short or long form), content. */
function tlv(tag: number, content: Uint8Array): Uint8Array<ArrayBuffer> {
  const n = content.length;
  let head: number[];
  if (n < 0x80) {
    head = [tag, n];
  } else {
    const len: number[] = [];
    for (let v = n; v > 0; v = Math.floor(v / 256)) len.unshift(v & 0xff);
    head = [tag, 0x80 | len.length, ...len];
  }
  return concatBytes([Uint8Array.from(head), content]);
}

function seq(...items: Uint8Array[]): Uint8Array<ArrayBuffer> {
  return tlv(0x30, concatBytes(items));
}

function int(content: Uint8Array): Uint8Array {
  return tlv(0x02, content);
}

/** A non-negative INTEGER from big-endian magnitude bytes: minimal, with a 0 before a high bit. */
function unsignedInt(magnitude: Uint8Array): Uint8Array {
  let i = 0;
  while (i < magnitude.length - 1 && magnitude[i] === 0) i++;
  const v = magnitude.subarray(i);
  return int(v[0] & 0x80 ? concatBytes([bytes(0), v]) : v);
}

function oid(dotted: string): Uint8Array {
  const arcs = dotted.split(".").map(Number);
  const out = [40 * arcs[0] + arcs[1]];
  for (const arc of arcs.slice(2)) {
    const base128 = [arc & 0x7f];
    for (let v = Math.floor(arc / 128); v > 0; v = Math.floor(v / 128)) {
      base128.unshift(0x80 | (v & 0x7f));
    }
    out.push(...base128);
  }
  return tlv(0x06, Uint8Array.from(out));
}

/** Name ::= SEQUENCE { SET { SEQUENCE { commonName, UTF8String } } } (Go rejects `@` in a
 * PrintableString). */
function commonName(cn: string): Uint8Array {
  return seq(tlv(0x31, seq(oid(OID_COMMON_NAME), tlv(0x0c, new TextEncoder().encode(cn)))));
}

/** UTCTime `YYMMDDhhmmssZ`. */
function utcTime(d: Date): Uint8Array {
  const two = (n: number) => String(n).padStart(2, "0");
  const text = two(d.getUTCFullYear() % 100) + two(d.getUTCMonth() + 1) + two(d.getUTCDate()) +
    two(d.getUTCHours()) + two(d.getUTCMinutes()) + two(d.getUTCSeconds()) + "Z";
  return tlv(0x17, new TextEncoder().encode(text));
}

/** Extension ::= SEQUENCE { extnID, critical BOOLEAN (only when TRUE), extnValue OCTET STRING } */
function extension(id: string, critical: boolean, value: Uint8Array): Uint8Array {
  return critical ? seq(oid(id), BOOLEAN_TRUE, tlv(0x04, value)) : seq(oid(id), tlv(0x04, value));
}
