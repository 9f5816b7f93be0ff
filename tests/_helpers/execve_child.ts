/**
 * Child of tests/launcher/execve_test.ts: `execve(argv[0], argv)` with this process's
 * permissions; on failure prints the error's message and exits 3.
 */

import { execve } from "../../src/launcher/execve.ts";

try {
  execve(Deno.args[0], Deno.args);
} catch (err) {
  console.error((err as Error).message);
  Deno.exit(3);
}
