/**
 * `apiServer.tlsCipherSuites` and `apiServer.tlsMinVersion` (control-plane.md §1.4): the names
 * upstream (Go's crypto/tls, through Kubernetes' flag helpers) accepts. An unknown cipher name is
 * fatal at start with upstream's message; an unknown minimum version is reported (upstream
 * silently uses TLS 1.2: limitation L15).
 *
 * @module
 */

/** Every cipher-suite name Go's crypto/tls knows (secure and insecure lists, and aliases). */
export const GO_CIPHER_SUITES: ReadonlySet<string> = new Set([
  "TLS_AES_128_GCM_SHA256",
  "TLS_AES_256_GCM_SHA384",
  "TLS_CHACHA20_POLY1305_SHA256",
  "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
  "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
  "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
  "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
  "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
  "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
  "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
  "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
  "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
  "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
  "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
  "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
  "TLS_RSA_WITH_RC4_128_SHA",
  "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
  "TLS_RSA_WITH_AES_128_CBC_SHA",
  "TLS_RSA_WITH_AES_256_CBC_SHA",
  "TLS_RSA_WITH_AES_128_CBC_SHA256",
  "TLS_RSA_WITH_AES_128_GCM_SHA256",
  "TLS_RSA_WITH_AES_256_GCM_SHA384",
  "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
  "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
  "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
  "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
  "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
]);

/** The minimum versions upstream knows. */
export const TLS_MIN_VERSIONS: readonly string[] = [
  "VersionTLS10",
  "VersionTLS11",
  "VersionTLS12",
  "VersionTLS13",
];

/**
 * The cipher names of `text` (spaces stripped, comma-separated; "" → none: the library's
 * defaults). Throws upstream's start-up error for an unknown name.
 */
export function parseCipherSuites(text: string): string[] {
  const stripped = text.replace(/\s+/g, "");
  if (stripped === "") return [];
  const names = stripped.split(",");
  for (const n of names) {
    if (!GO_CIPHER_SUITES.has(n)) {
      throw new Error(
        `error generating Cipher Suite list: unknown cipher name ${JSON.stringify(n)}`,
      );
    }
  }
  return names;
}

/** Whether `text` is a minimum version upstream knows ("" is the default, TLS 1.2). */
export function knownMinVersion(text: string): boolean {
  return text === "" || TLS_MIN_VERSIONS.includes(text);
}
