import assert from "node:assert/strict";
import { COMPONENTS } from "../src/components.ts";
import { UDP_FAST_WORKER_MODULE } from "../src/collector/mod.ts";
import { BUNDLED, WORKER_ENTRIES, workerModule } from "../src/worker_module.ts";

Deno.test("worker modules: every entry exists in the source tree, and every sink's is listed", () => {
  assert.equal(BUNDLED, false);
  for (const name of Object.keys(WORKER_ENTRIES)) {
    assert.ok(Deno.statSync(workerModule(name)).isFile, name);
  }
  const listed = new Set(Object.keys(WORKER_ENTRIES).map((n) => workerModule(n).href));
  for (const c of COMPONENTS) {
    if (c.workerModule !== undefined) assert.ok(listed.has(c.workerModule.href), c.name);
  }
  assert.ok(listed.has(UDP_FAST_WORKER_MODULE.href));
  assert.throws(() => workerModule("nope"), /worker module nope: not in WORKER_ENTRIES/);
});
