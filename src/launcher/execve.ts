/**
 * `execve(2)` through Deno's FFI: the calling process becomes another program, keeping its PID,
 * its open standard streams and its parent, so signals and the exit status are the new
 * program's own and nothing of the caller stays resident. Linux on x86_64 or aarch64 only (the
 * LP64 pointer size below).
 *
 * Needs `--allow-ffi` for the C library's path only: no pointer API is used (Deno grants
 * `Deno.UnsafePointer` only with the bare flag). The argument vector's addresses come from
 * libc's own `memcpy` (as the UDP fast path reads its buffers' addresses), and the environment
 * passed on is libc's `environ`, read the same way: the new program gets this process's whole
 * environment without this process being allowed to read it (`--allow-env`).
 *
 * @module
 */

import { LIBC_PATHS } from "../collector/udp_fast_ffi.ts";

const SYMBOLS = {
  // envp as a machine word (the value of `environ`, read below), not a Deno pointer object.
  execve: { parameters: ["buffer", "buffer", "usize"], result: "i32" },
  // The address of libc's `environ` variable (a static: Deno gives its address, not its value).
  environ: { type: "pointer" },
  // memcpy(b, b, 0) returns b: the address of a buffer, without Deno.UnsafePointer.
  addressOf: { name: "memcpy", parameters: ["buffer", "buffer", "usize"], result: "usize" },
  // memcpy(out, p, n): n bytes at a pointer libc gave, without a pointer view.
  load: { name: "memcpy", parameters: ["buffer", "pointer", "usize"], result: "pointer" },
  __errno_location: { parameters: [], result: "pointer" },
} as const;

/** Names of the errors execve(2) returns, for the message (`strerror` would need a pointer view). */
const ERRNO: Readonly<Record<number, string>> = {
  1: "EPERM",
  2: "ENOENT (no such file)",
  7: "E2BIG (argument list too long)",
  8: "ENOEXEC (not an executable)",
  12: "ENOMEM",
  13: "EACCES (permission denied)",
  14: "EFAULT",
  20: "ENOTDIR",
  22: "EINVAL",
  26: "ETXTBSY",
  36: "ENAMETOOLONG",
  40: "ELOOP",
};

/**
 * The C library paths this process may load (its `--allow-ffi` grant names them), existing ones
 * first; empty when it may load none.
 */
export function grantedLibcPaths(candidates: readonly string[] = LIBC_PATHS): string[] {
  const granted = candidates.filter((path) =>
    Deno.permissions.querySync({ name: "ffi", path }).state === "granted"
  );
  const exists = (p: string): boolean => {
    try {
      return Deno.statSync(p).isFile;
    } catch {
      return false; // absent, or not readable here: tried last
    }
  };
  return [...granted.filter(exists), ...granted.filter((p) => !exists(p))];
}

function openLibc(): Deno.DynamicLibrary<typeof SYMBOLS> {
  if (
    Deno.build.os !== "linux" || (Deno.build.arch !== "x86_64" && Deno.build.arch !== "aarch64")
  ) {
    throw new Error(
      `execve: only Linux on x86_64 or aarch64 is supported, not ${Deno.build.os}/${Deno.build.arch}`,
    );
  }
  const paths = grantedLibcPaths();
  if (paths.length === 0) {
    throw new Error(
      "execve: this process may not load the C library: start it with --allow-ffi=<path of " +
        `libc> (one of ${LIBC_PATHS.join(", ")})`,
    );
  }
  const errors: string[] = [];
  for (const path of paths) {
    try {
      return Deno.dlopen(path, SYMBOLS);
    } catch (err) {
      errors.push(`${path}: ${(err as Error).message}`);
    }
  }
  throw new Error(`execve: cannot open the C library: ${errors.join("; ")}`);
}

const encoder = new TextEncoder();

/**
 * Replaces this process with `path`, run with `argv` (its `argv[0]` first) and this process's
 * environment. Returns only by throwing: when the C library cannot be loaded or `execve` fails
 * (the message names the file and the error).
 */
export function execve(path: string, argv: readonly string[]): never {
  const lib = openLibc();
  const { symbols } = lib;
  // Every string NUL-terminated in one block, and the table of their addresses, NULL-ended.
  const parts = argv.map((a) => encoder.encode(`${a}\0`));
  const block = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  const table = new BigUint64Array(argv.length + 1);
  const base = BigInt(symbols.addressOf(block, block, 0n));
  let offset = 0;
  parts.forEach((p, i) => {
    block.set(p, offset);
    table[i] = base + BigInt(offset);
    offset += p.length;
  });
  const environ = new BigUint64Array(1);
  symbols.load(new Uint8Array(environ.buffer), symbols.environ, 8n);
  const file = encoder.encode(`${path}\0`);
  symbols.execve(file, new Uint8Array(table.buffer), environ[0]);
  // Still here: it failed. `block` is alive until now (its addresses are in `table`).
  const errno = new Int32Array(1);
  symbols.load(new Uint8Array(errno.buffer), symbols.__errno_location(), 4n);
  const code = errno[0];
  lib.close();
  throw new Error(
    `execve ${path}: ${ERRNO[code] ?? `errno ${code}`} (${block.length} bytes of arguments)`,
  );
}
