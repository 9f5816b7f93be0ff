/** The worker of config_worker.ts: one parse or edit, timed, its outcome posted back. */

import { parseConfig } from "../../src/components.ts";
import { editConfig, parseAssignment } from "../../src/k8s/config_set.ts";
import type { WorkerRequest } from "./config_worker.ts";

const scope = globalThis as unknown as {
  postMessage(message: unknown): void;
  onmessage: ((e: MessageEvent<WorkerRequest>) => void) | null;
};

scope.onmessage = (e) => {
  const { op, text, args = [] } = e.data;
  const t0 = performance.now();
  try {
    let result: string;
    if (op === "edit") result = editConfig(text, args.map(parseAssignment));
    else {
      let warnings = 0;
      parseConfig(text, { onWarning: () => void warnings++ });
      result = String(warnings);
    }
    scope.postMessage({ ok: true, ms: performance.now() - t0, result });
  } catch (err) {
    const { name, message } = err as Error;
    scope.postMessage({ ok: false, ms: performance.now() - t0, name, message });
  }
};
