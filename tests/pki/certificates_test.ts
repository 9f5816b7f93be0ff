import assert from "node:assert/strict";
import { createPrivateKey, X509Certificate } from "node:crypto";
import tls from "node:tls";
import forge from "node-forge";
import {
  generateApiCertificate,
  generateCertificates,
  type GeneratedCertificates,
  reissueNeeded,
  reissueServerCertificate,
} from "../../src/pki/mod.ts";

const NOW = new Date("2026-01-02T03:04:05Z");
const UNIX = Math.floor(NOW.getTime() / 1000);

// RSA-2048 generation takes ~1 s: generate once per address variant and share.
const withIp = generateCertificates({ namespace: "ns1", address: "10.1.2.3", now: NOW });
const withDns = generateCertificates({ address: "fa.example.org", now: NOW });
const plain = generateCertificates({ now: NOW });

function x509(pem: string): X509Certificate {
  return new X509Certificate(pem);
}

function extOf(pem: string, name: string): Record<string, unknown> {
  const cert = forge.pki.certificateFromPem(pem);
  const ext = cert.getExtension(name) as Record<string, unknown> | null;
  assert.ok(ext, `missing extension ${name}`);
  return ext;
}

function hasExt(pem: string, name: string): boolean {
  return forge.pki.certificateFromPem(pem).getExtension(name) !== null;
}

/** DER bytes of the subject or issuer Name, located structurally in the TBSCertificate. */
function nameDer(pem: string, which: "issuer" | "subject"): string {
  const asn = forge.pki.certificateToAsn1(forge.pki.certificateFromPem(pem));
  const tbs = (asn.value as forge.asn1.Asn1[])[0].value as forge.asn1.Asn1[];
  // tbs: [0] version, serial, sigAlg, issuer, validity, subject, ...
  const name = tbs[which === "issuer" ? 3 : 5];
  return forge.asn1.toDer(name).toHex();
}

/** ASN.1 tag of the CN value inside a Name. */
function cnTag(pem: string, which: "issuer" | "subject"): number {
  const asn = forge.pki.certificateToAsn1(forge.pki.certificateFromPem(pem));
  const tbs = (asn.value as forge.asn1.Asn1[])[0].value as forge.asn1.Asn1[];
  const name = tbs[which === "issuer" ? 3 : 5].value as forge.asn1.Asn1[];
  const atv = (name[0].value as forge.asn1.Asn1[])[0].value as forge.asn1.Asn1[];
  return atv[1].type;
}

Deno.test("pki: CA is self-signed, CA=true critical, certSign+digitalSignature, both EKUs", () => {
  const ca = x509(withIp.ca.certPem);
  assert.equal(ca.ca, true);
  assert.equal(ca.subject, `CN=flow-aggregator-ca@${UNIX}`);
  assert.equal(ca.issuer, ca.subject);
  assert.ok(ca.verify(ca.publicKey));
  assert.equal(ca.serialNumber.replace(/^0+/, ""), "1");
  const bc = extOf(withIp.ca.certPem, "basicConstraints");
  assert.equal(bc.cA, true);
  assert.equal(bc.critical, true);
  const ku = extOf(withIp.ca.certPem, "keyUsage");
  assert.equal(ku.critical, true);
  assert.equal(ku.keyCertSign, true);
  assert.equal(ku.digitalSignature, true);
  const eku = extOf(withIp.ca.certPem, "extKeyUsage");
  assert.equal(eku.serverAuth, true);
  assert.equal(eku.clientAuth, true);
  assert.equal(hasExt(withIp.ca.certPem, "subjectAltName"), false);
  assert.equal(hasExt(withIp.ca.certPem, "subjectKeyIdentifier"), true);
});

Deno.test("pki: validity is now-1h for 365 days on all three certificates", () => {
  for (const pair of [withIp.ca, withIp.server, withIp.client]) {
    const c = x509(pair.certPem);
    assert.equal(new Date(c.validFrom).getTime(), NOW.getTime() - 3_600_000);
    assert.equal(
      new Date(c.validTo).getTime(),
      NOW.getTime() - 3_600_000 + 365 * 86_400_000,
    );
  }
});

Deno.test("pki: server cert has DNS SAN for the namespace plus the IP SAN, serverAuth only", () => {
  const s = x509(withIp.server.certPem);
  assert.equal(s.subjectAltName, "DNS:flow-aggregator.ns1.svc, IP Address:10.1.2.3");
  assert.equal(s.subject, `CN=flow-aggregator-server-certificate@${UNIX}`);
  assert.equal(s.ca, false);
  assert.equal(s.serialNumber.replace(/^0+/, ""), "2");
  assert.ok(s.checkIssued(x509(withIp.ca.certPem)));
  assert.ok(s.verify(x509(withIp.ca.certPem).publicKey));
  assert.ok(s.checkHost("flow-aggregator.ns1.svc"));
  assert.equal(s.checkIP("10.1.2.3"), "10.1.2.3");
  const eku = extOf(withIp.server.certPem, "extKeyUsage");
  assert.equal(eku.serverAuth, true);
  assert.notEqual(eku.clientAuth, true);
  const ku = extOf(withIp.server.certPem, "keyUsage");
  assert.equal(ku.critical, true);
  assert.equal(ku.digitalSignature, true);
  assert.notEqual(ku.keyCertSign, true);
  assert.equal(hasExt(withIp.server.certPem, "basicConstraints"), false);
});

Deno.test("pki: a non-IP address becomes a second DNS SAN; default namespace is flow-aggregator", () => {
  assert.equal(
    x509(withDns.server.certPem).subjectAltName,
    "DNS:flow-aggregator.flow-aggregator.svc, DNS:fa.example.org",
  );
  assert.equal(
    x509(plain.server.certPem).subjectAltName,
    "DNS:flow-aggregator.flow-aggregator.svc",
  );
});

Deno.test("pki: an IPv6 flowAggregatorAddress becomes an IP SAN; a bracketed one is not an IP", () => {
  const v6 = generateCertificates({ address: "fd00::10", now: NOW, modulusLength: 1024 });
  const s = x509(v6.server.certPem);
  assert.equal(s.checkIP("fd00::10"), "fd00::10");
  assert.ok(s.checkHost("flow-aggregator.flow-aggregator.svc"));
  const bracketed = generateCertificates({ address: "[fd00::10]", now: NOW, modulusLength: 1024 });
  assert.equal(x509(bracketed.server.certPem).checkIP("fd00::10"), undefined);
});

Deno.test("pki: client cert has clientAuth only, no SANs, serial 3, signed by the CA", () => {
  const c = x509(withIp.client.certPem);
  assert.equal(c.subject, `CN=flow-aggregator-client-certificate@${UNIX}`);
  assert.equal(c.subjectAltName, undefined);
  assert.equal(c.serialNumber.replace(/^0+/, ""), "3");
  assert.ok(c.verify(x509(withIp.ca.certPem).publicKey));
  const eku = extOf(withIp.client.certPem, "extKeyUsage");
  assert.equal(eku.clientAuth, true);
  assert.notEqual(eku.serverAuth, true);
  assert.equal(hasExt(withIp.client.certPem, "subjectAltName"), false);
});

Deno.test("pki: CNs are UTF8String and issuer bytes equal the CA subject bytes (Go strictness)", () => {
  const caSubject = nameDer(withIp.ca.certPem, "subject");
  for (const pem of [withIp.ca.certPem, withIp.server.certPem, withIp.client.certPem]) {
    assert.equal(nameDer(pem, "issuer"), caSubject);
    assert.equal(cnTag(pem, "subject"), forge.asn1.Type.UTF8);
    assert.equal(cnTag(pem, "issuer"), forge.asn1.Type.UTF8);
  }
});

Deno.test("pki: keys are PKCS#1 RSA-2048 PEM and match their certificates", () => {
  for (const pair of [withIp.ca, withIp.server, withIp.client]) {
    assert.match(pair.keyPem, /^-----BEGIN RSA PRIVATE KEY-----\n/);
    const key = createPrivateKey(pair.keyPem);
    assert.equal(key.asymmetricKeyDetails?.modulusLength, 2048);
    assert.ok(x509(pair.certPem).checkPrivateKey(key));
  }
});

Deno.test("pki: each call rotates the CA (fresh keys)", () => {
  assert.notEqual(withIp.ca.keyPem, withDns.ca.keyPem);
  assert.notEqual(x509(withIp.ca.certPem).fingerprint256, x509(withDns.ca.certPem).fingerprint256);
});

async function handshake(
  certs: GeneratedCertificates,
  clientCerts: GeneratedCertificates,
): Promise<{ serverAuthorized: boolean; clientVerifiedServer: boolean }> {
  const server = tls.createServer({
    requestCert: true,
    rejectUnauthorized: true,
    ca: [certs.ca.certPem],
    cert: certs.server.certPem,
    key: certs.server.keyPem,
    minVersion: "TLSv1.2",
  });
  let serverAuthorized = false;
  const gotSecure = new Promise<void>((resolve) => {
    server.on("secureConnection", (s) => {
      serverAuthorized = s.authorized;
      s.end();
      resolve();
    });
    server.on("tlsClientError", () => resolve());
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  let clientVerifiedServer = false;
  await new Promise<void>((resolve) => {
    const s = tls.connect({
      host: "127.0.0.1",
      port,
      ca: [clientCerts.ca.certPem],
      cert: clientCerts.client.certPem,
      key: clientCerts.client.keyPem,
      servername: "flow-aggregator.ns1.svc",
    }, () => {
      clientVerifiedServer = s.authorized;
    });
    s.on("error", () => resolve());
    s.on("close", () => resolve());
    s.resume();
  });
  await gotSecure;
  await new Promise<void>((r) => server.close(() => r()));
  return { serverAuthorized, clientVerifiedServer };
}

Deno.test("pki: generated certificates complete a mutual TLS handshake verifying both sides", async () => {
  const r = await handshake(withIp, withIp);
  assert.equal(r.serverAuthorized, true);
  assert.equal(r.clientVerifiedServer, true);
});

Deno.test("pki: a client certificate from another CA is refused", async () => {
  const r = await handshake(withIp, withDns);
  assert.equal(r.serverAuthorized, false);
});

Deno.test("pki: openssl -x509_strict verifies server (sslserver) and client (sslclient) chains", async () => {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/ca.pem`, withIp.ca.certPem);
    await Deno.writeTextFile(`${dir}/server.pem`, withIp.server.certPem);
    await Deno.writeTextFile(`${dir}/client.pem`, withIp.client.certPem);
    const verify = async (purpose: string, file: string): Promise<number> => {
      const out = await new Deno.Command("openssl", {
        args: ["verify", "-x509_strict", "-purpose", purpose, "-CAfile", `${dir}/ca.pem`, file],
        stdout: "null",
        stderr: "null",
      }).output();
      return out.code;
    };
    assert.equal(await verify("sslserver", `${dir}/server.pem`), 0);
    assert.equal(await verify("sslclient", `${dir}/client.pem`), 0);
    // The EKUs are exclusive: the client certificate must not pass as a server certificate.
    assert.notEqual(await verify("sslserver", `${dir}/client.pem`), 0);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("pki: the API certificate is a localhost chain (leaf, then CA) for 127.0.0.1 and ::1", async () => {
  const c = await generateApiCertificate(new Date("2026-01-01T00:00:00Z"));
  const [leafPem] = c.chainPem.split(/(?<=-----END CERTIFICATE-----\n)/);
  const leaf = new X509Certificate(leafPem);
  const ca = new X509Certificate(c.caPem);
  assert.ok(c.chainPem.endsWith(c.caPem), "the CA follows the leaf");
  assert.match(leaf.subject, /CN=localhost@1767225600/);
  assert.match(ca.subject, /CN=localhost-ca@1767225600/);
  assert.ok(leaf.verify(ca.publicKey), "signed by the CA");
  assert.equal(
    leaf.subjectAltName,
    "DNS:localhost, IP Address:127.0.0.1, IP Address:::1",
  );
  assert.ok(leaf.checkPrivateKey(createPrivateKey(c.keyPem)));
});

Deno.test("pki: the API certificate reports its validity as encoded", async () => {
  const c = await generateApiCertificate(new Date("2026-01-01T00:00:00.750Z"));
  const ca = new X509Certificate(c.caPem);
  assert.equal(c.validity.notBeforeMs, Date.parse(ca.validFrom));
  assert.equal(c.validity.notAfterMs, Date.parse(ca.validTo));
  assert.equal(c.validity.notBeforeMs, Date.parse("2025-12-31T23:00:00Z"));
});

Deno.test("pki: reissueNeeded names the certificate out of its window and what to issue again", () => {
  const t = NOW.getTime();
  const hour = 3_600_000;
  const day = 24 * hour;
  assert.equal(reissueNeeded(plain, t), undefined, "valid at its making");
  assert.equal(reissueNeeded(plain, t - hour + 1000), undefined, "valid from an hour before");
  // The wall clock set back past notBefore: the CA, so everything, again.
  const back = reissueNeeded(plain, t - 2 * hour);
  assert.deepEqual(
    back && { scope: back.scope, reason: back.reason, certificate: back.certificate },
    { scope: "ca", reason: "notValidYet", certificate: "CA" },
  );
  assert.equal(back?.window.notBeforeMs, t - hour);
  // Under 90 days left, or past the end.
  for (const at of [t + 300 * day, t + 400 * day]) {
    const late = reissueNeeded(plain, at);
    assert.equal(late?.reason, "expiring");
    assert.equal(late?.scope, "ca");
  }
  assert.equal(reissueNeeded(plain, t + 200 * day), undefined);
  // A server certificate issued later (the clock ahead) from the same CA: only it.
  const ahead = reissueServerCertificate(plain, { now: new Date(t + 3 * hour) });
  const server = reissueNeeded(ahead, t + hour);
  assert.equal(server?.scope, "server");
  assert.equal(server?.certificate, "server");
  assert.equal(server?.reason, "notValidYet");
});
