/**
 * Sets process environment variables for the length of `body`, holding an exclusive file lock
 * meanwhile. `deno test --parallel` runs test files in one process, whose environment they
 * share: two ClickHouse worker tests each set CH_USERNAME / CH_PASSWORD for their sink's worker
 * (which reads them as in a Pod), and one's values reached the other's worker (its inserts then
 * refused: a full run's failure). The lock is taken through its own open file, so two test
 * files of one process wait for each other.
 */

const LOCK_PATH = "/tmp/flow-aggregator-tests-env.lock";

/** Runs `body` with `vars` set in the process environment, restored after. */
export async function withProcessEnv<T>(
  vars: Record<string, string>,
  body: () => Promise<T>,
): Promise<T> {
  const lock = await Deno.open(LOCK_PATH, { create: true, write: true });
  await lock.lock(true);
  const before = Object.fromEntries(Object.keys(vars).map((k) => [k, Deno.env.get(k)]));
  try {
    for (const [k, v] of Object.entries(vars)) Deno.env.set(k, v);
    return await body();
  } finally {
    for (const [k, v] of Object.entries(before)) {
      if (v === undefined) Deno.env.delete(k);
      else Deno.env.set(k, v);
    }
    await lock.unlock();
    lock.close();
  }
}
