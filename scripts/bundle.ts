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

/** Bundles the program and its worker entries into `outDir`; returns the files written. */
export async function bundleAll(outDir: string): Promise<string[]> {
  await Deno.mkdir(`${outDir}/workers`, { recursive: true });
  const files = [`${outDir}/flow-aggregator.js`];
  await bundle("main.ts", files[0]);
  for (const [name, rel] of Object.entries(WORKER_ENTRIES)) {
    const file = `${outDir}/workers/${name}.js`;
    await bundle(`src/${rel}`, file);
    files.push(file);
  }
  return files;
}

if (import.meta.main) {
  const arg = Deno.args.find((a) => a.startsWith("--out="));
  const outDir = arg === undefined ? `${REPO}/dist` : arg.slice("--out=".length);
  for (const f of await bundleAll(outDir)) {
    console.log(`${f} ${(await Deno.stat(f)).size} bytes`);
  }
}
