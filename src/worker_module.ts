/**
 * Where a worker thread's entry module is. Run from source, it is the `.ts` file next to the
 * module that starts the worker. In the single-file build (`deno task bundle`, the image) every
 * module is inlined into `flow-aggregator.js`, so `import.meta.url` is the bundle's for all of
 * them; each worker entry is bundled on its own as `workers/<name>.js` next to it
 * (`scripts/bundle.ts` builds the same list from {@linkcode WORKER_ENTRIES}).
 *
 * @module
 */

/** This module's own location, which tells source (`…/src/worker_module.ts`) from a bundle. */
const HERE = import.meta.url;

/** True when running from the bundle rather than the source tree. */
export const BUNDLED: boolean = !HERE.endsWith("/src/worker_module.ts");

/**
 * Every worker entry module of the product by name, as a path relative to `src/`: the UDP fast
 * path's receiver, the aggregation shard and each sink's worker. The bundle script builds each as `workers/<name>.js`.
 */
export const WORKER_ENTRIES: Readonly<Record<string, string>> = {
  udp_fast: "collector/udp_fast_worker.ts",
  shard: "shard/worker.ts",
  ipfix: "exporters/ipfix/worker.ts",
  flow_log: "exporters/flow_log/worker.ts",
  clickhouse: "exporters/clickhouse/worker.ts",
  s3: "exporters/s3/worker.ts",
};

/**
 * The URL of worker entry `name` (a key of {@linkcode WORKER_ENTRIES}): the source file, or
 * `workers/<name>.js` next to the bundle. Throws for an unknown name, so an entry missing from
 * the list fails at start, not only in the bundle.
 */
export function workerModule(name: string): URL {
  const rel = WORKER_ENTRIES[name];
  if (rel === undefined) throw new Error(`worker module ${name}: not in WORKER_ENTRIES`);
  return BUNDLED ? new URL(`./workers/${name}.js`, HERE) : new URL(`./${rel}`, HERE);
}
