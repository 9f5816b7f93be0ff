/**
 * `deno task build`: the single binary (`deno compile`), with the permission flags of the
 * image's default configuration (`scripts/image.ts`) and every worker entry of `src/worker_module.ts`
 * included (a worker module missing from `--include` only fails when that sink starts).
 *
 * `deno compile` needs the Deno runtime of the target (`denort`): it downloads it unless
 * `DENORT_BIN` points to one. Offline, set `DENORT_BIN=/path/to/denort` (the
 * `denort-<target>.zip` of the Deno 2.9.6 release); this script says so when it is missing.
 *
 *   deno run -A scripts/compile.ts [--output=dist/flow-aggregator]
 *
 * @module
 */

import { fileURLToPath } from "node:url";
import { WORKER_ENTRIES } from "../src/worker_module.ts";
import { imageSpec } from "./image.ts";

const REPO = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");

/**
 * The `deno compile` arguments: the flags of the program on the image's default configuration,
 * the worker entries, the output. A compiled binary cannot exec itself with other flags (no
 * launcher): they are fixed when it is built.
 */
export function compileArgs(output: string): string[] {
  const flags = imageSpec().programFlags;
  const includes = Object.values(WORKER_ENTRIES).flatMap((rel) => ["--include", `src/${rel}`]);
  return ["compile", ...flags, ...includes, "--output", output, "main.ts"];
}

if (import.meta.main) {
  const out = Deno.args.find((a) => a.startsWith("--output="))?.slice("--output=".length) ??
    "dist/flow-aggregator";
  const denort = Deno.env.get("DENORT_BIN");
  if (denort !== undefined && !(await Deno.stat(denort).then((s) => s.isFile, () => false))) {
    console.error(`DENORT_BIN=${denort}: no such file (the Deno runtime deno compile embeds)`);
    Deno.exit(1);
  }
  const r = await new Deno.Command(Deno.execPath(), {
    args: compileArgs(out),
    cwd: REPO,
    stdout: "inherit",
    stderr: "inherit",
  }).output();
  if (!r.success) {
    console.error(
      denort === undefined
        ? "deno compile failed. Without network access it cannot download the Deno runtime " +
          "(denort) for the target: set DENORT_BIN to a denort 2.9.6 binary and rerun. " +
          "The image (deno task image) does not need it."
        : `deno compile failed with DENORT_BIN=${denort}`,
    );
    Deno.exit(r.code || 1);
  }
}
