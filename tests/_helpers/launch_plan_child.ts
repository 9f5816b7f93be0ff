/**
 * Prints the launcher's plan for its arguments (`launchPlan` of `src/launcher/mod.ts`) as one
 * JSON line, `{ permissions }` or `{ error }`: run with the launcher's own flags
 * (`launcherFlags`), so that the plan is computed with exactly what the launcher may read.
 */

import { launchPlan } from "../../src/launcher/mod.ts";

try {
  const plan = await launchPlan(Deno.args);
  console.log(JSON.stringify({ permissions: plan.permissions }));
} catch (err) {
  console.log(JSON.stringify({ error: (err as Error).message }));
}
