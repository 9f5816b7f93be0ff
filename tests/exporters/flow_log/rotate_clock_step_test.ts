/**
 * Flow log backups under wall-clock steps (src/exporters/flow_log/rotate.ts, `pruneOrder`):
 * pruning follows the order and age this process saw, not the wall-clock time in the names.
 */

import assert from "node:assert/strict";
import { backupTimestamp, RotatingFile } from "../../../src/exporters/flow_log/rotate.ts";
import { setLogWriter } from "../../../src/log.ts";
import { WallStepClock } from "../../_helpers/wall_step_clock.ts";

const DAY = 86_400_000;

/** Log lines written while a test runs (kept off the test's output). */
const logLines: string[] = [];
setLogWriter((l) => logLines.push(l));

/** The lines held by each backup in `dir` (the live file left out), sorted. */
async function backupLines(dir: string): Promise<string[]> {
  const lines: string[] = [];
  for await (const e of Deno.readDir(dir)) {
    if (e.name !== "flows.log") lines.push((await Deno.readTextFile(`${dir}/${e.name}`)).trim());
  }
  return lines.sort();
}

/**
 * A writer of one 8-byte line per 10-byte file over `dir/flows.log`: each `write` after the
 * first rotates, waits for the pruning, then lets a minute pass.
 */
function oneLinePerFile(
  dir: string,
  clock: WallStepClock,
  limits: { maxBackups: number; maxAgeDays: number },
): { file: RotatingFile; write: () => Promise<void> } {
  const file = new RotatingFile(`${dir}/flows.log`, {
    maxSizeBytes: 10,
    compress: false,
    clock,
    ...limits,
  });
  let n = 0;
  return {
    file,
    async write() {
      const r = await file.writeLines([`line-${String(n++).padStart(2, "0")}\n`]);
      assert.equal(r.error, undefined);
      await file.settled();
      clock.advance(60_000);
    },
  };
}

Deno.test("wall clock stepped back 1 h: maxBackups keeps the backups rotated last, not the latest names", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-step-" });
  const clock = new WallStepClock(Date.UTC(2024, 0, 1, 12));
  const { file, write } = oneLinePerFile(dir, clock, { maxBackups: 3, maxAgeDays: 0 });
  try {
    for (let i = 0; i < 5; i++) await write(); // backups of line-01..03 (00 pruned)
    assert.deepEqual(await backupLines(dir), ["line-01", "line-02", "line-03"]);
    clock.stepWall(-3_600_000);
    for (let i = 0; i < 4; i++) await write(); // lines 05..08: backups of 04..07, named 1 h back
    // Before: line-02, 03 (named before the step) and 07 kept; 04, 05 and 06 removed.
    assert.deepEqual(await backupLines(dir), ["line-05", "line-06", "line-07"]);
    assert.equal(await Deno.readTextFile(`${dir}/flows.log`), "line-08\n");
    // Each of the last three prunings removed a backup named after one it kept: counted, logged.
    assert.equal(file.nameConflicts, 6);
    const warned = logLines.filter((l) => l.includes(dir) && l.includes("wall clock stepped"));
    assert.equal(warned.length, 3);
    assert.match(warned[0], /removed=flows-2024-01-01T12-02-00\.000\.log /);
  } finally {
    await file.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("wall clock stepped forward 10 days then back: maxAge goes by the time since rotation", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-step-" });
  const clock = new WallStepClock(Date.UTC(2024, 0, 1, 12));
  const { file, write } = oneLinePerFile(dir, clock, { maxBackups: 0, maxAgeDays: 7 });
  try {
    for (let i = 0; i < 5; i++) await write(); // backups of line-00..03, minutes old
    clock.stepWall(10 * DAY);
    await write(); // a rotation with the clock 10 days ahead
    // Before: every backup was removed, their names 10 days old.
    assert.deepEqual(await backupLines(dir), [
      "line-00",
      "line-01",
      "line-02",
      "line-03",
      "line-04",
    ]);
    clock.stepWall(-10 * DAY); // corrected: line-04's backup is named 10 days in the future
    await write();
    assert.equal((await backupLines(dir)).length, 6);
    // 7 days later (and a little), every backup is past maxAge, the one named in the future too
    // (before, it sorted newest and stayed until 17 days after its rotation).
    clock.advance(7 * DAY);
    await write();
    assert.deepEqual(await backupLines(dir), ["line-06"]);
  } finally {
    await file.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("backups rotated before a live reload keep their place: a new writer on the path knows them", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-step-" });
  const clock = new WallStepClock(Date.UTC(2024, 0, 1, 12));
  const first = oneLinePerFile(dir, clock, { maxBackups: 2, maxAgeDays: 0 });
  try {
    await first.write();
    await first.write();
    clock.stepWall(-3_600_000);
    await first.write(); // line-01's backup, named an hour before line-00's
    await first.file.close();
    const second = new RotatingFile(`${dir}/flows.log`, {
      maxSizeBytes: 10,
      maxBackups: 2,
      maxAgeDays: 0,
      compress: false,
      clock,
    });
    await second.writeLines(["line-03\n"]); // line-02 rotated: line-00's backup is the oldest
    await second.close();
    assert.deepEqual(await backupLines(dir), ["line-01", "line-02"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a backup an earlier process named in the future ages out maxAge after this one found it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-rot-step-" });
  const clock = new WallStepClock(Date.UTC(2024, 0, 1, 12));
  // Left by a process whose clock was 30 days ahead, and one 8 days old by its name.
  const future = `flows-${backupTimestamp(clock.wallMs() + 30 * DAY)}.log`;
  const old = `flows-${backupTimestamp(clock.wallMs() - 8 * DAY)}.log`;
  await Deno.writeTextFile(`${dir}/${future}`, "earlier-future\n");
  await Deno.writeTextFile(`${dir}/${old}`, "earlier-old\n");
  const { file, write } = oneLinePerFile(dir, clock, { maxBackups: 0, maxAgeDays: 7 });
  try {
    await write();
    await write(); // first pruning: the future one found, the 8-day-old one removed
    assert.deepEqual(await backupLines(dir), ["earlier-future", "line-00"]);
    clock.advance(7 * DAY);
    await write();
    assert.deepEqual(await backupLines(dir), ["line-01"]);
  } finally {
    await file.close();
    await Deno.remove(dir, { recursive: true });
  }
});
