/**
 * The one launcher of real Deno processes in the tests: the flow-aggregator itself
 * (`deno run main.ts` or a bundled script), followed through its structured stderr log (every
 * line parsed, logfmt or JSON, into a {@linkcode LogEvent}, so tests wait for events with a
 * deadline instead of sleeping), and other Deno commands (scripts, `deno bundle`, `deno eval`)
 * run to completion with {@linkcode runDeno}.
 */

import { V8_FLAGS } from "../../src/permissions.ts";

/** Root of the repository (ends with `/`). */
export const REPO: string = new URL("../../", import.meta.url).pathname;
/** `main.ts` of the repository. */
export const MAIN_TS: string = `${REPO}main.ts`;
/** `deno.json` of the repository (import map, `unstable: ["net"]`). */
export const DENO_JSON: string = `${REPO}deno.json`;
/** The launcher (`src/launcher/mod.ts`), the image's entrypoint, from the source tree. */
export const LAUNCHER_TS: string = `${REPO}src/launcher/mod.ts`;
/**
 * The `deno run` flags {@linkcode FaProcess.start} uses unless told otherwise: every permission,
 * the repository's configuration and V8's settings as shipped (`V8_FLAGS`).
 */
export const DEFAULT_DENO_FLAGS: readonly string[] = [
  "--allow-all",
  "--config",
  DENO_JSON,
  ...V8_FLAGS,
];

/** One structured log event of the process (logfmt or JSON line), plus the raw line. */
export interface LogEvent {
  /** The raw line. */
  readonly raw: string;
  /** Parsed fields (`level`, `component`, `msg`, ...); empty when the line is not structured. */
  readonly fields: Readonly<Record<string, string>>;
}

/**
 * klog's text line (`--log-format klog`), as operators' parsers match it: severity letter, MMDD,
 * time, pid, `file:line]`, the quoted message (group 7) and the key/values (group 8).
 */
export const KLOG_LINE =
  /^([IWEF])(\d{4}) (\d{2}:\d{2}:\d{2}\.\d{6}) +(\d+) ([^\s:]+):(\d+)\] "((?:[^"\\]|\\.)*)"(.*)$/;

const KLOG_LEVELS: Readonly<Record<string, string>> = { I: "info", W: "warn", E: "error" };

/** Parses one logfmt line (`k=v k2="quoted \"v\""`), JSON object line or klog line. */
export function parseLogLine(line: string): LogEvent {
  const fields: Record<string, string> = {};
  const t = line.trim();
  const klog = KLOG_LINE.exec(t);
  if (klog) {
    fields.level = KLOG_LEVELS[klog[1]] ?? klog[1];
    fields.component = klog[5];
    fields.msg = JSON.parse(`"${klog[7]}"`) as string;
    Object.assign(fields, parseLogLine(klog[8]).fields);
    return { raw: line, fields };
  }
  if (t.startsWith("{")) {
    try {
      for (const [k, v] of Object.entries(JSON.parse(t) as Record<string, unknown>)) {
        fields[k] = typeof v === "string" ? v : JSON.stringify(v);
      }
    } catch {
      // not JSON after all: no fields
    }
    return { raw: line, fields };
  }
  const re = /([A-Za-z_][A-Za-z0-9_.-]*)=("(?:[^"\\]|\\.)*"|\S*)/g;
  for (const m of t.matchAll(re)) {
    fields[m[1]] = m[2].startsWith('"') ? JSON.parse(m[2]) as string : m[2];
  }
  return { raw: line, fields };
}

/**
 * The API flags the helper adds to a process unless its test sets `--api-listen`: a free
 * loopback port and a token file in `dir`.
 */
export function apiArgs(dir: string): string[] {
  return ["--api-listen", "127.0.0.1:0", "--api-token-file", `${dir}/token`];
}

/** How to start the process. */
export interface StartOptions {
  /** Arguments after the script (flags of main.ts). */
  args?: readonly string[];
  /** Script to run; default {@linkcode MAIN_TS}. */
  script?: string;
  /** Deno permission and config flags before the script; default `--allow-all --config deno.json`. */
  denoFlags?: readonly string[];
  /** Working directory; default the current one. */
  cwd?: string;
  /** Extra environment. HOME is pointed at `cwd` (no kubeconfig) unless given. */
  env?: Record<string, string>;
}

/** How to start the process on a configuration file of its own (see {@linkcode FaProcess.startWithConfig}). */
export interface ConfigStartOptions extends StartOptions {
  /** Collector address for `--listen`; default `127.0.0.1:0` (a free port). */
  listen?: string;
}

/** Options of {@linkcode flowLogConfig}. */
export interface FlowLogConfigOptions {
  /** `aggregatorTransportProtocol`; default TCP. */
  transport?: "TCP" | "UDP" | "TLS";
  /** `activeFlowRecordTimeout`; default `1s`. */
  activeTimeout?: string;
  /** `inactiveFlowRecordTimeout`; default `2s`. */
  inactiveTimeout?: string;
  /** `flowLogger.prettyPrint`; left out (the default, true) unless given. */
  prettyPrint?: boolean;
}

/** The configuration file of a process whose only sink is the flow log at `path`. */
export function flowLogConfig(path: string, options: FlowLogConfigOptions = {}): string {
  const { transport = "TCP", activeTimeout = "1s", inactiveTimeout = "2s" } = options;
  return `activeFlowRecordTimeout: ${activeTimeout}
inactiveFlowRecordTimeout: ${inactiveTimeout}
aggregatorTransportProtocol: ${transport}
flowLogger:
  enable: true
  path: ${path}
` + (options.prettyPrint === undefined ? "" : `  prettyPrint: ${options.prettyPrint}\n`);
}

/** Predicate on a log event, or a partial set of fields that must all match exactly. */
export type EventMatcher = ((e: LogEvent) => boolean) | Record<string, string | RegExp>;

function matches(e: LogEvent, m: EventMatcher): boolean {
  if (typeof m === "function") return m(e);
  return Object.entries(m).every(([k, want]) => {
    const got = e.fields[k];
    if (got === undefined) return false;
    return typeof want === "string" ? got === want : want.test(got);
  });
}

/** A running flow-aggregator process. */
export class FaProcess {
  /** Every stderr line so far, parsed. */
  readonly events: LogEvent[] = [];
  /** Everything written to stdout so far. */
  stdout = "";
  /** Resolves with the exit status. */
  readonly status: Promise<Deno.CommandStatus>;
  readonly #child: Deno.ChildProcess;
  readonly #pumps: Promise<void>[];
  #waiters: (() => void)[] = [];
  #exited = false;

  private constructor(child: Deno.ChildProcess) {
    this.#child = child;
    this.#pumps = [this.#readStderr(child.stderr), this.#readStdout(child.stdout)];
    this.status = child.status.then(async (s) => {
      this.#exited = true;
      await Promise.all(this.#pumps);
      this.#wake();
      return s;
    });
  }

  /** Spawns the process; stdout and stderr are captured. */
  static start(opts: StartOptions = {}): FaProcess {
    const denoFlags = opts.denoFlags ?? DEFAULT_DENO_FLAGS;
    const cwd = opts.cwd ?? Deno.cwd();
    const args = [...(opts.args ?? [])];
    // Tests run in parallel: unless a test says otherwise, each process's API gets a free
    // loopback port and a token file of its own (not 10348 and upstream's shared path).
    let apiDir: string | undefined;
    if (!args.some((a) => a === "--api-listen" || a.startsWith("--api-listen="))) {
      apiDir = Deno.makeTempDirSync({ prefix: "fa-api-" });
      // In front: a test's own arguments may end with a flag whose value is missing.
      args.unshift(...apiArgs(apiDir));
    }
    const cmd = new Deno.Command(Deno.execPath(), {
      args: ["run", ...denoFlags, opts.script ?? MAIN_TS, ...args],
      cwd,
      // DENO_DIR stays the test runner's: a HOME-derived cache would be empty and make Deno
      // fetch npm metadata from the registry on every start (slow, and fails offline).
      env: { HOME: cwd, DENO_DIR: denoDir(), NO_COLOR: "1", ...opts.env },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    });
    const fa = new FaProcess(cmd.spawn());
    fa.apiTokenFile = apiDir === undefined ? undefined : `${apiDir}/token`;
    if (apiDir !== undefined) {
      const dir = apiDir;
      fa.status.finally(() => Deno.remove(dir, { recursive: true }).catch(() => {}));
    }
    return fa;
  }

  /** The API's token file when the helper chose it (see {@linkcode apiArgs}). */
  apiTokenFile: string | undefined;

  /** The API's bound port, from its start event. */
  async apiPort(timeoutMs = 15_000): Promise<number> {
    const e = await this.waitFor({ msg: "API server listening" }, timeoutMs);
    return Number(e.fields.port);
  }

  /**
   * Writes `config` to `<dir>/fa.conf` and starts the process on it in `dir`, its collector on
   * `options.listen` (default a free port on 127.0.0.1); `options.args` follow.
   */
  static async startWithConfig(
    dir: string,
    config: string,
    options: ConfigStartOptions = {},
  ): Promise<FaProcess> {
    const path = `${dir}/fa.conf`;
    await Deno.writeTextFile(path, config);
    const { listen = "127.0.0.1:0", args = [], ...rest } = options;
    return FaProcess.start({
      cwd: dir,
      ...rest,
      args: ["--config", path, "--listen", listen, ...args],
    });
  }

  /** Process id. */
  get pid(): number {
    return this.#child.pid;
  }

  /** True once the process has exited and its output is drained. */
  get exited(): boolean {
    return this.#exited;
  }

  /** All stderr as text. */
  get stderr(): string {
    return this.events.map((e) => e.raw).join("\n");
  }

  /** Events matching `m`, in order. */
  find(m: EventMatcher): LogEvent[] {
    return this.events.filter((e) => matches(e, m));
  }

  /**
   * Resolves with the first event matching `m` at index `from` or later; rejects after
   * `timeoutMs` or if the process exits first (the message includes the stderr tail).
   */
  async waitFor(m: EventMatcher, timeoutMs = 10_000, from = 0): Promise<LogEvent> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      for (let i = from; i < this.events.length; i++) {
        if (matches(this.events[i], m)) return this.events[i];
      }
      if (this.#exited) {
        throw new Error(`process exited before the event ${describe(m)}:\n${this.#tail()}`);
      }
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timeout waiting for ${describe(m)}:\n${this.#tail()}`);
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, Math.min(left, 250));
        function done(): void {
          clearTimeout(t);
          resolve();
        }
        this.#waiters.push(done);
      });
    }
  }

  /**
   * Waits for the collector start event and returns the bound port. The bound is generous: a
   * process starting every sink's worker took over 15 s to listen at a load of 13-23.
   */
  async collectorPort(timeoutMs = 60_000): Promise<number> {
    const e = await this.waitFor({ msg: /^Started (UDP|TCP|TLS) collecting process$/ }, timeoutMs);
    const port = Number(e.fields.port);
    if (!Number.isInteger(port) || port <= 0) throw new Error(`bad port in ${e.raw}`);
    return port;
  }

  /** Sends a signal (ignored if the process already exited). */
  kill(signal: Deno.Signal = "SIGTERM"): void {
    if (this.#exited) return;
    try {
      this.#child.kill(signal);
    } catch {
      // exited in the meantime
    }
  }

  /**
   * Waits for the exit with a deadline; kills with SIGKILL when it passes (and then throws).
   */
  async waitExit(timeoutMs = 15_000): Promise<Deno.CommandStatus> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<"timeout">((r) =>
      timer = setTimeout(() => r("timeout"), timeoutMs)
    );
    const s = await Promise.race([this.status, timeout]);
    clearTimeout(timer);
    if (s === "timeout") {
      this.kill("SIGKILL");
      await this.status;
      throw new Error(`process did not exit within ${timeoutMs} ms:\n${this.#tail()}`);
    }
    return s;
  }

  /** Sends `signal` and waits for the exit. */
  stop(signal: Deno.Signal = "SIGTERM", timeoutMs = 15_000): Promise<Deno.CommandStatus> {
    this.kill(signal);
    return this.waitExit(timeoutMs);
  }

  /** Test cleanup: SIGKILL if still running, then wait for the streams to drain. */
  async dispose(): Promise<void> {
    this.kill("SIGKILL");
    await this.status;
  }

  #tail(): string {
    return this.events.slice(-25).map((e) => e.raw).join("\n");
  }

  #wake(): void {
    const ws = this.#waiters;
    this.#waiters = [];
    for (const w of ws) w();
  }

  async #readStderr(stream: ReadableStream<Uint8Array>): Promise<void> {
    let buf = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      buf += chunk;
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        this.events.push(parseLogLine(buf.slice(0, nl)));
        buf = buf.slice(nl + 1);
      }
      this.#wake();
    }
    if (buf !== "") this.events.push(parseLogLine(buf));
  }

  async #readStdout(stream: ReadableStream<Uint8Array>): Promise<void> {
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) this.stdout += chunk;
  }
}

/** Deno's cache directory as the test runner sees it (DENO_DIR, else the XDG/HOME default). */
function denoDir(): string {
  const env = (k: string): string | undefined => Deno.env.get(k) || undefined;
  const dir = env("DENO_DIR");
  if (dir) return dir;
  const cache = env("XDG_CACHE_HOME") ?? `${env("HOME") ?? "/root"}/.cache`;
  return `${cache}/deno`;
}

function describe(m: EventMatcher): string {
  return typeof m === "function" ? "predicate" : JSON.stringify(
    Object.fromEntries(Object.entries(m).map(([k, v]) => [k, String(v)])),
  );
}

/** Runs the process to completion with a deadline and returns code, stdout and stderr. */
export async function runToExit(
  opts: StartOptions,
  timeoutMs = 20_000,
): Promise<{ code: number; stdout: string; stderr: string; events: LogEvent[] }> {
  const p = FaProcess.start(opts);
  const s = await p.waitExit(timeoutMs);
  return { code: s.code, stdout: p.stdout, stderr: p.stderr, events: p.events };
}

/** Exit code and decoded output of a Deno command run to completion. */
export interface DenoOutput {
  /** Exit code. */
  code: number;
  /** Standard output. */
  stdout: string;
  /** Standard error. */
  stderr: string;
}

/**
 * Runs `deno <args>` (this test runner's binary) to completion and returns its exit code and
 * output; `options.cwd` and `options.env` as for {@linkcode FaProcess.start}, without the HOME
 * change.
 */
export async function runDeno(
  args: readonly string[],
  options: { cwd?: string; env?: Record<string, string> } = {},
): Promise<DenoOutput> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [...args],
    cwd: options.cwd,
    env: { NO_COLOR: "1", ...options.env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const td = new TextDecoder();
  return { code: out.code, stdout: td.decode(out.stdout), stderr: td.decode(out.stderr) };
}

const FLOWGEN_TS = new URL("../../scripts/flowgen.ts", import.meta.url).pathname;
const REPLAY_TS = new URL("../../scripts/replay.ts", import.meta.url).pathname;

/**
 * Runs scripts/flowgen.ts with `args` in its own process (as in real use), asserts it exited 0
 * and returns its `--json` report.
 */
export function flowgenCli<T = Record<string, unknown>>(args: readonly string[]): Promise<T> {
  return senderCli(FLOWGEN_TS, args);
}

/** {@linkcode flowgenCli} for the replay sender (scripts/replay.ts). */
export function replayCli<T = Record<string, unknown>>(args: readonly string[]): Promise<T> {
  return senderCli(REPLAY_TS, args);
}

async function senderCli<T>(script: string, args: readonly string[]): Promise<T> {
  const out = await runDeno([
    "run",
    "--allow-net",
    "--allow-read",
    "--config",
    DENO_JSON,
    script,
    ...args,
    "--json",
  ]);
  if (out.code !== 0) throw new Error(`${script} exited with ${out.code}:\n${out.stderr}`);
  return JSON.parse(out.stdout);
}

/** `deno run` arguments of the `permissions` subcommand (it reads the config file and env). */
export const PERMISSIONS = ["run", "--allow-read", "--allow-env", "--config", DENO_JSON, MAIN_TS];

/** The `deno run` flags `permissions <args>` prints; throws with its stderr if it fails. */
export async function printedPermissions(args: readonly string[]): Promise<string[]> {
  const out = await runDeno([...PERMISSIONS, "permissions", ...args]);
  if (out.code !== 0) throw new Error(`permissions exited with ${out.code}:\n${out.stderr}`);
  return shellSplit(out.stdout.trim());
}

/**
 * The words of a line as a POSIX shell splits plain, single-quoted and backslash-escaped text
 * (what `permissions` prints: `shellWord` of src/permissions.ts).
 */
export function shellSplit(line: string): string[] {
  const words: string[] = [];
  let word: string | undefined;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === " ") {
      if (word !== undefined) words.push(word);
      word = undefined;
      continue;
    }
    word ??= "";
    if (c === "'") {
      const end = line.indexOf("'", i + 1);
      word += line.slice(i + 1, end);
      i = end;
    } else if (c === "\\") {
      word += line[++i];
    } else {
      word += c;
    }
  }
  if (word !== undefined) words.push(word);
  return words;
}
