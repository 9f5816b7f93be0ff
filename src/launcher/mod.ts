/**
 * The launcher, the image's entrypoint: it reads the command line (upstream's Deployment
 * passes `--config`, klog's flags and nothing else) and the environment (in a Pod, the API
 * server's address and the service account), computes the Deno permissions that command line
 * and its configuration need (`resolveCommand`, the same code as `deno task permissions`), and
 * then **replaces itself** (`execve(2)`, {@linkcode execve}) with `deno run <those flags>
 * <program> <the same arguments> --exit-on-new-permissions`. The PID, the signals and the exit
 * status are then the flow aggregator's; nothing of the launcher stays resident.
 *
 * Its own permissions ({@linkcode launcherFlags}): `--allow-read` (the configuration and a
 * kubeconfig are wherever the arguments name them; the service account and the C library are
 * looked for), `--allow-env` of the variables the computation reads, and `--allow-ffi` of the
 * C library's path for `execve`. No net, no write, no subprocess.
 *
 * The API client's subcommands (`get flowrecords`, `get recordmetrics`, `log-level`, `version`:
 * the image's `/usr/local/bin/antctl` runs this launcher with them) run the program with the
 * API's address and the token's directory granted, nothing else ({@linkcode cliPermissions});
 * `set flow-aggregator KEY=VALUE...` (antctl's too) with the Kubernetes API server, the service
 * account or kubeconfig, and the few variables it reads ({@linkcode setPermissions}).
 *
 * A configuration reloaded later that needs more makes the process exit with
 * `EXIT_NEW_PERMISSIONS` (77) after a graceful stop; kubelet restarts the container, and this
 * launcher grants the new permissions.
 *
 *   deno run --allow-read --allow-env=<PROCESS_ENV> --allow-ffi=<libc> src/launcher/mod.ts \
 *     --config /etc/flow-aggregator/flow-aggregator.conf [flags of main.ts]
 *
 * @module
 */

import { dirname, resolve } from "node:path";
import { ANTCTL, CLI_COMMANDS, cliTarget, commandFirst, SET_COMMAND } from "../api/cli.ts";
import { type CliOptions, parseArgs, resolveCommand } from "../cli_options.ts";
import { logger, setLogFormat } from "../log.ts";
import { kubeconfigPath, resolveKubeTarget, serviceAccountLookup } from "../k8s/client.ts";
import type { SetCommandLine } from "../k8s/config_set.ts";
import { permissionEntryProblem } from "../permission_entry.ts";
import {
  kubeGrants,
  permissionFlags,
  type PermissionGrant,
  PROCESS_ENV,
  UNSTABLE_FLAGS,
} from "../permissions.ts";
import { PROGRAM_FILE } from "../worker_module.ts";
import { execve } from "./execve.ts";

const log = logger("launcher");

/** The flag the launcher adds to the program's arguments (main.ts, `CliOptions`). */
export const LAUNCHED_FLAG = "--exit-on-new-permissions";

/**
 * The launcher's own `deno run` permission flags, with `libc` the C library's possible paths
 * (its `execve`): read anything (it reads only the configuration, a kubeconfig, the service
 * account directory's token and the C library's paths), the environment the permission
 * computation reads, FFI of the C library alone.
 */
export function launcherFlags(libc: readonly string[]): string[] {
  return [
    "--allow-read",
    `--allow-env=${[...PROCESS_ENV].sort().join(",")}`,
    `--allow-ffi=${libc.join(",")}`,
  ];
}

/** Where the program is, and what `deno run` needs besides the permissions to run it. */
export interface ProgramLocation {
  /** The Deno runtime (default: this one, `Deno.execPath()`). */
  deno: string;
  /** The program: the build's `flow-aggregator.js`, or `main.ts` of the source tree. */
  program: string;
  /** Flags before the program besides the permissions (the source tree's `--config deno.json`). */
  denoFlags: string[];
}

/**
 * The program beside this module: in the build (`src/launcher/mod.js`), the build's
 * `flow-aggregator.js`; in the source tree, `main.ts` with the repository's deno.json (import
 * map), which a working directory outside the repository would not find.
 */
export function programLocation(here: string = import.meta.url): ProgramLocation {
  const deno = Deno.execPath();
  if (here.endsWith(".ts")) {
    return {
      deno,
      program: new URL("../../main.ts", here).pathname,
      denoFlags: ["--config", new URL("../../deno.json", here).pathname],
    };
  }
  return { deno, program: new URL(`../../${PROGRAM_FILE}`, here).pathname, denoFlags: [] };
}

/**
 * The permissions of an API client command line (`get ...`, `log-level`, `version`): the
 * server's `host:port` (`--server`, default `DEFAULT_SERVER` of src/api/cli.ts) and the directory of the
 * token file (`--token-file`), where the API's CA (`api-ca.crt`) sits too, made absolute from
 * the working directory. None when the command line does not parse or the server is not an
 * http(s) URL, or a value could not be a `deno run` flag's list item (a comma): the program then
 * says what is wrong itself.
 */
export function cliPermissions(args: readonly string[]): string[] {
  const target = cliTarget(args);
  if (target === undefined) return [];
  let url: URL;
  try {
    url = new URL(target.server);
  } catch {
    return [];
  }
  const defaultPort = { "https:": "443", "http:": "80" }[url.protocol];
  if (defaultPort === undefined || url.hostname === "") return [];
  const host = `${url.hostname}:${url.port || defaultPort}`;
  const dir = dirname(resolve(target.tokenFile));
  if (
    permissionEntryProblem("net", host) !== undefined ||
    permissionEntryProblem("read", dir) !== undefined
  ) return [];
  return [`--allow-net=${host}`, `--allow-read=${dir}`];
}

/** Where {@linkcode setPermissions} looks for the API server (tests replace them). */
export interface KubeLookup {
  /** Environment lookup; default the process's. */
  env?: (name: string) => string | undefined;
  /** The service account directory; default the Pod's. */
  serviceAccountDir?: string;
}

/**
 * The permissions of `set flow-aggregator ...` (`args` with the subcommand): the Kubernetes API
 * server and the service account directory or kubeconfig file, found and computed as for the
 * aggregator (`resolveKubeTarget`, `kubeGrants` of src/permissions.ts), and the environment the
 * command reads (`SET_ENV`). None for `-h` or a command line that does not parse (the program
 * says what is wrong); a kubeconfig that cannot be read is granted alone (the program reads it
 * and says why).
 */
export async function setPermissions(
  args: readonly string[],
  lookup: KubeLookup = {},
): Promise<string[]> {
  // Loaded for `set` only: the aggregator's launch (every container start) does not need it.
  const { parseSetArgs, SET_ENV } = await import("../k8s/config_set.ts");
  let cmd: SetCommandLine;
  try {
    cmd = parseSetArgs(args);
  } catch {
    return [];
  }
  if (cmd.help) return [];
  const options = {
    kubeconfig: cmd.kubeconfig,
    env: lookup.env,
    serviceAccountDir: lookup.serviceAccountDir,
    processEnv: PROCESS_ENV,
  };
  let grants: PermissionGrant[];
  try {
    grants = kubeGrants(await resolveKubeTarget(options), serviceAccountLookup(options));
  } catch {
    const path = kubeconfigPath(cmd.kubeconfig, lookup.env);
    grants = path === undefined
      ? []
      : [{ kind: "read", source: "the kubeconfig", value: resolve(path) }];
  }
  const flags = [];
  for (const kind of ["net", "read"] as const) {
    const values = new Set(
      grants.filter((g) => g.kind === kind && permissionEntryProblem(kind, g.value) === undefined)
        .map((g) => g.value),
    );
    if (values.size > 0) flags.push(`--allow-${kind}=${[...values].join(",")}`);
  }
  flags.push(`--allow-env=${[...SET_ENV].sort().join(",")}`);
  return flags;
}

/** What the launcher does with a command line. */
export interface LaunchPlan {
  /** The argument vector to exec (`argv[0]` the runtime). */
  argv: string[];
  /** The permission flags computed for it, when it runs the aggregator. */
  permissions?: string[];
  /** The parsed command line, when it parsed. */
  opts?: CliOptions;
}

/**
 * The command that replaces the launcher for `args`:
 *
 * - the aggregator (the usual case): `deno run <computed permissions> <program> <args>
 *   --exit-on-new-permissions`;
 * - `--help`, `--version` or arguments that do not parse: the program with no permission, which
 *   prints the help, the version or the usage error itself;
 * - `permissions`: the program with `--allow-read --allow-env`, as `deno task permissions`;
 * - the API client's subcommands (`get`, `log-level`, `version`: the image's `antctl`): the
 *   program with {@linkcode cliPermissions}, the API's address and the token's directory;
 * - `set flow-aggregator ...` (antctl's too): the program with {@linkcode setPermissions}.
 *
 * Throws for `clickhouse`, which needs permissions of its own (run the program for it), and
 * when the configuration cannot be read or is invalid (the message is the program's).
 */
export async function launchPlan(
  args: readonly string[],
  where: ProgramLocation = programLocation(),
): Promise<LaunchPlan> {
  const run = (flags: readonly string[], rest: readonly string[] = args): string[] => [
    where.deno,
    "run",
    ...flags,
    ...where.denoFlags,
    where.program,
    ...rest,
  ];
  if (args[0] === ANTCTL) {
    // The image's antctl: its command line, whatever it holds, is never the aggregator's. The
    // program gets it as it came (with the marker) and says what is wrong when no command is.
    const line = commandFirst(args.slice(1));
    const granted = CLI_COMMANDS.includes(line[0])
      ? cliPermissions(line)
      : line[0] === SET_COMMAND
      ? await setPermissions(line)
      : [];
    return { argv: run([...granted, "--no-prompt", ...UNSTABLE_FLAGS]) };
  }
  if (CLI_COMMANDS.includes(args[0])) {
    // No `permissions` in the plan: the launcher logs nothing before a CLI's output. No
    // prompt either (`kubectl exec -it` has a terminal): what is not granted is an error.
    return { argv: run([...cliPermissions(args), "--no-prompt", ...UNSTABLE_FLAGS]) };
  }
  if (args[0] === SET_COMMAND) {
    return { argv: run([...await setPermissions(args), "--no-prompt", ...UNSTABLE_FLAGS]) };
  }
  if (args[0] === "clickhouse") {
    throw new Error(
      `the launcher starts the aggregator; for "${args[0]}" run the program itself: ` +
        `${where.deno} run <flags> ${where.program} ${args[0]} ...`,
    );
  }
  let opts: CliOptions;
  try {
    opts = parseArgs(args);
  } catch {
    return { argv: run(UNSTABLE_FLAGS) };
  }
  if (opts.help || opts.version) return { argv: run(UNSTABLE_FLAGS), opts };
  if (opts.permissions) return { argv: run(["--allow-read", "--allow-env"]), opts };
  const permissions = permissionFlags((await resolveCommand(opts)).permissions);
  const rest = opts.exitOnNewPermissions ? args : [...args, LAUNCHED_FLAG];
  return { argv: run(permissions, rest), permissions, opts };
}

/** Computes the plan for `args` and execs it; returns only by throwing. */
export async function launch(args: readonly string[]): Promise<never> {
  const plan = await launchPlan(args);
  if (plan.opts !== undefined) setLogFormat(plan.opts.logFormat);
  if (plan.permissions !== undefined) {
    log.info("starting the flow aggregator with the permissions its configuration needs", {
      pid: Deno.pid,
      permissions: plan.permissions.join(" "),
    });
  }
  return execve(plan.argv[0], plan.argv);
}

if (import.meta.main) {
  try {
    await launch(Deno.args);
  } catch (err) {
    log.error("Error running flow aggregator: the launcher cannot start it", { err });
    Deno.exit(255);
  }
}
