/**
 * The cluster UUID: read late from the Antrea cluster identity (the observation domain id of
 * the IPFIX sink switches to it, nothing lost meanwhile), the `clusterID` key, and the
 * standalone state file that keeps the id stable across restarts.
 */

import assert from "node:assert/strict";
import { ManualClock } from "../../src/clock.ts";
import { parseConfig } from "../../src/components.ts";
import { observationDomainIdFromUuid } from "../../src/exporters/ipfix/exporter.ts";
import { componentExporterFactory, FlowAggregator } from "../../src/flow_aggregator.ts";
import { CLUSTER_IDENTITY, ClusterIdentity } from "../../src/k8s/cluster_uuid.ts";
import { agentRecord } from "../_helpers/agent_record.ts";
import { printedPermissions } from "../_helpers/process.ts";
import { connectTestApi, FakeKubeApiServer } from "../_helpers/k8s_server.ts";
import { pollUntil, settleDriving, waitFor, withDeadline } from "../_helpers/wait.ts";
import { startCollector } from "../collector/helpers.ts";

// control-plane.md §4.4 test vector.
const UUID = "4d1a2a44-7d1a-4c0e-9a4b-2f3c1f6b8e10";
const ODID = 556872197;

Deno.test("cluster UUID: appearing 20 s late switches the observation domain id, nothing lost", async () => {
  const server = await new FakeKubeApiServer().start();
  const { api, cleanup } = await connectTestApi(server);
  const kubeClock = new ManualClock();
  const identity = new ClusterIdentity({ clock: kubeClock, api, attemptTimeoutMs: 3_600_000 });
  const { c: external, received } = await startCollector({
    address: "127.0.0.1:0",
    protocol: "tcp",
  });
  const coreClock = new ManualClock();
  const fa = new FlowAggregator(
    parseConfig(`aggregatorTransportProtocol: TCP
activeFlowRecordTimeout: 10s
flowCollector:
  enable: true
  address: 127.0.0.1:${external.port}:tcp
`),
    {
      clock: coreClock,
      manualSweep: true,
      listenAddress: "127.0.0.1:0",
      metricsLogIntervalMs: 0,
      exporterFactory: componentExporterFactory({
        inProcess: true,
        clusterUuid: () => identity.current(),
      }),
    },
  );
  let switched: Promise<void> | undefined;
  identity.onChange(() => switched = fa.clusterUuidChanged());
  try {
    await identity.start();
    await fa.start();
    const provisional = identity.current();
    assert.equal(identity.source, "process");
    const exportOne = (port: number): void => {
      fa.ingest([agentRecord({
        sourceIPv4Address: "10.0.0.1",
        destinationIPv4Address: "10.0.0.2",
        sourceTransportPort: port,
        destinationTransportPort: 80,
      })]);
      coreClock.advance(11_000);
      fa.sweep();
    };
    exportOne(1);
    // The identity ConfigMap appears 20 s after the start; polling backs off meanwhile.
    await waitFor(() => server.requests.length > 0, { what: "first poll" });
    // Each failed poll arms a backoff pause (the attempt timeouts are far longer): fire them
    // until 20 s have passed.
    const pause = (): number | undefined => kubeClock.pendingTimers().find((ms) => ms <= 60_000);
    for (let t = 0; t < 20_000;) {
      const next = await pollUntil(pause, { what: "a backoff pause after a failed poll" });
      kubeClock.advance(next);
      t += next;
    }
    exportOne(2); // before the switch: still the stand-in
    server.put("configmaps", {
      metadata: { name: CLUSTER_IDENTITY.name, namespace: CLUSTER_IDENTITY.namespace },
      data: { uuid: UUID },
    });
    await settleDriving(kubeClock, identity.discovered);
    assert.equal(identity.current(), UUID);
    assert.equal(identity.source, "cluster");
    assert.ok(switched, "the aggregator was told");
    await switched;
    exportOne(3);
    await fa.stop();
    // Flows are exported again at every active timeout: each port's exports, in order.
    const domains = (port: number): number[] =>
      received.flatMap((r) =>
        r.records.filter((x) => x.sourceTransportPort === port).map(() => r.ctx.observationDomainId)
      );
    await waitFor(() => domains(3).length > 0, { what: "the last flow at the collector" });
    const before = observationDomainIdFromUuid(provisional);
    assert.equal(domains(1)[0], before);
    assert.equal(domains(2)[0], before);
    assert.deepEqual(new Set(domains(3)), new Set([ODID]), "after the switch: the cluster's id");
    // Every flow exported after the switch carries it (1 and 2 again at the final flush).
    assert.equal(domains(1).at(-1), ODID);
    assert.ok(server.requests.length >= 4, "polled with backoff until it appeared");
  } finally {
    await fa.stop();
    await identity.stop();
    await external.stop();
    await server.stop();
    await cleanup();
  }
});

Deno.test("cluster UUID: standalone, the state file keeps it across restarts", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const stateFile = `${dir}/cluster-uuid`;
    const first = new ClusterIdentity({ clock: new ManualClock(), stateFile });
    await first.start();
    assert.equal(first.source, "state-file");
    const second = new ClusterIdentity({ clock: new ManualClock(), stateFile });
    await second.start();
    assert.equal(second.current(), first.current());
    assert.equal((await Deno.readTextFile(stateFile)).trim(), first.current());
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cluster UUID: the clusterID key wins, a non-UUID is ignored", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const id = new ClusterIdentity({
      clock: new ManualClock(),
      stateFile: `${dir}/cluster-uuid`,
      configured: UUID.toUpperCase(),
    });
    const changes: string[] = [];
    id.onChange((u) => changes.push(u));
    await id.start();
    assert.equal(id.current(), UUID);
    assert.equal(id.source, "config");
    assert.equal(id.setConfigured("my-cluster"), true, "falls back to the state file");
    assert.equal(id.source, "state-file");
    assert.equal(id.setConfigured(""), false);
    assert.deepEqual(changes, [], "config changes are applied by the reload, not listeners");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** A state file's identity after its start, within a bound (a FIFO's open never ended). */
async function startedOn(stateFile: string): Promise<ClusterIdentity> {
  const id = new ClusterIdentity({ clock: new ManualClock(), stateFile });
  await withDeadline(id.start(), 10_000, "the start on the state file");
  return id;
}

/** The state file is now a regular file holding the identity's UUID. */
async function assertReplaced(stateFile: string, id: ClusterIdentity): Promise<void> {
  assert.equal(id.source, "state-file");
  assert.ok((await Deno.lstat(stateFile)).isFile, "a regular file now");
  assert.equal((await Deno.readTextFile(stateFile)).trim(), id.current());
  assert.deepEqual(id.stats(), {
    stateFileRejected: 1,
    stateFileWriteFailures: 0,
    pollFailures: 0,
    pollErrors: 0,
  });
  const again = await startedOn(stateFile);
  assert.equal(again.current(), id.current(), "kept for the next start");
}

// A link to /dev/zero was read until memory ran out (6.6 GB), a FIFO's open held the start
// forever: only a regular file of at most 1 KiB is read now, anything else is replaced.
Deno.test("cluster UUID: a state file linked to a device is replaced, not read", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const stateFile = `${dir}/cluster-uuid`;
    await Deno.symlink("/dev/zero", stateFile);
    const id = await startedOn(stateFile);
    await assertReplaced(stateFile, id);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cluster UUID: a state file that is a FIFO is replaced, not opened", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const stateFile = `${dir}/cluster-uuid`;
    const made = await new Deno.Command("mkfifo", { args: [stateFile] }).output();
    assert.equal(made.code, 0, "mkfifo");
    const id = await startedOn(stateFile);
    await assertReplaced(stateFile, id);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cluster UUID: a state file over 1 KiB is not read, counted and replaced", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const stateFile = `${dir}/cluster-uuid`;
    // A UUID first, then past STATE_FILE_MAX_BYTES: only a whole file read is trusted.
    await Deno.writeTextFile(stateFile, `${UUID}\n${" ".repeat(1024)}`);
    const id = await startedOn(stateFile);
    assert.notEqual(id.current(), UUID);
    await assertReplaced(stateFile, id);
    assert.deepEqual(
      (await Array.fromAsync(Deno.readDir(dir))).map((e) => e.name),
      ["cluster-uuid"],
      "no temporary file left",
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// What `deno task permissions` grants: write on the state file alone, no temporary file beside
// it. The state file is then written in place, a FIFO there removed first.
Deno.test("cluster UUID: with write permission on the state file alone, a FIFO there is replaced", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const stateFile = `${dir}/cluster-uuid`;
    const made = await new Deno.Command("mkfifo", { args: [stateFile] }).output();
    assert.equal(made.code, 0, "mkfifo");
    const module = new URL("../../src/k8s/cluster_uuid.ts", import.meta.url).href;
    const child = `${dir}/child.ts`;
    await Deno.writeTextFile(
      child,
      `import { ClusterIdentity } from ${JSON.stringify(module)};
const id = new ClusterIdentity({ clock: undefined as never, stateFile: ${
        JSON.stringify(stateFile)
      } });
await id.start();
console.log(JSON.stringify({ uuid: id.current(), stats: id.stats() }));
`,
    );
    const run = new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-config", "--allow-read", `--allow-write=${stateFile}`, child],
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    let out: Deno.CommandOutput;
    try {
      out = await withDeadline(run.output(), 30_000, "the child's start");
    } finally {
      try {
        run.kill("SIGKILL"); // still running only when the deadline passed
      } catch {
        // it ended
      }
    }
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    const { uuid, stats } = JSON.parse(new TextDecoder().decode(out.stdout));
    assert.deepEqual(stats, {
      stateFileRejected: 1,
      stateFileWriteFailures: 0,
      pollFailures: 0,
      pollErrors: 0,
    });
    assert.ok((await Deno.lstat(stateFile)).isFile);
    assert.equal((await Deno.readTextFile(stateFile)).trim(), uuid);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

// data.uuid as a JSON array passed isUuid (String(["<uuid>"]) is the UUID), then its
// toLowerCase threw past the retries: the polling stopped for good on one malformed answer.
Deno.test("cluster UUID: an answer whose uuid is no string is refused, the polling goes on", async () => {
  const server = await new FakeKubeApiServer().start();
  const { api, cleanup } = await connectTestApi(server);
  const clock = new ManualClock();
  const identity = new ClusterIdentity({ clock, api, attemptTimeoutMs: 3_600_000 });
  const { namespace, name } = CLUSTER_IDENTITY;
  try {
    server.put("configmaps", {
      metadata: { name, namespace },
      data: { uuid: [UUID.toUpperCase()] },
    });
    await identity.start();
    await waitFor(() => server.requests.length >= 1, { what: "the first poll" });
    // The Antrea Controller writes it right.
    server.put("configmaps", { metadata: { name, namespace }, data: { uuid: UUID } });
    await settleDriving(clock, identity.discovered);
    assert.equal(identity.current(), UUID);
    assert.equal(identity.source, "cluster");
    assert.equal(identity.stats().pollFailures, 1);
    assert.equal(api.stats().malformedAnswers, 1);
  } finally {
    await identity.stop();
    await server.stop();
    await cleanup();
  }
});

// Started standalone with a clusterID, the process was given no state file: a reload that
// removed the clusterID fell back to a UUID drawn for the process, not to the persisted one.
Deno.test("cluster UUID: standalone with a clusterID, the process keeps the state file (permissions)", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const conf = `${dir}/flow-aggregator.conf`;
    await Deno.writeTextFile(conf, `aggregatorTransportProtocol: TCP\nclusterID: "${UUID}"\n`);
    const flags = await printedPermissions(["--config", conf, "--state-dir", dir]);
    const list = (flag: string): string[] =>
      flags.find((f) => f.startsWith(`${flag}=`))?.slice(flag.length + 1).split(",") ?? [];
    assert.ok(list("--allow-read").includes(`${dir}/cluster-uuid`), flags.join(" "));
    assert.ok(list("--allow-write").includes(`${dir}/cluster-uuid`), flags.join(" "));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cluster UUID: a state file that cannot be written (its directory missing) is not named as the source", async () => {
  const dir = await Deno.makeTempDir({ prefix: "fa-uuid-" });
  try {
    const id = await startedOn(`${dir}/missing/cluster-uuid`);
    // Before: "source=state-file" was logged though nothing was saved.
    assert.equal(id.source, "process");
    assert.equal(id.stats().stateFileWriteFailures, 1);
    assert.match(id.current(), /^[0-9a-f-]{36}$/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
