/**
 * Child process of the heap benchmark (a fresh isolate per size, so earlier parts of the run
 * do not pollute the heap): prints {"bytesPerFlow":..,"flows":..} for N flows.
 *
 *   deno run --v8-flags=--expose-gc scripts/bench/heap.ts <flows>
 */

import { measureHeapPerFlow } from "./core.ts";

const flows = Number(Deno.args[0] ?? 100_000);
console.log(JSON.stringify(measureHeapPerFlow(flows)));
