/**
 * Runs a configuration parse or a `set` edit in a worker, so that a test can give up on one that
 * never ends (an alias bomb, a quadratic parse) instead of hanging with it: the worker is
 * terminated at the guard.
 */

/** What the worker did. */
export type WorkerOutcome =
  | { ok: true; ms: number; result: string }
  | { ok: false; ms: number; name: string; message: string }
  | "timeout";

/** A request to the worker. */
export interface WorkerRequest {
  /** `edit`: editConfig(text, args); `parse`: parseConfig(text), its warnings counted. */
  op: "edit" | "parse";
  text: string;
  args?: string[];
}

/** Runs `req` in a worker; "timeout" when it has not answered after `guardMs` (wall clock). */
export async function inWorker(req: WorkerRequest, guardMs: number): Promise<WorkerOutcome> {
  const worker = new Worker(new URL("./config_worker_child.ts", import.meta.url), {
    type: "module",
  });
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await new Promise<WorkerOutcome>((resolve, reject) => {
      timer = setTimeout(() => resolve("timeout"), guardMs);
      worker.onmessage = (e) => resolve(e.data as WorkerOutcome);
      worker.onerror = (e) => {
        e.preventDefault();
        reject(new Error(e.message));
      };
      worker.postMessage(req);
    });
  } finally {
    clearTimeout(timer);
    worker.terminate();
  }
}
