/**
 * Facts the README states that the code defines: each is checked against its one source, so a
 * change to the code that leaves the README behind fails here.
 */

import assert from "node:assert/strict";
import { USAGE } from "../main.ts";
import { FLOW_FIXED_BYTES } from "../src/aggregation/layout.ts";
import { RUN_FLAGS } from "../src/permissions.ts";

const README = await Deno.readTextFile(new URL("../README.md", import.meta.url));

/** The README's text from the heading `title` to the next heading. */
function section(title: string): string {
  const start = README.indexOf(`\n${title}\n`);
  assert.ok(start >= 0, `README has "${title}"`);
  const end = README.indexOf("\n#", start + title.length + 2);
  return README.slice(start, end < 0 ? undefined : end);
}

Deno.test("README: a flow's fixed charge is FLOW_FIXED_BYTES", () => {
  assert.match(README, new RegExp(`a fixed ${FLOW_FIXED_BYTES} bytes, \`FLOW_FIXED_BYTES\``));
});

Deno.test("README: the image's command for its default configuration has every run flag", () => {
  const at = README.indexOf("    /usr/local/bin/deno run ");
  assert.ok(at >= 0);
  const command = README.slice(at, README.indexOf("\n\n", at));
  for (const flag of RUN_FLAGS) assert.ok(command.includes(flag), flag);
});

Deno.test("README: the command line block names every flag of --help", () => {
  const block = section("### Command line");
  // Deno's own flags (--allow-ffi) are named in the text, not ours.
  const flags = new Set(
    [...USAGE.matchAll(/(?<![\w-])--[a-z][\w-]*/g)].map((m) => m[0]).filter((f) =>
      !f.startsWith("--allow-")
    ),
  );
  assert.ok(flags.size > 20, `${flags.size} flags in --help`);
  const named = [...flags].filter((f) => !new RegExp(`(?<![\\w-])${f}(?![\\w-])`).test(block));
  assert.deepEqual(named, [], "flags of --help the README's command line block lacks");
});
