/**
 * execve(2) through FFI scoped to the C library: the process becomes the new program (same PID,
 * the environment passed on although the caller may not read it, the exit status the new
 * program's); without the FFI grant, or for a file that is not there, a clear error.
 */

import assert from "node:assert/strict";
import { libcPath } from "../../src/collector/udp_fast_ffi.ts";
import { grantedLibcPaths } from "../../src/launcher/execve.ts";

const LIBC = libcPath() ?? "/lib/x86_64-linux-gnu/libc.so.6";
const CHILD = new URL("../_helpers/execve_child.ts", import.meta.url).pathname;

async function runChild(
  flags: string[],
  argv: string[],
): Promise<{ pid: number; code: number; stdout: string; stderr: string }> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", ...flags, CHILD, ...argv],
    env: { FA_EXECVE_TEST: "passed-on", NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const out = await child.output();
  const dec = new TextDecoder();
  return {
    pid: child.pid,
    code: out.code,
    stdout: dec.decode(out.stdout),
    stderr: dec.decode(out.stderr),
  };
}

const SHOW = "console.log(JSON.stringify({ pid: Deno.pid, env: Deno.env.get('FA_EXECVE_TEST'), " +
  "args: Deno.args })); Deno.exit(42)";

Deno.test("execve: the process becomes the program: same PID, environment passed on, its exit status", async () => {
  const libc = libcPath();
  assert.ok(libc !== undefined, "a C library on this host");
  // No --allow-env: the environment reaches the new program through libc's environ.
  const r = await runChild([`--allow-ffi=${libc}`], [Deno.execPath(), "eval", SHOW, "a b", ""]);
  assert.equal(r.code, 42, r.stderr);
  const shown = JSON.parse(r.stdout);
  assert.equal(shown.pid, r.pid, "exec keeps the PID: no second process");
  assert.equal(shown.env, "passed-on");
  // Arguments arrive exactly (a space inside one, an empty one).
  assert.deepEqual(shown.args, ["a b", ""]);
});

Deno.test("execve: without --allow-ffi for the C library it fails saying which flag it needs", async () => {
  const r = await runChild([], [Deno.execPath(), "eval", SHOW]);
  assert.equal(r.code, 3);
  assert.match(r.stderr, /may not load the C library: start it with --allow-ffi=<path of libc>/);
});

Deno.test("execve: a program that is not there fails with ENOENT and its path", async () => {
  const r = await runChild([`--allow-ffi=${libcPath()}`], ["/nonexistent/deno", "run", "x.ts"]);
  assert.equal(r.code, 3);
  assert.match(r.stderr, /^execve \/nonexistent\/deno: ENOENT/);
});

Deno.test({
  name: "execve: the C library paths granted, existing ones first",
  permissions: { ffi: [LIBC, "/nonexistent/libc.so.6"], read: true },
  fn() {
    assert.deepEqual(
      grantedLibcPaths(["/nonexistent/libc.so.6", LIBC, "/x/libc"]),
      [LIBC, "/nonexistent/libc.so.6"],
    );
  },
});
