/**
 * Where a worker thread's entry module is. Run from source, it is the `.ts` file next to the
 * module that starts the worker. In the build (`deno task bundle`, the image: `deno bundle
 * --code-splitting` of the program and every worker entry at once) each entry keeps its path
 * with a `.js` extension (`src/shard/worker.js`) and the modules they share are chunks at the
 * build's root, beside the program; this module is one of them (`scripts/bundle.ts` checks), so
 * `import.meta.url` is a root file's and the entries resolve from it.
 *
 * @module
 */

/** This module's own location, which tells source (`…/src/worker_module.ts`) from a bundle. */
const HERE = import.meta.url;

/** True when running from the bundle rather than the source tree. */
export const BUNDLED: boolean = !HERE.endsWith("/src/worker_module.ts");

/**
 * Every worker entry module of the product by name, as a path relative to `src/`: the UDP fast
 * path's receiver, the aggregation shard and each sink's worker. The build puts each at
 * {@linkcode bundledEntryPath}.
 */
export const WORKER_ENTRIES: Readonly<Record<string, string>> = {
  udp_fast: "collector/udp_fast_worker.ts",
  shard: "shard/worker.ts",
  ipfix: "exporters/ipfix/worker.ts",
  flow_log: "exporters/flow_log/worker.ts",
  clickhouse: "exporters/clickhouse/worker.ts",
  s3: "exporters/s3/worker.ts",
};

/** The program's file at the build's root (`deno bundle` names it `main.js`; renamed). */
export const PROGRAM_FILE = "flow-aggregator.js";

/**
 * The launcher (`src/launcher/mod.ts`, the image's entrypoint), relative to `src/`: an entry of
 * the build beside the program, at its {@linkcode bundledEntryPath}.
 */
export const LAUNCHER_ENTRY = "launcher/mod.ts";

/** Where the build puts the entry `src/<rel>`, relative to its root: `src/<rel>` as `.js`. */
export function bundledEntryPath(rel: string): string {
  return `src/${rel.replace(/\.ts$/, ".js")}`;
}

/**
 * The URL of worker entry `name` (a key of {@linkcode WORKER_ENTRIES}): the source file, or its
 * {@linkcode bundledEntryPath} under the build's root. Throws for an unknown name, so an entry
 * missing from the list fails at start, not only in the bundle.
 */
export function workerModule(name: string): URL {
  const rel = WORKER_ENTRIES[name];
  if (rel === undefined) throw new Error(`worker module ${name}: not in WORKER_ENTRIES`);
  return new URL(BUNDLED ? `./${bundledEntryPath(rel)}` : `./${rel}`, HERE);
}
