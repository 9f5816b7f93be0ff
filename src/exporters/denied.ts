/**
 * Permission denials a sink caught itself (a write, a connect, a request that failed with
 * `NotCapable` and was handled as any failure of its kind): counted here, per thread, so that a
 * sink's worker reports them in `permissionDenied` next to those that escaped the sink (see
 * `worker_host.ts`). Each sink calls {@linkcode noteDenied} on the errors it handles.
 *
 * @module
 */

let denied = 0;

/** A message of Deno's permission check (also once an error was turned into text). */
const DENIED_TEXT = /Requires \S+ access to /;

/** Whether `err` (or what caused it) is a permission denial. */
export function isDenied(err: unknown): boolean {
  for (let e = err, depth = 0; e !== undefined && e !== null && depth < 5; depth++) {
    if (typeof e === "string") return DENIED_TEXT.test(e);
    if (e instanceof Error) {
      if (e.name === "NotCapable" || DENIED_TEXT.test(e.message)) return true;
      e = e.cause;
    } else return false;
  }
  return false;
}

/** Counts `err` when it is a permission denial; returns whether it was. */
export function noteDenied(err: unknown): boolean {
  if (!isDenied(err)) return false;
  denied++;
  return true;
}

/** Denials counted by {@linkcode noteDenied} in this thread. */
export function deniedCount(): number {
  return denied;
}
