/**
 * The runtime image, built here without any registry (issue 16): `FROM scratch` holding the Deno
 * runtime (the binary of the npm `deno` package this repository pins), the glibc libraries it
 * links (what distroless/cc ships), CA certificates, `/etc/passwd` with `nonroot` (65532), no
 * shell and no package manager, and the program as its build (`scripts/bundle.ts`:
 * `/app/flow-aggregator.js`, the launcher and the worker entries under `/app/src/`, the chunks
 * they share). The entrypoint is the launcher (`src/launcher/mod.ts`): it computes the
 * permissions of the arguments and configuration it is given (as `flow-aggregator permissions`
 * does) and execs the program with them, so a Deployment that passes only `args` (Antrea
 * v1.13's) runs whatever its ConfigMap enables.
 *
 * The same {@linkcode imageSpec} generates the registry-based `Containerfile` at the repository
 * root (`--write-containerfile`), so the two builds share user, paths, entrypoint and flags; a
 * test checks the committed file is the generated one.
 *
 *   deno run -A scripts/image.ts [--tag=flow-aggregator:<version>] [--out=dist] [--no-archive]
 *   deno run -A scripts/image.ts --write-containerfile
 *   deno run -A scripts/image.ts --print-antctl-source   # the C source of /usr/local/bin/antctl
 *
 * Output: the local image `<tag>` (buildah's store) and `dist/flow-aggregator.oci.tar`, an OCI
 * archive that `podman load`, `docker load` (via skopeo) and `kind load image-archive` accept.
 *
 * @module
 */

import { fileURLToPath } from "node:url";
import { parseConfig } from "../src/components.ts";
import { EMBEDDED_DEFAULT_CONFIG } from "../src/config/mod.ts";
import { permissionFlags, processPermissions } from "../src/permissions.ts";
import { LIBC_PATHS } from "../src/collector/udp_fast_ffi.ts";
import { launcherFlags } from "../src/launcher/mod.ts";
import { ANTCTL } from "../src/api/cli.ts";
import { bundleAll, bundleLayout, cacheWarmCommands } from "./bundle.ts";
import denoJson from "../deno.json" with { type: "json" };

/** The image's default tag, the one `deploy/flow-aggregator.yml` runs. */
export const IMAGE_TAG = `flow-aggregator:${denoJson.version}`;

const REPO = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");

const APP = "/app";

/** Where things are in the image (upstream's paths for the config and the logs). */
export const IMAGE_PATHS = {
  deno: "/usr/local/bin/deno",
  app: APP,
  program: bundleLayout(APP)[0].file,
  launcher: bundleLayout(APP)[1].file,
  configDir: "/etc/flow-aggregator",
  config: "/etc/flow-aggregator/flow-aggregator.conf",
  logDir: "/var/log/antrea/flow-aggregator",
  tokenDir: "/var/run/antrea/apiserver",
  home: "/home/nonroot",
  antctl: "/usr/local/bin/antctl",
} as const;

/**
 * Where the image's C library may be, the launcher's `--allow-ffi` grant (its `execve`): the
 * Debian multiarch paths of both architectures, so the generated `Containerfile` is the same
 * on either (distroless/cc-debian12 has it there, and the offline build copies the host's
 * Debian/Ubuntu glibc to the same path; `buildContext` checks).
 */
export const IMAGE_LIBC: readonly string[] = LIBC_PATHS.filter((p) =>
  /^\/lib\/(x86_64|aarch64)-linux-gnu\//.test(p)
);

/** The non-root user of distroless images. */
export const NONROOT = 65532;

/**
 * The image's default configuration: the embedded default (TCP collector, the flow log), the
 * flow log under upstream's log directory. In Kubernetes the ConfigMap mounted over
 * `/etc/flow-aggregator` replaces it.
 */
export const IMAGE_CONFIG: string = (() => {
  const from = "path: ./flows.log";
  if (!EMBEDDED_DEFAULT_CONFIG.includes(from)) {
    throw new Error(`image: the embedded default config no longer has "${from}"`);
  }
  return EMBEDDED_DEFAULT_CONFIG.replace(from, `path: ${IMAGE_PATHS.logDir}/flows.log`);
})();

/** What both image builds declare. */
export interface ImageSpec {
  /**
   * Run at build time, in order, as the image's user with its environment: fill Deno's cache
   * (`DENO_DIR`) for the installed program (`cacheWarmCommands` in bundle.ts), then run the
   * launcher with `--version`, which fails the build when it cannot exec.
   */
  warmCache: string[][];
  /** The process: the runtime running the launcher with its own permissions. */
  entrypoint: string[];
  /**
   * The `deno run` flags of the program on the image's default configuration (what the
   * launcher computes for the default command): the single binary's (`scripts/compile.ts`).
   */
  programFlags: string[];
  /** Default arguments (upstream's `--config` path). */
  cmd: string[];
  /** Environment of the process. */
  env: Record<string, string>;
  /** Ports. */
  expose: string[];
}

/** The entrypoint, command and environment of the image. */
export function imageSpec(): ImageSpec {
  const config = parseConfig(IMAGE_CONFIG, { tmpDir: "/tmp" });
  const perms = processPermissions(config, {
    configPath: IMAGE_PATHS.config,
    moduleDir: IMAGE_PATHS.app,
  });
  const flags = permissionFlags(perms);
  const launcher = [IMAGE_PATHS.deno, "run", ...launcherFlags(IMAGE_LIBC), IMAGE_PATHS.launcher];
  return {
    warmCache: [
      ...cacheWarmCommands(IMAGE_PATHS.app, flags).map((a) => [IMAGE_PATHS.deno, ...a]),
      [...launcher, "--version"],
    ],
    entrypoint: launcher,
    programFlags: flags,
    cmd: ["--config", IMAGE_PATHS.config],
    env: {
      HOME: IMAGE_PATHS.home,
      // Deno's own caches (not the program's files: no permission flag covers them).
      DENO_DIR: "/tmp/.deno",
      DENO_NO_UPDATE_CHECK: "1",
    },
    expose: ["4739/tcp", "4739/udp", "10348/tcp"],
  };
}

/** A C string literal of `s`: its UTF-8 bytes, all but printable ASCII as octal escapes. */
export function cStringLiteral(s: string): string {
  let out = '"';
  for (const b of new TextEncoder().encode(s)) {
    if (b === 0x22 || b === 0x5c) out += `\\${String.fromCharCode(b)}`;
    // Not `?` either: `??=` would be a trigraph under -trigraphs.
    else if (b >= 0x20 && b < 0x7f && b !== 0x3f) out += String.fromCharCode(b);
    else out += `\\${b.toString(8).padStart(3, "0")}`;
  }
  return `${out}"`;
}

/** The C compiler's flags for `antctl` (both builds): static, so it needs no C library. */
export const ANTCTL_CFLAGS: readonly string[] = ["-O2", "-static", "-s", "-Wall", "-Werror"];

/**
 * The C source of the image's `antctl` (the image has no shell for a script): it execs the
 * image's entrypoint (the launcher, {@linkcode ImageSpec.entrypoint}) with `antctl` (`ANTCTL`
 * of src/api/cli.ts) and its own arguments, `kubectl exec <pod> -- antctl get flowrecords` as
 * upstream's. The launcher takes that line as an antctl command line whatever follows, never as
 * the aggregator's: the API client's commands get the API's address and the token's directory,
 * `set flow-aggregator KEY=VALUE...` the Kubernetes API server and the service account, anything
 * else no permission at all (the program prints the usage or what is wrong). So the commands,
 * the flags and the usage are the program's alone, not repeated here.
 */
export function antctlSource(spec: ImageSpec): string {
  const list = (items: readonly string[]) =>
    [...items.map((a) => `    ${cStringLiteral(a)},`), "    NULL,"].join("\n");
  return `/* GENERATED by scripts/image.ts (antctlSource) from the image spec: do not edit. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The image's entrypoint (the launcher), then the antctl marker. */
static const char *const ENTRYPOINT[] = {
${list([...spec.entrypoint, ANTCTL])}
};

int main(int argc, char **argv) {
  enum { N = sizeof ENTRYPOINT / sizeof *ENTRYPOINT - 1 };
  char *args[N + argc];
  for (int i = 0; i < N; i++) args[i] = (char *)ENTRYPOINT[i];
  for (int i = 1; i < argc; i++) args[N + i - 1] = argv[i];
  args[N + argc - 1] = NULL;
  execv(args[0], args);
  fprintf(stderr, "antctl: cannot run %s: %s\\n", args[0], strerror(errno));
  return 127;
}
`;
}

/** Compiles {@linkcode antctlSource} with the host's `cc` into `out`. */
export async function compileAntctl(spec: ImageSpec, out: string): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "fa-antctl-" });
  try {
    await Deno.writeTextFile(`${dir}/antctl.c`, antctlSource(spec));
    await run("cc", [...ANTCTL_CFLAGS, "-o", out, `${dir}/antctl.c`]);
    await Deno.chmod(out, 0o755);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function tail(spec: ImageSpec): string[] {
  return [
    `USER ${NONROOT}:${NONROOT}`,
    ...Object.entries(spec.env).map(([k, v]) => `ENV ${k}=${v}`),
    // Exec form: the image has no shell. As the image's user, so the cache stays writable.
    ...spec.warmCache.map((c) => `RUN ${JSON.stringify(c)}`),
    `EXPOSE ${spec.expose.join(" ")}`,
    `ENTRYPOINT ${JSON.stringify(spec.entrypoint)}`,
    `CMD ${JSON.stringify(spec.cmd)}`,
  ];
}

/** The Containerfile of the offline build: the context is the root file system built here. */
export function scratchContainerfile(spec: ImageSpec): string {
  return [
    "FROM scratch",
    "COPY rootfs/ /",
    `COPY --chown=${NONROOT}:${NONROOT} owned/ /`,
    ...tail(spec),
    "",
  ].join("\n");
}

/**
 * The canonical `Containerfile`, for where registries are reachable: the same layout, the Deno
 * runtime and the build (`scripts/bundle.ts`) from the official Deno image, on distroless/cc.
 */
export function registryContainerfile(spec: ImageSpec): string {
  return [
    "# flow-aggregator container image. GENERATED by `deno run -A scripts/image.ts",
    "# --write-containerfile` from the same spec as the offline build (`scripts/image.ts`):",
    "# same user, paths, entrypoint and permission flags. Build: `podman build -t",
    "# flow-aggregator -f Containerfile .` (or docker). A drop-in for antrea/flow-aggregator:",
    "# config at /etc/flow-aggregator/flow-aggregator.conf, ports 4739/tcp+udp and 10348.",
    "FROM docker.io/denoland/deno:debian-2.9.6 AS build",
    "WORKDIR /src",
    "COPY deno.json deno.lock package.json ./",
    "COPY main.ts ./",
    "COPY src ./src",
    "COPY scripts ./scripts",
    `RUN deno install && deno run -A scripts/bundle.ts --out=/out${IMAGE_PATHS.app} && \\`,
    `    mkdir -p /out${IMAGE_PATHS.configDir} /out${IMAGE_PATHS.logDir} /out${IMAGE_PATHS.tokenDir} && \\`,
    `    deno run -A scripts/image.ts --print-config > /out${IMAGE_PATHS.config} && \\`,
    `    deno run -A scripts/image.ts --print-antctl-source > /out/antctl.c`,
    "",
    "# antctl: a static C program (the image has no shell) that execs the entrypoint.",
    "FROM docker.io/denoland/deno:debian-2.9.6 AS antctl",
    "RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && \\",
    "    rm -rf /var/lib/apt/lists/*",
    "COPY --from=build /out/antctl.c /src/antctl.c",
    `RUN cc ${ANTCTL_CFLAGS.join(" ")} -o /src/antctl /src/antctl.c && chmod 0755 /src/antctl`,
    "",
    "FROM gcr.io/distroless/cc-debian12:nonroot",
    `COPY --from=antctl /src/antctl ${IMAGE_PATHS.antctl}`,
    `COPY --from=build /usr/bin/deno ${IMAGE_PATHS.deno}`,
    `COPY --from=build /out${IMAGE_PATHS.app} ${IMAGE_PATHS.app}`,
    `COPY --from=build /out${IMAGE_PATHS.configDir} ${IMAGE_PATHS.configDir}`,
    `COPY --from=build --chown=${NONROOT}:${NONROOT} /out${IMAGE_PATHS.logDir} ${IMAGE_PATHS.logDir}`,
    `COPY --from=build --chown=${NONROOT}:${NONROOT} /out${IMAGE_PATHS.tokenDir} ${IMAGE_PATHS.tokenDir}`,
    ...tail(spec),
    "",
  ].join("\n");
}

/** The shared libraries `binary` links, as absolute paths (glibc, libgcc, the loader). */
async function linkedLibraries(binary: string): Promise<string[]> {
  const out = await new Deno.Command("ldd", { args: [binary], stdout: "piped" }).output();
  if (!out.success) throw new Error(`ldd ${binary} failed`);
  const libs: string[] = [];
  for (const line of new TextDecoder().decode(out.stdout).split("\n")) {
    const m = /(\/\S+) \(0x/.exec(line);
    if (m !== null) libs.push(m[1]);
  }
  return libs;
}

async function copyInto(root: string, path: string, from = path, mode?: number): Promise<void> {
  const to = `${root}${path}`;
  await Deno.mkdir(to.slice(0, to.lastIndexOf("/")), { recursive: true });
  // The file itself, not the symlink: the image has no other copy.
  await Deno.copyFile(await Deno.realPath(from), to);
  if (mode !== undefined) await Deno.chmod(to, mode);
}

async function run(cmd: string, args: string[]): Promise<string> {
  const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) {
    throw new Error(`${cmd} ${args.join(" ")} failed:\n${new TextDecoder().decode(out.stderr)}`);
  }
  return text;
}

/** Writes the build context (`rootfs/`, `owned/`, `Containerfile`) into `ctx`. */
export async function buildContext(ctx: string, spec: ImageSpec): Promise<number> {
  const root = `${ctx}/rootfs`;
  const owned = `${ctx}/owned`;
  const deno = Deno.execPath();
  await copyInto(root, IMAGE_PATHS.deno, deno, 0o755);
  const libs = await linkedLibraries(deno);
  for (const lib of libs) await copyInto(root, lib, lib, 0o755);
  if (!libs.some((lib) => IMAGE_LIBC.includes(lib))) {
    throw new Error(
      `image: the runtime's C library (${libs.join(", ")}) is not at a path the launcher may ` +
        `load (${IMAGE_LIBC.join(", ")}): build on a Debian or Ubuntu host`,
    );
  }
  await compileAntctl(spec, `${root}${IMAGE_PATHS.antctl}`);
  await copyInto(root, "/etc/ssl/certs/ca-certificates.crt");
  await bundleAll(`${root}${IMAGE_PATHS.app}`);
  await Deno.mkdir(`${root}${IMAGE_PATHS.configDir}`, { recursive: true });
  await Deno.writeTextFile(`${root}${IMAGE_PATHS.config}`, IMAGE_CONFIG);
  await Deno.writeTextFile(
    `${root}/etc/passwd`,
    `root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:${NONROOT}:${NONROOT}:nonroot:${IMAGE_PATHS.home}:/sbin/nologin\n`,
  );
  await Deno.writeTextFile(`${root}/etc/group`, `root:x:0:\nnonroot:x:${NONROOT}:\n`);
  await Deno.mkdir(`${root}/tmp`, { recursive: true });
  await Deno.chmod(`${root}/tmp`, 0o1777);
  for (const dir of [IMAGE_PATHS.logDir, IMAGE_PATHS.tokenDir, IMAGE_PATHS.home]) {
    await Deno.mkdir(`${owned}${dir}`, { recursive: true });
  }
  await Deno.writeTextFile(`${ctx}/Containerfile`, scratchContainerfile(spec));
  return await treeBytes(ctx);
}

async function treeBytes(dir: string): Promise<number> {
  let n = 0;
  for await (const e of Deno.readDir(dir)) {
    const p = `${dir}/${e.name}`;
    if (e.isDirectory) n += await treeBytes(p);
    else if (e.isFile) n += (await Deno.stat(p)).size;
  }
  return n;
}

/** Options of {@linkcode buildImage}. */
export interface BuildOptions {
  /** Image tag in buildah's local store. */
  tag: string;
  /** Directory of the OCI archive; undefined: no archive. */
  archiveDir?: string;
}

/** What {@linkcode buildImage} made. */
export interface BuiltImage {
  /** The local tag. */
  tag: string;
  /** Bytes of the image's file system. */
  bytes: number;
  /** The OCI archive, if written. */
  archive?: string;
}

/** Builds the image with `buildah bud --isolation chroot` (no registry, no daemon). */
export async function buildImage(opts: BuildOptions): Promise<BuiltImage> {
  const ctx = await Deno.makeTempDir({ prefix: "fa-image-" });
  try {
    const bytes = await buildContext(ctx, imageSpec());
    await run("buildah", ["bud", "--isolation", "chroot", "--quiet", "-t", opts.tag, ctx]);
    let archive: string | undefined;
    if (opts.archiveDir !== undefined) {
      await Deno.mkdir(opts.archiveDir, { recursive: true });
      archive = `${opts.archiveDir}/flow-aggregator.oci.tar`;
      await Deno.remove(archive).catch(() => {});
      await run("buildah", ["push", "--quiet", opts.tag, `oci-archive:${archive}:${opts.tag}`]);
    }
    return { tag: opts.tag, bytes, archive };
  } finally {
    await Deno.remove(ctx, { recursive: true });
  }
}

if (import.meta.main) {
  const flag = (name: string) =>
    Deno.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  if (Deno.args.includes("--print-config")) {
    console.log(IMAGE_CONFIG);
  } else if (Deno.args.includes("--print-antctl-source")) {
    await Deno.stdout.write(new TextEncoder().encode(antctlSource(imageSpec())));
  } else if (Deno.args.includes("--write-containerfile")) {
    await Deno.writeTextFile(`${REPO}/Containerfile`, registryContainerfile(imageSpec()));
    console.log(`${REPO}/Containerfile written`);
  } else {
    const started = performance.now();
    const img = await buildImage({
      tag: flag("tag") ?? IMAGE_TAG,
      archiveDir: Deno.args.includes("--no-archive") ? undefined : flag("out") ?? `${REPO}/dist`,
    });
    console.log(JSON.stringify({
      ...img,
      megabytes: +(img.bytes / 1e6).toFixed(1),
      buildSeconds: +((performance.now() - started) / 1000).toFixed(1),
    }));
  }
}
