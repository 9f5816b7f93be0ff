/**
 * An in-process Kubernetes API server for the tests, speaking the wire protocol real clients
 * use (`@kubernetes/client-node`, `kubectl`): discovery (`/api`, `/api/v1`, `/apis`), get /
 * list / create / update / delete of ConfigMaps and Secrets in a namespace, Pods listed across
 * all namespaces (or in one) with a `resourceVersion`, and watches (`?watch=true`) as chunked
 * streams of newline-separated JSON events (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR).
 *
 * Like etcd-backed API servers it keeps a window of past events: a watch from a resource version
 * older than the window gets the `410 Gone` ERROR event ({@linkcode compact} empties the
 * window). An update whose `metadata.resourceVersion` is stale gets `409 Conflict`. Faults are
 * injected per request: 5xx answers, slow answers, a concurrent writer before an update.
 */

import type http from "node:http";
import https from "node:https";
import { connectKube, type KubeApi, resolveKubeTarget } from "../../src/k8s/client.ts";
import { generateCertificates, type GeneratedCertificates } from "../../src/pki/mod.ts";

let certificates: GeneratedCertificates | undefined;

/** One certificate set for every test server of the process (RSA generation is slow). */
function serverCertificates(): GeneratedCertificates {
  certificates ??= generateCertificates({ address: "127.0.0.1" });
  return certificates;
}

/** A Kubernetes object as JSON. */
// deno-lint-ignore no-explicit-any
export type KubeObject = Record<string, any> & {
  // deno-lint-ignore no-explicit-any
  metadata: Record<string, any>;
};

/** One request as the server saw it. */
export interface SeenRequest {
  /** HTTP method. */
  method: string;
  /** Path and query. */
  url: string;
  /** Status answered. */
  status: number;
}

/** A fault applied to the next requests that match. */
export interface Fault {
  /** Which requests: method, a path substring and a query substring (all when absent). */
  match?: { method?: string; path?: string; query?: string };
  /** How many matching requests it applies to; default 1. */
  times?: number;
  /** Answer with this status (a `Status` body) instead of handling the request. */
  status?: number;
  /** With `status`: these headers too (a redirect's `location`). */
  headers?: Record<string, string>;
  /** Wait this long (real time) before handling the request. */
  delayMs?: number;
  /**
   * Never finish the answer, until the client goes away: `headers` sends nothing, `body` sends
   * the headers of a 200 and then a space (JSON whitespace) every 100 ms.
   */
  hang?: "headers" | "body";
  /** Before an update: modify the stored object (a concurrent writer), so the update is stale. */
  concurrentWrite?: boolean;
  /**
   * Before an update: replace the stored object with what this returns for it (a concurrent
   * writer's own change, e.g. to the data), so the update is stale.
   */
  concurrentEdit?: (stored: KubeObject) => KubeObject;
  /** Answer 200 with these lines and end the answer (a watch that sends them and closes). */
  lines?: readonly string[];
  /** Answer 200 with this text (an object of the server's choosing, right or wrong). */
  body?: string;
  /** With `body`: declare its length (`content-length`) rather than send it in chunks. */
  contentLength?: boolean;
}

interface WatchEvent {
  rv: number;
  type: "ADDED" | "MODIFIED" | "DELETED";
  object: KubeObject;
}

interface Watcher {
  kind: string;
  namespace?: string;
  bookmarks: boolean;
  send(line: string): void;
  close(): void;
}

const RESOURCES = {
  configmaps: "ConfigMap",
  secrets: "Secret",
  pods: "Pod",
} as const;
type Resource = keyof typeof RESOURCES;

function status(code: number, reason: string, message: string): KubeObject {
  return {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message,
    reason,
    code,
  };
}

function json(body: unknown, code = 200): Response {
  return new Response(JSON.stringify(body), {
    status: code,
    // No keep-alive: a client's idle pooled connection would hold the server's shutdown.
    headers: { "content-type": "application/json", connection: "close" },
  });
}

/** The test API server. */
export class FakeKubeApiServer {
  readonly #objects = new Map<string, KubeObject>();
  #rv = 1000;
  #events: WatchEvent[] = [];
  readonly #watchers = new Set<Watcher>();
  readonly #faults: Fault[] = [];
  #server: https.Server | undefined;
  #uid = 0;
  /** Connections open now (a client's cancelled request closes its own). */
  openConnections = 0;
  /** Every request handled, in order (recorded once answered). */
  readonly requests: SeenRequest[] = [];
  /** Requests received so far, answered or not (a slow answer counts at once). */
  received = 0;
  /** Bearer token the requests must carry (none checked when undefined). */
  token: string | undefined;

  /**
   * Starts listening on 127.0.0.1 (a free port) over HTTPS, with a certificate for 127.0.0.1
   * signed by {@linkcode apiServerCa} (clients refuse plain HTTP unless told to skip TLS). The
   * listener is `node:https`, HTTP/1.1 only like an API server without h2: Deno.serve offers
   * h2, and a client-side h2 session torn down at shutdown aborted the test process.
   */
  async start(): Promise<this> {
    const certs = serverCertificates();
    const server = https.createServer(
      { cert: certs.server.certPem, key: certs.server.keyPem },
      // A client that goes away mid-request (an aborted watch) rejects the request's reading:
      // a real API server shrugs that off, and so does this one.
      (req, res) => void this.#serveNode(req, res).catch(() => res.destroy()),
    );
    server.on("connection", (socket: { on(ev: "close", fn: () => void): void }) => {
      this.openConnections++;
      socket.on("close", () => this.openConnections--);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    this.#server = server;
    return this;
  }

  async #serveNode(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Uint8Array[] = [];
    for await (const c of req) chunks.push(c as Uint8Array);
    const body = chunks.length > 0 ? new Blob(chunks as BlobPart[]) : undefined;
    const request = new Request(`https://127.0.0.1${req.url}`, {
      method: req.method,
      headers: req.headers as Record<string, string>,
      body: req.method === "GET" || req.method === "HEAD" ? undefined : body,
    });
    const gone = new Promise<void>((resolve) => res.on("close", resolve));
    const response = await this.#handle(request, gone);
    res.writeHead(response.status, Object.fromEntries(response.headers));
    // An API server sends a watch's headers at once, events or not: node:http holds them until
    // the first write, and a quiet watch then failed the client's 10 s wait for an answer.
    res.flushHeaders();
    if (response.body === null) {
      res.end();
      return;
    }
    const reader = response.body.getReader();
    res.on("close", () => void reader.cancel().catch(() => {}));
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        res.write(value);
      }
    } catch {
      // the client went away
    }
    res.end();
  }

  /** The CA that signed the server's certificate (PEM). */
  get apiServerCa(): string {
    return serverCertificates().ca.certPem;
  }

  /** `https://127.0.0.1:<port>`. */
  get url(): string {
    if (this.#server === undefined) throw new Error("k8s test server not started");
    return `https://127.0.0.1:${(this.#server.address() as { port: number }).port}`;
  }

  /** Closes the watches and the listener. */
  async stop(): Promise<void> {
    this.dropWatches();
    const server = this.#server;
    if (server === undefined) return;
    // Node's close() waits for every connection to end, and under Deno a streaming watch
    // response cut by closeAllConnections() does not always count as ended: bounded.
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      new Promise((resolve) => {
        server.close(resolve);
        server.closeAllConnections();
      }),
      new Promise((resolve) => timer = setTimeout(resolve, 2_000)),
    ]);
    clearTimeout(timer);
  }

  /** A kubeconfig (YAML is a superset of JSON) pointing at this server. */
  kubeconfig(token = this.token ?? "test-token"): string {
    return JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{
        name: "test",
        cluster: { server: this.url, "certificate-authority-data": btoa(this.apiServerCa) },
      }],
      users: [{ name: "test", user: { token } }],
      contexts: [{ name: "test", context: { cluster: "test", user: "test" } }],
      "current-context": "test",
    });
  }

  /** The current resource version. */
  get resourceVersion(): number {
    return this.#rv;
  }

  /** Queues a fault for the next matching requests. */
  fault(f: Fault): void {
    this.#faults.push({ times: 1, ...f });
  }

  /** The stored object, or undefined. */
  get(resource: Resource, namespace: string, name: string): KubeObject | undefined {
    const o = this.#objects.get(`${resource}/${namespace}/${name}`);
    return o === undefined ? undefined : structuredClone(o);
  }

  /** Creates or replaces an object directly (as another client would), with watch events. */
  put(resource: Resource, obj: KubeObject): KubeObject {
    const ns = obj.metadata.namespace ?? "default";
    const key = `${resource}/${ns}/${obj.metadata.name}`;
    const existing = this.#objects.get(key);
    const stored: KubeObject = structuredClone(obj);
    stored.kind = RESOURCES[resource];
    stored.apiVersion = "v1";
    stored.metadata = {
      ...stored.metadata,
      namespace: ns,
      uid: stored.metadata.uid ?? existing?.metadata.uid ?? `uid-${++this.#uid}`,
      creationTimestamp: stored.metadata.creationTimestamp ??
        existing?.metadata.creationTimestamp ?? new Date().toISOString(),
      resourceVersion: String(++this.#rv),
    };
    this.#objects.set(key, stored);
    this.#emit(existing === undefined ? "ADDED" : "MODIFIED", resource, stored);
    return structuredClone(stored);
  }

  /** Deletes an object directly, with a DELETED watch event. */
  delete(resource: Resource, namespace: string, name: string): boolean {
    const key = `${resource}/${namespace}/${name}`;
    const existing = this.#objects.get(key);
    if (existing === undefined) return false;
    this.#objects.delete(key);
    existing.metadata.resourceVersion = String(++this.#rv);
    this.#emit("DELETED", resource, existing);
    return true;
  }

  /** Sends a BOOKMARK with the current resource version to the watches that asked for them. */
  bookmark(): void {
    for (const w of this.#watchers) {
      if (!w.bookmarks) continue;
      w.send(JSON.stringify({
        type: "BOOKMARK",
        object: { kind: w.kind, apiVersion: "v1", metadata: { resourceVersion: String(this.#rv) } },
      }));
    }
  }

  /** Forgets the event window: a watch from any earlier resource version gets 410 Gone. */
  compact(): void {
    this.#events = [];
  }

  /** Closes every open watch stream (a dropped connection, an API server restart). */
  dropWatches(): void {
    for (const w of this.#watchers) w.close();
    this.#watchers.clear();
  }

  /** Number of open watch streams. */
  get watchCount(): number {
    return this.#watchers.size;
  }

  #emit(type: WatchEvent["type"], resource: Resource, obj: KubeObject): void {
    const ev: WatchEvent = { rv: this.#rv, type, object: structuredClone(obj) };
    if (resource === "pods") this.#events.push(ev);
    for (const w of this.#watchers) {
      if (w.kind !== RESOURCES[resource]) continue;
      if (w.namespace !== undefined && w.namespace !== obj.metadata.namespace) continue;
      w.send(JSON.stringify({ type, object: ev.object }));
    }
  }

  #takeFault(method: string, path: string, query = ""): Fault | undefined {
    const i = this.#faults.findIndex((f) =>
      (f.match?.method === undefined || f.match.method === method) &&
      (f.match?.path === undefined || path.includes(f.match.path)) &&
      (f.match?.query === undefined || query.includes(f.match.query))
    );
    if (i < 0) return undefined;
    const f = this.#faults[i];
    f.times = (f.times ?? 1) - 1;
    if (f.times <= 0) this.#faults.splice(i, 1);
    return f;
  }

  async #handle(req: Request, gone: Promise<void>): Promise<Response> {
    this.received++;
    const u = new URL(req.url);
    const res = await this.#route(req, u, gone);
    this.requests.push({ method: req.method, url: u.pathname + u.search, status: res.status });
    return res;
  }

  async #route(req: Request, u: URL, gone: Promise<void>): Promise<Response> {
    if (this.token !== undefined && req.headers.get("authorization") !== `Bearer ${this.token}`) {
      return json(status(401, "Unauthorized", "Unauthorized"), 401);
    }
    const fault = this.#takeFault(req.method, u.pathname, u.search);
    if (fault?.delayMs !== undefined) await new Promise((r) => setTimeout(r, fault.delayMs));
    if (fault?.hang === "headers") {
      await gone;
      return json(status(503, "ServiceUnavailable", "the client went away"), 503);
    }
    if (fault?.hang === "body") {
      const space = new TextEncoder().encode(" ");
      return new Response(
        new ReadableStream({
          pull: (c) => new Promise((r) => setTimeout(r, 100)).then(() => c.enqueue(space)),
        }),
        { headers: { "content-type": "application/json", connection: "close" } },
      );
    }
    if (fault?.status !== undefined) {
      const res = json(status(fault.status, "InternalError", "injected fault"), fault.status);
      for (const [k, v] of Object.entries(fault.headers ?? {})) res.headers.set(k, v);
      return res;
    }
    if (fault?.body !== undefined) {
      const bytes = new TextEncoder().encode(fault.body);
      return new Response(bytes, {
        headers: {
          "content-type": "application/json",
          connection: "close",
          ...(fault.contentLength ? { "content-length": String(bytes.byteLength) } : {}),
        },
      });
    }
    if (fault?.lines !== undefined) {
      return new Response(fault.lines.map((l) => l + "\n").join(""), {
        headers: { "content-type": "application/json", connection: "close" },
      });
    }
    const p = u.pathname.replace(/\/+$/, "");
    if (p === "/api") {
      return json({ kind: "APIVersions", versions: ["v1"], serverAddressByClientCIDRs: [] });
    }
    if (p === "/apis") return json({ kind: "APIGroupList", apiVersion: "v1", groups: [] });
    if (p === "/api/v1") return json(this.#resourceList());
    if (p === "/version") return json({ major: "1", minor: "28", gitVersion: "v1.28.0" });
    const m = /^\/api\/v1(?:\/namespaces\/([^/]+))?\/(configmaps|secrets|pods)(?:\/([^/]+))?$/
      .exec(p);
    if (m === null) return json(status(404, "NotFound", `the server could not find ${p}`), 404);
    const [, ns, resource, name] = m as unknown as [string, string | undefined, Resource, string?];
    if (name === undefined) {
      if (req.method === "GET") {
        const watch = u.searchParams.get("watch");
        if (watch === "true" || watch === "1") return this.#watch(resource, ns, u);
        return json(this.#list(resource, ns, u));
      }
      if (req.method === "POST" && ns !== undefined) {
        const obj = await req.json() as KubeObject;
        if (this.#objects.has(`${resource}/${ns}/${obj.metadata?.name}`)) {
          return json(
            status(409, "AlreadyExists", `${resource} "${obj.metadata.name}" already exists`),
            409,
          );
        }
        return json(
          this.put(resource, { ...obj, metadata: { ...obj.metadata, namespace: ns } }),
          201,
        );
      }
      return json(status(405, "MethodNotAllowed", "method not allowed"), 405);
    }
    if (ns === undefined) return json(status(404, "NotFound", "no namespace"), 404);
    const key = `${resource}/${ns}/${name}`;
    const existing = this.#objects.get(key);
    const notFound = (): Response =>
      json(status(404, "NotFound", `${resource} "${name}" not found`), 404);
    switch (req.method) {
      case "GET":
        return existing === undefined ? notFound() : json(existing);
      case "PUT": {
        if (existing === undefined) return notFound();
        if (fault?.concurrentEdit !== undefined) {
          this.put(resource, fault.concurrentEdit(structuredClone(existing)));
        }
        if (fault?.concurrentWrite) {
          this.put(resource, {
            ...existing,
            metadata: { ...existing.metadata, annotations: { concurrent: String(this.#rv) } },
          });
        }
        const obj = await req.json() as KubeObject;
        const current = this.#objects.get(key)!;
        const rv = obj.metadata?.resourceVersion;
        if (rv !== undefined && rv !== current.metadata.resourceVersion) {
          return json(
            status(
              409,
              "Conflict",
              `Operation cannot be fulfilled on ${resource} "${name}": the object has been ` +
                "modified; please apply your changes to the latest version and try again",
            ),
            409,
          );
        }
        if (resource === "secrets" && obj.type !== current.type) {
          return json(status(422, "Invalid", "field is immutable: type"), 422);
        }
        return json(this.put(resource, { ...obj, metadata: { ...obj.metadata, namespace: ns } }));
      }
      case "DELETE":
        return this.delete(resource, ns, name) ? json(status(200, "", "deleted")) : notFound();
    }
    return json(status(405, "MethodNotAllowed", "method not allowed"), 405);
  }

  #resourceList(): KubeObject {
    const verbs = ["create", "delete", "get", "list", "update", "watch"];
    return {
      kind: "APIResourceList",
      groupVersion: "v1",
      metadata: {},
      resources: Object.entries(RESOURCES).map(([name, kind]) => ({
        name,
        singularName: kind.toLowerCase(),
        namespaced: true,
        kind,
        verbs,
      })),
    };
  }

  #matching(resource: Resource, ns: string | undefined): KubeObject[] {
    const prefix = ns === undefined ? `${resource}/` : `${resource}/${ns}/`;
    return [...this.#objects].filter(([k]) => k.startsWith(prefix)).map(([, o]) => o);
  }

  /**
   * A list, in pages when the request has a `limit` (the continue token is the version of the
   * first page and the offset of the next; the pages are cut from the current objects).
   */
  #list(resource: Resource, ns: string | undefined, u: URL): KubeObject {
    const all = this.#matching(resource, ns);
    const limit = Number(u.searchParams.get("limit") ?? 0);
    const [rv, offset] = (u.searchParams.get("continue") ?? `${this.#rv}:0`).split(":");
    const end = limit > 0 ? Number(offset) + limit : all.length;
    return {
      kind: `${RESOURCES[resource]}List`,
      apiVersion: "v1",
      metadata: {
        resourceVersion: rv,
        ...(end < all.length ? { continue: `${rv}:${end}` } : {}),
      },
      items: all.slice(Number(offset), end),
    };
  }

  #watch(resource: Resource, ns: string | undefined, u: URL): Response {
    const kind = RESOURCES[resource];
    const from = u.searchParams.get("resourceVersion");
    const enc = new TextEncoder();
    let watcher: Watcher;
    const body = new ReadableStream<Uint8Array>({
      start: (c) => {
        let open = true;
        watcher = {
          kind,
          namespace: ns,
          bookmarks: u.searchParams.get("allowWatchBookmarks") === "true",
          send: (line) => {
            if (open) c.enqueue(enc.encode(line + "\n"));
          },
          close: () => {
            if (!open) return;
            open = false;
            this.#watchers.delete(watcher);
            c.close();
          },
        };
        if (from === null || from === "" || from === "0") {
          // No version: the current state as ADDED events, then changes.
          for (const o of this.#matching(resource, ns)) {
            watcher.send(JSON.stringify({ type: "ADDED", object: o }));
          }
        } else if (resource === "pods") {
          const rv = Number(from);
          const oldest = this.#events.length > 0 ? this.#events[0].rv - 1 : this.#rv;
          if (!(rv >= oldest)) {
            watcher.send(JSON.stringify({
              type: "ERROR",
              object: status(410, "Expired", `too old resource version: ${from} (${oldest})`),
            }));
            watcher.close();
            return;
          }
          for (const ev of this.#events) {
            if (ev.rv <= rv) continue;
            if (ns !== undefined && ev.object.metadata.namespace !== ns) continue;
            watcher.send(JSON.stringify({ type: ev.type, object: ev.object }));
          }
        }
        this.#watchers.add(watcher);
      },
      cancel: () => {
        this.#watchers.delete(watcher);
      },
    });
    return new Response(body, {
      headers: { "content-type": "application/json", connection: "close" },
    });
  }
}

/**
 * A real client (`@kubernetes/client-node`, through `src/k8s/client.ts`) of `server`, from a
 * kubeconfig file written to a temporary directory (removed by `cleanup`).
 */
export async function connectTestApi(
  server: FakeKubeApiServer,
): Promise<{ api: KubeApi; kubeconfig: string; cleanup(): Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix: "fa-kube-" });
  const kubeconfig = `${dir}/config`;
  await Deno.writeTextFile(kubeconfig, server.kubeconfig());
  const target = await resolveKubeTarget({ kubeconfig, env: () => undefined });
  if (target === undefined) throw new Error("no target from the test kubeconfig");
  return {
    api: await connectKube(target),
    kubeconfig,
    cleanup: () => Deno.remove(dir, { recursive: true }),
  };
}

/** The text of a Secret's `data` key (base64 on the wire). */
export function secretText(secret: KubeObject, key: string): string {
  const data = secret.data?.[key];
  if (typeof data !== "string") throw new Error(`Secret ${secret.metadata.name}: no ${key}`);
  return new TextDecoder().decode(Uint8Array.from(atob(data), (c) => c.charCodeAt(0)));
}
