import assert from "node:assert/strict";
import { parseConfig } from "../src/components.ts";
import {
  permissionFlags,
  PROCESS_ENV,
  processPermissions,
  sinkPermissionTable,
} from "../src/permissions.ts";

const SRC = new URL("../src", import.meta.url).pathname;

function cfg(text: string) {
  return parseConfig(text, { tmpDir: "/tmp" });
}

Deno.test("permissions: the collector port, each sink's own permissions, the config directory", () => {
  const p = processPermissions(
    cfg(`aggregatorTransportProtocol: TCP
flowCollector:
  enable: true
  address: "[fd00::5]:4740:udp"
flowLogger:
  enable: true
  path: /var/log/fa/flows.log
`),
    { configPath: "/etc/flow-aggregator/flow-aggregator.conf", listen: "0.0.0.0:4739" },
  );
  assert.deepEqual(p, {
    net: ["0.0.0.0:4739", "[fd00::5]:4740"],
    read: ["/etc/flow-aggregator", SRC, "/var/log/fa"].sort(),
    write: ["/var/log/fa"],
    env: [...PROCESS_ENV].sort(),
    ffi: false,
  });
});

Deno.test("permissions: --allow-ffi only for the UDP fast path", () => {
  const udp = cfg("aggregatorTransportProtocol: UDP\nflowLogger:\n  enable: true\n  path: '-'\n");
  assert.equal(processPermissions(udp).ffi, Deno.build.os === "linux");
  assert.equal(processPermissions(udp, { udpReceiver: "socket" }).ffi, false);
  const tcp = cfg("aggregatorTransportProtocol: TCP\nflowLogger:\n  enable: true\n  path: '-'\n");
  assert.equal(processPermissions(tcp).ffi, false);
  assert.ok(!permissionFlags(processPermissions(tcp)).includes("--allow-ffi"));
});

Deno.test("permissions: UDP adds --allow-ffi and the worker modules, never /proc", () => {
  const udp = cfg("aggregatorTransportProtocol: UDP\nflowLogger:\n  enable: true\n  path: '-'\n");
  const linux = Deno.build.os === "linux";
  assert.deepEqual(processPermissions(udp, { exportersInProcess: true }), {
    net: ["[::]:4739"],
    // The fast path's receive worker module; kernel drops and buffer sizes under /proc are not
    // asked for: Deno reads /proc only with --allow-all, whatever --allow-read lists.
    read: linux ? [SRC] : [],
    write: [],
    env: [...PROCESS_ENV].sort(),
    ffi: linux,
  });
  const socket = processPermissions(udp, { exportersInProcess: true, udpReceiver: "socket" });
  assert.deepEqual(socket.read, []);
  assert.equal(socket.ffi, false);
});

Deno.test("permissions: a flow log on stdout writes nowhere; sinks in process read no worker modules", () => {
  const p = processPermissions(
    cfg("aggregatorTransportProtocol: TCP\nflowLogger:\n  enable: true\n  path: '-'\n"),
    { exportersInProcess: true },
  );
  assert.deepEqual(p.write, []);
  assert.deepEqual(p.read, []);
  assert.deepEqual(permissionFlags(p), [
    "--allow-net=[::]:4739",
    `--allow-env=${[...PROCESS_ENV].sort().join(",")}`,
    "--unstable-net",
    "--unstable-worker-options",
  ]);
});

Deno.test("permissions: the ClickHouse sink reaches the mapped HTTP port and owns its spool", () => {
  const conf = `aggregatorTransportProtocol: TCP
clickHouse:
  enable: true
  databaseURL: tcp://ch.example:9000
  spool:
    dir: /var/spool/fa-ch
`;
  const p = processPermissions(cfg(conf));
  // The native port 9000 maps to the HTTP port 8123.
  assert.ok(p.net.includes("ch.example:8123"), p.net.join(","));
  assert.ok(!p.net.includes("ch.example:9000"));
  assert.ok(p.write.includes("/var/spool/fa-ch"));
  assert.match(
    sinkPermissionTable(cfg(conf)),
    /\| clickhouse \(`clickHouse`\) \| `ch\.example:8123` \| `\/var\/spool\/fa-ch` \| `\/var\/spool\/fa-ch` \| `CH_USERNAME`, `CH_PASSWORD` \|/,
  );
});
