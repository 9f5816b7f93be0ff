/**
 * Publication of the collector's TLS material to Kubernetes (control-plane.md §3.3), so Antrea
 * Agents can connect: ConfigMap `<ns>/flow-aggregator-ca` (key `ca.crt`, label
 * `app=flow-aggregator`) and Secret `<ns>/flow-aggregator-client-tls` (`kubernetes.io/tls`,
 * `tls.crt`, `tls.key`; created with no labels, as upstream's). Each object is read, then
 * created or updated, and every step is retried with backoff (errors, 5xx, 409 conflicts) in
 * the background: the collector never waits for the API server.
 *
 * Improvement over v1.13 (newer Antrea's design, §3.7): the CA certificate and key are kept in
 * Secret `<ns>/flow-aggregator-ca-tls` (`kubernetes.io/tls`). At start, when that Secret and the
 * client Secret hold a valid pair (keys match, the CA signed the client certificate, more than
 * 90 days left), they are reused and only a new server certificate is issued from the CA, so
 * the Agents keep working across a restart without re-reading anything. v1.13's RBAC grants no
 * right on that Secret: a 401/403 on it means "the CA is not persisted" (a new CA per start, as
 * v1.13 does), warned about once and counted, never waited on or retried; the objects the
 * Agents read are published first, that Secret last.
 */

import type * as k8s from "@kubernetes/client-node";
import { toBase64 } from "../bytes.ts";
import type { Clock } from "../clock.ts";
import { logger } from "../log.ts";
import type {
  CertificatePair,
  GenerateCertificatesOptions,
  GeneratedCertificates,
} from "../pki/certificates.ts";
import type { KubeApi } from "./client.ts";
import { type Backoff, describe, RetryAborted, retrying, statusOf, withTimeout } from "./retry.ts";

const log = logger("k8s-certificates");

/** ConfigMap with the CA certificate the Agents trust. */
export const CA_CONFIGMAP = "flow-aggregator-ca";
/** Secret with the client certificate and key the Agents present. */
export const CLIENT_SECRET = "flow-aggregator-client-tls";
/** Secret of ours with the CA certificate and key, so a restart can keep the CA. */
export const CA_SECRET = "flow-aggregator-ca-tls";

const TLS_SECRET_TYPE = "kubernetes.io/tls";
const LABELS = { app: "flow-aggregator" };

/** Options of {@linkcode prepareCertificates} and {@linkcode CertificatePublisher}. */
export interface CertificateSyncOptions extends Backoff {
  /** The API. */
  api: KubeApi;
  /** Namespace of the three objects (`POD_NAMESPACE`, default `flow-aggregator`). */
  namespace: string;
  /** Time source of the retries. */
  clock: Clock;
}

/** What {@linkcode prepareCertificates} reports to its caller's counters. */
export interface PrepareHooks {
  /**
   * The CA Secret could not be read for lack of rights (401/403); default: a warning. The
   * publisher's {@linkcode CertificatePublisher.prepare} counts it and warns once.
   */
  onCaForbidden?: (err: unknown) => void;
  /** A persisted certificate or key was over {@linkcode MAX_PEM_BYTES}: not reused. */
  onPemTooLarge?: () => void;
}

/** What {@linkcode CertificatePublisher.prepare} takes beyond the publisher's own options. */
export interface PrepareSettings {
  /** `flowAggregatorAddress` (server certificate SAN). */
  address?: string;
  /** Longest wait for the API server before generating new material; default 10 s. */
  waitMs?: number;
  /** Key size and time of generation (tests). */
  generate?: Pick<GenerateCertificatesOptions, "modulusLength" | "now">;
}

/** Options of {@linkcode prepareCertificates}. */
export interface PrepareOptions extends CertificateSyncOptions, PrepareSettings, PrepareHooks {}

/** True for the answers that mean "no right to do that": 401 and 403. */
function isForbidden(err: unknown): boolean {
  const code = statusOf(err);
  return code === 401 || code === 403;
}

/** The warning for a CA Secret we may not read or write, naming the RBAC rule to add. */
function warnCaForbidden(namespace: string, err: unknown): void {
  log.warn(
    `no right to read or write Secret ${namespace}/${CA_SECRET}: the collector CA is not kept ` +
      "across restarts (a new CA at every start, as v1.13); to keep it, grant the Flow " +
      `Aggregator's Role get and update on secrets named ${CA_SECRET} (and create on secrets)`,
    { namespace, secret: CA_SECRET, err: describe(err) },
  );
}

/** Most bytes of a persisted certificate or key reused (ours are under 4 KiB). */
export const MAX_PEM_BYTES = 64 << 10;

/** Base64 of `text`'s UTF-8, whatever its size. */
function b64(text: string): string {
  return toBase64(new TextEncoder().encode(text));
}

/** The text of a Secret's base64 value; undefined when absent or not base64 (someone's edit). */
function unb64(data: string | undefined): string | undefined {
  if (data === undefined) return undefined;
  try {
    return new TextDecoder().decode(Uint8Array.from(atob(data), (c) => c.charCodeAt(0)));
  } catch {
    return undefined;
  }
}

function pairOf(secret: k8s.V1Secret | undefined): CertificatePair | undefined {
  const certPem = unb64(secret?.data?.["tls.crt"]);
  const keyPem = unb64(secret?.data?.["tls.key"]);
  return certPem === undefined || keyPem === undefined ? undefined : { certPem, keyPem };
}

/**
 * The collector's certificates at start: the persisted CA and client pair when reusable (a new
 * server certificate issued from that CA), else a new set. Waits at most `waitMs` for the API
 * server; when it does not answer, new material is generated (and published later, in the
 * background). A 401/403 ends the wait at once: the rights will not come by waiting.
 */
export async function prepareCertificates(options: PrepareOptions): Promise<GeneratedCertificates> {
  const { api, namespace, clock } = options;
  // node-forge only for a TLS collector: not loaded by a process that never needs it.
  const { generateCertificates, issueServerCertificate, reuseProblem } = await import(
    "../pki/certificates.ts"
  );
  const gen = { namespace, address: options.address, ...options.generate };
  const abort = new AbortController();
  let lastError: unknown;
  const read = retrying(
    "reading the persisted collector CA",
    async (signal) => {
      let caSecret: k8s.V1Secret | undefined;
      try {
        caSecret = await api.getSecret(namespace, CA_SECRET, signal);
      } catch (err) {
        if (isForbidden(err)) return { caForbidden: err };
        throw err;
      }
      const ca = pairOf(caSecret);
      // Without a CA to reuse, the client Secret does not matter.
      if (ca === undefined) return {};
      let client: k8s.V1Secret | undefined;
      try {
        client = await api.getSecret(namespace, CLIENT_SECRET, signal);
      } catch (err) {
        if (isForbidden(err)) return { clientForbidden: err };
        throw err;
      }
      return { ca, client: pairOf(client) };
    },
    { ...options, log, signal: abort.signal, onFailure: (err) => lastError = err },
  );
  let found: {
    ca?: CertificatePair;
    client?: CertificatePair;
    caForbidden?: unknown;
    clientForbidden?: unknown;
  };
  const waitMs = options.waitMs ?? 10_000;
  try {
    found = await withTimeout(read, waitMs, clock);
  } catch (err) {
    abort.abort();
    read.catch(() => {}); // RetryAborted
    // What the API server answered last, when it answered: "no answer" would be wrong then.
    log.warn(
      lastError === undefined
        ? "Kubernetes API unavailable: generating a new collector CA"
        : "the persisted collector CA could not be read: generating a new collector CA",
      { namespace, waitedMs: waitMs, err: describe(lastError ?? err) },
    );
    return generateCertificates(gen);
  }
  if (found.caForbidden !== undefined) {
    if (options.onCaForbidden !== undefined) options.onCaForbidden(found.caForbidden);
    else warnCaForbidden(namespace, found.caForbidden);
    log.info("persisted collector CA not readable: generating one", { namespace });
    return generateCertificates(gen);
  }
  if (found.clientForbidden !== undefined) {
    log.warn("the Agents' client Secret is not readable: generating a new collector CA", {
      namespace,
      secret: CLIENT_SECRET,
      err: describe(found.clientForbidden),
    });
    return generateCertificates(gen);
  }
  if (found.ca === undefined || found.client === undefined) {
    log.info("no persisted collector CA: generating one", { namespace, secret: CA_SECRET });
    return generateCertificates(gen);
  }
  // Ours are under 4 KiB; parsing a large one is slow (node-forge's PEM regex), and it is
  // republished at every start.
  const sizes = [found.ca.certPem, found.ca.keyPem, found.client.certPem, found.client.keyPem]
    .map((pem) => pem.length);
  if (sizes.some((n) => n > MAX_PEM_BYTES)) {
    options.onPemTooLarge?.();
    log.warn("persisted collector CA not reused: a certificate or key is too large", {
      namespace,
      bytes: Math.max(...sizes),
      maxBytes: MAX_PEM_BYTES,
    });
    return generateCertificates(gen);
  }
  const problem = reuseProblem(found.ca, found.client, { now: options.generate?.now });
  if (problem !== undefined) {
    log.info("persisted collector CA not reusable: generating a new one", {
      namespace,
      reason: problem,
    });
    return generateCertificates(gen);
  }
  log.info("reusing the persisted collector CA and Agent client certificate", { namespace });
  return { ca: found.ca, client: found.client, server: issueServerCertificate(found.ca, gen) };
}

/** Counters of {@linkcode CertificatePublisher}. */
export interface PublisherStats {
  /** Completed publications. */
  published: number;
  /** Failed API calls (each retried). */
  failures: number;
  /** Objects created. */
  created: number;
  /** Objects updated. */
  updated: number;
  /**
   * Times Secret `flow-aggregator-ca-tls` could not be read or written for lack of rights
   * (401/403, at start or in a publication): the CA is not kept across restarts.
   */
  caNotPersisted: number;
  /**
   * Persisted certificates or keys not reused at start for being over
   * {@linkcode MAX_PEM_BYTES} (a new CA made instead).
   */
  pemsTooLarge: number;
}

/**
 * Publishes certificate sets in the background; a new set supersedes one still being
 * published. Never throws: failures are retried, logged and counted.
 */
export class CertificatePublisher {
  readonly #opts: CertificateSyncOptions;
  #abort: AbortController | undefined;
  #running: Promise<void> = Promise.resolve();
  readonly #stats: PublisherStats = {
    published: 0,
    failures: 0,
    created: 0,
    updated: 0,
    caNotPersisted: 0,
    pemsTooLarge: 0,
  };
  #warnedCaForbidden = false;

  /** Creates the publisher; nothing happens before {@linkcode publish}. */
  constructor(options: CertificateSyncOptions) {
    this.#opts = options;
  }

  /** Counters. */
  stats(): PublisherStats {
    return { ...this.#stats };
  }

  /**
   * {@linkcode prepareCertificates} with this publisher's API, namespace and clock; a CA Secret
   * not readable for lack of rights is counted in `caNotPersisted` and warned about once, a
   * certificate or key too large to reuse in `pemsTooLarge`.
   */
  prepare(settings: PrepareSettings = {}): Promise<GeneratedCertificates> {
    return prepareCertificates({
      ...this.#opts,
      ...settings,
      onCaForbidden: (err) => this.#caForbidden(err),
      onPemTooLarge: () => this.#stats.pemsTooLarge++,
    });
  }

  #caForbidden(err: unknown): void {
    this.#stats.caNotPersisted++;
    if (this.#warnedCaForbidden) return;
    this.#warnedCaForbidden = true;
    warnCaForbidden(this.#opts.namespace, err);
  }

  /** Resolves when the latest publication is done (or stopped). */
  get settled(): Promise<void> {
    return this.#running;
  }

  /**
   * Starts publishing `certs` (the ConfigMap, the client Secret, then the CA Secret),
   * superseding an earlier call.
   */
  publish(certs: GeneratedCertificates): void {
    this.#abort?.abort();
    const abort = new AbortController();
    this.#abort = abort;
    const previous = this.#running;
    this.#running = previous.then(() => this.#publish(certs, abort.signal)).catch((err) => {
      if (!(err instanceof RetryAborted)) log.error("certificate publication failed", { err });
    });
  }

  /** Stops a publication in progress. */
  async stop(): Promise<void> {
    this.#abort?.abort();
    await this.#running;
  }

  async #publish(certs: GeneratedCertificates, signal: AbortSignal): Promise<void> {
    const { api, namespace } = this.#opts;
    log.info("Syncing CA certificate, client certificate and client key with ConfigMap", {
      namespace,
      configMap: CA_CONFIGMAP,
      secret: CLIENT_SECRET,
    });
    const retry = {
      ...this.#opts,
      log,
      signal,
      onFailure: () => this.#stats.failures++,
    };
    // What the Agents read first: a CA Secret that cannot be written must not hold them up. A
    // restart that finds the CA Secret older than the client Secret sees that the CA did not
    // sign it, and makes a new set.
    await retrying(`syncing ConfigMap ${namespace}/${CA_CONFIGMAP}`, async (signal) => {
      const existing = await api.getConfigMap(namespace, CA_CONFIGMAP, signal);
      const data = { "ca.crt": certs.ca.certPem };
      if (existing === undefined) {
        await api.createConfigMap(namespace, {
          metadata: { name: CA_CONFIGMAP, namespace, labels: LABELS },
          data,
        }, signal);
        this.#stats.created++;
      } else if (existing.data?.["ca.crt"] !== data["ca.crt"] || hasOtherKeys(existing.data)) {
        // The name and namespace we mean, whatever the answer said (the client checks it too).
        await api.replaceConfigMap(namespace, {
          ...existing,
          metadata: { ...existing.metadata, name: CA_CONFIGMAP, namespace },
          data,
        }, signal);
        this.#stats.updated++;
      }
    }, retry);
    // Created with no labels (§3.3): only the ConfigMap carries `app: flow-aggregator`.
    await retrying(
      `syncing Secret ${namespace}/${CLIENT_SECRET}`,
      (signal) => this.#syncSecret(CLIENT_SECRET, certs.client, signal, undefined),
      retry,
    );
    // No right on it (v1.13's RBAC): not persisted, which is no failure to retry.
    const caPersisted = await retrying(
      `syncing Secret ${namespace}/${CA_SECRET}`,
      async (signal) => {
        try {
          await this.#syncSecret(CA_SECRET, certs.ca, signal, LABELS);
          return true;
        } catch (err) {
          if (!isForbidden(err)) throw err;
          this.#caForbidden(err);
          return false;
        }
      },
      retry,
    );
    this.#stats.published++;
    log.info("published the collector CA and Agent client certificate", {
      namespace,
      caPersisted,
    });
  }

  /** Creates or updates Secret `name`; `labels` are given to one created (none when absent). */
  async #syncSecret(
    name: string,
    pair: CertificatePair,
    signal: AbortSignal,
    labels: Record<string, string> | undefined,
  ): Promise<void> {
    const { api, namespace } = this.#opts;
    const existing = await api.getSecret(namespace, name, signal);
    const data = { "tls.crt": b64(pair.certPem), "tls.key": b64(pair.keyPem) };
    if (existing === undefined) {
      try {
        await api.createSecret(namespace, {
          metadata: labels === undefined ? { name, namespace } : { name, namespace, labels },
          type: TLS_SECRET_TYPE,
          data,
        }, signal);
      } catch (err) {
        // Created meanwhile by someone else: the retry reads and updates it.
        if (statusOf(err) === 409) throw new Error(`Secret ${name} appeared meanwhile`);
        throw err;
      }
      this.#stats.created++;
      return;
    }
    const same = unb64(existing.data?.["tls.crt"]) === pair.certPem &&
      unb64(existing.data?.["tls.key"]) === pair.keyPem;
    if (same && !hasOtherKeys(existing.data, 2)) return;
    // The type is immutable: an existing Secret keeps its own (§3.3).
    await api.replaceSecret(namespace, {
      ...existing,
      metadata: { ...existing.metadata, name, namespace },
      data,
    }, signal);
    this.#stats.updated++;
  }
}

function hasOtherKeys(data: Record<string, string> | undefined, expected = 1): boolean {
  return Object.keys(data ?? {}).length !== expected;
}
