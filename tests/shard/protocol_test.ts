import assert from "node:assert/strict";
import {
  applyCoreSettings,
  type SettableCore,
  type ShardSettings,
} from "../../src/shard/protocol.ts";

/** A core that records the setters called, with their arguments. */
function recordingCore(): { core: SettableCore; calls: string[] } {
  const calls: string[] = [];
  return {
    calls,
    core: {
      updateTimeouts: (a, i) => void calls.push(`timeouts ${a} ${i}`),
      setIncludePodLabels: (on) => void calls.push(`podLabels ${on}`),
      setMaxFlows: (n) => void calls.push(`maxFlows ${n}`),
      setMaxFlowBytes: (n) => void calls.push(`maxFlowBytes ${n}`),
    },
  };
}

const BASE: ShardSettings = {
  activeTimeoutMs: 60_000,
  inactiveTimeoutMs: 90_000,
  maxFlows: 1000,
  maxFlowBytes: 1 << 20,
  includePodLabels: false,
  maxStringBytes: 256,
};

Deno.test("core settings: without a previous state every setting is applied (a shard's start)", () => {
  const { core, calls } = recordingCore();
  const changes = applyCoreSettings(core, BASE);
  assert.deepEqual(calls, [
    "timeouts 60000 90000",
    "podLabels false",
    "maxFlows 1000",
    "maxFlowBytes 1048576",
  ]);
  assert.equal(changes.length, 4);
});

Deno.test("core settings: a reload applies and reports only what changed", () => {
  const { core, calls } = recordingCore();
  assert.deepEqual(applyCoreSettings(core, { ...BASE, maxStringBytes: 64 }, BASE), []);
  assert.deepEqual(calls, [], "maxStringBytes is the decoders', not the core's");
  const changes = applyCoreSettings(core, { ...BASE, inactiveTimeoutMs: 1000, maxFlows: 5 }, BASE);
  assert.deepEqual(calls, ["timeouts 60000 1000", "maxFlows 5"]);
  assert.deepEqual(changes.map((c) => c.msg), [
    "flow record timeouts updated",
    "maxFlows limit updated",
  ]);
  assert.deepEqual(changes[0].keys, ["activeTimeoutMs", "inactiveTimeoutMs"]);
});
