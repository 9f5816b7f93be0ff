/**
 * An exporter component: everything one sink owns, in its folder `src/exporters/<sink>/`. Its
 * configuration section (types, defaults, validation, reload rule), the Deno permissions its
 * configuration needs, the factory of the sink itself and the worker entry that runs the sink
 * with exactly those permissions. The export loop and the config layer only ever iterate over
 * the registered components (`src/components.ts`); nothing names a sink.
 *
 * @module
 */

import { basename, join, resolve } from "node:path";
import type { ConfigSection, SectionConfig } from "../config/section.ts";
import type { Exporter } from "./exporter.ts";

/**
 * The Deno permissions a sink needs, as allow-lists (empty: denied). They become both the
 * sink's worker permissions and part of the process's `deno run` flags.
 */
export interface ExporterPermissions {
  /** `host:port` the sink connects to. */
  net: string[];
  /** Files or directories it reads. */
  read: string[];
  /** Files or directories it writes. */
  write: string[];
  /** Environment variables it reads. */
  env: string[];
  /**
   * System information: true for a sink that makes HTTPS requests with `node:https` (the
   * ClickHouse and S3 clients), whose agent reads the runtime's root certificates for every
   * connection, which Deno grants only with the bare `--allow-sys` (it knows no narrower
   * grant for them). Absent: none.
   */
  sys?: boolean;
}

/**
 * What an HTTPS client by `node:https` needs besides the host (see
 * {@linkcode ExporterPermissions.sys}): the root certificates, and the variable that says which.
 */
export const HTTPS_CLIENT_PERMISSIONS = { sys: true, env: ["NODE_USE_SYSTEM_CA"] } as const;

/** Process-wide facts a sink is built with (structured-cloneable: they cross to its worker). */
export interface ExporterContext {
  /** `recordContents.podLabels`: records carry `sourcePodLabels` / `destinationPodLabels`. */
  podLabels: boolean;
  /** The cluster UUID (the IPFIX observation domain id derives from it). */
  clusterUuid: string;
}

/** One sink, as registered in `src/components.ts`. */
export interface ExporterComponent<
  K extends string = string,
  C extends SectionConfig = SectionConfig,
> {
  /** Short name in logs and metrics (`ipfix`, `clickhouse`, `s3`, `log`). */
  readonly name: string;
  /** The configuration section the component owns. */
  readonly section: ConfigSection<K, C>;
  /**
   * The permissions the sink needs for `config` (computed, never broader than needed). It reads
   * the environment only through {@linkcode readPermissionEnv}, and only the variables of
   * {@linkcode permissionEnv}.
   */
  permissions(config: C): ExporterPermissions;
  /**
   * The environment variables {@linkcode permissions} reads (the S3 endpoint's). Every process
   * and the launcher may read them: `PROCESS_ENV` (src/permissions.ts) includes them, so the
   * launcher computes what the program it starts computes again at each reload.
   */
  readonly permissionEnv?: readonly string[];
  /**
   * Builds the sink. Absent: this build has no such sink yet; enabling the section is reported
   * as an error and its records are counted as exported without a sink. A sink whose module (or
   * library) is heavy imports it here, so a process or worker that never builds it never loads
   * it; the result is then a promise.
   */
  readonly create?: (config: C, ctx: ExporterContext) => Exporter | Promise<Exporter>;
  /** Module that runs the sink in a permission-scoped worker (`worker.ts` in the folder). */
  readonly workerModule?: URL;
}

/** No permission at all. */
export function noPermissions(): ExporterPermissions {
  return { net: [], read: [], write: [], env: [] };
}

/**
 * Reads an environment variable for a permission computation (a component's
 * {@linkcode ExporterComponent.permissions}). Throws, naming the variable, when this process
 * may not read it: read as unset, it would compute other permissions than a process that may
 * (the launcher would grant what the program it starts finds lacking, a restart loop).
 */
export function readPermissionEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotCapable)) throw err;
    throw new Error(
      `the permission computation reads the environment variable ${name}, which this process ` +
        `may not read (--allow-env=${name}; a component declares it in its permissionEnv)`,
      { cause: err },
    );
  }
}

/**
 * The paths to grant for a directory a sink reads and writes (its files' directory): the
 * directory as given (absolute, normalised), and its real path when a symlink is on the way,
 * which Deno checks a file's operations against too. A directory not there yet (the sink
 * creates it) is resolved through its nearest existing ancestor, so a new directory under a
 * symlinked parent is granted where the sink will create it.
 */
export function directoryGrants(dir: string): string[] {
  const literal = resolve(dir);
  let existing = literal;
  const rest: string[] = [];
  for (;;) {
    try {
      const real = join(Deno.realPathSync(existing), ...rest);
      return real === literal ? [literal] : [literal, real];
    } catch {
      // Not there (or not readable): its parent, up to the root.
      const parent = resolve(existing, "..");
      if (parent === existing) return [literal];
      rest.unshift(basename(existing));
      existing = parent;
    }
  }
}
