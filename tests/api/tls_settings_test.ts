import assert from "node:assert/strict";
import { knownMinVersion, parseCipherSuites } from "../../src/api/tls_settings.ts";

Deno.test("api tls: cipher names are Go's, spaces stripped; an unknown one is upstream's error", () => {
  assert.deepEqual(parseCipherSuites(""), []);
  assert.deepEqual(
    parseCipherSuites(" TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 , TLS_AES_128_GCM_SHA256"),
    ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"],
  );
  assert.throws(
    () => parseCipherSuites("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,ECDHE-RSA-AES128-GCM-SHA256"),
    /^Error: error generating Cipher Suite list: unknown cipher name "ECDHE-RSA-AES128-GCM-SHA256"$/,
  );
  assert.equal(knownMinVersion(""), true);
  assert.equal(knownMinVersion("VersionTLS13"), true);
  assert.equal(knownMinVersion("VersionTLS1.3"), false);
});
