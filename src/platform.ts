/**
 * `<os>/<arch>` in Go's names (`linux/amd64`, `linux/arm64`), as upstream's `/version`,
 * `--version` and klog file headers print it and as nodes' `kubernetes.io/arch` labels say it
 * (Deno says `x86_64`).
 *
 * @module
 */

/** This process's platform in Go's names. */
export const PLATFORM = `${Deno.build.os}/${
  ({ x86_64: "amd64", aarch64: "arm64" } as Record<string, string>)[Deno.build.arch] ??
    Deno.build.arch
}`;
