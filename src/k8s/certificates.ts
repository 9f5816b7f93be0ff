/**
 * Publication of the collector's TLS material to Kubernetes (control-plane.md §3.3), so Antrea
 * Agents can connect: ConfigMap `<ns>/flow-aggregator-ca` (key `ca.crt`, label
 * `app=flow-aggregator`) and Secret `<ns>/flow-aggregator-client-tls` (`kubernetes.io/tls`,
 * `tls.crt`, `tls.key`). Each object is read, then created or updated, and every step is
 * retried with backoff (errors, 5xx, 409 conflicts) in the background: the collector never
 * waits for the API server.
 *
 * Improvement over v1.13 (newer Antrea's design, §3.7): the CA certificate and key are kept in
 * Secret `<ns>/flow-aggregator-ca-tls` (`kubernetes.io/tls`). At start, when that Secret and the
 * client Secret hold a valid pair (keys match, the CA signed the client certificate, more than
 * 90 days left), they are reused and only a new server certificate is issued from the CA, so
 * the Agents keep working across a restart without re-reading anything.
 */

import type * as k8s from "@kubernetes/client-node";
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

/** Options of {@linkcode prepareCertificates}. */
export interface PrepareOptions extends CertificateSyncOptions {
  /** `flowAggregatorAddress` (server certificate SAN). */
  address?: string;
  /** Longest wait for the API server before generating new material; default 10 s. */
  waitMs?: number;
  /** Key size and time of generation (tests). */
  generate?: Pick<GenerateCertificatesOptions, "modulusLength" | "now">;
}

function b64(text: string): string {
  return btoa(String.fromCharCode(...new TextEncoder().encode(text)));
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
 * background).
 */
export async function prepareCertificates(options: PrepareOptions): Promise<GeneratedCertificates> {
  const { api, namespace, clock } = options;
  // node-forge only for a TLS collector: not loaded by a process that never needs it.
  const { generateCertificates, issueServerCertificate, reuseProblem } = await import(
    "../pki/certificates.ts"
  );
  const gen = { namespace, address: options.address, ...options.generate };
  const abort = new AbortController();
  const read = retrying(
    "reading the persisted collector CA",
    async (signal) => {
      const [ca, client] = await Promise.all([
        api.getSecret(namespace, CA_SECRET, signal),
        api.getSecret(namespace, CLIENT_SECRET, signal),
      ]);
      return { ca: pairOf(ca), client: pairOf(client) };
    },
    { ...options, log, signal: abort.signal },
  );
  let found: { ca?: CertificatePair; client?: CertificatePair };
  try {
    found = await withTimeout(read, options.waitMs ?? 10_000, clock);
  } catch (err) {
    abort.abort();
    read.catch(() => {}); // RetryAborted
    log.warn("Kubernetes API unavailable: generating a new collector CA", {
      namespace,
      err: describe(err),
    });
    return generateCertificates(gen);
  }
  if (found.ca === undefined || found.client === undefined) {
    log.info("no persisted collector CA: generating one", { namespace, secret: CA_SECRET });
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
}

/**
 * Publishes certificate sets in the background; a new set supersedes one still being
 * published. Never throws: failures are retried, logged and counted.
 */
export class CertificatePublisher {
  readonly #opts: CertificateSyncOptions;
  #abort: AbortController | undefined;
  #running: Promise<void> = Promise.resolve();
  readonly #stats: PublisherStats = { published: 0, failures: 0, created: 0, updated: 0 };

  /** Creates the publisher; nothing happens before {@linkcode publish}. */
  constructor(options: CertificateSyncOptions) {
    this.#opts = options;
  }

  /** Counters. */
  stats(): PublisherStats {
    return { ...this.#stats };
  }

  /** Resolves when the latest publication is done (or stopped). */
  get settled(): Promise<void> {
    return this.#running;
  }

  /** Starts publishing `certs` (ConfigMap, then Secrets), superseding an earlier call. */
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
    // The CA first: a restart must find the key of the CA the Agents were given.
    await retrying(
      `syncing Secret ${namespace}/${CA_SECRET}`,
      (signal) => this.#syncSecret(CA_SECRET, certs.ca, signal),
      retry,
    );
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
        await api.replaceConfigMap(namespace, { ...existing, data }, signal);
        this.#stats.updated++;
      }
    }, retry);
    await retrying(
      `syncing Secret ${namespace}/${CLIENT_SECRET}`,
      (signal) => this.#syncSecret(CLIENT_SECRET, certs.client, signal),
      retry,
    );
    this.#stats.published++;
    log.info("published the collector CA and Agent client certificate", { namespace });
  }

  async #syncSecret(name: string, pair: CertificatePair, signal: AbortSignal): Promise<void> {
    const { api, namespace } = this.#opts;
    const existing = await api.getSecret(namespace, name, signal);
    const data = { "tls.crt": b64(pair.certPem), "tls.key": b64(pair.keyPem) };
    if (existing === undefined) {
      try {
        await api.createSecret(namespace, {
          metadata: { name, namespace, labels: LABELS },
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
    await api.replaceSecret(namespace, { ...existing, data }, signal);
    this.#stats.updated++;
  }
}

function hasOtherKeys(data: Record<string, string> | undefined, expected = 1): boolean {
  return Object.keys(data ?? {}).length !== expected;
}
