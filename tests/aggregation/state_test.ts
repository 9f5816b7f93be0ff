import assert from "node:assert/strict";
import { ManualClock } from "../../src/clock.ts";
import { checkTimeouts, CoreState } from "../../src/aggregation/state.ts";

Deno.test("CoreState applies the option defaults", () => {
  const s = new CoreState({ activeTimeoutMs: 5, inactiveTimeoutMs: 7, clock: new ManualClock() });
  assert.equal(s.maxRetries, 2);
  assert.equal(s.maxFlows, Infinity);
  assert.equal(s.maxFlowBytes, Infinity);
  assert.equal(s.heldBytes(), 0);
  assert.equal(s.minExpiryMs, 100);
  assert.equal(s.dropUncorrelated, false);
  assert.equal(s.includePodLabels, false);
});

Deno.test("checkTimeouts names the bad timeout", () => {
  assert.throws(() => checkTimeouts(0, 1), /activeTimeoutMs 0/);
  assert.throws(() => checkTimeouts(1, Infinity), /inactiveTimeoutMs Infinity/);
  checkTimeouts(1, 1);
});

Deno.test("CoreState.reject counts the reason and returns false", () => {
  const s = new CoreState({ activeTimeoutMs: 5, inactiveTimeoutMs: 7, clock: new ManualClock() });
  assert.equal(s.reject("badAddress", "test rejection"), false);
  assert.equal(s.counters.rejected.badAddress, 1);
});
