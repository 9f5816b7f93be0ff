/**
 * Starts a throw-away ClickHouse server (Debian's `clickhouse-server`, installed by
 * `scripts/setup.sh`) as a child process: free ports, a temporary data directory and a config
 * of its own (one user with a password, listening on 127.0.0.1 only), for tests and benchmarks.
 * It can be stopped and started again on the same ports and data (an outage), or killed.
 *
 * As a command: `deno run -A scripts/clickhouse.ts` starts one, prints its HTTP URL and
 * credentials, and stops it on Ctrl-C.
 *
 * @module
 */

/** Where Debian installs the server and the client. */
export const CLICKHOUSE_SERVER_BIN = "clickhouse-server";
/** The command-line client (the bench's baseline inserter). */
export const CLICKHOUSE_CLIENT_BIN = "clickhouse-client";

/** How to start a server. */
export interface ClickHouseServerOptions {
  /** User created in the server's config. Default `flow_aggregator`. */
  username?: string;
  /** Its password. Default `flow_aggregator_password`. */
  password?: string;
  /** How long to wait until it answers. Default 30 s. */
  readyTimeoutMs?: number;
  /** Also serve HTTPS with this certificate and key (PEM) on {@linkcode ClickHouseServer.httpsPort}. */
  tls?: { certPem: string; keyPem: string };
  /** The HTTP and native ports to listen on. Default: free ones the system picks. */
  ports?: { http: number; tcp: number };
}

/** A free TCP port on 127.0.0.1 (closed again: a race with other processes is possible). */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

function configXml(
  dir: string,
  ports: { http: number; tcp: number; https?: number },
  user: string,
  pass: string,
): string {
  const esc = (s: string) =>
    s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
  const https = ports.https === undefined ? "" : `<https_port>${ports.https}</https_port>
  <openSSL><server>
    <certificateFile>${dir}/server.crt</certificateFile>
    <privateKeyFile>${dir}/server.key</privateKeyFile>
    <verificationMode>none</verificationMode>
    <loadDefaultCAFile>false</loadDefaultCAFile>
  </server></openSSL>`;
  const { http, tcp } = ports;
  return `<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><console>1</console></logger>
  <http_port>${http}</http_port>${https}
  <tcp_port>${tcp}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>${dir}/data/</path>
  <tmp_path>${dir}/data/tmp/</tmp_path>
  <user_files_path>${dir}/data/user_files/</user_files_path>
  <format_schema_path>${dir}/data/format_schemas/</format_schema_path>
  <mark_cache_size>268435456</mark_cache_size>
  <max_concurrent_queries>100</max_concurrent_queries>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <users>
    <${esc(user)}>
      <password>${esc(pass)}</password>
      <networks><ip>::/0</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </${esc(user)}>
  </users>
  <profiles><default></default></profiles>
  <quotas><default></default></quotas>
</yandex>
`;
}

/** A running (or stopped) throw-away ClickHouse server. */
export class ClickHouseServer {
  /** HTTP port (what the sink uses). */
  readonly httpPort: number;
  /** Native protocol port (what `clickhouse-client` uses). */
  readonly tcpPort: number;
  /** HTTPS port when started with `tls` (else 0). */
  readonly httpsPort: number;
  /** Temporary directory holding the config and the data. */
  readonly dir: string;
  /** The user of the server's config. */
  readonly username: string;
  /** Its password. */
  readonly password: string;
  readonly #readyTimeoutMs: number;
  #child: Deno.ChildProcess | undefined;
  #stderr = "";

  private constructor(dir: string, options: ClickHouseServerOptions) {
    this.dir = dir;
    this.httpPort = options.ports?.http ?? freePort();
    this.tcpPort = options.ports?.tcp ?? freePort();
    this.username = options.username ?? "flow_aggregator";
    this.password = options.password ?? "flow_aggregator_password";
    this.#readyTimeoutMs = options.readyTimeoutMs ?? 30_000;
    this.httpsPort = options.tls === undefined ? 0 : freePort();
    if (options.tls !== undefined) {
      Deno.writeTextFileSync(`${dir}/server.crt`, options.tls.certPem);
      Deno.writeTextFileSync(`${dir}/server.key`, options.tls.keyPem);
    }
    Deno.writeTextFileSync(
      `${dir}/config.xml`,
      configXml(
        dir,
        {
          http: this.httpPort,
          tcp: this.tcpPort,
          https: options.tls === undefined ? undefined : this.httpsPort,
        },
        this.username,
        this.password,
      ),
    );
  }

  /** Creates the data directory and config, starts the server and waits until it answers. */
  static async start(options: ClickHouseServerOptions = {}): Promise<ClickHouseServer> {
    const dir = await Deno.makeTempDir({ prefix: "fa-clickhouse-" });
    const server = new ClickHouseServer(dir, options);
    try {
      await server.resume();
    } catch (err) {
      await server.close();
      throw err;
    }
    return server;
  }

  /** `http://127.0.0.1:<httpPort>`. */
  get url(): string {
    return `http://127.0.0.1:${this.httpPort}`;
  }

  /** True while the child process runs. */
  get running(): boolean {
    return this.#child !== undefined;
  }

  /** Starts the server again (same ports and data) and waits until it answers. */
  async resume(): Promise<void> {
    if (this.#child !== undefined) return;
    let child: Deno.ChildProcess;
    try {
      child = new Deno.Command(CLICKHOUSE_SERVER_BIN, {
        args: [`--config-file=${this.dir}/config.xml`],
        cwd: this.dir,
        stdin: "null",
        stdout: "null",
        stderr: "piped",
      }).spawn();
    } catch (err) {
      throw new Error(
        `cannot run ${CLICKHOUSE_SERVER_BIN} (install Debian's clickhouse-server: ` +
          `bash scripts/setup.sh): ${(err as Error).message}`,
      );
    }
    this.#child = child;
    this.#stderr = "";
    void (async () => {
      const dec = new TextDecoder();
      for await (const chunk of child.stderr) {
        this.#stderr = (this.#stderr + dec.decode(chunk)).slice(-4000);
      }
    })().catch(() => {});
    const deadline = Date.now() + this.#readyTimeoutMs;
    while (Date.now() < deadline) {
      if (await this.#answers()) return;
      const exited = await Promise.race([
        child.status.then(() => true),
        new Promise<false>((r) => setTimeout(() => r(false), 100)),
      ]);
      if (exited) {
        this.#child = undefined;
        throw new Error(`clickhouse-server exited at start: ${this.#stderr.trim()}`);
      }
    }
    await this.stop();
    throw new Error(`clickhouse-server did not answer within ${this.#readyTimeoutMs} ms`);
  }

  async #answers(): Promise<boolean> {
    try {
      const res = await fetch(`${this.url}/ping`, { signal: AbortSignal.timeout(1000) });
      await res.body?.cancel();
      return res.ok;
    } catch {
      return false;
    }
  }

  /** Stops the server (SIGTERM, then SIGKILL after 10 s) and waits for it to exit. */
  async stop(signal: Deno.Signal = "SIGTERM"): Promise<void> {
    const child = this.#child;
    if (child === undefined) return;
    this.#child = undefined;
    try {
      child.kill(signal);
    } catch {
      // already gone
    }
    const timer = setTimeout(() => {
      try {
        child.kill("SIGKILL");
      } catch {
        // already gone
      }
    }, 10_000);
    await child.status;
    clearTimeout(timer);
  }

  /** Runs one SQL statement over HTTP and returns the response text; throws on an error. */
  async query(sql: string): Promise<string> {
    const res = await fetch(`${this.url}/`, {
      method: "POST",
      body: sql,
      headers: {
        "X-ClickHouse-User": this.username,
        "X-ClickHouse-Key": this.password,
      },
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`clickhouse: ${text.trim()} (query: ${sql.slice(0, 200)})`);
    return text;
  }

  /** Stops the server and removes its directory. */
  async close(): Promise<void> {
    await this.stop();
    await Deno.remove(this.dir, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) {
  const server = await ClickHouseServer.start();
  console.log(
    `clickhouse-server on ${server.url} (native 127.0.0.1:${server.tcpPort}), ` +
      `user ${server.username}, password ${server.password}, data ${server.dir}; Ctrl-C stops it`,
  );
  const done = Promise.withResolvers<void>();
  Deno.addSignalListener("SIGINT", () => done.resolve());
  Deno.addSignalListener("SIGTERM", () => done.resolve());
  await done.promise;
  await server.close();
}
