/**
 * The single-file build: `main.ts` bundled into `<out>/flow-aggregator.js`, and each worker
 * entry of `src/worker_module.ts` bundled on its own into `<out>/workers/<name>.js`, where the
 * bundled program looks for it, so the sinks keep running in their permission-scoped workers.
 * The result runs outside the repository (no deno.json, no node_modules):
 *
 *   deno run -A scripts/bundle.ts [--out=dist]
 *   deno run --unstable-net --unstable-worker-options <permission flags> dist/flow-aggregator.js
 *
 * @module
 */

import { fileURLToPath } from "node:url";
import { WORKER_ENTRIES } from "../src/worker_module.ts";

const REPO = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");

async function bundle(entry: string, output: string): Promise<void> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["bundle", "--quiet", "--minify", "--output", output, entry],
    cwd: REPO,
    stdout: "inherit",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(`deno bundle ${entry} failed:\n${new TextDecoder().decode(out.stderr)}`);
  }
}

/**
 * Where the build puts each file under `outDir`, with the source it bundles: the program first,
 * then each worker entry of `src/worker_module.ts`.
 */
export function bundleLayout(outDir: string): { file: string; entry: string }[] {
  return [
    { file: `${outDir}/flow-aggregator.js`, entry: "main.ts" },
    ...Object.entries(WORKER_ENTRIES).map(([name, rel]) => ({
      file: `${outDir}/workers/${name}.js`,
      entry: `src/${rel}`,
    })),
  ];
}

/** Bundles the program and its worker entries into `outDir`; returns the files written. */
export async function bundleAll(outDir: string): Promise<string[]> {
  await Deno.mkdir(`${outDir}/workers`, { recursive: true });
  const layout = bundleLayout(outDir);
  for (const { file, entry } of layout) await bundle(entry, file);
  return layout.map((l) => l.file);
}

/**
 * The `deno` commands (arguments) that fill Deno's cache (`DENO_DIR`) for the build installed in
 * `appDir`, whose program later runs with `runFlags` (its permission and unstable flags): the
 * module analysis of every file (`deno cache`), then the program's compiled code (a run of
 * `--version`, which lets the module finish so Deno stores it). Without them each start parses
 * the whole program (5.7 MB of JavaScript) to find its imports and compiles it cold, and keeps
 * what that allocates: in the benchmark run of `c449a8b`, the idle process was 303 MB from an
 * empty cache against 133 MB from one filled so (`deno task bench`: `rss_bytes_idle_bundle`). The image runs them
 * at build time, where the files are installed (the cache is keyed by path).
 */
export function cacheWarmCommands(appDir: string, runFlags: readonly string[]): string[][] {
  const layout = bundleLayout(appDir);
  return [
    ["cache", ...layout.map((l) => l.file)],
    ["run", ...runFlags, layout[0].file, "--version"],
  ];
}

if (import.meta.main) {
  const arg = Deno.args.find((a) => a.startsWith("--out="));
  const outDir = arg === undefined ? `${REPO}/dist` : arg.slice("--out=".length);
  for (const f of await bundleAll(outDir)) {
    console.log(`${f} ${(await Deno.stat(f)).size} bytes`);
  }
}
