/**
 * The build: `deno bundle --code-splitting` of `main.ts` and every worker entry of
 * `src/worker_module.ts` at once, into `<out>/`: the program as `flow-aggregator.js`, each
 * worker entry at its `bundledEntryPath` (`src/shard/worker.js`, ...), and the modules they
 * share as chunks beside the program. What the program imports only when a feature is enabled
 * (the ClickHouse, S3 and Kubernetes clients, mutual TLS, certificate generation) stays in its
 * own chunk and is read and compiled only then; a single file held all of it (5.7 MB of
 * JavaScript) in every start. The result runs outside the repository (no deno.json, no
 * node_modules):
 *
 *   deno run -A scripts/bundle.ts [--out=dist]
 *   deno run --unstable-net --unstable-worker-options <permission flags> dist/flow-aggregator.js
 *
 * @module
 */

import { fileURLToPath } from "node:url";
import {
  bundledEntryPath,
  LAUNCHER_ENTRY,
  PROGRAM_FILE as PROGRAM,
  WORKER_ENTRIES,
} from "../src/worker_module.ts";

const REPO = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");

/**
 * A string only `src/worker_module.ts` holds: the build checks that module landed in a chunk at
 * the root, where `workerModule` resolves the entries from (a module only one worker entry used
 * would be inlined into that entry, under `src/`).
 */
const WORKER_MODULE_MARK = "not in WORKER_ENTRIES";

/**
 * Where the build puts each file under `outDir`, with the source it comes from: the program
 * first, the launcher (the image's entrypoint, `src/launcher/mod.js`) second, then each worker
 * entry of `src/worker_module.ts`.
 */
export function bundleLayout(outDir: string): { file: string; entry: string }[] {
  return [
    { file: `${outDir}/${PROGRAM}`, entry: "main.ts" },
    ...[LAUNCHER_ENTRY, ...Object.values(WORKER_ENTRIES)].map((rel) => ({
      file: `${outDir}/${bundledEntryPath(rel)}`,
      entry: `src/${rel}`,
    })),
  ];
}

/**
 * Builds into `outDir` (a previous build there is replaced); returns the entry files written
 * (program first). Throws when `deno bundle` fails or the layout is not the one the program
 * expects.
 */
export async function bundleAll(outDir: string): Promise<string[]> {
  await clearPreviousBuild(outDir);
  const layout = bundleLayout(outDir);
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "bundle",
      "--quiet",
      "--minify",
      "--code-splitting",
      "--outdir",
      outDir,
      ...layout.map((l) => l.entry),
    ],
    cwd: REPO,
    stdout: "inherit",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(`deno bundle failed:\n${new TextDecoder().decode(out.stderr)}`);
  }
  await Deno.rename(`${outDir}/main.js`, layout[0].file);
  for (const { file } of layout) {
    await Deno.stat(file).catch(() => {
      throw new Error(`bundle: ${file} was not written (deno bundle's output layout changed?)`);
    });
  }
  let marked = false;
  for await (const e of Deno.readDir(outDir)) {
    if (!e.isFile || !e.name.endsWith(".js")) continue;
    if ((await Deno.readTextFile(`${outDir}/${e.name}`)).includes(WORKER_MODULE_MARK)) {
      marked = true;
    }
  }
  if (!marked) {
    throw new Error(
      "bundle: src/worker_module.ts is not in a file at the build's root, where workerModule() " +
        "resolves the worker entries from",
    );
  }
  return layout.map((l) => l.file);
}

/**
 * Removes a previous build from `outDir` (one holding the program): its root-level `.js` files
 * (program, chunks), its entries (`src/`) and the former layout's `workers/`. Anything else in
 * the directory (an image archive) stays.
 */
async function clearPreviousBuild(outDir: string): Promise<void> {
  try {
    await Deno.stat(`${outDir}/${PROGRAM}`);
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return;
    throw e;
  }
  for await (const e of Deno.readDir(outDir)) {
    if (e.isFile && e.name.endsWith(".js")) await Deno.remove(`${outDir}/${e.name}`);
  }
  for (const dir of ["src", "workers"]) {
    await Deno.remove(`${outDir}/${dir}`, { recursive: true }).catch((e) => {
      if (!(e instanceof Deno.errors.NotFound)) throw e;
    });
  }
}

/**
 * The `deno` commands (arguments) that fill Deno's cache (`DENO_DIR`) for the build installed in
 * `appDir`, whose program later runs with `runFlags` (its permission and unstable flags): the
 * module analysis of every entry and what it imports (`deno cache`), then the program's compiled
 * code (a run of `--version`, which lets the module finish so Deno stores it). Without them each
 * start parses what it loads to find its imports and compiles it cold, and keeps what that
 * allocates: in the benchmark run of `c449a8b` (one 5.7 MB file then), the idle process was
 * 303 MB from an empty cache against 133 MB from one filled so (`deno task bench`:
 * `rss_bytes_idle_bundle`); with the chunks, 267 MB against 125 MB (A/B, 2026-12-05). The image
 * runs them at build time, where the files are installed (the cache is keyed by path).
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
