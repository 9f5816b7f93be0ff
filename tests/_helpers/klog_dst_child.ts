/**
 * Run by tests/log/klog_files_test.ts with `TZ=America/New_York` (the time zone is the
 * process's): writes five klog files into the directory of its argument, one line each, ten
 * minutes apart from 01:40 EDT on 2024-11-03, across that night's fall-back to EST, keeping 3;
 * prints the time stamps of the names as JSON.
 */

import { KlogFiles, klogFileStamp } from "../../src/log/mod.ts";
import { WallStepClock } from "./wall_step_clock.ts";

const clock = new WallStepClock(Date.UTC(2024, 10, 3, 5, 40)); // 01:40 EDT
const files = new KlogFiles({
  dir: Deno.args[0],
  host: "node-1",
  user: "alice",
  pid: 4242,
  maxSizeBytes: 600,
  maxFiles: 3,
  clock,
});
const stamps: string[] = [];
for (let i = 0; i < 5; i++) {
  stamps.push(klogFileStamp(new Date(clock.wallMs())));
  files.write(`line-${String(i).padStart(2, "0")} ${"x".repeat(300)}`, "info");
  files.flush();
  clock.advance(10 * 60_000);
}
files.close();
console.log(JSON.stringify({ stamps }));
