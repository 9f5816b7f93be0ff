/**
 * `deploy/flow-aggregator.yml` against Antrea v1.13's manifest (control-plane.md §4.5, §4.6,
 * §6.8): the objects and their names, RBAC with no more than the calls the process makes, the
 * Service ports, the Deployment's probes, mounts and upstream arguments; its ConfigMap carries
 * the stock configuration (the fixture, byte for byte), which our parser loads; and, like
 * upstream's, the Deployment passes `args` only: the image's entrypoint, the launcher, grants
 * what `deno task permissions` computes for that configuration, those arguments and a Pod's
 * environment (checked here: scoped, the service account and the API server included).
 */

import assert from "node:assert/strict";
import { parseAllDocuments } from "yaml";
import denoJson from "../../deno.json" with { type: "json" };
import { parseArgs } from "../../main.ts";
import { permissionInputs } from "../../src/cli_options.ts";
import { parseConfig } from "../../src/components.ts";
import { klogFileDir } from "../../src/log/mod.ts";
import { permissionFlags, processPermissions } from "../../src/permissions.ts";
import { STOCK_V113_CONF, UPSTREAM_DEPLOYMENT_ARGS } from "../_helpers/stock_config.ts";
import { IMAGE_PATHS, IMAGE_TAG, imageSpec } from "../../scripts/image.ts";
import { SERVICE_ACCOUNT_DIR } from "../../src/k8s/mod.ts";
import { CONFIG_KEY, CONFIG_MAP_ENV } from "../../src/k8s/config_set.ts";

const MANIFEST = new URL("../../deploy/flow-aggregator.yml", import.meta.url).pathname;
const NS = "flow-aggregator";

// deno-lint-ignore no-explicit-any
type Obj = Record<string, any>;

const docs = parseAllDocuments(Deno.readTextFileSync(MANIFEST));
const objects: Obj[] = (docs as unknown as { errors: unknown[]; toJS(): Obj }[]).map((d) => {
  assert.deepEqual(d.errors, []);
  return d.toJS();
});

function get(kind: string, name: string, namespace?: string): Obj {
  const o = objects.find((x) =>
    x.kind === kind && x.metadata.name === name && x.metadata.namespace === namespace
  );
  assert.ok(o, `${kind} ${namespace ?? ""}/${name} in the manifest`);
  return o;
}

/** Every (resource, name, verb) a set of rules grants, "*" for rules without resourceNames. */
function grants(rules: Obj[]): string[] {
  const out: string[] = [];
  for (const r of rules) {
    assert.deepEqual(r.apiGroups, [""], "core API group only");
    for (const res of r.resources) {
      for (const name of r.resourceNames ?? ["*"]) {
        for (const verb of r.verbs) out.push(`${res}/${name}:${verb}`);
      }
    }
  }
  return out.sort();
}

function bindingSubjects(kind: string, name: string, namespace?: string): string[] {
  return get(kind, name, namespace).subjects.map((s: Obj) => `${s.namespace}/${s.name}`);
}

Deno.test("manifest: the objects of upstream's v1.13 manifest", () => {
  assert.deepEqual(
    objects.map((o) => `${o.kind} ${o.metadata.namespace ?? ""}/${o.metadata.name}`).sort(),
    [
      "ClusterRole /flow-aggregator-role",
      "ClusterRoleBinding /flow-aggregator-cluster-role-binding",
      "ConfigMap flow-aggregator/flow-aggregator-configmap",
      "Deployment flow-aggregator/flow-aggregator",
      "Namespace /flow-aggregator",
      "Role flow-aggregator/flow-aggregator-role",
      "Role flow-aggregator/flow-exporter-role",
      "Role kube-system/flow-aggregator-cluster-identity-reader",
      "RoleBinding flow-aggregator/flow-aggregator-role-binding",
      "RoleBinding flow-aggregator/flow-exporter-role-binding",
      "RoleBinding kube-system/flow-aggregator-cluster-identity-reader",
      "Secret flow-aggregator/clickhouse-secret",
      "Secret flow-aggregator/flow-aggregator-aws-credentials",
      "Service flow-aggregator/flow-aggregator",
      "ServiceAccount flow-aggregator/flow-aggregator",
    ],
  );
  assert.equal(get("Namespace", NS).metadata.labels.app, "flow-aggregator");
});

Deno.test("manifest: RBAC grants only the calls the process makes (§4.5), namespaced", () => {
  // Certificate publication: get/update the named objects (the CA Secret is ours, so that a
  // restart keeps the CA), create (not name-restrictable); `antctl set flow-aggregator`: get and
  // update of the configuration's ConfigMap, by name (upstream's chart: update only, §4.6).
  assert.deepEqual(grants(get("Role", "flow-aggregator-role", NS).rules), [
    "configmaps/*:create",
    "configmaps/flow-aggregator-ca:get",
    "configmaps/flow-aggregator-ca:update",
    "configmaps/flow-aggregator-configmap:get",
    "configmaps/flow-aggregator-configmap:update",
    "secrets/*:create",
    "secrets/flow-aggregator-ca-tls:get",
    "secrets/flow-aggregator-ca-tls:update",
    "secrets/flow-aggregator-client-tls:get",
    "secrets/flow-aggregator-client-tls:update",
  ]);
  // The Pod store, the only cluster-wide right.
  assert.deepEqual(grants(get("ClusterRole", "flow-aggregator-role").rules), [
    "pods/*:list",
    "pods/*:watch",
  ]);
  // The cluster UUID, in kube-system only.
  assert.deepEqual(
    grants(get("Role", "flow-aggregator-cluster-identity-reader", "kube-system").rules),
    ["configmaps/antrea-cluster-identity:get"],
  );
  for (
    const [kind, name, namespace, role] of [
      ["RoleBinding", "flow-aggregator-role-binding", NS, "flow-aggregator-role"],
      [
        "ClusterRoleBinding",
        "flow-aggregator-cluster-role-binding",
        undefined,
        "flow-aggregator-role",
      ],
      [
        "RoleBinding",
        "flow-aggregator-cluster-identity-reader",
        "kube-system",
        "flow-aggregator-cluster-identity-reader",
      ],
    ] as const
  ) {
    assert.equal(get(kind, name, namespace).roleRef.name, role);
    assert.deepEqual(bindingSubjects(kind, name, namespace), [`${NS}/flow-aggregator`]);
  }
  // The Agents read what the process publishes.
  assert.deepEqual(grants(get("Role", "flow-exporter-role", NS).rules), [
    "configmaps/flow-aggregator-ca:get",
    "secrets/flow-aggregator-client-tls:get",
  ]);
  assert.deepEqual(bindingSubjects("RoleBinding", "flow-exporter-role-binding", NS), [
    "kube-system/antrea-agent",
  ]);
});

Deno.test("manifest: the ConfigMap carries the v1.13 stock config, which our parser loads", () => {
  const text = get("ConfigMap", "flow-aggregator-configmap", NS).data["flow-aggregator.conf"];
  assert.equal(text, Deno.readTextFileSync(STOCK_V113_CONF));
  const warnings: string[] = [];
  const config = parseConfig(text, { onWarning: (w) => warnings.push(w.message) });
  assert.equal(config.aggregatorTransportProtocol, "TLS");
  assert.equal(config.s3Uploader.maxRecordsPerFile, 1_000_000);
  assert.equal(warnings.length, 1, "only: no sink enabled");
});

Deno.test("manifest: Service ports 4739 tcp/udp and 10348", () => {
  const svc = get("Service", "flow-aggregator", NS);
  assert.deepEqual(svc.spec.selector, { app: "flow-aggregator" });
  assert.deepEqual(
    svc.spec.ports.map((p: Obj) => `${p.name} ${p.port}/${p.protocol}->${p.targetPort}`),
    ["ipfix-udp 4739/UDP->4739", "ipfix-tcp 4739/TCP->4739", "api 10348/TCP->10348"],
  );
});

Deno.test("manifest: the Deployment runs our image with upstream's args, probes and mounts", () => {
  const d = get("Deployment", "flow-aggregator", NS);
  assert.equal(d.spec.replicas, 1);
  const pod = d.spec.template.spec;
  assert.equal(pod.serviceAccountName, "flow-aggregator");
  assert.ok(pod.terminationGracePeriodSeconds >= 60, "covers the S3 flush budget (§8 L24)");
  assert.equal(pod.containers.length, 1);
  const c = pod.containers[0];
  assert.equal(c.image, `flow-aggregator:${denoJson.version}`);
  // Upstream's args, unchanged (§6.1), and what they mean to us.
  assert.deepEqual(c.args, UPSTREAM_DEPLOYMENT_ARGS);
  const cli = parseArgs(c.args);
  assert.equal(klogFileDir(cli.klog), "/var/log/antrea/flow-aggregator");
  assert.deepEqual(c.securityContext.capabilities, { drop: ["ALL"] });
  assert.equal(c.securityContext.allowPrivilegeEscalation, false);
  for (const probe of [c.readinessProbe, c.livenessProbe]) {
    assert.deepEqual(probe.tcpSocket, { port: 4739 });
  }
  const mounts = Object.fromEntries(c.volumeMounts.map((m: Obj) => [m.name, m]));
  const volumes = Object.fromEntries(pod.volumes.map((v: Obj) => [v.name, v]));
  const mountOf = (path: string): Obj => {
    const m = c.volumeMounts.find((x: Obj) => x.mountPath === path);
    assert.ok(m, `a mount at ${path}`);
    return volumes[m.name];
  };
  assert.equal(mountOf("/etc/flow-aggregator").configMap.name, "flow-aggregator-configmap");
  assert.equal(mounts["flow-aggregator-config"].readOnly, true);
  assert.deepEqual(mountOf("/var/log/antrea/flow-aggregator").hostPath, {
    path: "/var/log/antrea/flow-aggregator",
    type: "DirectoryOrCreate",
  });
  assert.equal(mountOf("/etc/flow-aggregator/certs").secret.optional, true);
  const env = Object.fromEntries(c.env.map((e: Obj) => [e.name, e]));
  assert.equal(env.POD_NAMESPACE.valueFrom.fieldRef.fieldPath, "metadata.namespace");
  assert.equal(env.CH_USERNAME.valueFrom.secretKeyRef.name, "clickhouse-secret");
});

Deno.test("manifest: antctl set flow-aggregator may get and update the ConfigMap the Pod mounts, and only it", () => {
  const c = get("Deployment", "flow-aggregator", NS).spec.template.spec.containers[0];
  const env = Object.fromEntries(c.env.map((e: Obj) => [e.name, e]));
  // What the command edits: $FA_CONFIG_MAP_NAME in $POD_NAMESPACE (the Pod's, the Role's).
  const name = env[CONFIG_MAP_ENV].value;
  assert.equal(name, "flow-aggregator-configmap");
  const cm = get("ConfigMap", name, NS);
  assert.equal(typeof cm.data[CONFIG_KEY], "string");
  const role = get("Role", "flow-aggregator-role", NS);
  const onIt = grants(role.rules).filter((g) => g.startsWith(`configmaps/${name}:`));
  assert.deepEqual(onIt, [`configmaps/${name}:get`, `configmaps/${name}:update`]);
  // By name: no rule grants get or update on every ConfigMap, nor any cluster-wide.
  assert.ok(!grants(role.rules).some((g) => /^configmaps\/\*:(get|update|patch|list)/.test(g)));
  assert.ok(
    !grants(get("ClusterRole", "flow-aggregator-role").rules).some((g) =>
      g.startsWith("configmaps/")
    ),
  );
  assert.deepEqual(bindingSubjects("RoleBinding", "flow-aggregator-role-binding", NS), [
    `${NS}/${get("Deployment", "flow-aggregator", NS).spec.template.spec.serviceAccountName}`,
  ]);
});

Deno.test("manifest: no command, the image's launcher runs; in a Pod it grants what deno task permissions computes, scoped", () => {
  const d = get("Deployment", "flow-aggregator", NS);
  const c = d.spec.template.spec.containers[0];
  // Upstream's Deployment has no command either: the image's entrypoint runs.
  assert.equal(c.command, undefined);
  assert.equal(c.image, IMAGE_TAG);
  assert.equal(imageSpec().entrypoint.at(-1), IMAGE_PATHS.launcher);
  const cli = parseArgs(c.args);
  assert.ok(cli.config !== undefined);
  const text = get("ConfigMap", "flow-aggregator-configmap", NS).data["flow-aggregator.conf"];
  const config = parseConfig(text, { onWarning: () => {} });
  // What the launcher computes in the Pod (resolveCommand: this file, these args, the service
  // account kubelet mounts, the API server kubelet names in the environment).
  const kube = {
    mode: "in-cluster" as const,
    server: "https://10.96.0.1:443",
    source: SERVICE_ACCOUNT_DIR,
  };
  const flags = permissionFlags(
    processPermissions(config, {
      ...permissionInputs(cli, config, kube),
      moduleDir: IMAGE_PATHS.app,
    }),
  );
  const list = (kind: string) =>
    flags.find((f) => f.startsWith(`--allow-${kind}=`))?.split("=")[1].split(",") ?? [];
  assert.deepEqual(list("net"), ["10.96.0.1:443", "[::]:10348", "[::]:4739"]);
  assert.deepEqual(list("read"), [
    IMAGE_PATHS.app,
    "/etc/flow-aggregator",
    "/var/log/antrea/flow-aggregator",
    SERVICE_ACCOUNT_DIR,
  ]);
  assert.deepEqual(list("write"), ["/var/log/antrea/flow-aggregator", "/var/run/antrea/apiserver"]);
  // Nothing broad: every allow flag is scoped.
  for (const f of flags.filter((x) => x.startsWith("--allow-"))) assert.match(f, /^--allow-\w+=/);
});
