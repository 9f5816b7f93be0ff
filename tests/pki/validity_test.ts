import assert from "node:assert/strict";
import { reissueReason, RENEW_BEFORE_MS } from "../../src/pki/validity.ts";

const WINDOW = { notBeforeMs: 1_000_000, notAfterMs: 1_000_000 + 365 * 86_400_000 };

Deno.test("validity: inside the window with more than 90 days left, nothing to do", () => {
  assert.equal(reissueReason(WINDOW, WINDOW.notBeforeMs), undefined);
  assert.equal(reissueReason(WINDOW, WINDOW.notAfterMs - RENEW_BEFORE_MS), undefined);
});

Deno.test("validity: before notBefore is notValidYet (the wall clock set back)", () => {
  assert.equal(reissueReason(WINDOW, WINDOW.notBeforeMs - 1), "notValidYet");
});

Deno.test("validity: under 90 days left, or past notAfter, is expiring", () => {
  assert.equal(reissueReason(WINDOW, WINDOW.notAfterMs - RENEW_BEFORE_MS + 1), "expiring");
  assert.equal(reissueReason(WINDOW, WINDOW.notAfterMs + 1), "expiring");
  assert.equal(reissueReason(WINDOW, WINDOW.notAfterMs - 10, 0), undefined, "a 0 margin");
});
