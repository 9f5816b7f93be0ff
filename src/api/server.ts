/**
 * The HTTPS API listener (control-plane.md §5.1): `[::]:<apiServer.apiPort>` (IPv4 too on a
 * dual-stack host, else `0.0.0.0`), a self-signed localhost certificate generated at every start,
 * and the loopback bearer token written to a file (mode 0600) for the in-image CLI, next to the
 * CA the CLI verifies the server with.
 *
 * The port is served by `front.ts` (not `Deno.serve`, which bounds nothing): connections in
 * total and per address, request and idle timeouts (`limits.*Api*`), HTTP/1.1 (`http1.ts`; ALPN
 * offers only it), which antctl, Prometheus and browsers speak.
 *
 * TLS settings: Deno's TLS stack (rustls) speaks TLS 1.2 and 1.3 only and picks from its own
 * cipher suites, so `apiServer.tlsMinVersion` `VersionTLS10`/`11` are met by its stricter floor,
 * and `tlsCipherSuites` is validated (an unknown name is a start-up error, as upstream) but cannot
 * narrow rustls's list: both are logged at start.
 *
 * @module
 */

import { dirname } from "node:path";
import { type ApiCertificate, generateApiCertificate } from "../pki/api_certificate.ts";
import {
  type ReissueReason,
  reissueReason,
  VALIDITY_CHECK_INTERVAL_MS,
  validityFields,
} from "../pki/validity.ts";
import { type Clock, type ClockTimer, systemClock } from "../clock.ts";
import { logger } from "../log.ts";
import { apiHandler, type ApiSource } from "./handler.ts";
import { ApiFront, type ApiFrontLimits, type ApiFrontStats } from "./front.ts";
import { bindTcp } from "../collector/tcp.ts";
import { knownMinVersion, parseCipherSuites, TLS_MIN_VERSIONS } from "./tls_settings.ts";

const log = logger("api");

/** Upstream's loopback token path (antctl reads it). */
export const DEFAULT_TOKEN_FILE = "/var/run/antrea/apiserver/loopback-client-token";

/** The CA certificate of the running API, next to the token (the CLI trusts it). */
export function caFileOf(tokenFile: string): string {
  return `${dirname(tokenFile)}/api-ca.crt`;
}

/** Options of {@linkcode startApiServer}. */
export interface ApiServerOptions {
  /** Port (`apiServer.apiPort`); 0 picks a free one (tests). */
  port: number;
  /** Bind address; default `[::]`, falling back to `0.0.0.0`. */
  hostname?: string;
  /** Where the loopback token and the CA are written. */
  tokenFile: string;
  /** Product version. */
  version: string;
  /** `apiServer.tlsCipherSuites` (validated; see the module doc). */
  tlsCipherSuites?: string;
  /** `apiServer.tlsMinVersion` (validated; see the module doc). */
  tlsMinVersion?: string;
  /** The port's bounds (`limits.*Api*`; `front.ts`). */
  limits: ApiFrontLimits;
  /**
   * Wall time of the certificate and monotonic time of its checks; default the process clock.
   */
  clock?: Clock;
  /**
   * How often the certificate's validity is compared with the wall clock (a new one issued
   * when outside it or near its end, `src/pki/validity.ts`); default
   * {@linkcode VALIDITY_CHECK_INTERVAL_MS}, 0 never.
   */
  certificateCheckIntervalMs?: number;
}

/** A running API server. */
export interface ApiServer {
  /** The bound port. */
  readonly port: number;
  /** The bearer token (for in-process callers and tests). */
  readonly token: string;
  /** The CA to verify the server with (PEM); a new one once the certificate is re-issued. */
  readonly caPem: string;
  /** The port's counters. */
  stats(): ApiFrontStats;
  /** Stops listening. */
  close(): Promise<void>;
}

/**
 * Writes `text` to `path`, mode 0600. In place, not written aside and renamed: a rename needs
 * read access to the directory too, which the image's process is not given.
 */
async function writePrivate(path: string, text: string): Promise<void> {
  await Deno.mkdir(dirname(path), { recursive: true });
  await Deno.writeTextFile(path, text, { mode: 0o600 });
  await Deno.chmod(path, 0o600);
}

/**
 * Starts the API. The token file and the CA are written once the port is bound, before the first
 * connection is accepted; failing to write them is
 * logged (the API then answers 401 to all but the health checks), not fatal. A bind failure is
 * thrown (fatal at start, as upstream).
 */
export async function startApiServer(
  source: ApiSource,
  opts: ApiServerOptions,
): Promise<ApiServer> {
  const ciphers = parseCipherSuites(opts.tlsCipherSuites ?? "");
  const minVersion = opts.tlsMinVersion ?? "";
  if (!knownMinVersion(minVersion)) {
    log.warn("apiServer.tlsMinVersion is not a known version: TLS 1.2 is the minimum", {
      tlsMinVersion: minVersion,
      known: TLS_MIN_VERSIONS.join(","),
    });
  }
  if (ciphers.length > 0 || minVersion !== "") {
    log.info("API TLS: Deno's TLS stack offers TLS 1.2 and 1.3 with its own cipher suites", {
      tlsCipherSuites: ciphers.join(","),
      tlsMinVersion: minVersion,
    });
  }
  const token = crypto.randomUUID();
  const clock = opts.clock ?? systemClock;
  let cert = await generateApiCertificate(new Date(clock.wallMs()));
  // The front counts the handler's refusals with its own (it exists once the handler does).
  let front: ApiFront | undefined = undefined;
  const handler = apiHandler(source, {
    token,
    version: opts.version,
    onBusy: (reason) => front?.countBusy(reason),
    onLiveViewDropped: () => front?.countLiveViewDropped(),
  });
  // [::] falls back to 0.0.0.0 where IPv6 is off; an explicit address is used as given.
  let listener: Deno.TcpListener;
  try {
    listener = bindTcp({
      hostname: opts.hostname ?? "::",
      port: opts.port,
      wildcard: opts.hostname === undefined,
    });
  } catch (err) {
    const where = opts.hostname?.includes(":") ? `[${opts.hostname}]` : opts.hostname ?? "[::]";
    throw new Error(
      `API server cannot listen on ${where}:${opts.port}: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
  // Only once the port is ours: a second process that cannot bind (the first one serving) must
  // not replace the token and CA the serving one answers to. Before the front accepts, so a
  // client that got through reads the token of the process that answers it.
  try {
    await writePrivate(opts.tokenFile, token);
    await writePrivate(caFileOf(opts.tokenFile), cert.caPem);
  } catch (err) {
    log.error("cannot write the API token file: only the health checks can be used", {
      path: opts.tokenFile,
      err,
    });
  }
  const address = listener.addr;
  front = new ApiFront(
    listener,
    { cert: cert.chainPem, key: cert.keyPem },
    handler,
    opts.limits,
    { log },
  );
  front.start();
  const port = address.port;
  log.info("API server listening", {
    address: address.hostname,
    port,
    tokenFile: opts.tokenFile,
  });
  // The certificate is made once, from the wall clock at start: checked on a monotonic timer
  // against the wall clock now, and made again when outside its validity (see validity.ts).
  const interval = opts.certificateCheckIntervalMs ?? VALIDITY_CHECK_INTERVAL_MS;
  let timer: ClockTimer | undefined;
  let closed = false;
  const check = async (): Promise<void> => {
    const now = clock.wallMs();
    const reason = reissueReason(cert.validity, now);
    if (reason !== undefined) {
      const next = await reissueApiCertificate(cert, reason, now);
      if (closed) return;
      front!.setCertificate({ cert: next.chainPem, key: next.keyPem }, reason);
      cert = next;
      // Served first, then written for the CLI: a closed server writes nothing (a CA file over
      // a newer server's would make the CLI refuse it).
      await writePrivate(caFileOf(opts.tokenFile), next.caPem).catch((err) =>
        log.error("cannot write the API's new CA: the CLI cannot verify the server", {
          path: caFileOf(opts.tokenFile),
          err,
        })
      );
    }
  };
  const arm = (): void => {
    if (interval <= 0 || closed) return;
    timer = clock.setTimer(interval, () => {
      check().catch((err) => log.error("cannot re-issue the API certificate", { err }))
        .finally(arm);
    }, { unref: true });
  };
  arm();
  return {
    port,
    token,
    get caPem(): string {
      return cert.caPem;
    },
    stats: () => front.stats(),
    close: async () => {
      closed = true;
      timer?.cancel();
      // Live views stream forever: end them first (their connections then end), and close
      // every other connection.
      source.live?.close();
      await front.close();
    },
  };
}

/**
 * A new API certificate for wall time `nowMs`, replacing `old` (out of its validity for
 * `reason`), logged.
 */
async function reissueApiCertificate(
  old: ApiCertificate,
  reason: ReissueReason,
  nowMs: number,
): Promise<ApiCertificate> {
  const fields = validityFields(old.validity, nowMs);
  if (reason === "notValidYet") {
    log.warn(
      "the wall clock moved before the API certificate's validity (it was ahead when the " +
        "certificate was made): issuing a new one",
      fields,
    );
  } else {
    log.info("the API certificate expires soon: issuing a new one", fields);
  }
  return await generateApiCertificate(new Date(nowMs));
}
